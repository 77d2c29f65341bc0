"""Every refusal of the model classes leaves the model exactly as it was: its parameters and buffers (the running
max-norm, the word counts included), its config (the head section too) and its head's options, compared before and
after each refused call. A refusal that changes part of the model first would hand the user a half-changed model
with an error about the other half."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import tiny_enc_dec_config, tiny_gpt2_config
from torch import nn

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM

V = 50


def _causal(head: dict) -> HeadsForCausalLM:
    torch.manual_seed(0)
    return HeadsForCausalLM(HeadsConfig(backbone=tiny_gpt2_config(V, n_layer=1, n_embd=16).to_dict(), head=head))


def _state(model) -> tuple:
    tensors = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return tensors, copy.deepcopy(model.config.to_dict()), model.head.options, model.head_origin


def _same(before: tuple, model) -> None:
    tensors, config, options, origin = before
    after = model.state_dict()
    assert tensors.keys() == after.keys()
    changed = [k for k in tensors if not torch.equal(tensors[k], after[k])]
    assert not changed, changed
    assert model.config.to_dict() == config
    assert model.head.options is options and model.head_origin == origin


def _ids(seed: int = 0):
    return torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(seed))


MARGIN = {"family": "margin", "margin": "arc", "m": 0.2, "context_norm": "max-norm"}
SPARSE = {"family": "sparse", "k": 5}
REFUSALS = {
    "an invalid option": (SPARSE, lambda m: m.set_head_options(k=-1), ValueError),
    "an option no family has": (SPARSE, lambda m: m.set_head_options(decodek=3), ValueError),
    "a family of another task": (MARGIN, lambda m: m.set_head_options(family="continuous"), ValueError),
    "an unknown family": (MARGIN, lambda m: m.set_head_options(family="nope"), ValueError),
    "another head than the model's own": (SPARSE, lambda m: m.bind_head({"family": "sparse", "k": 7}), ValueError),
    "resize_token_embeddings": (MARGIN, lambda m: m.resize_token_embeddings(V + 10), NotImplementedError),
    "set_output_embeddings": (MARGIN, lambda m: m.set_output_embeddings(nn.Linear(16, V)), NotImplementedError),
    "word counts of the wrong shape": (MARGIN, lambda m: m.set_word_counts(torch.ones(V + 1)), ValueError),
    "negative word counts": (MARGIN, lambda m: m.set_word_counts(-torch.ones(V)), ValueError),
    "a label out of range, training": (
        MARGIN, lambda m: m.train()(input_ids=_ids(), labels=_ids().clamp(max=V - 1) + V), ValueError,
    ),
    "a token id out of range": (MARGIN, lambda m: m.train()(input_ids=_ids() + V, labels=_ids()), ValueError),
    "a warm start still to calibrate": (
        {"family": "margin", "word_norm": "log-unigram"},
        lambda m: (setattr(m.head, "warm_start_pending", True), m.train()(input_ids=_ids(), labels=_ids())),
        ValueError,
    ),
    "a beam wider than the sparse head's support": (
        SPARSE, lambda m: m.generate(input_ids=_ids()[:1, :3], num_beams=6, max_new_tokens=2, do_sample=False),
        ValueError,
    ),
    "calibrating without labels": (MARGIN, lambda m: m.calibrate_warm_start(input_ids=_ids()), ValueError),
}  # fmt: skip


@pytest.mark.parametrize("name", list(REFUSALS))
def test_a_refused_call_changes_nothing(name, tmp_path):
    head, call, error = REFUSALS[name]
    model = _causal(head)
    if model.head.needs_counts or head is MARGIN:
        model.set_word_counts(torch.arange(1.0, V + 1))
    model.train()(input_ids=_ids(1), labels=_ids(1))  # a training step's running max-norm, where the head keeps one
    if name == "a warm start still to calibrate":  # the flag is the precondition, not the change under test
        model.head.warm_start_pending = True
    model.eval()
    before = _state(model)
    with pytest.raises(error):
        call(model)
    if name == "a warm start still to calibrate":
        model.head.warm_start_pending = False
    _same(before, model)


def test_a_save_refused_for_a_replaced_config_writes_nothing_and_changes_nothing(tmp_path):
    model = _causal(SPARSE)
    model.config.head = {**model.config.head, "k": 6}
    before = _state(model)
    with pytest.raises(ValueError, match="config.head was replaced"):
        model.save_pretrained(tmp_path / "saved")
    assert not (tmp_path / "saved").exists() or not any((tmp_path / "saved").iterdir())
    _same(before, model)


def test_a_seq2seq_model_refuses_a_family_switch_that_cannot_start_from_its_head():
    """A discrete head of a seq2seq model cannot become a continuous head in place (it has no embedding table to
    start from): refused before anything changes."""
    config = HeadsConfig(backbone=tiny_enc_dec_config("bart", V).to_dict(), head={"family": "softmax"})
    model = HeadsForSeq2SeqLM(config).eval()
    before = _state(model)
    with pytest.raises(ValueError, match="head.family='continuous' cannot start from this model's softmax head"):
        model.set_head_options(family="continuous", embedding_dim=8)
    _same(before, model)


@pytest.mark.parametrize(
    "tasks, allowed",
    [
        (("classification",), "HeadsForSequenceClassification"),
        (("seq2seq",), "HeadsForSeq2SeqLM"),
        (("seq2seq", "classification"), "HeadsForSeq2SeqLM, HeadsForSequenceClassification"),
    ],
)
def test_a_family_on_a_model_of_another_task_is_refused_naming_the_model_classes_it_serves(
    monkeypatch, tasks, allowed
):
    from conftest import tiny_llama_config

    from hf_heads.heads import FAMILIES

    monkeypatch.setattr(FAMILIES["softmax"].head, "tasks", tasks)
    with pytest.raises(ValueError, match=f"^head.family='softmax' is for {allowed}, not HeadsForCausalLM$"):
        HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config(30).to_dict(), head={"family": "softmax"}))
