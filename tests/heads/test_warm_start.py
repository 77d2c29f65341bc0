"""Calibrated warm starts (`from_base`): a head whose distribution cannot equal the checkpoint's by copying its
output layer (norm scalings, sampled criteria) starts as close to it as the family allows."""

import copy
import logging

import pytest
import torch
from conftest import tiny_llama_config
from transformers import LlamaForCausalLM

from hf_heads import HeadsForCausalLM
from hf_heads.losses import corrected_log_probs

V = 61


@pytest.fixture(scope="module")
def base():
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_llama_config(vocab_size=V, initializer_range=0.3)).eval()


@pytest.fixture(scope="module")
def batch():
    return torch.randint(4, V, (3, 20), generator=torch.Generator().manual_seed(5))


COUNTS = torch.randint(1, 1000, (V,), generator=torch.Generator().manual_seed(6)).float()


def _log_probs(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)


def _nll(model, ids) -> float:
    return float(-_log_probs(model, ids)[:, :-1].gather(-1, ids[:, 1:, None]).mean())


@pytest.mark.parametrize("criterion, method", [("ce", "mcs"), ("ce", "cps"), ("bce", "mcs"), ("bce", "nce")])
def test_sampled_head_starts_at_the_checkpoint_distribution(base, batch, criterion, method):
    """Bias shifted by −log Z − (the correction's per-class offset): the corrected posterior is the base's."""
    head = {"family": "sampled", "criterion": criterion, "method": method, "num_samples": 20, "noise": "log-uniform"}
    model = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS).eval()
    torch.testing.assert_close(_log_probs(model, batch), _log_probs(base, batch), atol=1e-4, rtol=1e-4)
    raw = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS, calibrate=False).eval()
    if method in ("mcs", "cps"):  # these corrections add a per-class term to the copied layer
        assert _nll(raw, batch) > _nll(base, batch) + 0.05
    # the unnormalised corrected scores start self-normalised on average (log Z shifted out)
    o = model.head.options
    with torch.no_grad():
        scores = model.head.scores(model.backbone(input_ids=batch).last_hidden_state)
        raw_scores = corrected_log_probs(
            scores,
            criterion=criterion,
            method=method,
            num_samples=20,
            noise_probs=model.head.noise_probs(),
            normalize=False,
        )
    assert abs(float(torch.logsumexp(raw_scores, -1).mean())) < 0.5 and o.normalize  # probe vs batch positions


def test_bce_nce_training_loss_starts_small(base, batch):
    head = {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 20, "noise": "log-uniform"}
    calibrated = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS).train()
    raw = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS, calibrate=False).train()
    with torch.no_grad():
        losses = [float(m(input_ids=batch, labels=batch).loss) for m in (calibrated, raw)]
    assert losses[0] < losses[1]


def test_norm_scaled_margin_head_gain_is_fitted_saved_and_reloaded(base, batch, tmp_path):
    head = {"family": "margin", "margin": "arc", "m": 0.001, "word_norm": "log-unigram", "context_norm": "max-norm"}
    model = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS).eval()
    raw = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS, calibrate=False).eval()
    gain = model.config.head["warm_start_gain"]
    assert gain != 1.0 and model.head.options.warm_start_gain == gain
    assert float(model.head.context_norm_running) > 0
    assert _nll(model, batch) < _nll(raw, batch)
    assert _nll(model, batch) < _nll(base, batch) + 0.2
    model.save_pretrained(tmp_path)
    again = HeadsForCausalLM.from_pretrained(tmp_path).eval()
    assert again.config.head["warm_start_gain"] == gain
    torch.testing.assert_close(again(input_ids=batch).logits, model(input_ids=batch).logits)


def test_the_default_probe_samples_the_checkpoints_whole_distribution(base, monkeypatch):
    """Without `calibration_ids` the warm start is fitted on sequences sampled from the checkpoint's distribution
    itself: the nucleus, temperature, penalties and suppressed tokens its generation config recommends for generating
    do not change the fit."""
    head = {"family": "margin", "word_norm": "log-unigram"}
    probes, generate = [], base.generate
    monkeypatch.setattr(base, "generate", lambda *a, **k: probes.append(generate(*a, **k)) or probes[-1])
    gain = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS).head.options.warm_start_gain
    recommended = copy.deepcopy(base.generation_config)
    recommended.update(
        do_sample=True,
        top_p=0.5,
        temperature=0.6,
        repetition_penalty=1.3,
        min_p=0.1,
        no_repeat_ngram_size=2,
        suppress_tokens=[2, 3],
    )
    monkeypatch.setattr(base, "generation_config", recommended)
    assert HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS).head.options.warm_start_gain == gain
    assert len(probes) == 2 and torch.equal(probes[0], probes[1])  # the same sequences sampled


def test_gain_minimises_the_kl_over_the_probe(base, batch):
    """The fitted gain is the minimum of KL(base ‖ head) over the probe (golden-section search)."""
    head = {"family": "margin", "word_norm": "log-unigram"}
    model = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS, calibration_ids=batch).eval()
    hidden = model.backbone(input_ids=batch).last_hidden_state
    target = _log_probs(base, batch)
    gain = model.head.options.warm_start_gain

    def kl(g):
        model.set_head_options(warm_start_gain=g)
        out = torch.log_softmax(model.head.logits(hidden).float(), -1)
        return float((target.exp() * (target - out)).sum(-1).mean().detach())

    best = kl(gain)
    assert best <= kl(gain * 1.05) and best <= kl(gain / 1.05)


def test_without_counts_the_start_is_not_calibrated_and_says_so(base, caplog):
    head = {"family": "margin", "word_norm": "log-unigram"}
    with caplog.at_level(logging.WARNING, logger="hf_heads.modeling.causal_lm"):
        model = HeadsForCausalLM.from_base(base, head=head)
    assert "warm_start_gain" not in model.config.head or model.config.head["warm_start_gain"] == 1.0
    assert "pass word_counts= to from_base" in caplog.text


def test_softmax_and_plain_margin_heads_are_left_exact(base, batch):
    for head in ({"family": "softmax"}, {"family": "margin", "margin": "arc", "m": 0.2}):
        model = HeadsForCausalLM.from_base(base, head=head).eval()
        torch.testing.assert_close(model(input_ids=batch).logits, base(input_ids=batch).logits)


def test_a_ce_nce_head_keeps_the_copied_bias(base, batch, caplog):
    """CE-NCE's optimum is σ-bounded, not the checkpoint's posterior: its warm start keeps the output layer as copied
    (the bias of a checkpoint without one: zeros) and reports that it fitted nothing."""
    head = {"family": "sampled", "criterion": "ce", "method": "nce", "num_samples": 20, "noise": "log-uniform"}
    with caplog.at_level(logging.INFO, logger="hf_heads.modeling.causal_lm"):
        model = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS).eval()
    raw = HeadsForCausalLM.from_base(base, head=head, word_counts=COUNTS, calibrate=False).eval()
    assert torch.equal(model.head.bias, torch.zeros(V)) and torch.equal(model.head.weight, raw.head.weight)
    assert not model.head.warm_start_pending
    torch.testing.assert_close(_log_probs(model, batch), _log_probs(raw, batch), rtol=0, atol=0)
    assert [r.getMessage() for r in caplog.records if r.name == "hf_heads.modeling.causal_lm"] == [
        "warm start calibrated on 128 probe positions: {}"
    ]
