"""Load the bundled `evaluate` modules by name and build `compute_metrics` functions for the Trainer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from hf_heads.validation import check_choice

MODULES = Path(__file__).with_name("modules")
# Each is a drop-in for `evaluate.load(name)`: same arguments, defaults and keys as huggingface/evaluate's module.
METRICS = ("bleu", "sacrebleu", "rouge", "accuracy", "f1", "precision", "recall", "perplexity")
# What `generation_metrics` reports under each name (the run scripts' `Seq2SeqTask.metrics`).
GENERATION_METRICS = ("bleu", "rouge")
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def path(name: str) -> str:
    """Path of a shipped `evaluate` module: `evaluate.load(hf_heads.metrics.path("rouge"))` works offline."""
    check_choice("metric", name, METRICS)
    return str(MODULES / f"{name}.py")


def load_metric(name: str, config_name: str | None = None, **kwargs):
    """`evaluate.load` of a module shipped with hf_heads (never downloads), e.g. `load_metric("perplexity", "nll")`."""
    import evaluate

    return evaluate.load(path(name), config_name, **kwargs)


def classification_metrics() -> Callable:
    """compute_metrics for sequence classification, from logits: `accuracy`, `f1_macro` and `f1_micro`
    (scikit-learn's, an undefined F1 counting 0 without a warning)."""
    accuracy = load_metric("accuracy")
    f1 = load_metric("f1")

    def compute(eval_pred) -> dict:
        logits, labels = eval_pred
        logits = logits[0] if isinstance(logits, tuple) else logits
        predictions = np.argmax(logits, axis=-1)
        return {
            "accuracy": accuracy.compute(predictions=predictions, references=labels)["accuracy"],
            **{
                f"f1_{average}": f1.compute(
                    predictions=predictions, references=labels, average=average, zero_division=0
                )["f1"]
                for average in ("macro", "micro")
            },
        }

    return compute


def _report_bleu(metric, predictions: list[str], references: list[str]) -> dict:
    """sacreBLEU corpus BLEU (0-100, 13a, smoothing 'exp'), its brevity penalty and length ratio, and the
    cumulative BLEU-1..4 of the sparse-softmax paper's table 3."""
    result = metric.compute(predictions=predictions, references=references, cumulative_bleu=True)
    return {
        "bleu": result["score"],
        "brevity_penalty": result["bp"],
        "length_ratio": result["sys_len"] / max(result["ref_len"], 1),
        **{f"bleu_{n}": result[f"bleu_{n}"] for n in range(1, 5)},
    }


def _report_rouge(metric, predictions: list[str], references: list[str]) -> dict:
    """ROUGE-1/2/L/Lsum: the plain mean over examples of rouge-score's F-measure, with Porter stemming
    (deterministic; evaluate's default instead reports the bootstrap `mid` without stemming)."""
    result = metric.compute(
        predictions=predictions,
        references=references,
        rouge_types=list(ROUGE_TYPES),
        use_aggregator=False,
        use_stemmer=True,
    )
    return {key: sum(result[key]) / max(len(result[key]), 1) for key in ROUGE_TYPES}


def distinct_share(texts: Sequence[str]) -> float:
    """Share of distinct strings in `texts` (after stripping whitespace): 1.0 when all differ, 1/N when all equal."""
    return len({t.strip() for t in texts}) / max(len(texts), 1)


_REPORTS = {"bleu": ("sacrebleu", _report_bleu), "rouge": ("rouge", _report_rouge)}


def generation_metrics(tokenizer, names: Sequence[str] = GENERATION_METRICS) -> Callable:
    """compute_metrics for seq2seq with `predict_with_generate`: per name "bleu" (sacreBLEU 0-100, its brevity penalty,
    length ratio and cumulative `bleu_1`..`bleu_4`) or "rouge" (mean per-example F-measure, stemmed), and always
    `distinct`, the share of distinct predictions (one constant output scores 1/N however good its ROUGE looks)."""
    for name in names:
        check_choice("generation metric", name, GENERATION_METRICS)
    reports = [(load_metric(_REPORTS[name][0]), _REPORTS[name][1]) for name in names]

    def compute(eval_pred) -> dict:
        preds, labels = eval_pred
        preds = preds[0] if isinstance(preds, tuple) else preds
        pad = tokenizer.pad_token_id
        preds = np.where(preds < 0, pad, preds)
        labels = np.where(labels < 0, pad, labels)
        texts = [t.strip() for t in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        refs = [t.strip() for t in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        out: dict = {}
        for metric, report in reports:
            out.update(report(metric, texts, refs))
        out["distinct"] = distinct_share(texts)
        return out

    return compute
