"""ROUGE-1/2/L/Lsum F-measures through rouge-score (an `evaluate` module shipped with hf_heads)."""

import datasets
import evaluate
from rouge_score import rouge_scorer, scoring


class Rouge(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="ROUGE F-measures (rouge-score, with stemming), aggregated by bootstrap mid value.",
            citation="Lin, ROUGE: A Package for Automatic Evaluation of Summaries, 2004.",
            inputs_description="predictions: list of str; references: list of str",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),  # fmt: skip
        )

    def _compute(self, predictions, references, use_stemmer=True):
        types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
        scorer = rouge_scorer.RougeScorer(types, use_stemmer=use_stemmer)
        aggregator = scoring.BootstrapAggregator(n_samples=1000)
        for pred, ref in zip(predictions, references, strict=True):
            aggregator.add_scores(scorer.score(ref, pred))
        result = aggregator.aggregate()
        return {key: result[key].mid.fmeasure for key in types}
