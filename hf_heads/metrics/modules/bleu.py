"""Corpus BLEU through sacrebleu (an `evaluate` module that ships with hf_heads: loads offline)."""

import datasets
import evaluate
import sacrebleu


class Bleu(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Corpus BLEU (sacrebleu, 13a tokenisation) on a 0-100 scale, and cumulative BLEU-1..4 "
            "(uniform weights over 1..n-grams, as the sparse-softmax paper's table 3 reports).",
            citation="Post, A Call for Clarity in Reporting BLEU Scores, WMT 2018.",
            inputs_description="predictions: list of str; references: list of str or list of list of str",
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string"),
                        "references": datasets.Sequence(datasets.Value("string")),
                    }
                ),
                datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
            ],  # fmt: skip
        )

    def _compute(self, predictions, references, tokenize="13a", lowercase=False):
        refs = [[r] if isinstance(r, str) else list(r) for r in references]
        width = max(len(r) for r in refs) if refs else 1
        if any(len(r) != width for r in refs):
            raise ValueError("references: every prediction needs the same number of references")
        streams = [[r[i] for r in refs] for i in range(width)]
        result = sacrebleu.corpus_bleu(predictions, streams, tokenize=tokenize, lowercase=lowercase)
        out = {"bleu": result.score, "precisions": result.precisions, "brevity_penalty": result.bp,
               "length_ratio": result.sys_len / max(result.ref_len, 1)}  # fmt: skip
        for n in range(1, 5):
            bleu_n = sacrebleu.BLEU(tokenize=tokenize, lowercase=lowercase, max_ngram_order=n, effective_order=True)
            out[f"bleu_{n}"] = bleu_n.corpus_score(predictions, streams).score
        return out
