"""`evaluate` modules that ship inside hf_heads (bleu, sacrebleu, rouge, accuracy, f1, precision, recall,
perplexity) so metrics load with no network, each taking the arguments and returning the keys of the
huggingface/evaluate module of the same name, and `compute_metrics` builders for the transformers Trainer."""

from hf_heads.metrics.builders import (
    GENERATION_METRICS,
    METRICS,
    classification_metrics,
    distinct_share,
    generation_metrics,
    load_metric,
    path,
)

__all__ = [
    "GENERATION_METRICS",
    "METRICS",
    "classification_metrics",
    "distinct_share",
    "generation_metrics",
    "load_metric",
    "path",
]
