"""Accuracy and F1 (macro and micro) through scikit-learn (an `evaluate` module shipped with hf_heads)."""

import datasets
import evaluate
from sklearn.metrics import accuracy_score, f1_score


class F1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Accuracy, macro-F1 and micro-F1 of integer class predictions.",
            citation="Pedregosa et al., Scikit-learn: Machine Learning in Python, JMLR 2011.",
            inputs_description="predictions: list of int; references: list of int",
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),  # fmt: skip
        )

    def _compute(self, predictions, references):
        return {
            "accuracy": float(accuracy_score(references, predictions)),
            "f1_macro": float(f1_score(references, predictions, average="macro", zero_division=0)),
            "f1_micro": float(f1_score(references, predictions, average="micro", zero_division=0)),
        }
