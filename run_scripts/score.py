#!/usr/bin/env python
"""Score texts or rescore n-best lists with a saved hf_heads model (`python -m hf_heads.scoring`, same arguments).

    python run_scripts/score.py score --model out/clm --input texts.txt --output scores.jsonl
    python run_scripts/score.py rescore --model out/clm --nbest dev.nbest.jsonl --output reranked.jsonl \\
        --lm_weight 0.5 --length_penalty 0.2

Seq2seq models score a target given its source (`score --sources src.txt`; n-best records carry `source`).
`--no-normalize` rescores a sampled head with its corrected scores without renormalisation (the sampling paper's
table 4). Bad input prints one line and exits with status 2.
"""

import sys

from hf_heads.scoring.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
