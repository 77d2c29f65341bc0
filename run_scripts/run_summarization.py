#!/usr/bin/env python
"""Train / fine-tune a summarization model with any hf_heads head (the transformers `run_summarization.py` shape).

    accelerate launch run_scripts/run_summarization.py --output_dir out/bbc \\
        --dataset_name bbc-news --model_name_or_path tiny-bart --head sparse --k 20 \\
        --max_source_length 256 --max_target_length 24 --head_tail \\
        --do_train --do_eval --do_predict --predict_with_generate --generation_num_beams 5

Bundled corpus: `bbc-news` (2,225 BBC articles, body → headline). Or a Hub dataset / local .csv/.json
files with `--source_column` / `--target_column`. ROUGE-1/2/L (rouge-score) and BLEU come from the
evaluate modules shipped in hf_heads when `--predict_with_generate` is on.
"""

from hf_heads.cli.errors import main_wrapper
from hf_heads.cli.seq2seq import Seq2SeqTask, main
from hf_heads.data import SUMMARIZATION_CORPORA, load_summarization

TASK = Seq2SeqTask(
    name="summarization",
    title="Summarization",
    corpora=SUMMARIZATION_CORPORA,
    load=load_summarization,
    source_column="document",
    target_column="summary",
    metrics=("rouge", "bleu"),
)

if __name__ == "__main__":
    main_wrapper(lambda: main(TASK))
