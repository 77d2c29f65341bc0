"""`evaluate` modules that ship inside hf_heads (BLEU, ROUGE, F1, perplexity) so metrics load with
no network, and `compute_metrics` builders for the transformers Trainer."""

from hf_heads.metrics.builders import (
    METRICS,
    classification_metrics,
    generation_metrics,
    load_metric,
    path,
)

__all__ = ["METRICS", "classification_metrics", "generation_metrics", "load_metric", "path"]
