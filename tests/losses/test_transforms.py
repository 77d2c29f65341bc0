"""Checkpoint output transforms (hf_heads.losses.transforms: logit multiplier, final soft-cap) in every discrete
criterion and head: naive references forward and backward, float64 gradcheck, inference logits."""

import pytest
import torch
import torch.nn.functional as F
from conftest import chunked, with_impl

from hf_heads.heads import make_head
from hf_heads.losses import OptionError, Scorer, margin_logits, presets

margin_cross_entropy = with_impl(presets.margin_cross_entropy)

SCALE, CAP = 0.6, 2.5


def capped(z: torch.Tensor) -> torch.Tensor:
    """The transform written out: cap·tanh(scale·z / cap)."""
    return CAP * torch.tanh(SCALE * z / CAP)


def _data(n=7, hidden=5, vocab=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, hidden, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(vocab, hidden, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(vocab, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, vocab, (n,), generator=g)
    y[2] = -100
    return h, w, b, y


def naive_top_k_loss(z, y, k, smoothing, reduction):
    """Sparse-softmax eq. 5 (top-k log-sum-exp) with label smoothing over the kept logits."""
    keep = y != -100
    vals, _ = z.topk(k, dim=1)
    lse = torch.logsumexp(vals, dim=1)
    loss = lse - z.gather(1, y.clamp_min(0)[:, None]).squeeze(1)
    loss = (1 - smoothing) * loss + smoothing * (lse - vals.mean(1))
    loss = loss * keep
    return loss if reduction == "none" else loss.sum() / keep.sum()


@pytest.mark.parametrize("top_k", [None, 4])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fused_cross_entropy_with_transform_matches_naive(top_k, smoothing, reduction):
    h, w, b, y = _data()

    def ours(h_, w_, b_):
        kw = dict(top_k=top_k, label_smoothing=smoothing, reduction=reduction, chunk_size=3)
        return chunked(h_, w_, b_, y, logit_multiplier=SCALE, softcap=CAP, **kw)

    z = capped(h @ w.T + b)
    if top_k is None:
        ref = F.cross_entropy(z, y, label_smoothing=smoothing, reduction=reduction)
    else:
        ref = naive_top_k_loss(z, y, top_k, smoothing, reduction)
    out = ours(h, w, b)
    torch.testing.assert_close(out, ref)
    weights = torch.rand_like(out)
    grads = torch.autograd.grad((out * weights).sum(), (h, w, b))
    for a, r in zip(grads, torch.autograd.grad((ref * weights).sum(), (h, w, b)), strict=True):
        torch.testing.assert_close(a, r)
    assert torch.autograd.gradcheck(ours, (h, w, b))


@pytest.mark.parametrize(
    "options",
    [dict(margin="arc", m=0.3), dict(margin="cos", m=0.2, context_norm="max-norm"), dict(margin="lsm", m=2)],
    ids=["arc", "cos-max-norm", "lsm"],
)
def test_margin_with_transform_takes_the_margin_on_the_raw_logit_then_caps(options):
    """Documented choice (hf_heads.losses.margin): l' = cap·tanh(scale·l / cap), l with the margin on the target."""
    h, w, b, y = _data()
    spec, plain = Scorer.from_options(**options, logit_multiplier=SCALE, softcap=CAP), Scorer.from_options(**options)

    def ours(h_, w_, b_):
        return margin_cross_entropy(h_, w_, b_, y, scorer=spec, chunk_size=3)

    ref = F.cross_entropy(capped(margin_logits(h, w, b, y, scorer=plain)), y)
    torch.testing.assert_close(ours(h, w, b), ref)
    grads = torch.autograd.grad(ours(h, w, b), (h, w, b))
    for a, r in zip(grads, torch.autograd.grad(ref, (h, w, b)), strict=True):
        torch.testing.assert_close(a, r)
    assert torch.autograd.gradcheck(ours, (h, w, b))
    torch.testing.assert_close(margin_logits(h, w, b, scorer=spec), capped(margin_logits(h, w, b, scorer=plain)))


@pytest.mark.parametrize(
    "section",
    [
        {"family": "softmax"},
        {"family": "sparse", "k": 4},
        {"family": "margin", "margin": "arc", "m": 0.2},
        {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 4, "noise": "uniform"},
    ],
    ids=lambda s: s["family"],
)
def test_every_discrete_head_applies_the_transform_in_training_and_inference(section):
    torch.manual_seed(0)
    head = make_head(5, 11, {**section, "logit_multiplier": SCALE, "logit_softcap": CAP}).double()
    plain = make_head(5, 11, section).double()
    plain.load_state_dict(head.state_dict())
    h, _, _, y = _data()
    logits = head.logits(h)
    finite = logits[torch.isfinite(logits)]
    assert finite.abs().max() <= CAP  # every logit is capped
    if section["family"] in ("softmax", "margin"):  # the transform of the plain head's logits
        torch.testing.assert_close(logits, capped(plain.logits(h)))
    head.train()
    loss = head.loss(h, y)
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(h.grad).all()
    head.eval()
    with torch.no_grad():  # the eval loss is the NLL of the inference logits (sparse: +inf outside the top decode_k)
        keep = y != -100
        want = -torch.log_softmax(head.logits(h), dim=-1)[keep].gather(1, y[keep, None]).mean()
        torch.testing.assert_close(head.loss(h, y), want)


def test_bad_transform_is_refused_with_its_field():
    with pytest.raises(ValueError, match="head.logit_softcap=0.0"):
        make_head(5, 11, {"family": "softmax", "logit_softcap": 0.0})
    with pytest.raises(ValueError, match="head.logit_multiplier=-1"):
        make_head(5, 11, {"family": "margin", "logit_multiplier": -1})
    with pytest.raises(OptionError, match="logit_multiplier"):
        Scorer.from_options(logit_multiplier=0.0)
    h, w, b, y = _data()
    with pytest.raises(OptionError, match="^logit_multiplier=0.0 must be > 0"):
        chunked(h, w, b, y, logit_multiplier=0.0)


def test_saved_and_exported_models_keep_the_transform(tmp_path):
    """A Gemma 2 checkpoint (soft-cap) wrapped by from_base: its head section carries the cap, and the directory it
    saves gives the checkpoint's logits through from_pretrained and where hf_heads is not installed."""
    from arch_matrix import build, probe_inputs
    from export_check import export_job, load_without_hf_heads
    from transformers import AutoModelForCausalLM

    from hf_heads import HeadsForCausalLM

    original = build("gemma2", "causal_lm")
    model = HeadsForCausalLM.from_base(original, head={"family": "margin", "margin": "arc", "m": 0.1})
    assert model.config.head["logit_softcap"] == 2.0
    model.save_pretrained(tmp_path / "saved")
    inputs = probe_inputs("causal_lm")
    with torch.no_grad():
        want = original(**inputs).logits
        torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(tmp_path / "saved")(**inputs).logits, want)
    (got,) = load_without_hf_heads([export_job(tmp_path / "saved", "AutoModelForCausalLM", inputs)], tmp_path / "x")
    torch.testing.assert_close(got["output"], want)
