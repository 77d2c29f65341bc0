"""The evaluate modules shipped inside hf_heads load offline and agree with their libraries."""

import math

import numpy as np
import pytest
import sacrebleu

from hf_heads.metrics import classification_metrics, generation_metrics, load_metric


def test_bleu_matches_sacrebleu():
    preds = ["the cat sat on the mat", "a dog barked loudly"]
    refs = ["the cat sat on a mat", "the dog barked loudly"]
    got = load_metric("bleu").compute(predictions=preds, references=refs)
    assert got["bleu"] == sacrebleu.corpus_bleu(preds, [refs]).score
    for n in range(1, 5):  # cumulative BLEU-n, the sparse-softmax paper's table 3
        expected = sacrebleu.BLEU(max_ngram_order=n, effective_order=True).corpus_score(preds, [refs]).score
        assert got[f"bleu_{n}"] == expected
    assert got["bleu_4"] == pytest.approx(got["bleu"]) and got["bleu_1"] > got["bleu_2"] > got["bleu_4"]


def test_modules_load_by_path_with_evaluate():
    import evaluate

    from hf_heads.metrics import path

    f1 = evaluate.load(path("f1"))
    assert f1.compute(predictions=[0, 1, 1], references=[0, 1, 0])["accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="metric='sacrebleu' is not allowed"):
        path("sacrebleu")


def test_rouge_is_the_mean_of_rouge_score():
    from rouge_score import rouge_scorer

    preds = ["storms hit the northern coast", "shares fell sharply", "the team won"]
    refs = ["storm hits coast", "shares fell on monday", "team loses final"]
    got = load_metric("rouge").compute(predictions=preds, references=refs)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for key in ("rouge1", "rouge2", "rougeL"):
        expected = sum(scorer.score(r, p)[key].fmeasure for p, r in zip(preds, refs, strict=True)) / 3
        assert got[key] == pytest.approx(expected, abs=1e-12)


def test_rouge_identity_and_disjoint():
    rouge = load_metric("rouge")
    same = rouge.compute(predictions=["storms hit the coast"], references=["storms hit the coast"])
    assert same["rouge1"] == pytest.approx(1.0) and same["rougeL"] == pytest.approx(1.0)
    assert rouge.compute(predictions=["alpha beta"], references=["gamma delta"])["rouge1"] == 0.0


def test_f1_and_classification_builder():
    logits = np.array([[2.0, 0.1, 0.0], [0.0, 3.0, 0.0], [0.0, 2.0, 0.5], [0.0, 0.0, 1.0]])
    labels = np.array([0, 1, 2, 2])
    out = classification_metrics()((logits, labels))
    assert out["accuracy"] == pytest.approx(0.75) and 0 < out["f1_macro"] < 1


def test_perplexity_module():
    out = load_metric("perplexity").compute(predictions=[2.0, 4.0], references=[2, 2])
    assert out["perplexity"] == pytest.approx(math.exp(1.5))


def test_generation_builder_decodes_and_ignores_padding():
    from hf_heads.data import build_word_tokenizer

    tok = build_word_tokenizer(["the cat sat on the mat", "a dog barked"])
    ids = tok(["the cat sat on the mat"], return_tensors="np").input_ids
    labels = np.concatenate([ids, np.full((1, 2), -100)], axis=1)
    preds = np.concatenate([ids, np.full((1, 2), tok.pad_token_id)], axis=1)
    out = generation_metrics(tok)((preds, labels))
    assert out["bleu"] == pytest.approx(100.0) and out["rouge1"] == pytest.approx(1.0)


def test_unknown_metric():
    with pytest.raises(ValueError, match="metric='meteor'"):
        load_metric("meteor")
