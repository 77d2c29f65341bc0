"""ROUGE-1/2/L/Lsum F-measures through rouge-score (an `evaluate` module shipped with hf_heads)."""

import datasets
import evaluate
from rouge_score import rouge_scorer


class Rouge(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="ROUGE-1/2/L/Lsum F-measures (rouge-score, with stemming): the mean over examples of "
            "rouge_score's per-example F-measure (deterministic; no bootstrap resampling).",
            citation="Lin, ROUGE: A Package for Automatic Evaluation of Summaries, 2004.",
            inputs_description="predictions: list of str; references: list of str",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),  # fmt: skip
        )

    def _compute(self, predictions, references, use_stemmer=True):
        types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
        scorer = rouge_scorer.RougeScorer(types, use_stemmer=use_stemmer)
        scores = [scorer.score(ref, pred) for pred, ref in zip(predictions, references, strict=True)]
        return {key: sum(s[key].fmeasure for s in scores) / max(len(scores), 1) for key in types}
