"""Scoring texts with an hf_heads model's inference distribution and n-best rescoring.

- `sentence_log_probs` / `token_log_probs`: log p(text) (given a source for seq2seq models), computed in chunks of
  positions without the (B, T, V) logits; what a score means per head family is in `hf_heads.scoring.scores`.
- `rescore_nbest` / `tune_weights`: log-linear combination of first-pass and LM scores with a word bonus, and its grid
  search on a dev set (`corpus_bleu`, `negative_wer`).
- CLI: `python -m hf_heads.scoring score|rescore ...` (`run_scripts/score.py` is the same).

Not imported by `import hf_heads` (it stays light): `from hf_heads.scoring import sentence_log_probs`.
"""

from hf_heads.scoring.rescore import (
    TuningResult,
    check_nbest,
    check_record,
    corpus_bleu,
    nbest_sources,
    nbest_texts,
    negative_wer,
    rescore_nbest,
    tune_weights,
)
from hf_heads.scoring.scores import sentence_log_probs, token_log_probs

__all__ = [
    "TuningResult",
    "check_nbest",
    "check_record",
    "corpus_bleu",
    "nbest_sources",
    "nbest_texts",
    "negative_wer",
    "rescore_nbest",
    "sentence_log_probs",
    "token_log_probs",
    "tune_weights",
]
