"""Precision as the Hub's `evaluate.load("precision")` computes it (an `evaluate` module shipped with hf_heads).

Same arguments, defaults, configurations (`"multilabel"`) and returned key as huggingface/evaluate's
metrics/precision/precision.py: scikit-learn's `precision_score`."""

import datasets
import evaluate
from sklearn.metrics import precision_score

_CITATION = """\
@article{scikit-learn,
    title={Scikit-learn: Machine Learning in {P}ython},
    author={Pedregosa, F. and Varoquaux, G. and Gramfort, A. and Michel, V. and Thirion, B. and Grisel, O. and
           Blondel, M. and Prettenhofer, P. and Weiss, R. and Dubourg, V. and Vanderplas, J. and Passos, A. and
           Cournapeau, D. and Brucher, M. and Perrot, M. and Duchesnay, E.},
    journal={Journal of Machine Learning Research},
    volume={12},
    pages={2825--2830},
    year={2011}
}
"""

_DESCRIPTION = """\
Precision is the fraction of the predicted positives that are correct: TP / (TP + FP).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `int`): Predicted class labels.
    references (`list` of `int`): Actual class labels.
    labels (`list` of `int`): The set of labels to include when `average` is not set to `'binary'`. If `average`
        is `None`, it should be the label order. By default, all labels in `predictions` and `references` are used
        in sorted order. Defaults to None.
    pos_label (`int`): The class to be considered the positive class, in the case where `average` is set to
        `binary`. Defaults to 1.
    average (`string`): This parameter is required for multiclass/multilabel targets. If set to `None`, the scores
        for each class are returned. Otherwise, this determines the type of averaging performed on the data
        (`'binary'`, `'micro'`, `'macro'`, `'weighted'`, `'samples'`). Defaults to `'binary'`.
    sample_weight (`list` of `float`): Sample weights Defaults to None.
    zero_division (`int` or `string`): Sets the value to return when there is a zero division: `0`, `1`, or
        `'warn'` (0 with a warning). Defaults to `'warn'`.
Returns:
    precision (`float` or `array` of `float`): Precision score or list of precision scores, depending on the value
        passed to `average`.
Examples:
    >>> precision_metric = evaluate.load(hf_heads.metrics.path("precision"))
    >>> predictions, references = [0, 2, 1, 0, 0, 1], [0, 1, 2, 0, 1, 2]
    >>> results = precision_metric.compute(predictions=predictions, references=references, average="micro")
    >>> print(results)
    {'precision': 0.3333333333333333}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Precision(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("int32")),
                    "references": datasets.Sequence(datasets.Value("int32")),
                }
                if self.config_name == "multilabel"
                else {
                    "predictions": datasets.Value("int32"),
                    "references": datasets.Value("int32"),
                }
            ),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.precision_score.html"],
        )

    def _compute(
        self,
        predictions,
        references,
        labels=None,
        pos_label=1,
        average="binary",
        sample_weight=None,
        zero_division="warn",
    ):
        score = precision_score(
            references,
            predictions,
            labels=labels,
            pos_label=pos_label,
            average=average,
            sample_weight=sample_weight,
            zero_division=zero_division,
        )
        return {"precision": score if getattr(score, "size", 1) > 1 else float(score)}
