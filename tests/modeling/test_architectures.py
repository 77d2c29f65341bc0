"""from_base keeps every Hub architecture's distribution: tiny random-weight models of many transformers model types
(tests/arch_matrix.py: large weights, each architecture's output transform pushed up) wrapped with
`HeadsFor*.from_base(model, head={"family": "softmax"})` give the original's log-probabilities, greedy and beam
`generate()` output, survive save -> `AutoModelFor*.from_pretrained`, and train one step with every family.
`python benchmarks/reproduce/architectures_table.py` writes the same matrix as README's table."""

import pytest
import torch
from arch_matrix import _TASKS as MATRIX
from arch_matrix import NO_BEAM_SEARCH, NUM_LABELS, SKIPPED, TASKS, VOCAB, build, cache_mismatches, probe_inputs
from conftest import family_heads
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

from hf_heads import HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification
from hf_heads.heads.registry import DEFAULT_FAMILY
from hf_heads.modeling import parity

CASES = [(task, key) for task in TASKS for key in MATRIX[task][0]]
# The default suite runs one case per output transform, body layout and refusal (`make test-all` runs them all).
DEFAULT = {
    "causal_lm": {
        "gpt2",
        "llama",
        "gemma2",
        "recurrent_gemma",
        "cohere",
        "granite",
        "hyperclovax",
        "falcon_h1",
        "minicpm3",
        "opt-project-out",
        "llama4_text",
        "phi",
        "mamba",
        "modernbert-decoder",
    },
    "seq2seq": {"bart", "t5", "t5-untied", "mt5", "umt5", "switch_transformers", "marian", "fsmt"},
    "encoder_classification": {"bert", "roberta", "deberta-v2", "distilbert", "modernbert", "xlm"},
    "decoder_classification": {"gpt2", "llama"},
}
PARAMS = [
    pytest.param(task, key, id=f"{task}-{key}", marks=() if key in DEFAULT[task] else pytest.mark.slow)
    for task, key in CASES
]
# Architectures from_base refuses (loudly, with the architecture named) instead of wrapping them wrong.
REFUSED = {
    ("causal_lm", "modernbert-decoder"): "refuses to return a different model",  # a prediction head before lm_head
    ("seq2seq", "fsmt"): "cannot start a head from it",  # the decoder applies its output projection itself
}
# transformers 5.23's own xLSTMForCausalLM cannot backpropagate (an in-place op in its cell): no training step.
NO_BACKWARD = {"xlstm"}
# the task of each matrix row, as the head families name theirs (hf_heads.heads.base.TASKS)
HEAD_TASKS = {"causal_lm": "causal-lm", "seq2seq": "seq2seq"}


def _wrap(task: str, original, head: dict, **kw):
    if task == "causal_lm":
        return HeadsForCausalLM.from_base(original, head=head, **kw)
    if task == "seq2seq":
        return HeadsForSeq2SeqLM.from_base(original, head=head, **kw)
    return HeadsForSequenceClassification.from_base(original, head=head, **kw)


def _log_probs(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(**inputs).logits.double(), dim=-1)


@pytest.mark.parametrize("task, key", PARAMS)
def test_from_base_returns_the_checkpoints_distribution(task, key, tmp_path):
    original = build(key, task)
    inputs = probe_inputs(task)
    if (task, key) in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[task, key]):
            _wrap(task, original, {"family": "softmax"})
        return
    model = _wrap(task, original, {"family": "softmax"}).eval()
    want = _log_probs(original, inputs)
    torch.testing.assert_close(_log_probs(model, inputs), want, rtol=1e-5, atol=1e-5)
    prompt = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
    if task in ("causal_lm", "seq2seq"):
        # recurrent-state decoders (mamba, rwkv, ...) generate through their own class's cache and hooks
        beams = (1,) if key in NO_BEAM_SEARCH else (1, 2)
        for n in beams:
            kw = dict(max_new_tokens=4, do_sample=False, num_beams=n)
            assert torch.equal(model.generate(**prompt, **kw), original.generate(**prompt, **kw)), n
        if key in NO_BEAM_SEARCH:  # transformers' own class refuses beam search with its cache: the same refusal
            with pytest.raises(ValueError, match="cannot use beam search with a cache"):
                model.generate(**prompt, max_new_tokens=2, num_beams=2)
        # generate() runs with the cache by default: cached decoding must be the uncached one, for a head that
        # copies the checkpoint and for one whose distribution is its own (sparse top-k) ...
        if not cache_mismatches(original, prompt, beams=beams):
            sparse = _wrap(task, original, {"family": "sparse", "k": 5}).eval()
            assert cache_mismatches(model, prompt, beams=beams) == []
            assert cache_mismatches(sparse, prompt, beams=beams) == []
        else:  # ... unless transformers' own model decodes differently with its cache: then follow it in both modes
            for n, cache in ((n, cache) for n in beams for cache in (True, False)):
                kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=n, use_cache=cache)
                assert torch.equal(model.generate(**prompt, **kw), original.generate(**prompt, **kw)), (n, cache)
    else:
        assert want.shape == (2, NUM_LABELS) and model.config.id2label == original.config.id2label
    model.save_pretrained(tmp_path)
    auto = {"causal_lm": AutoModelForCausalLM, "seq2seq": AutoModelForSeq2SeqLM}.get(
        task, AutoModelForSequenceClassification
    )
    reloaded = auto.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(_log_probs(reloaded, inputs), want, rtol=1e-5, atol=1e-5)
    if task in ("causal_lm", "seq2seq"):
        kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=beams[-1])
        assert torch.equal(reloaded.generate(**prompt, **kw), original.generate(**prompt, **kw))
    if key in NO_BACKWARD:
        return

    families = [  # every family but the default one checked above, as the families give theirs
        section
        for section in family_heads(HEAD_TASKS.get(task, "classification")).values()
        if section["family"] != DEFAULT_FAMILY
    ]
    labels = inputs["input_ids"] if task == "causal_lm" else inputs.get("decoder_input_ids")
    if labels is None:
        labels = torch.tensor([0, NUM_LABELS - 1])
    # The softmax head's training loss is the checkpoint's own loss on the same labels (its label shift included).
    with torch.no_grad():
        want_loss = original(**inputs, labels=labels).loss
        got_loss = model(**inputs, labels=labels).loss
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-5, msg=lambda m: f"{key} softmax loss: {m}")
    for section in families:
        section = {**section, "num_samples": 2} if "classification" in task and "num_samples" in section else section
        trained = _wrap(task, original, section, calibrate=False)  # from the copied layer as it is
        if trained.head.uses_embedding_table:
            trained.head.set_embedding_table(torch.randn(VOCAB, trained.head.options.embedding_dim))
        trained.train()
        loss = trained(**inputs, labels=labels).loss
        loss.backward()
        assert torch.isfinite(loss) and loss > 0, (section, loss)
        grads = {name: p.grad for name, p in trained.named_parameters() if p.requires_grad}
        assert all(g is None or bool(torch.isfinite(g).all()) for g in grads.values()), section
        # the loss reaches the backbone: a head that detached its input would train nothing below it
        backbone = [g for name, g in grads.items() if not name.startswith("head.") and g is not None]
        assert any(bool(g.abs().sum() > 0) for g in backbone), (key, section, "no gradient reaches the backbone")


def test_matrix_size_and_skips_are_reported():
    counts = {task: len(MATRIX[task][0]) for task in TASKS}
    assert counts["causal_lm"] >= 30 and counts["seq2seq"] >= 8, counts
    assert counts["encoder_classification"] >= 8 and counts["decoder_classification"] >= 3, counts
    assert all(reason for reason in SKIPPED.values())


def test_an_unknown_output_transform_is_refused_not_wrapped(monkeypatch):
    """The guard, not the transform table, is what keeps a model from changing silently: with the table emptied,
    a Gemma 2 checkpoint (soft-cap 2.0) is refused with its architecture named."""
    original = build("gemma2", "causal_lm")
    monkeypatch.setattr(parity, "output_transform", lambda config: {"logit_multiplier": 1.0, "logit_softcap": None})
    monkeypatch.setattr("hf_heads.modeling.causal_lm.output_transform", parity.output_transform)
    with pytest.raises(ValueError, match=r"Gemma2ForCausalLM \(model_type='gemma2'\).*refuses to return a different"):
        HeadsForCausalLM.from_base(original, head={"family": "softmax"})


def test_a_head_section_contradicting_the_checkpoints_transform_is_refused():
    original = build("cohere", "causal_lm")
    with pytest.raises(ValueError, match=r"head.logit_multiplier=2.0, but the checkpoint .* applies"):
        HeadsForCausalLM.from_base(original, head={"family": "softmax", "logit_multiplier": 2.0})


def test_classifier_labels_must_agree_with_the_checkpoint():
    original = build("bert", "encoder_classification")
    with pytest.raises(ValueError, match="num_labels=5, but .* is a classifier over 3 labels"):
        HeadsForSequenceClassification.from_base(original, num_labels=5)
    fresh = HeadsForSequenceClassification.from_base(original, num_labels=5, keep_classifier=False)
    assert fresh.config.num_labels == 5 and fresh.config.classifier_stem is None


def test_from_base_leaves_the_callers_model_as_it_was():
    for task, key in (("seq2seq", "t5"), ("encoder_classification", "roberta"), ("causal_lm", "llama")):
        original = build(key, task)
        before = {k: v.clone() for k, v in original.state_dict().items()}
        _wrap(task, original, {"family": "softmax"})
        after = original.state_dict()
        assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before), key


@pytest.mark.slow
def test_every_seq2seq_type_round_trips_through_trust_remote_code(tmp_path):
    """from_base -> save_pretrained -> `AutoModelForSeq2SeqLM.from_pretrained(dir, trust_remote_code=True)` where
    hf_heads is not installed (Marian's chain of tied embeddings included): the original's beam-search output."""
    from export_check import export_job, load_without_hf_heads

    keys = sorted(k for k in DEFAULT["seq2seq"] if ("seq2seq", k) not in REFUSED)
    prompt = {k: v for k, v in probe_inputs("seq2seq").items() if k != "decoder_input_ids"}
    kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=2)
    jobs, want = [], []
    for key in keys:
        original = build(key, "seq2seq").eval()
        HeadsForSeq2SeqLM.from_base(original, head={"family": "softmax"}).save_pretrained(tmp_path / key)
        jobs.append(export_job(tmp_path / key, "AutoModelForSeq2SeqLM", prompt, generate=kw))
        want.append(original.generate(**prompt, **kw))
    results = load_without_hf_heads(jobs, tmp_path / "check")
    for key, expected, result in zip(keys, want, results, strict=True):
        assert torch.equal(result["output"], expected), key
