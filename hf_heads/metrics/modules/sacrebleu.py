"""sacreBLEU as the Hub's `evaluate.load("sacrebleu")` computes it (an `evaluate` module shipped with hf_heads).

Same arguments, defaults and returned keys as huggingface/evaluate's metrics/sacrebleu/sacrebleu.py. One
extra keyword, off by default: `cumulative_bleu=True` also returns `bleu_1`..`bleu_4`, the cumulative
BLEU-n the sparse-softmax paper's table 3 reports (what the run scripts report)."""

import datasets
import evaluate
import sacrebleu as scb

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    publisher = "Association for Computational Linguistics",
    url = "https://www.aclweb.org/anthology/W18-6319",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
SacreBLEU provides hassle-free computation of shareable, comparable, and reproducible BLEU scores (0-100).
This module calls `sacrebleu.corpus_bleu` exactly as the `sacrebleu` module of huggingface/evaluate does.
"""

_KWARGS_DESCRIPTION = """
Produces BLEU scores along with its sufficient statistics
from a source against one or more references.

Args:
    predictions (`list` of `str`): list of translations to score.
    references (`list` of `list` of `str`, or `list` of `str`): the references of each prediction. Every
        prediction must have the same number of references.
    smooth_method (`str`): The smoothing method to use, defaults to `'exp'`. Possible values are:
        `'none'`, `'floor'` (increment zero counts), `'add-k'` (increment num/denom by k for n>1),
        `'exp'` (exponential decay).
    smooth_value (`float`): The smoothing value. Only valid when `smooth_method='floor'` (defaults to `0.1`)
        or `smooth_method='add-k'` (defaults to `1`).
    tokenize (`str`): Tokenization method to use for BLEU. If not provided, sacrebleu's default (`'13a'`,
        mteval). Possible values include `'none'`, `'zh'`, `'13a'`, `'intl'`, `'char'`, `'ja-mecab'`.
    lowercase (`bool`): If `True`, lowercases the input, enabling case-insensitivity. Defaults to `False`.
    force (`bool`): If `True`, insists that your tokenized input is actually detokenized. Defaults to `False`.
    use_effective_order (`bool`): If `True`, stops including n-gram orders for which precision is 0. This
        should be `True`, if sentence-level BLEU will be computed. Defaults to `False`.
    cumulative_bleu (`bool`): hf_heads extra, not in evaluate's module. If `True`, also return `bleu_1`..
        `bleu_4`: cumulative BLEU-n (uniform weights over 1..n-grams, effective order) with the same
        tokenisation, case and smoothing. Defaults to `False` (then the keys are exactly evaluate's).

Returns:
    'score': BLEU score,
    'counts': Counts,
    'totals': Totals,
    'precisions': Precisions,
    'bp': Brevity penalty,
    'sys_len': predictions length,
    'ref_len': reference length,
    'bleu_1'..'bleu_4': only with `cumulative_bleu=True`.

Examples:
    >>> predictions = ["hello there general kenobi", "on our way to ankh morpork"]
    >>> references = [["hello there general kenobi", "hello there !"], ["goodbye ankh morpork", "ankh morpork"]]
    >>> sacrebleu = evaluate.load(hf_heads.metrics.path("sacrebleu"))
    >>> results = sacrebleu.compute(predictions=predictions, references=references)
    >>> print(list(results.keys()))
    ['score', 'counts', 'totals', 'precisions', 'bp', 'sys_len', 'ref_len']
    >>> print(round(results["score"], 1))
    39.8
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sacrebleu(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            homepage="https://github.com/mjpost/sacreBLEU",
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references"),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacreBLEU"],
            reference_urls=["https://github.com/mjpost/sacreBLEU", "https://en.wikipedia.org/wiki/BLEU"],
        )

    def _compute(
        self,
        predictions,
        references,
        smooth_method="exp",
        smooth_value=None,
        force=False,
        lowercase=False,
        tokenize=None,
        use_effective_order=False,
        cumulative_bleu=False,
    ):
        # if only one reference is provided make sure we still use list of lists
        if isinstance(references[0], str):
            references = [[ref] for ref in references]
        references_per_prediction = len(references[0])
        if any(len(refs) != references_per_prediction for refs in references):
            raise ValueError("Sacrebleu requires the same number of references for each prediction")
        transformed_references = [[refs[i] for refs in references] for i in range(references_per_prediction)]
        output = scb.corpus_bleu(
            predictions,
            transformed_references,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            force=force,
            lowercase=lowercase,
            use_effective_order=use_effective_order,
            **(dict(tokenize=tokenize) if tokenize else {}),
        )
        output_dict = {
            "score": output.score,
            "counts": output.counts,
            "totals": output.totals,
            "precisions": output.precisions,
            "bp": output.bp,
            "sys_len": output.sys_len,
            "ref_len": output.ref_len,
        }
        if cumulative_bleu:
            for n in range(1, 5):
                bleu_n = scb.BLEU(
                    lowercase=lowercase,
                    force=force,
                    tokenize=tokenize or None,
                    smooth_method=smooth_method,
                    smooth_value=smooth_value,
                    max_ngram_order=n,
                    effective_order=True,
                )
                output_dict[f"bleu_{n}"] = bleu_n.corpus_score(predictions, transformed_references).score
        return output_dict
