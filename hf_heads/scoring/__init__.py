"""Scoring texts with an hf_heads model's inference distribution and n-best rescoring: `sentence_log_probs` /
`token_log_probs` (log p(text), in chunks, without the (B, T, V) logits; what a score means per family:
`hf_heads.scoring.scores`), `rescore_nbest` / `tune_weights` (log-linear combination with LM scores and its grid
search), and the CLI `python -m hf_heads.scoring score|rescore ...`. Not imported by `import hf_heads`.
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
