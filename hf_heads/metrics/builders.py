"""Load the bundled `evaluate` modules by name and build `compute_metrics` functions for the Trainer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from hf_heads.losses._checks import check_choice

MODULES = Path(__file__).with_name("modules")
METRICS = ("bleu", "rouge", "f1", "perplexity")


def path(name: str) -> str:
    """Path of a shipped `evaluate` module: `evaluate.load(hf_heads.metrics.path("bleu"))` works offline."""
    check_choice("metric", name, METRICS)
    return str(MODULES / f"{name}.py")


def load_metric(name: str):
    """`evaluate.load` of a module shipped with hf_heads (never downloads)."""
    import evaluate

    return evaluate.load(path(name))


def classification_metrics() -> Callable:
    """compute_metrics for sequence classification: accuracy, macro-F1, micro-F1 from logits."""
    metric = load_metric("f1")

    def compute(eval_pred) -> dict:
        logits, labels = eval_pred
        logits = logits[0] if isinstance(logits, tuple) else logits
        return metric.compute(predictions=np.argmax(logits, axis=-1), references=labels)

    return compute


def generation_metrics(tokenizer, names: tuple[str, ...] = ("bleu", "rouge")) -> Callable:
    """compute_metrics for seq2seq with `predict_with_generate`: decodes predictions and labels
    (-100 replaced by the pad id) and reports BLEU and/or ROUGE."""
    metrics = {name: load_metric(name) for name in names}

    def compute(eval_pred) -> dict:
        preds, labels = eval_pred
        preds = preds[0] if isinstance(preds, tuple) else preds
        pad = tokenizer.pad_token_id
        preds = np.where(preds < 0, pad, preds)
        labels = np.where(labels < 0, pad, labels)
        texts = [t.strip() for t in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        refs = [t.strip() for t in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        out: dict = {}
        for metric in metrics.values():
            result = metric.compute(predictions=texts, references=refs)
            out.update({k: v for k, v in result.items() if isinstance(v, float | int)})
        return out

    return compute
