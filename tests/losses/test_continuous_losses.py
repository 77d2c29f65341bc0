"""Continuous-output losses: log C_m against mpmath, vMF NLL (both forms), the margin losses and the cosine /
in-batch softmax losses against literal per-row references (forward and backward), float64 gradcheck, table-2
diagnostics, bad input."""

import math

import mpmath
import pytest
import torch
import torch.nn.functional as F

from hf_heads.losses import log_cmk, nearest_neighbour_diagnostics, syn_margin_loss, vmf_nll
from hf_heads.losses.continuous import (
    CosineSoftmaxLoss,
    InBatchSoftmaxLoss,
    cosine_softmax_loss,
    in_batch_softmax_loss,
    log_bessel_iv_and_ratio,
)

mpmath.mp.dps = 40
KAPPAS = [1e-4, 1e-2, 0.5, 3.0, 29.0, 31.0, 200.0, 1e3, 1e4, 1e5]


@pytest.mark.parametrize("dim", [2, 3, 50, 61, 300, 1024])
def test_log_bessel_and_ratio_match_mpmath(dim):
    v = dim / 2 - 1
    log_iv, ratio = log_bessel_iv_and_ratio(v, torch.tensor(KAPPAS, dtype=torch.float64))
    for i, k in enumerate(KAPPAS):
        ref = float(mpmath.log(mpmath.besseli(v, k)))
        ref_ratio = float(mpmath.besseli(v + 1, k) / mpmath.besseli(v, k))
        assert abs(log_iv[i].item() - ref) <= 1e-9 * max(1.0, abs(ref)), (dim, k)
        assert abs(ratio[i].item() - ref_ratio) <= 1e-9 * ref_ratio, (dim, k)


@pytest.mark.parametrize("dim", [2, 50, 300, 1024])
def test_log_cmk_float32_stable_and_gradient_is_minus_bessel_ratio(dim):
    kappa64 = torch.logspace(-4, 5, 40, dtype=torch.float64, requires_grad=True)
    out64 = log_cmk(kappa64, dim)
    (grad,) = torch.autograd.grad(out64.sum(), kappa64)
    v = dim / 2 - 1
    for k, g in zip(kappa64.tolist()[::7], grad.tolist()[::7], strict=True):
        expected = -float(mpmath.besseli(v + 1, k) / mpmath.besseli(v, k))
        assert g == pytest.approx(expected, rel=1e-9)
    kappa32 = kappa64.detach().float().requires_grad_()
    out32 = log_cmk(kappa32, dim)
    out32.sum().backward()
    assert out32.dtype == torch.float32 and torch.isfinite(out32).all() and torch.isfinite(kappa32.grad).all()
    torch.testing.assert_close(out32.double(), out64.detach(), rtol=1e-6, atol=1e-3)
    assert torch.autograd.gradcheck(
        lambda k: log_cmk(k, dim), (torch.tensor([1e-3, 0.7, 40.0, 2e3]).double().requires_grad_(),)
    )


def test_log_cmk_closed_form_d3():
    """I_{1/2}(κ) = sqrt(2 / (π κ)) sinh κ, so C_3(κ) = κ / (4π sinh κ)."""
    kappa = torch.tensor([1e-3, 0.3, 2.0, 15.0, 80.0], dtype=torch.float64)
    expected = torch.log(kappa) - math.log(4 * math.pi) - (kappa + torch.log(-torch.expm1(-2 * kappa)) - math.log(2))
    torch.testing.assert_close(log_cmk(kappa, 3), expected, rtol=1e-10, atol=1e-10)


def _unit(n, d, seed):
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=-1)


def test_vmf_nll_matches_literal_d3_forward_and_backward():
    pred = (torch.randn(6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 4).requires_grad_()
    target = _unit(6, 3, 1)
    for lambda1, lambda2 in ((0.0, 1.0), (0.02, 1.0), (0.0, 0.1)):
        ours = vmf_nll(pred, target, lambda1=lambda1, lambda2=lambda2)
        kappa = pred.norm(dim=-1)
        log_c3 = torch.log(kappa) - math.log(4 * math.pi) - torch.log(torch.sinh(kappa))
        ref = (-log_c3 - lambda2 * (pred * target).sum(-1) + lambda1 * kappa).mean()
        torch.testing.assert_close(ours, ref)
        torch.testing.assert_close(torch.autograd.grad(ours, pred)[0], torch.autograd.grad(ref, pred)[0])
    assert torch.autograd.gradcheck(
        lambda p: vmf_nll(p, _unit(6, 50, 2)), (torch.randn(6, 50).double().requires_grad_(),)
    )


def _literal_margin(pred, target, negative, margin, table=None, ids=None, draws=None):
    losses = []
    for i in range(pred.shape[0]):
        u_hat = pred[i] / pred[i].norm()
        u = target[i]
        if negative == "projection":
            neg = (u_hat - (u_hat @ u) * u).detach()
            neg = neg / neg.norm()
        elif negative == "difference":
            neg = (u_hat - u).detach()
            neg = neg / neg.norm()
        elif negative == "most-informative":
            d = (u_hat - u).detach()
            best = max((j for j in range(table.shape[0]) if j != int(ids[i])), key=lambda j: float(table[j] @ d))
            neg = table[best]
        if negative == "random":
            losses.append(
                torch.stack([torch.clamp(margin + table[j] @ u_hat - u @ u_hat, min=0) for j in draws[i]]).mean()
            )
        else:
            losses.append(torch.clamp(margin + neg @ u_hat - u @ u_hat, min=0))
    return torch.stack(losses).mean()


@pytest.mark.parametrize("negative", ["projection", "difference", "random", "most-informative"])
def test_margin_losses_match_literal_forward_and_backward(negative):
    table = _unit(20, 8, 3)
    ids = torch.tensor([1, 5, 7, 0, 19, 3])
    pred = torch.randn(6, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64).requires_grad_()
    target = table[ids]
    kw = dict(negative=negative, margin=0.5, embeddings=table, target_ids=ids, num_negatives=3)
    ours = syn_margin_loss(pred, target, generator=torch.Generator().manual_seed(9), **kw)
    draws = torch.randint(0, 20, (6, 3), generator=torch.Generator().manual_seed(9))
    ref = _literal_margin(pred, target, negative, 0.5, table, ids, draws)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(torch.autograd.grad(ours, pred)[0], torch.autograd.grad(ref, pred)[0])
    # gradcheck perturbs û and so moves a synthetic negative, which the loss detaches: it applies where the
    # detached gradient equals the full one (projection: d‖û_orth‖/dû = u_orth) or the negative is piecewise constant
    if negative in ("projection", "most-informative"):
        assert torch.autograd.gradcheck(lambda p: syn_margin_loss(p, target, **kw), (pred.detach().requires_grad_(),))


def test_synthetic_negatives_geometry_and_detachment():
    u = torch.tensor([[1.0, 0.0, 0.0]])
    pred = torch.tensor([[0.6, 0.8, 0.0]], requires_grad=True)
    # projection: u_orth = (0, 1, 0), loss = λ + 0.8 - 0.6; the gradient treats u_orth as a constant
    loss = syn_margin_loss(pred, u, negative="projection", margin=0.5)
    assert loss.item() == pytest.approx(0.7)
    (grad,) = torch.autograd.grad(loss, pred)
    u_hat = F.normalize(pred.detach(), dim=-1)
    direction = torch.tensor([[0.0, 1.0, 0.0]]) - u
    expected = (direction - (direction * u_hat).sum(-1, keepdim=True) * u_hat) / pred.detach().norm()
    torch.testing.assert_close(grad, expected)
    assert syn_margin_loss(u.clone(), u, negative="projection", margin=0.0).item() == 0.0  # û = u: no orth part


def test_reductions():
    pred, target = torch.randn(4, 5), _unit(4, 5, 0).float()
    rows = vmf_nll(pred, target, reduction="none")
    assert rows.shape == (4,)
    torch.testing.assert_close(vmf_nll(pred, target, reduction="sum"), rows.sum())
    rows = syn_margin_loss(pred, target, reduction="none")
    torch.testing.assert_close(syn_margin_loss(pred, target), rows.mean())


@pytest.mark.parametrize("loss", [vmf_nll, syn_margin_loss])
def test_the_prediction_sets_the_precision_whatever_the_targets_dtype(loss):
    """Float32 (or half) predictions are computed in float32 against float64 targets too: the loss is the float32
    loss of the targets rounded to float32, a float32 tensor."""
    pred, target = torch.randn(4, 5, generator=torch.Generator().manual_seed(1)), _unit(4, 5, 0)
    for p in (pred, pred.bfloat16()):
        ours = loss(p, target)
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours, loss(p, target.float()), rtol=0, atol=0)


@pytest.mark.parametrize("loss", [vmf_nll, syn_margin_loss])
def test_num_items_in_batch_divides_the_sum(loss):
    """As in the transformers Trainer: "mean" divides the sum by num_items_in_batch when given (gradient
    accumulation over batches of different sizes), else by the number of positions."""
    pred, target = torch.randn(2, 3, 5, dtype=torch.float64), _unit(6, 5, 0).reshape(2, 3, 5)
    total, mean = loss(pred, target, reduction="sum"), loss(pred, target)
    torch.testing.assert_close(mean, total / 6)
    for n in (10, torch.tensor(10)):
        ours = loss(pred, target, num_items_in_batch=n)
        torch.testing.assert_close(ours, total / 10)
        torch.testing.assert_close(ours, mean * 6 / 10)
    assert loss(pred, target, reduction="none").shape == (2, 3)


def test_nearest_neighbour_diagnostics():
    table = torch.eye(4)
    pred = torch.tensor([[1.0, 0.1, 0, 0], [0.2, 1.0, 0.5, 0], [0, 0.4, 0.0, 1.0]])
    out = nearest_neighbour_diagnostics(pred, torch.tensor([0, 2, 1]), table, ks=(1, 2))
    assert out["accuracy@1"] == pytest.approx(1 / 3) and out["accuracy@2"] == pytest.approx(1.0)
    assert out["correct_similarity_to_nearest"] == pytest.approx(1 / math.sqrt(1.01))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: syn_margin_loss(torch.randn(2, 3), torch.randn(2, 3), negative="hardest"), "negative='hardest'"),
        (lambda: syn_margin_loss(torch.randn(2, 3), torch.randn(2, 3), margin=-0.1), "margin=-0.1 must be >= 0"),
        (lambda: syn_margin_loss(torch.randn(2, 3), torch.randn(2, 3), negative="random"), "needs embeddings"),
        (
            lambda: syn_margin_loss(
                torch.randn(2, 3), torch.randn(2, 3), negative="random", embeddings=torch.eye(3), num_negatives=0
            ),
            "num_negatives=0 must be >= 1",
        ),
        (lambda: vmf_nll(torch.randn(2, 3), torch.randn(2, 4)), "pred has shape (2, 3) but target_emb has (2, 4)"),
        (lambda: vmf_nll(torch.randn(2, 3), torch.randn(2, 3), lambda1=-1.0), "lambda1=-1.0 must be >= 0"),
        (lambda: log_cmk(torch.tensor([0.0]), 3), "kappa must be finite and > 0"),
        (lambda: log_cmk(torch.tensor([1.0]), 1), "dim=1 must be >= 2"),
    ],
    ids=[
        "unknown-negative",
        "negative-margin",
        "random-without-embeddings",
        "no-negatives",
        "vmf-shapes",
        "vmf-negative-lambda1",
        "log-cmk-kappa-zero",
        "log-cmk-dim-one",
    ],  # fmt: skip
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_vmf_released_form_matches_literal_d3():
    """The authors' released `_nllvmf`: −log C_m(κ) + log(1 + κ)(0.2 − cos(û, u))."""
    pred = (torch.randn(6, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 3).requires_grad_()
    target = _unit(6, 3, 6)
    ours = vmf_nll(pred, target, form="released")
    kappa = pred.norm(dim=-1)
    log_c3 = torch.log(kappa) - math.log(4 * math.pi) - torch.log(torch.sinh(kappa))
    cos = (pred * target).sum(-1) / kappa
    ref = (-log_c3 + torch.log(1 + kappa) * (0.2 - cos)).mean()
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(torch.autograd.grad(ours, pred)[0], torch.autograd.grad(ref, pred)[0])
    assert torch.autograd.gradcheck(
        lambda p: vmf_nll(p, _unit(4, 50, 7), form="released"), (torch.randn(4, 50).double().requires_grad_(),)
    )
    with pytest.raises(ValueError, match="form='released' has no λ1 / λ2 terms"):
        vmf_nll(pred, target, form="released", lambda1=0.02)


# ---------------------------------------------------------------- the cross-entropies over scaled cosines


def _literal_softmax_rows(pred, target, table, scale, candidate_sets, extra=None):
    """loss_i = −s·cos(û_i, E_y) + log Σ_{c in candidate_sets[i]} exp(s·cos(û_i, E_c)) (+ extra[i] logits)."""
    rows = []
    for i in range(pred.shape[0]):
        u_hat = pred[i] / pred[i].norm()
        logits = torch.stack([scale * (u_hat @ table[c]) for c in candidate_sets[i]])
        if extra is not None:
            logits = torch.cat([logits, extra[i]])
        rows.append(-scale * (u_hat @ table[target[i]]) + torch.logsumexp(logits, 0))
    return torch.stack(rows)


def _softmax_case(seed=0):
    table = _unit(12, 5, seed)
    pred = torch.randn(7, 5, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    target = torch.tensor([3, 3, 0, -100, 11, 7, 0])
    return table, pred.requires_grad_(), target


def test_cosine_softmax_matches_literal_forward_and_backward():
    table, pred, target = _softmax_case()
    valid = target != -100
    for candidates in (None, torch.tensor([True] * 6 + [False] * 6)):  # target 7 and 11 lie outside the second
        ours = cosine_softmax_loss(pred, target, table, scale=7.0, candidates=candidates)
        sets = [
            [c for c in range(12) if candidates is None or bool(candidates[c]) or c == int(y)] for y in target[valid]
        ]
        ref = _literal_softmax_rows(pred[valid], target[valid], table, 7.0, sets).mean()
        torch.testing.assert_close(ours, ref)
        torch.testing.assert_close(torch.autograd.grad(ours, pred)[0], torch.autograd.grad(ref, pred)[0])
    # at full table and s = 1 it is F.cross_entropy of the cosines
    full = F.cross_entropy(F.normalize(pred[valid], dim=-1) @ table.T, target[valid])
    torch.testing.assert_close(cosine_softmax_loss(pred, target, table, scale=1.0), full)


def test_in_batch_softmax_matches_literal_forward_and_backward():
    table, pred, target = _softmax_case(1)
    valid = target != -100
    batch = sorted(set(target[valid].tolist()))  # {0, 3, 7, 11}
    ours = in_batch_softmax_loss(pred, target, table, scale=5.0)
    ref = _literal_softmax_rows(pred[valid], target[valid], table, 5.0, [batch] * int(valid.sum())).mean()
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(torch.autograd.grad(ours, pred)[0], torch.autograd.grad(ref, pred)[0])
    # K = 6 uniform draws from a pool of M = 9 ids: + log(M/K) on each, accidental hits (batch targets) dropped
    pool = torch.tensor([0, 1, 2, 3, 4, 5, 6, 8, 9])
    ours = in_batch_softmax_loss(
        pred, target, table, scale=5.0, num_sampled=6, sample_pool=pool, generator=torch.Generator().manual_seed(3)
    )
    draws = pool[torch.randint(0, 9, (6,), generator=torch.Generator().manual_seed(3))]
    kept = [int(d) for d in draws if int(d) not in batch]
    assert 0 < len(kept) < 6  # the seed gives both kinds
    extra = [
        torch.stack([5.0 * (F.normalize(pred[i], dim=0) @ table[d]) + math.log(9 / 6) for d in kept])
        for i in range(7)
        if valid[i]
    ]
    ref = _literal_softmax_rows(pred[valid], target[valid], table, 5.0, [batch] * int(valid.sum()), extra).mean()
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(torch.autograd.grad(ours, pred)[0], torch.autograd.grad(ref, pred)[0])


@pytest.mark.parametrize("loss", [cosine_softmax_loss, in_batch_softmax_loss])
def test_softmax_losses_gradcheck_float64_with_a_learned_scale(loss):
    table, pred, target = _softmax_case(2)
    scale = torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
    weights = torch.arange(1.0, 8.0, dtype=torch.float64)

    def both(p, s):
        return loss(p, target, table, scale=s), (loss(p, target, table, scale=s, reduction="none") * weights).sum()

    assert torch.autograd.gradcheck(both, (pred.detach().requires_grad_(), scale))


@pytest.mark.parametrize("loss", [cosine_softmax_loss, in_batch_softmax_loss])
def test_softmax_losses_reductions_ignored_rows_and_num_items_in_batch(loss):
    table, pred, target = _softmax_case(3)
    rows = loss(pred, target, table, reduction="none")
    assert rows.shape == target.shape and rows[3] == 0
    total = loss(pred, target, table, reduction="sum")
    torch.testing.assert_close(total, rows.sum())
    torch.testing.assert_close(loss(pred, target, table), total / 6)
    torch.testing.assert_close(loss(pred, target, table, num_items_in_batch=torch.tensor(10)), total / 10)
    nothing = loss(pred, torch.full_like(target, -100), table)
    assert nothing.item() == 0.0
    nothing.backward()
    assert pred.grad is not None and not pred.grad.any()
    bf = loss(pred.detach().bfloat16(), target, table.float())  # computed in float32 whatever comes in
    assert bf.dtype == torch.float32


@pytest.mark.parametrize("loss", [cosine_softmax_loss, in_batch_softmax_loss])
def test_softmax_losses_keep_a_float64_prediction_in_float64_against_a_float32_table(loss):
    """The wider of the prediction and the table sets the precision: a float64 prediction against a float32 table
    gives the float64 loss of that table's values."""
    table, pred, target = _softmax_case(5)
    ours = loss(pred, target, table.float())
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, loss(pred, target, table.float().double()), rtol=0, atol=0)


def test_softmax_loss_modules_equal_the_functions():
    table, pred, target = _softmax_case(4)
    torch.testing.assert_close(
        CosineSoftmaxLoss(scale=3.0, reduction="sum")(pred, target, table),
        cosine_softmax_loss(pred, target, table, scale=3.0, reduction="sum"),
    )
    torch.testing.assert_close(
        InBatchSoftmaxLoss(scale=3.0)(pred, target, table), in_batch_softmax_loss(pred, target, table, scale=3.0)
    )
    y = torch.where(target == -100, 5, target)
    torch.testing.assert_close(
        CosineSoftmaxLoss(ignore_index=5)(pred, y, table), cosine_softmax_loss(pred, y, table, ignore_index=5)
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: cosine_softmax_loss(torch.randn(2, 3), torch.tensor([0, 1]), torch.randn(4, 3), scale=0.0),
            "scale=0.0",
        ),
        (lambda: cosine_softmax_loss(torch.randn(2, 3), torch.tensor([0, 9]), torch.randn(4, 3)), "found 9"),
        (lambda: cosine_softmax_loss(torch.randn(2, 3), torch.tensor([0]), torch.randn(4, 3)), "pred has shape"),
        (lambda: cosine_softmax_loss(torch.randn(2, 3), torch.tensor([0, 1]), torch.randn(4, 2)), "expected (V, 3)"),
        (
            lambda: cosine_softmax_loss(
                torch.randn(2, 3), torch.tensor([0, 1]), torch.randn(4, 3), candidates=torch.ones(3, dtype=torch.bool)
            ),
            "candidates must be a (4,) bool mask",
        ),
        (
            lambda: in_batch_softmax_loss(torch.randn(2, 3), torch.tensor([0, 1]), torch.randn(4, 3), num_sampled=2),
            "needs sample_pool",
        ),
        (
            lambda: in_batch_softmax_loss(torch.randn(2, 3), torch.tensor([0, 1]), torch.randn(4, 3), num_sampled=-1),
            "num_sampled=-1 must be >= 0",
        ),
        (lambda: vmf_nll(torch.randn(2, 3), torch.randn(2, 3), form="paper"), "form='paper' is not allowed"),
    ],
)
def test_softmax_losses_bad_input(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()
