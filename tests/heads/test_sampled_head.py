"""The `sampled` head family inside HeadsForCausalLM: training criterion, corrected inference
distribution, eval NLL, save/load, generate, missing counts, CLI flags."""

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_llama_config
from transformers import HfArgumentParser

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.losses import corrected_log_probs, noise_distribution
from hf_heads.training import HeadsTrainingArguments

DOCS = Path(__file__).resolve().parents[2] / "docs"
NCE = {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 16, "noise": "log-uniform"}


def _model(head, counts=True):
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
    if counts:
        model.set_word_counts(torch.arange(61.0, 0.0, -1.0))
    return model


def _batch(seed=0):
    return torch.randint(4, 61, (3, 9), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "head",
    [
        NCE,
        {**NCE, "criterion": "ce", "method": "is", "noise": "unigram", "noise_add": 1.0},
        {**NCE, "criterion": "bce", "method": "mcs", "margin": "cos", "m": 0.2, "noise": "uniform"},
        {"family": "sampled", "criterion": "mse", "method": "full"},
    ],
)
def test_sampled_head_trains_and_infers_with_the_corrected_posterior(head, tmp_path):
    model = _model(head)
    x = _batch()
    model.train()
    torch.manual_seed(1)
    out = model(x, labels=x)
    assert out.logits is None and torch.isfinite(out.loss)
    out.loss.backward()
    assert torch.isfinite(model.head.weight.grad).all() and model.head.weight.grad.abs().sum() > 0

    model.eval()
    with torch.no_grad():
        logits = model(x).logits  # (B, T, V) normalised corrected log-posteriors
        torch.testing.assert_close(logits.logsumexp(-1), torch.zeros(3, 9), atol=1e-5, rtol=0)
        hidden = model.backbone(x).last_hidden_state
        scores = hidden @ model.head.weight.T + model.head.bias
        o = model.head.options
        expected = corrected_log_probs(
            scores,
            criterion=o.criterion,
            method=o.method,
            noise_probs=model.head.noise_probs(),
            num_samples=o.num_samples,
        )
        torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)  # inference applies no margin
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, 61), x[:, 1:].reshape(-1))
        torch.testing.assert_close(model(x, labels=x).loss, nll, atol=1e-5, rtol=1e-5)  # eval loss = corrected NLL
        assert model.generate(x[:1, :3], max_new_tokens=4, do_sample=False).shape == (1, 7)
    model.save_pretrained(tmp_path)
    loaded = HeadsForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.head == model.config.head
    torch.testing.assert_close(loaded(x).logits, logits)


def test_unnormalized_scoring_mode():
    model = _model({**NCE, "normalize": False}).eval()
    x = _batch()
    with torch.no_grad():
        raw = model(x).logits
        hidden = model.backbone(x).last_hidden_state
    torch.testing.assert_close(raw, hidden @ model.head.weight.T + model.head.bias)  # BCE-NCE: log p̃ = s (eq. 20)
    model.train()
    model(x, labels=x)
    diag = model.head.diagnostics()
    assert {"head/self_norm_logz_mean", "head/self_norm_logz_std"} <= diag.keys()


def test_the_self_normalization_diagnostic_measures_the_scores_before_any_renormalisation():
    """head/self_norm_logz_mean / _std are log Σ_c p̃(c|x) of the corrected scores as trained, not renormalised: the
    same with normalize true (the default, inference renormalises) as with false, varying over a fresh head's rows."""
    x = _batch()
    diagnostics = []
    for normalize in (True, False):
        model = _model({**NCE, "normalize": normalize}).train()
        torch.manual_seed(1)
        model(x, labels=x)
        diagnostics.append(model.head.diagnostics())
    renormalised, raw = diagnostics
    for key in ("head/self_norm_logz_mean", "head/self_norm_logz_std"):
        assert renormalised[key] == pytest.approx(raw[key])
    assert raw["head/self_norm_logz_std"] > 1e-3  # the rows differ: not self-normalised


def test_noise_probs_follow_the_counts_rank():
    model = _model(NCE)
    expected = noise_distribution("log-uniform", 61, counts=torch.arange(61.0, 0.0, -1.0))
    torch.testing.assert_close(model.head.noise_probs(), expected)


def test_missing_counts_is_a_clear_error():
    model = _model(NCE, counts=False).train()
    x = _batch()
    with pytest.raises(ValueError, match="head.noise='log-uniform' needs word counts"):
        model(x, labels=x)


@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(head="sampled", method="nce"), "--num_samples"),
        (dict(head="sampled", method="nce", num_samples=8, noise="zipf"), "--noise='zipf'"),
        (
            dict(head="sampled", criterion="mse", method="is", num_samples=8),
            "--method='is' is not allowed: --criterion='mse' has only",
        ),
        (dict(head="margin", criterion="bce"), "--criterion is not an option of head family 'margin'"),
        (dict(head="sampled", noise="unigram", noise_smoothing=0.0), "--noise_smoothing=0.0 must be > 0"),
        (dict(head="sampled", noise_smoothing=0.5), "--noise_smoothing=0.5 is a parameter of the unigram noise only"),
    ],
)
def test_head_flags_errors_name_the_flag(flags, message, tmp_path):
    args = HeadsTrainingArguments(output_dir=str(tmp_path), report_to="none", **flags)
    with pytest.raises(ValueError, match=message):
        args.head_config()


def test_head_flags_build_the_section(tmp_path):
    args = HeadsTrainingArguments(
        output_dir=str(tmp_path),
        report_to="none",
        head="sampled",
        criterion="bce",
        method="nce",
        num_samples=8192,
        noise="log-uniform",
    )
    head = args.head_config()
    assert head["family"] == "sampled" and head["num_samples"] == 8192 and head["margin"] == "none"


def test_num_samples_help_gives_the_rule_for_k_and_points_at_its_section_of_the_guide():
    """`--num_samples` in `--help`: the rule of thumb for K, and the section of the guide that explains it, which
    exists."""
    (action,) = [a for a in HfArgumentParser(HeadsTrainingArguments)._actions if "--num_samples" in a.option_strings]
    assert "K·D(c) should be about 0.8 or more" in action.help
    guide, section = re.search(r"\((\S+\.md): ([^)]+)\)", action.help).groups()
    headings = [
        line.lstrip("#").strip().lower() for line in (DOCS / guide).read_text().splitlines() if line[:1] == "#"
    ]
    assert any(heading.startswith(section) for heading in headings), (section, headings)


@pytest.mark.parametrize(
    ("criterion", "method", "expected"), [("bce", "nce", -4.1109), ("mse", "full", -4.1109), ("ce", "is", 0.0)]
)
def test_initial_bias_makes_bce_outputs_start_near_one_over_v(criterion, method, expected):
    head = {"family": "sampled", "criterion": criterion, "method": method}
    if method != "full":
        head.update(num_samples=8, noise="uniform")
    model = _model(head).eval()
    torch.testing.assert_close(model.head.bias, torch.full((61,), expected), atol=1e-4, rtol=0)  # −log 61
    if criterion == "bce":  # q = exp(s) starts self-normalised: log Σ_c q ≈ 0
        with torch.no_grad():
            hidden = model.backbone(_batch()).last_hidden_state
            raw = hidden @ model.head.weight.T + model.head.bias
        assert raw.logsumexp(-1).abs().max() < 0.5


def test_noise_distribution_is_cached_until_the_counts_change():
    model = _model(NCE)
    first = model.head.noise_probs()
    assert model.head.noise_probs() is first  # not rebuilt at every step
    model.set_word_counts(torch.arange(1.0, 62.0))  # reversed frequency order
    second = model.head.noise_probs()
    assert second is not first and second[60] > second[0]
    model.head.load_state_dict(model.head.state_dict())
    assert model.head.noise_probs() is not second  # a load rebuilds it too
