"""Perplexity from summed token negative log-likelihoods (an `evaluate` module shipped with hf_heads).

Unlike the Hub's `perplexity` metric, which re-runs a Hub model, this one takes what the trainer
already computed: per-sequence summed NLL (nats) and token counts, so the heads' own distribution
(margin never applied, sampled heads corrected and renormalised) is what is scored."""

import math

import datasets
import evaluate


class Perplexity(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="exp(Σ NLL / Σ tokens) over a corpus.",
            citation="",
            inputs_description="predictions: summed NLL per sequence (float); references: token count per sequence",
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("int64")}
            ),  # fmt: skip
        )

    def _compute(self, predictions, references):
        tokens = sum(references)
        if tokens <= 0:
            raise ValueError("references: the token counts sum to 0")
        nll = sum(predictions) / tokens
        return {"perplexity": math.exp(min(nll, 700.0)), "nll_per_token": nll}
