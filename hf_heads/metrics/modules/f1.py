"""F1 as the Hub's `evaluate.load("f1")` computes it (an `evaluate` module shipped with hf_heads: loads offline).

Same arguments, defaults, configurations (`"multilabel"`) and returned key as huggingface/evaluate's
metrics/f1/f1.py: scikit-learn's `f1_score`. One extra keyword: `zero_division` (scikit-learn's, default
`"warn"` as there, so leaving it out gives evaluate's numbers and warnings)."""

import datasets
import evaluate
from sklearn.metrics import f1_score

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
The F1 score is the harmonic mean of the precision and recall: F1 = 2 * (precision * recall) / (precision + recall).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `int`): Predicted labels.
    references (`list` of `int`): Ground truth labels.
    labels (`list` of `int`): The set of labels to include when `average` is not set to `'binary'`, and the order
        of the labels if `average` is `None`. By default, all labels in `predictions` and `references` are used in
        sorted order. Defaults to None.
    pos_label (`int`): The class to be considered the positive class, in the case where `average` is set to
        `binary`. Defaults to 1.
    average (`string`): This parameter is required for multiclass/multilabel targets. If set to `None`, the scores
        for each class are returned. Otherwise, this determines the type of averaging performed on the data
        (`'binary'`, `'micro'`, `'macro'`, `'weighted'`, `'samples'`). Defaults to `'binary'`.
    sample_weight (`list` of `float`): Sample weights Defaults to None.
    zero_division (`"warn"`, `0`, `1` or `nan`): hf_heads extra, not in evaluate's module: scikit-learn's value
        for an undefined F1. Defaults to `"warn"` (scikit-learn's default: 0 with a warning).
Returns:
    f1 (`float` or `array` of `float`): F1 score or list of f1 scores, depending on the value passed to `average`.
Examples:
    >>> f1_metric = evaluate.load(hf_heads.metrics.path("f1"))
    >>> results = f1_metric.compute(references=[0, 1, 0, 1, 0], predictions=[0, 0, 1, 1, 0])
    >>> print(results)
    {'f1': 0.5}
    >>> results = f1_metric.compute(predictions=[0, 2, 1, 0, 0, 1], references=[0, 1, 2, 0, 1, 2], average="macro")
    >>> print(round(results['f1'], 2))
    0.27
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class F1(evaluate.Metric):
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
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.f1_score.html"],
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
        score = f1_score(
            references,
            predictions,
            labels=labels,
            pos_label=pos_label,
            average=average,
            sample_weight=sample_weight,
            zero_division=zero_division,
        )
        return {"f1": score if getattr(score, "size", 1) > 1 else float(score)}
