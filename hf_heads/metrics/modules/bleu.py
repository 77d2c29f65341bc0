"""BLEU as the Hub's `evaluate.load("bleu")` computes it (an `evaluate` module shipped with hf_heads: loads offline).

Same arguments, defaults and returned keys as huggingface/evaluate's metrics/bleu/bleu.py: the
tensorflow/nmt `compute_bleu` on mteval-v13a tokens, on a 0-1 scale. This is NOT sacreBLEU (0-100,
closest reference length, smoothing 'exp'): for that load the `sacrebleu` module, which is what the
run scripts report as `bleu`."""

import collections
import math

import datasets
import evaluate
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a as _SacreBleuTokenizer13a

_CITATION = """\
@INPROCEEDINGS{Papineni02bleu:a,
    author = {Kishore Papineni and Salim Roukos and Todd Ward and Wei-jing Zhu},
    title = {BLEU: a Method for Automatic Evaluation of Machine Translation},
    year = {2002},
    pages = {311--318}
}
@inproceedings{lin-och-2004-orange,
    title = "{ORANGE}: a Method for Evaluating Automatic Evaluation Metrics for Machine Translation",
    author = "Lin, Chin-Yew and Och, Franz Josef",
    booktitle = "COLING 2004",
    year = "2004",
    pages = "501--507",
}
"""

_DESCRIPTION = """\
BLEU (Bilingual Evaluation Understudy): the geometric mean of the clipped n-gram precisions (n = 1..max_order)
of a corpus of translations against one or more references each, times the brevity penalty. The n-gram
counts are those of tensorflow/nmt's `compute_bleu` (the reference length is the SHORTEST reference of each
segment), exactly as the `bleu` module of huggingface/evaluate.
"""

_KWARGS_DESCRIPTION = """
Computes BLEU score of translated segments against one or more references.
Args:
    predictions: list of translations to score.
    references: list of lists of or just a list of references for each translation.
    tokenizer : approach used for tokenizing `predictions` and `references`.
        The default tokenizer is `tokenizer_13a`, a minimal tokenization approach that is equivalent to
        `mteval-v13a`, used by WMT. This can be replaced by any function that takes a string as input and
        returns a list of tokens as output.
    max_order: Maximum n-gram order to use when computing BLEU score. Defaults to 4.
    smooth: Whether or not to apply Lin et al. 2004 smoothing (add one to the matches and the possible
        matches of every order). Defaults to False.
Returns:
    'bleu': bleu score (0-1),
    'precisions': the n-gram precisions (0-1), orders 1..max_order,
    'brevity_penalty': brevity penalty,
    'length_ratio': ratio of lengths (translation / reference),
    'translation_length': translation_length,
    'reference_length': reference_length
Examples:
    >>> predictions = ["hello there general kenobi", "foo bar foobar"]
    >>> references = [["hello there general kenobi", "hello there!"], ["foo bar foobar"]]
    >>> bleu = evaluate.load(hf_heads.metrics.path("bleu"))
    >>> results = bleu.compute(predictions=predictions, references=references)
    >>> print(results["bleu"])
    1.0
"""


class Tokenizer13a:
    """mteval-v13a tokenisation returning the list of tokens, as evaluate's bleu `tokenizer_13a.Tokenizer13a`
    (a copy of sacrebleu's with `line.split()` returned): sacrebleu's tokenizer, split on whitespace."""

    def __init__(self) -> None:
        self._tokenize = _SacreBleuTokenizer13a()

    def signature(self) -> str:
        return "13a"

    def __call__(self, line: str) -> list[str]:
        return self._tokenize(line).split()


_TOKENIZER_13A = Tokenizer13a()  # the default `tokenizer`, one instance as in evaluate's signature


def _get_ngrams(segment, max_order: int) -> collections.Counter:
    """All n-grams of orders 1..max_order in `segment`, with their counts."""
    ngram_counts: collections.Counter = collections.Counter()
    for order in range(1, max_order + 1):
        for i in range(0, len(segment) - order + 1):
            ngram_counts[tuple(segment[i : i + order])] += 1
    return ngram_counts


def compute_bleu(reference_corpus, translation_corpus, max_order: int = 4, smooth: bool = False) -> tuple:
    """tensorflow/nmt nmt/scripts/bleu.py `compute_bleu` (Apache-2.0, Copyright 2017 Google Inc.), unchanged
    in arithmetic: returns (bleu, precisions, bp, ratio, translation_length, reference_length)."""
    matches_by_order = [0] * max_order
    possible_matches_by_order = [0] * max_order
    reference_length = 0
    translation_length = 0
    for references, translation in zip(reference_corpus, translation_corpus, strict=False):
        reference_length += min(len(r) for r in references)
        translation_length += len(translation)

        merged_ref_ngram_counts: collections.Counter = collections.Counter()
        for reference in references:
            merged_ref_ngram_counts |= _get_ngrams(reference, max_order)
        translation_ngram_counts = _get_ngrams(translation, max_order)
        overlap = translation_ngram_counts & merged_ref_ngram_counts
        for ngram in overlap:
            matches_by_order[len(ngram) - 1] += overlap[ngram]
        for order in range(1, max_order + 1):
            possible_matches = len(translation) - order + 1
            if possible_matches > 0:
                possible_matches_by_order[order - 1] += possible_matches

    precisions = [0] * max_order
    for i in range(0, max_order):
        if smooth:
            precisions[i] = (matches_by_order[i] + 1.0) / (possible_matches_by_order[i] + 1.0)
        elif possible_matches_by_order[i] > 0:
            precisions[i] = float(matches_by_order[i]) / possible_matches_by_order[i]
        else:
            precisions[i] = 0.0

    if min(precisions) > 0:
        p_log_sum = sum((1.0 / max_order) * math.log(p) for p in precisions)
        geo_mean = math.exp(p_log_sum)
    else:
        geo_mean = 0

    ratio = float(translation_length) / reference_length
    bp = 1.0 if ratio > 1.0 else math.exp(1 - 1.0 / ratio)
    bleu = geo_mean * bp
    return (bleu, precisions, bp, ratio, translation_length, reference_length)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Bleu(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
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
            codebase_urls=["https://github.com/tensorflow/nmt/blob/master/nmt/scripts/bleu.py"],
            reference_urls=["https://en.wikipedia.org/wiki/BLEU"],
        )

    def _compute(self, predictions, references, tokenizer=_TOKENIZER_13A, max_order=4, smooth=False):
        # if only one reference is provided make sure we still use list of lists
        if isinstance(references[0], str):
            references = [[ref] for ref in references]
        references = [[tokenizer(r) for r in ref] for ref in references]
        predictions = [tokenizer(p) for p in predictions]
        bleu, precisions, bp, ratio, translation_length, reference_length = compute_bleu(
            reference_corpus=references, translation_corpus=predictions, max_order=max_order, smooth=smooth
        )
        return {
            "bleu": bleu,
            "precisions": precisions,
            "brevity_penalty": bp,
            "length_ratio": ratio,
            "translation_length": translation_length,
            "reference_length": reference_length,
        }
