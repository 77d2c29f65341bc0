"""The evaluate modules shipped inside hf_heads load offline, take the arguments and return the keys of the
huggingface/evaluate module of the same name, and agree with the libraries they wrap (sacrebleu, nltk,
rouge-score, scikit-learn) on fixed inputs; the compute_metrics builders report what the run scripts did."""

import math
import warnings

import numpy as np
import pytest
import sacrebleu
import torch
from sklearn import metrics as skm

from hf_heads.metrics import METRICS, classification_metrics, distinct_share, generation_metrics, load_metric, path

PREDS = ["the cat sat on the mat", "a dog barked loudly", "storms hit the northern coast, again."]
REFS = ["the cat sat on a mat", "the dog barked loudly", "Storm hits the north coast again."]
MULTI_REFS = [
    ["the cat is on the mat", "there is a cat sitting on the mat today"],
    ["a dog barks", "the dog barked very loudly at night"],
    ["storms hit the coast again", "the northern coast was hit by storms once again"],
]

# Keys of huggingface/evaluate's modules (metrics/<name>/<name>.py), in order.
EVALUATE_KEYS = {
    "bleu": ["bleu", "precisions", "brevity_penalty", "length_ratio", "translation_length", "reference_length"],
    "sacrebleu": ["score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len"],
    "rouge": ["rouge1", "rouge2", "rougeL", "rougeLsum"],
}


@pytest.fixture(scope="module")
def loaded():
    cache: dict = {}

    def get(name: str, config_name: str | None = None):
        if (name, config_name) not in cache:
            cache[name, config_name] = load_metric(name, config_name)
        return cache[name, config_name]

    return get


def test_every_module_loads_by_path_with_evaluate():
    import evaluate

    assert set(METRICS) == {"bleu", "sacrebleu", "rouge", "accuracy", "f1", "precision", "recall", "perplexity"}
    for name in METRICS:
        module = evaluate.load(path(name), module_type="metric")
        assert module.name == name and module.module_type == "metric" and isinstance(module, evaluate.Metric)
    f1 = evaluate.load(path("f1"))
    assert f1.compute(predictions=[0, 1, 1], references=[0, 1, 0]) == {"f1": pytest.approx(2 / 3)}
    with pytest.raises(ValueError, match="metric='meteor' is not allowed"):
        path("meteor")
    with pytest.raises(ValueError, match="metric='meteor'"):
        load_metric("meteor")


CITED = {  # the work each module's `citation` (evaluate's, BibTeX) names
    "bleu": "title = {BLEU: a Method for Automatic Evaluation of Machine Translation}",
    "sacrebleu": 'title = "A Call for Clarity in Reporting {BLEU} Scores"',
    "rouge": 'title = "{ROUGE}: A Package for Automatic Evaluation of Summaries"',
    "accuracy": "title={Scikit-learn: Machine Learning in {P}ython}",
    "f1": "title={Scikit-learn: Machine Learning in {P}ython}",
    "precision": "title={Scikit-learn: Machine Learning in {P}ython}",
    "recall": "title={Scikit-learn: Machine Learning in {P}ython}",
    "perplexity": "title={Perplexity{\\textemdash}a measure of the difficulty of speech recognition tasks}",
}


@pytest.mark.parametrize("name", list(CITED))
def test_every_module_cites_the_work_it_computes(loaded, name):
    assert set(CITED) == set(METRICS)
    citation = loaded(name).citation
    assert citation.startswith("@") and CITED[name] in citation


LINKS = {  # (homepage, codebase_urls, reference_urls) of each text-generation module
    "bleu": (
        "",
        ["https://github.com/tensorflow/nmt/blob/master/nmt/scripts/bleu.py"],
        ["https://en.wikipedia.org/wiki/BLEU"],
    ),
    "sacrebleu": (
        "https://github.com/mjpost/sacreBLEU",
        ["https://github.com/mjpost/sacreBLEU"],
        ["https://github.com/mjpost/sacreBLEU", "https://en.wikipedia.org/wiki/BLEU"],
    ),
    "rouge": (
        "",
        ["https://github.com/google-research/google-research/tree/master/rouge"],
        ["https://en.wikipedia.org/wiki/ROUGE_(metric)"],
    ),
}


@pytest.mark.parametrize("name", list(LINKS))
def test_text_generation_modules_link_to_their_code_and_the_metrics_description(loaded, name):
    info = loaded(name).info
    assert (info.homepage, info.codebase_urls, info.reference_urls) == LINKS[name]


# ---------------------------------------------------------------- bleu (evaluate's: tensorflow/nmt on 13a tokens)


def test_bleu_matches_evaluate_example_and_keys(loaded):
    bleu = loaded("bleu")
    refs = [["hello there general kenobi", "hello there!"], ["foo bar foobar"]]
    got = bleu.compute(predictions=["hello there general kenobi", "foo bar foobar"], references=refs)
    assert list(got) == EVALUATE_KEYS["bleu"]
    assert got["bleu"] == 1.0 and got["translation_length"] == 7 and got["reference_length"] == 6


@pytest.mark.parametrize("lowercase_refs", [False, True])
def test_bleu_single_reference_matches_sacrebleu_without_smoothing(loaded, lowercase_refs):
    """With one reference per segment evaluate's BLEU is sacreBLEU's (13a, smoothing 'none') / 100."""
    refs = [r.lower() for r in REFS] if lowercase_refs else REFS
    got = loaded("bleu").compute(predictions=PREDS, references=refs)
    ref = sacrebleu.corpus_bleu(PREDS, [refs], smooth_method="none")
    assert got["bleu"] == pytest.approx(ref.score / 100, rel=1e-12)
    assert got["precisions"] == pytest.approx([p / 100 for p in ref.precisions], rel=1e-12)
    assert got["brevity_penalty"] == pytest.approx(ref.bp, rel=1e-12)
    assert (got["translation_length"], got["reference_length"]) == (ref.sys_len, ref.ref_len)
    assert got["length_ratio"] == pytest.approx(ref.sys_len / ref.ref_len)


@pytest.mark.parametrize("max_order", [1, 2, 4])
def test_bleu_multi_reference_matches_nltk(loaded, max_order):
    """Several references: clipped counts against the max over references, reference length of the shortest
    reference (here also the closest, which is what nltk uses); user tokenizer `str.split`."""
    from nltk.translate.bleu_score import corpus_bleu

    preds = ["the cat is on the mat today", "a dog barked at night", "storms hit the coast again today"]
    got = loaded("bleu").compute(predictions=preds, references=MULTI_REFS, tokenizer=str.split, max_order=max_order)
    expected = corpus_bleu(
        [[r.split() for r in refs] for refs in MULTI_REFS],
        [p.split() for p in preds],
        weights=(1 / max_order,) * max_order,
    )
    assert got["bleu"] == pytest.approx(expected, rel=1e-12)
    assert got["reference_length"] == sum(min(len(r.split()) for r in refs) for refs in MULTI_REFS)
    assert len(got["precisions"]) == max_order


def test_bleu_smoothing_adds_one_to_every_order(loaded):
    got = loaded("bleu").compute(predictions=PREDS, references=REFS, smooth=True)
    ref = sacrebleu.corpus_bleu(PREDS, [REFS], smooth_method="none")
    precisions = [(c + 1) / (t + 1) for c, t in zip(ref.counts, ref.totals, strict=True)]
    assert got["precisions"] == pytest.approx(precisions, rel=1e-12)
    geo = math.exp(sum(math.log(p) for p in precisions) / 4)
    assert got["bleu"] == pytest.approx(geo * ref.bp, rel=1e-12)
    unsmoothed = loaded("bleu").compute(predictions=["a b c d e"], references=["a b x d e"])
    assert unsmoothed["bleu"] == 0.0  # no 4-gram match and no smoothing, as in evaluate


def test_bleu_brevity_penalty_of_short_translations(loaded):
    """Translations shorter than their references: BP = exp(1 - r / c) with r = 10 reference and c = 6 translation
    tokens; a translation longer than its reference is not penalised."""
    preds, refs = ["the cat sat", "a dog barked"], ["the cat sat on the mat", "a dog barked loudly"]
    got = loaded("bleu").compute(predictions=preds, references=refs, max_order=2)
    assert got["length_ratio"] == pytest.approx(0.6)
    assert got["brevity_penalty"] == pytest.approx(math.exp(1 - 10 / 6), rel=1e-12)
    assert got["bleu"] == pytest.approx(got["brevity_penalty"], rel=1e-12)  # every 1- and 2-gram matches
    assert loaded("bleu").compute(predictions=refs, references=preds, max_order=2)["brevity_penalty"] == 1.0


def test_bleu_user_tokenizer_applies_to_the_predictions_too(loaded):
    kwargs = {"predictions": ["The Cat sat on the Mat"], "references": ["the cat sat on the mat"]}
    assert loaded("bleu").compute(**kwargs, tokenizer=lambda text: text.lower().split())["bleu"] == 1.0
    assert loaded("bleu").compute(**kwargs)["bleu"] < 1.0  # 13a keeps the case


# ---------------------------------------------------------------- sacrebleu


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"lowercase": True},
        {"tokenize": "intl"},
        {"tokenize": "char"},
        {"smooth_method": "floor", "smooth_value": 0.2},
        {"smooth_method": "none"},
        {"smooth_method": "add-k", "smooth_value": 2},
        {"use_effective_order": True},
    ],
)
@pytest.mark.parametrize("multi", [False, True])
def test_sacrebleu_matches_corpus_bleu(loaded, kwargs, multi):
    refs = MULTI_REFS if multi else REFS
    streams = [[r[i] for r in refs] for i in range(2)] if multi else [REFS]
    got = loaded("sacrebleu").compute(predictions=PREDS, references=refs, **kwargs)
    ref = sacrebleu.corpus_bleu(PREDS, streams, **kwargs)
    assert list(got) == EVALUATE_KEYS["sacrebleu"]
    assert got == {
        "score": ref.score,
        "counts": ref.counts,
        "totals": ref.totals,
        "precisions": ref.precisions,
        "bp": ref.bp,
        "sys_len": ref.sys_len,
        "ref_len": ref.ref_len,
    }


def test_sacrebleu_evaluate_example_and_errors(loaded):
    refs = [["hello there general kenobi", "hello there !"], ["goodbye ankh morpork", "ankh morpork"]]
    preds = ["hello there general kenobi", "on our way to ankh morpork"]
    assert round(loaded("sacrebleu").compute(predictions=preds, references=refs)["score"], 1) == 39.8
    with pytest.raises(ValueError, match="same number of references"):
        loaded("sacrebleu").compute(predictions=preds, references=[refs[0], refs[1][:1]])


@pytest.mark.parametrize("kwargs", [{}, {"lowercase": True, "tokenize": "intl"}])
def test_sacrebleu_cumulative_bleu_extra(loaded, kwargs):
    """`cumulative_bleu=True` adds BLEU-1..4 (the sparse-softmax paper's table 3) and changes no other key."""
    plain = loaded("sacrebleu").compute(predictions=PREDS, references=REFS, **kwargs)
    got = loaded("sacrebleu").compute(predictions=PREDS, references=REFS, cumulative_bleu=True, **kwargs)
    assert list(got) == EVALUATE_KEYS["sacrebleu"] + ["bleu_1", "bleu_2", "bleu_3", "bleu_4"]
    assert {k: got[k] for k in plain} == plain
    for n in range(1, 5):
        bleu_n = sacrebleu.BLEU(max_ngram_order=n, effective_order=True, **kwargs)
        assert got[f"bleu_{n}"] == bleu_n.corpus_score(PREDS, [REFS]).score
    assert got["bleu_4"] == pytest.approx(got["score"]) and got["bleu_1"] > got["bleu_2"] > got["bleu_4"]


SHORT = (["a b c"], ["a b c d"])  # no 4-gram in the hypothesis
NO_4GRAM_MATCH = (["a b c d e f", "the cat sat down"], ["a b x d e f", "the cat is down"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"use_effective_order": True},
        {"smooth_method": "none"},
        {"smooth_method": "floor", "smooth_value": 0.2},
        {"smooth_method": "add-k", "smooth_value": 2},
    ],
)
@pytest.mark.parametrize("pair", [SHORT, NO_4GRAM_MATCH], ids=["short", "no-4-gram-match"])
def test_sacrebleu_options_where_an_order_has_no_match(loaded, pair, kwargs):
    """Smoothing and effective order only act where an n-gram order has no match (or no n-gram): there the score
    and BLEU-1..4 are sacreBLEU's with the same options."""
    preds, refs = pair
    got = loaded("sacrebleu").compute(predictions=preds, references=refs, cumulative_bleu=True, **kwargs)
    assert got["score"] == sacrebleu.corpus_bleu(preds, [refs], **kwargs).score
    smoothing = {k: v for k, v in kwargs.items() if k != "use_effective_order"}
    for n in range(1, 5):
        bleu_n = sacrebleu.BLEU(max_ngram_order=n, effective_order=True, **smoothing)
        assert got[f"bleu_{n}"] == bleu_n.corpus_score(preds, [refs]).score


# ---------------------------------------------------------------- rouge


def _rouge_score(preds, refs, types=("rouge1", "rouge2", "rougeL", "rougeLsum"), stem=False, tokenizer=None):
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(list(types), use_stemmer=stem, tokenizer=tokenizer)
    multi = isinstance(refs[0], list)
    return [scorer.score_multi(r, p) if multi else scorer.score(r, p) for p, r in zip(preds, refs, strict=True)]


def test_rouge_defaults_are_evaluates_bootstrap_mid_without_stemming(loaded):
    from rouge_score import scoring

    np.random.seed(0)
    got = loaded("rouge").compute(predictions=PREDS, references=REFS)
    aggregator = scoring.BootstrapAggregator()
    for score in _rouge_score(PREDS, REFS):
        aggregator.add_scores(score)
    np.random.seed(0)
    expected = {k: v.mid.fmeasure for k, v in aggregator.aggregate().items()}
    assert list(got) == EVALUATE_KEYS["rouge"] and got == expected
    stemmed = loaded("rouge").compute(predictions=PREDS, references=REFS, use_stemmer=True)
    assert stemmed["rouge1"] > got["rouge1"]  # "storms"/"storm", "hit"/"hits": no stemming by default
    same = loaded("rouge").compute(
        predictions=["hello there", "general kenobi"], references=["hello there", "general kenobi"]
    )
    assert same == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0, "rougeLsum": 1.0}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"use_stemmer": True},
        {"rouge_types": ["rouge1", "rougeL"]},
        {"rouge_types": ["rouge3", "rougeLsum"], "use_stemmer": True},
        {"tokenizer": str.split},
    ],
)
@pytest.mark.parametrize("multi", [False, True])
def test_rouge_per_example_matches_rouge_score(loaded, kwargs, multi):
    refs = MULTI_REFS if multi else REFS
    got = loaded("rouge").compute(predictions=PREDS, references=refs, use_aggregator=False, **kwargs)
    types = kwargs.get("rouge_types", EVALUATE_KEYS["rouge"])
    tokenizer = None
    if "tokenizer" in kwargs:
        tokenizer = type("Split", (), {"tokenize": staticmethod(kwargs["tokenizer"])})()
    scores = _rouge_score(PREDS, refs, types, stem=kwargs.get("use_stemmer", False), tokenizer=tokenizer)
    assert got == {key: [s[key].fmeasure for s in scores] for key in types}


def test_rouge_tokenizer_is_used(loaded):
    """A user tokenizer replaces rouge-score's (which lowercases and drops punctuation)."""
    kw = {"predictions": ["Storm, hits!"], "references": ["storm hits"], "use_aggregator": False}
    assert loaded("rouge").compute(**kw)["rouge1"] == [1.0]
    assert loaded("rouge").compute(**kw, tokenizer=str.split)["rouge1"] == [0.0]


def test_rouge_several_references_score_against_the_best_one(loaded):
    """With a list of references per prediction the best-scoring reference counts, wherever it is in the list."""
    preds = ["the cat sat on the mat", "a dog barked"]
    refs = [["a dog barked", "the cat sat on the mat"], ["a dog barked", "storms hit the coast"]]
    got = loaded("rouge").compute(predictions=preds, references=refs, use_aggregator=False)
    assert got == {key: [1.0, 1.0] for key in EVALUATE_KEYS["rouge"]}


# ---------------------------------------------------------------- accuracy, f1, precision, recall

MC_PRED, MC_REF = [0, 2, 1, 0, 0, 1, 2, 2], [0, 1, 2, 0, 1, 2, 2, 0]
BIN_PRED, BIN_REF = [0, 0, 1, 1, 0, 1], [0, 1, 0, 1, 0, 1]
WEIGHTS = [0.9, 0.5, 3.9, 1.2, 0.3, 2.0]


@pytest.mark.parametrize(
    "kwargs, binary",
    [
        ({}, True),
        ({"pos_label": 0}, True),
        ({"sample_weight": WEIGHTS}, True),
        ({"average": "macro"}, False),
        ({"average": "micro"}, False),
        ({"average": "weighted"}, False),
        ({"average": "macro", "labels": [1, 2]}, False),
        ({"average": "weighted", "sample_weight": WEIGHTS + [1.0, 0.5]}, False),
        ({"average": None}, False),
        ({"average": None, "labels": [2, 0]}, False),
    ],
)
@pytest.mark.parametrize("name", ["f1", "precision", "recall"])
def test_f1_precision_recall_match_sklearn(loaded, name, kwargs, binary):
    pred, ref = (BIN_PRED, BIN_REF) if binary else (MC_PRED, MC_REF)
    got = loaded(name).compute(predictions=pred, references=ref, **kwargs)
    expected = getattr(skm, f"{name}_score")(ref, pred, **kwargs)
    assert list(got) == [name]
    if kwargs.get("average", "binary") is None:
        assert isinstance(got[name], np.ndarray) and np.array_equal(got[name], expected)
    else:
        assert isinstance(got[name], float) and got[name] == float(expected)


def test_classification_modules_reproduce_evaluate_examples(loaded):
    pred, ref = [0, 2, 1, 0, 0, 1], [0, 1, 2, 0, 1, 2]
    assert round(loaded("f1").compute(predictions=pred, references=ref, average="macro")["f1"], 2) == 0.27
    assert round(loaded("f1").compute(predictions=pred, references=ref, average="micro")["f1"], 2) == 0.33
    assert loaded("precision").compute(predictions=pred, references=ref, average="macro") == {
        "precision": 0.2222222222222222
    }
    assert loaded("recall").compute(predictions=pred, references=ref, average="macro") == {"recall": 1 / 3}
    b_pred, b_ref = [0, 0, 1, 1, 0], [0, 1, 0, 1, 0]
    assert loaded("f1").compute(predictions=b_pred, references=b_ref) == {"f1": 0.5}
    assert round(loaded("f1").compute(predictions=b_pred, references=b_ref, pos_label=0)["f1"], 2) == 0.67
    weights = [0.9, 0.5, 3.9, 1.2, 0.3]
    assert round(loaded("f1").compute(predictions=b_pred, references=b_ref, sample_weight=weights)["f1"], 2) == 0.35
    acc = loaded("accuracy")
    a_pred, a_ref = [0, 1, 1, 2, 1, 0], [0, 1, 2, 0, 1, 2]
    assert acc.compute(predictions=a_pred, references=a_ref) == {"accuracy": 0.5}
    assert acc.compute(predictions=a_pred, references=a_ref, normalize=False) == {"accuracy": 3.0}
    weighted = acc.compute(predictions=a_pred, references=a_ref, sample_weight=[0.5, 2, 0.7, 0.5, 9, 0.4])
    assert weighted == {"accuracy": 0.8778625954198473}


@pytest.mark.parametrize("name", ["accuracy", "f1", "precision", "recall"])
def test_classification_modules_link_to_the_scikit_learn_function_they_compute(loaded, name):
    url = f"https://scikit-learn.org/stable/modules/generated/sklearn.metrics.{name}_score.html"
    assert loaded(name).reference_urls == [url]


@pytest.mark.parametrize("name", ["precision", "recall", "f1"])
def test_zero_division(loaded, name):
    """precision/recall take scikit-learn's `zero_division` as evaluate's do; f1 takes it as an extra."""
    pred, ref = [0, 0, 0], [0, 0, 0]  # no positive predicted nor present: every score is 0/0
    with pytest.warns(skm._classification.UndefinedMetricWarning):
        assert loaded(name).compute(predictions=pred, references=ref) == {name: 0.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loaded(name).compute(predictions=pred, references=ref, zero_division=1) == {name: 1.0}


@pytest.mark.parametrize("name", ["accuracy", "f1", "precision", "recall"])
def test_multilabel_configuration(name):
    metric = load_metric(name, "multilabel")
    pred, ref = [[0, 1, 1], [1, 1, 0], [0, 0, 1]], [[0, 1, 1], [0, 1, 0], [1, 0, 1]]
    kwargs = {} if name == "accuracy" else {"average": "macro"}
    got = metric.compute(predictions=pred, references=ref, **kwargs)
    assert got == {name: float(getattr(skm, f"{name}_score")(np.array(ref), np.array(pred), **kwargs))}


# ---------------------------------------------------------------- perplexity


def test_perplexity_nll_configuration():
    out = load_metric("perplexity", "nll").compute(predictions=[2.0, 4.0], references=[2, 1])
    assert out["perplexities"] == pytest.approx([math.e, math.exp(4.0)])
    assert out["mean_perplexity"] == pytest.approx((math.e + math.exp(4.0)) / 2)
    assert out["perplexity"] == pytest.approx(math.exp(2.0)) and out["nll_per_token"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match=r"references\[1\]=0 is not allowed"):
        load_metric("perplexity", "nll").compute(predictions=[2.0, 4.0], references=[2, 0])


def _per_text_perplexity(model, tok, texts: list[str], add_start_token: bool) -> list[float]:
    """exp(mean NLL of each text's tokens after the first), one unpadded text at a time."""
    ppls = []
    for text in texts:
        ids = tok(text, add_special_tokens=False).input_ids
        ids = torch.tensor([([tok.bos_token_id] if add_start_token else []) + ids])
        with torch.no_grad():
            logits = model(ids).logits
        nll = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])
        ppls.append(math.exp(nll.item()))
    return ppls


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory):
    from conftest import tiny_gpt2_config
    from transformers import GPT2LMHeadModel

    from hf_heads.data import build_word_tokenizer

    texts = ["the cat sat on the mat", "a dog barked", "storms hit the northern coast again today"]
    tok = build_word_tokenizer(texts)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(tiny_gpt2_config(vocab_size=len(tok))).eval()
    where = tmp_path_factory.mktemp("ppl") / "gpt2"
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return str(where), model, tok, texts


@pytest.mark.parametrize("kwargs", [{}, {"add_start_token": False, "batch_size": 1}, {"batch_size": 2}])
def test_perplexity_from_model_id(causal_lm, kwargs):
    where, model, tok, texts = causal_lm
    out = load_metric("perplexity").compute(model_id=where, predictions=texts, device="cpu", **kwargs)
    assert list(out) == ["perplexities", "mean_perplexity"]
    expected = _per_text_perplexity(model, tok, texts, kwargs.get("add_start_token", True))
    assert out["perplexities"] == pytest.approx(expected, rel=1e-4)
    assert out["mean_perplexity"] == pytest.approx(np.mean(expected), rel=1e-4)


def test_perplexity_truncates_to_max_length(causal_lm):
    where, model, tok, texts = causal_lm
    out = load_metric("perplexity").compute(model_id=where, predictions=texts[2:], max_length=4, device="cpu")
    short = " ".join(texts[2].split()[:3])  # max_length counts the BOS token
    assert out["perplexities"] == pytest.approx(_per_text_perplexity(model, tok, [short], True), rel=1e-4)


def test_perplexity_of_an_hf_heads_checkpoint(causal_lm, tmp_path):
    """`model_id` may be a saved HeadsForCausalLM: its inference logits (no margin) are scored."""
    from hf_heads import HeadsForCausalLM

    where, _, tok, texts = causal_lm
    heads = HeadsForCausalLM.from_base(where, head={"family": "margin", "margin": "cos", "m": 0.2}).eval()
    heads.save_pretrained(tmp_path / "heads")
    tok.save_pretrained(tmp_path / "heads")
    out = load_metric("perplexity").compute(model_id=str(tmp_path / "heads"), predictions=texts, device="cpu")
    assert out["perplexities"] == pytest.approx(_per_text_perplexity(heads, tok, texts, True), rel=1e-4)


def test_perplexity_argument_errors(causal_lm):
    where, *_ = causal_lm
    with pytest.raises(ValueError, match="device='tpu' is not allowed; allowed: 'gpu', 'cpu', 'cuda'"):
        load_metric("perplexity").compute(model_id=where, predictions=["a dog"], device="tpu")
    with pytest.raises(ValueError, match="model_id=None is not allowed"):
        load_metric("perplexity").compute(predictions=["a dog"])


def test_perplexity_refuses_a_start_token_the_tokenizer_does_not_have(causal_lm, tmp_path):
    """add_start_token=True needs the tokenizer's BOS token: without one it is refused, saying so, with or without
    truncation (the first token of each text would go unscored); add_start_token=False scores such a model."""
    where, model, tok, texts = causal_lm
    tok = tok.__class__.from_pretrained(where, bos_token=None)
    assert tok.bos_token is None
    model.save_pretrained(tmp_path / "no-bos")
    tok.save_pretrained(tmp_path / "no-bos")
    with pytest.raises(
        ValueError, match="^add_start_token=True is not allowed for a tokenizer without a BOS token; allowed: False$"
    ):
        load_metric("perplexity").compute(
            model_id=str(tmp_path / "no-bos"), predictions=texts, max_length=4, device="cpu"
        )
    with pytest.raises(ValueError, match="^add_start_token=True is not allowed for a tokenizer without a BOS token"):
        load_metric("perplexity").compute(model_id=str(tmp_path / "no-bos"), predictions=texts, device="cpu")
    scored = load_metric("perplexity").compute(
        model_id=str(tmp_path / "no-bos"), predictions=texts, add_start_token=False, device="cpu"
    )
    assert all(math.isfinite(p) for p in scored["perplexities"])


def test_perplexity_refuses_texts_too_short_to_score(causal_lm):
    """An empty text (or, without a start token, a one-token text) has no token to predict: refused, saying so."""
    where, *_ = causal_lm
    with pytest.raises(ValueError, match="^predictions: each input text must be at least one token long$"):
        load_metric("perplexity").compute(model_id=where, predictions=["a dog", ""], device="cpu")
    with pytest.raises(
        ValueError, match="^predictions: with add_start_token=False each input text must be at least two"
    ):
        load_metric("perplexity").compute(
            model_id=where, predictions=["a dog", "dog"], add_start_token=False, device="cpu"
        )


# ---------------------------------------------------------------- compute_metrics builders (the run scripts' numbers)


def test_classification_builder_reports_accuracy_and_macro_micro_f1():
    logits = np.array([[2.0, 0.1, 0.0], [0.0, 3.0, 0.0], [0.0, 2.0, 0.5], [0.0, 0.0, 1.0], [0.0, 3.0, 0.0]])
    labels = np.array([0, 1, 2, 2, 3])  # class 3 is never predicted: its F1 is 0/0, counted 0 without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = classification_metrics()((logits, labels))
    pred = logits.argmax(-1)
    assert out == {
        "accuracy": skm.accuracy_score(labels, pred),
        "f1_macro": skm.f1_score(labels, pred, average="macro", zero_division=0),
        "f1_micro": skm.f1_score(labels, pred, average="micro", zero_division=0),
    }
    assert out["accuracy"] == pytest.approx(0.6)
    pooled = np.tile([0.0, 0.0, 0.0, 1.0], (len(labels), 1))  # a further model output, e.g. a pooled hidden state
    assert classification_metrics()(((logits, pooled), labels)) == out


def _decode_pair(texts: list[str], refs: list[str]):
    from hf_heads.data import build_word_tokenizer

    tok = build_word_tokenizer(texts + refs)
    width = 16
    pred_ids = tok(texts, padding="max_length", max_length=width, return_tensors="np").input_ids
    ref_ids = tok(refs, padding="max_length", max_length=width, return_tensors="np").input_ids
    ref_ids = np.where(ref_ids == tok.pad_token_id, -100, ref_ids)
    decode = [t.strip() for t in tok.batch_decode(pred_ids, skip_special_tokens=True)]
    decode_refs = [
        t.strip() for t in tok.batch_decode(np.where(ref_ids < 0, tok.pad_token_id, ref_ids), skip_special_tokens=True)
    ]
    return tok, (pred_ids, ref_ids), decode, decode_refs


def test_generation_builder_reports_sacrebleu_and_stemmed_mean_rouge():
    """The numbers the run scripts report: sacreBLEU (0-100) with BLEU-1..4, and ROUGE as the mean per-example
    F-measure with stemming (not evaluate's bootstrap default)."""
    from rouge_score import rouge_scorer

    tok, eval_pred, texts, refs = _decode_pair(PREDS, REFS)
    out = generation_metrics(tok, ("rouge", "bleu"))(eval_pred)
    keys = ["rouge1", "rouge2", "rougeL", "rougeLsum", "bleu", "brevity_penalty", "length_ratio"]
    assert list(out) == keys + ["bleu_1", "bleu_2", "bleu_3", "bleu_4", "distinct"]
    assert out["distinct"] == len(set(texts)) / len(texts)
    ref = sacrebleu.corpus_bleu(texts, [refs])
    assert out["bleu"] == ref.score and out["brevity_penalty"] == ref.bp
    assert out["length_ratio"] == ref.sys_len / max(ref.ref_len, 1)
    for n in range(1, 5):
        assert (
            out[f"bleu_{n}"]
            == sacrebleu.BLEU(max_ngram_order=n, effective_order=True).corpus_score(texts, [refs]).score
        )
    scorer = rouge_scorer.RougeScorer(EVALUATE_KEYS["rouge"], use_stemmer=True)
    scores = [scorer.score(r, p) for p, r in zip(texts, refs, strict=True)]
    for key in EVALUATE_KEYS["rouge"]:
        assert out[key] == sum(s[key].fmeasure for s in scores) / len(scores)
    bleu_keys = keys[4:] + ["bleu_1", "bleu_2", "bleu_3", "bleu_4", "distinct"]
    assert list(generation_metrics(tok, ("bleu",))(eval_pred)) == bleu_keys


def test_distinct_share_counts_repeated_outputs():
    """A model that writes one constant headline scores 1/N; whitespace around an output does not make it new."""
    assert distinct_share(["a b", "a b ", "c", "d"]) == 3 / 4
    assert distinct_share(["same"] * 5) == 1 / 5
    assert distinct_share([]) == 0.0
    tok, (pred_ids, ref_ids), _, _ = _decode_pair(PREDS, REFS)
    repeated = np.repeat(pred_ids[:1], len(PREDS), axis=0)  # the first prediction for every example
    assert generation_metrics(tok, ("bleu",))((repeated, ref_ids))["distinct"] == 1 / len(PREDS)


def test_generation_builder_decodes_and_ignores_padding():
    from hf_heads.data import build_word_tokenizer

    tok = build_word_tokenizer(["the cat sat on the mat", "a dog barked"])
    ids = tok(["the cat sat on the mat"], return_tensors="np").input_ids
    labels = np.concatenate([ids, np.full((1, 2), -100)], axis=1)
    preds = np.concatenate([ids, np.full((1, 2), tok.pad_token_id)], axis=1)
    out = generation_metrics(tok)((preds, labels))
    assert out["bleu"] == pytest.approx(100.0) and out["rouge1"] == pytest.approx(1.0)
    assert out["distinct"] == 1.0
    with pytest.raises(ValueError, match="generation metric='sacrebleu' is not allowed; allowed: 'bleu', 'rouge'"):
        generation_metrics(tok, ("sacrebleu",))


def test_generation_builder_reads_predictions_padded_with_minus_100():
    """The Trainer pads generated ids of different lengths with -100 when it concatenates the batches."""
    tok, (pred_ids, ref_ids), _, _ = _decode_pair(PREDS, REFS)
    padded = np.where(pred_ids == tok.pad_token_id, -100, pred_ids)
    assert (padded == -100).any()
    assert generation_metrics(tok)((padded, ref_ids)) == generation_metrics(tok)((pred_ids, ref_ids))


def test_generation_builder_reads_the_generated_ids_first_in_a_tuple_of_outputs():
    """Predictions given as a tuple (generated ids, then further outputs) are scored on the generated ids."""
    tok, (pred_ids, ref_ids), _, _ = _decode_pair(PREDS, REFS)
    further = np.repeat(pred_ids[:1], len(PREDS), axis=0)
    assert generation_metrics(tok)(((pred_ids, further), ref_ids)) == generation_metrics(tok)((pred_ids, ref_ids))


@pytest.mark.parametrize("device, expected", [("gpu", "cuda"), ("cuda", "cuda"), ("cpu", "cpu")])
def test_perplexity_device_names_the_torch_device(causal_lm, monkeypatch, device, expected):
    """evaluate's `device="gpu"` (and "cuda", "cpu") reaches torch as its device name; the model is moved once."""
    moved = []

    class Moved(Exception):
        pass

    def to(module, *args, **kwargs):
        moved.append(args[0] if args else kwargs.get("device"))
        raise Moved

    monkeypatch.setattr(torch.nn.Module, "to", to)
    with pytest.raises(Moved):
        load_metric("perplexity").compute(model_id=causal_lm[0], predictions=causal_lm[3], device=device)
    assert moved == [expected]
