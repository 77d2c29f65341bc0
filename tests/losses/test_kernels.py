"""The chunk engine's kernel seam (hf_heads.losses.chunks): every registered `ChunkKernel` (the built-in ones and
those of the user's package under tests/extension: tests/extensions.py) computes the fused
cross-entropy of one naive reference (forward and backward, float64) and passes float64 gradcheck, for each option
the kernels implement (label smoothing, soft-cap, a replaced target logit, top-k, their mixes), at shapes that are no
multiple of the chunk size; the kernel is chosen by name, by a head's `chunk_kernel` option, by
`HF_HEADS_CHUNK_KERNEL` or automatically, an unknown one refused. The Triton kernel runs here under Triton's CPU
interpreter (`TRITON_INTERPRET=1`) with tiles of 8 columns, so the rows of 17 logits cross tile edges."""

from __future__ import annotations

import itertools
import logging

import pytest
import torch
import torch.nn.functional as F
from conftest import chunked, with_impl
from extensions import KERNELS, registered

from hf_heads.heads import make_head
from hf_heads.losses import presets
from hf_heads.losses.chunks import (
    CHUNK_KERNELS,
    KERNEL_ENV,
    MIN_CHUNK_ROWS,
    ChunkOptions,
    Grads,
    automatic_kernel,
    chunk_kernel,
    eval_rows_per_chunk,
    map_chunks,
    rows_per_chunk,
)
from hf_heads.losses.kernels import CompiledKernel, EagerKernel
from hf_heads.losses.triton_kernel import TritonKernel
from hf_heads.validation import OptionError

margin_cross_entropy = with_impl(presets.margin_cross_entropy)
sampled_loss = with_impl(presets.sampled_loss)

N, H, V = 11, 5, 17  # 11 rows in chunks of 4: 4 + 4 + 3
OPTIONS = {
    "plain": {},
    "smoothing": {"label_smoothing": 0.1},
    "softcap": {"softcap": 3.0},
    "target-logit": {"target": True},
    "target-logit-softcap-smoothing": {"target": True, "softcap": 3.0, "label_smoothing": 0.2},
    "top-k": {"top_k": 4},
    "top-k-smoothing-target": {"top_k": 4, "label_smoothing": 0.1, "target": True},
    "column-scale": {"scale": True},
    "column-scale-target-softcap": {"scale": True, "target": True, "softcap": 3.0},
    "column-scale-top-k-smoothing": {"scale": True, "top_k": 4, "label_smoothing": 0.1},
    "bce": {"criterion": "bce"},
    "bce-target-softcap-column-scale": {"criterion": "bce", "target": True, "softcap": 3.0, "scale": True},
    "mse": {"criterion": "mse"},
    "mse-target-softcap": {"criterion": "mse", "target": True, "softcap": 3.0},
    "z-loss": {"z_loss": 0.1},
    "z-loss-target-softcap-smoothing": {"z_loss": 0.1, "target": True, "softcap": 3.0, "label_smoothing": 0.2},
    "z-loss-top-k-smoothing": {"z_loss": 0.1, "top_k": 4, "label_smoothing": 0.1},
    "class-weight": {"class_weight": True},
    "class-weight-z-loss-column-scale-target": {"class_weight": True, "z_loss": 0.1, "scale": True, "target": True},
    "class-weight-z-loss-top-k": {"class_weight": True, "z_loss": 0.1, "top_k": 4},
}
CLASS_WEIGHT = torch.rand(V, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 2  # a ≥ 0, some < 1


def naive(
    h, w, b, y, t, s=None, top_k=None, label_smoothing=0.0, softcap=None, criterion="ce", z_loss=0.0,
    class_weight=None, reduction="mean",
):  # fmt: skip
    """Mean over non-ignored rows of lse − z_y on z = s ∘ (h wᵀ) + b, z[i, y_i] = t_i, z = cap·tanh(z / cap); the
    log-sum-exp over the row or its k largest logits; label smoothing over the same support. criterion "bce":
    −log σ(z_y) − Σ_{c≠y} log(1 − σ(z_c)) (sampling paper, eq. 3); "mse": Σ_c (σ(z_c) − δ_cy)² (eq. 1). `z_loss` λ
    adds λ · lse² per row (its own mean over the rows); `class_weight` a (V,) weighs row i's cross-entropy by a[y_i]
    and divides by Σ_i a[y_i], as `F.cross_entropy(weight=a)`. reduction "none": the per-row losses of the kept rows
    (a[y_i] · loss_i + λ · lse_i²)."""
    keep = y != -100
    z = (h[keep] @ w.T) * (1.0 if s is None else s) + b
    yk = y[keep]
    if t is not None:
        z = z.scatter(1, yk[:, None], t[keep][:, None])
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    onehot = torch.nn.functional.one_hot(yk, z.shape[1]).to(z.dtype)
    if criterion != "ce":
        if criterion == "bce":  # written as the paper writes it: log σ of the target, log(1 − σ) of the others
            sig = torch.sigmoid(z)
            rows = -(onehot * torch.log(sig) + (1 - onehot) * torch.log1p(-sig)).sum(1)
        else:
            rows = (torch.sigmoid(z) - onehot).square().sum(1)
        return rows if reduction == "none" else rows.mean()
    support = z if top_k is None else z.topk(top_k, dim=1).values
    lse = torch.logsumexp(support, dim=1)
    loss = lse - z.gather(1, yk[:, None]).squeeze(1)
    loss = (1 - label_smoothing) * loss + label_smoothing * (lse - support.mean(1))
    a = torch.ones_like(loss) if class_weight is None else class_weight[yk]
    if reduction == "none":
        return a * loss + z_loss * lse.square()
    return (a * loss).sum() / a.sum() + z_loss * lse.square().mean()


def naive_entropy(h, w, b, y, t, s=None, top_k=None, softcap=None, **_) -> torch.Tensor:
    """(kept rows,) the entropy −Σ_c p_c log p_c of each kept row's softmax over the logits `naive` takes (the
    replaced target logit, the soft-cap, the top k)."""
    keep = y != -100
    z = (h[keep] @ w.T) * (1.0 if s is None else s) + b
    if t is not None:
        z = z.scatter(1, y[keep][:, None], t[keep][:, None])
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    support = z if top_k is None else z.topk(top_k, dim=1).values
    logp = torch.log_softmax(support, dim=1)
    return -(logp.exp() * logp).sum(1)


def use_kernel(kernel: str, monkeypatch, max_block: int = 8) -> None:
    """Select `kernel` through the environment (an extension's kernel registered for the test); the Triton one
    (under the CPU interpreter: tests/conftest.py) in tiles of `max_block` columns."""
    registered("kernel", kernel, monkeypatch)
    monkeypatch.setenv(KERNEL_ENV, kernel)
    if kernel.startswith("triton"):
        monkeypatch.setattr(TritonKernel, "max_block", max_block)


def spy_on_products(monkeypatch, workspace: bool = False) -> list:
    """The (h, w) dtypes of every chunk's product (`workspace`: the dtype of the logits workspace it is written
    into instead), appended to the returned list as the kernels compute them."""
    from hf_heads.losses import kernels, triton_kernel

    seen = []
    raw = kernels._raw_logits

    def spy(h, w, b, out=None, s=None):
        seen.append(out.dtype if workspace else (h.dtype, w.dtype))
        return raw(h, w, b, out, s)

    monkeypatch.setattr(kernels, "_raw_logits", spy)
    monkeypatch.setattr(triton_kernel, "_raw_logits", spy)  # the Triton kernel's own name for it
    return seen


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(V, H, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(V, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.randn(N, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, V, (N,), generator=g)
    y[3] = -100
    return h, w, b, t, y


# The Triton kernels run under Triton's CPU interpreter here, 5-30 s per case. The default suite runs each of them on
# the option sets in INTERPRETED (the plain loss, and combined sets that together take every option of the Triton
# program: the z-loss with a target logit, soft-cap and smoothing; the column scale, a target logit and soft-cap under
# BCE; a target logit and soft-cap under MSE); the other cases (each option alone, the other combinations) are marked
# slow and run in `make test-all` (and on a GPU in benchmarks/gpu/gpu_check.py). The eager and compiled kernels run
# every case.
INTERPRETED = {  # class weights reach the Triton program as the row weights every case passes
    "triton": {"plain", "z-loss-target-softcap-smoothing", "bce-target-softcap-column-scale", "mse-target-softcap"},
    "triton-half": {"plain"},  # the triton kernel with another workspace dtype (its own tests below)
}  # fmt: skip
TOP_K = {name for name, opts in OPTIONS.items() if opts.get("top_k")}  # the Triton kernels hand top-k to eager: fast


def kernel_cases(options: list[str], interpreted: dict[str, set[str]] = INTERPRETED) -> list:
    """(kernel, options) cases, ids "kernel-options"; an interpreted kernel's case outside `interpreted` is slow."""
    return [
        pytest.param(
            kernel, name, id=f"{kernel}-{name}",
            marks=[pytest.mark.slow] if kernel in interpreted and name not in interpreted[kernel] | TOP_K else [],
        )
        for kernel in KERNELS
        for name in options
    ]  # fmt: skip


@pytest.mark.parametrize("kernel, options", kernel_cases(list(OPTIONS)))
def test_every_kernel_equals_the_naive_reference_and_passes_gradcheck(kernel, options, monkeypatch):
    _check_against_the_reference(kernel, options, monkeypatch)


SCALED = [name for name, opts in OPTIONS.items() if opts.get("scale") and not opts.get("z_loss")]


# the scaled copy is one path for every option set: the interpreted kernels take it on the column scale alone here
@pytest.mark.parametrize("kernel, options", kernel_cases(SCALED, {"triton": {"column-scale"}, "triton-half": set()}))
def test_the_column_scale_through_a_scaled_copy_of_w_equals_the_reference(kernel, options, monkeypatch):
    """Where H is small next to the chunks (`_scale_by_copy`), training takes the column scale s through one copy
    s ∘ w (the kernels then see no column scale): the same loss and gradients, s's included, and gradcheck. At these
    shapes (H = 5, chunks of 4 rows) the rule itself picks the pass per chunk, which the test above covers."""
    from hf_heads.losses import fused_linear, kernels, triton_kernel

    assert not fused_linear._scale_by_copy(4, H, torch.float64, torch.float64)
    monkeypatch.setattr(fused_linear, "_scale_by_copy", lambda *args: True)
    scales, raw = [], kernels._raw_logits

    def spy(h, w, b, out=None, s=None):
        scales.append(s)
        return raw(h, w, b, out, s)

    monkeypatch.setattr(kernels, "_raw_logits", spy)
    monkeypatch.setattr(triton_kernel, "_raw_logits", spy)  # the Triton kernel's own name for it
    _check_against_the_reference(kernel, options, monkeypatch)
    assert any(s is None for s in scales)  # training chunks ran without a column scale (evaluation keeps it)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_the_scaled_copy_under_autocast_is_in_the_half_dtype_and_agrees_with_the_pass_per_chunk(dtype, monkeypatch):
    """Under autocast the scaled copy s ∘ w is in the products' half dtype (no float32 (V, H) copy), each entry rounded
    once; loss and gradients (s's included) match the pass per chunk to half-precision rounding."""
    from hf_heads.losses import fused_linear

    use_kernel("eager", monkeypatch)
    h, w, b, t, y = (x.detach().float().requires_grad_() if x.is_floating_point() else x for x in _data(6))
    s = (torch.rand(V, generator=torch.Generator().manual_seed(7)) + 0.5).requires_grad_()
    products = spy_on_products(monkeypatch)
    results = {}
    for by_copy in (False, True):
        monkeypatch.setattr(fused_linear, "_scale_by_copy", lambda *args, by_copy=by_copy: by_copy)
        products.clear()
        with torch.autocast("cpu", dtype=dtype):
            loss = chunked(h, w, b, y, target_logit=t, column_scale=s, softcap=3.0, chunk_size=4)
        assert set(products) == {(dtype, dtype)}, products
        results[by_copy] = (loss, *torch.autograd.grad(loss, (h, w, b, t, s)))
    for got, want in zip(results[True], results[False], strict=True):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


def test_the_scaled_copy_is_taken_where_it_costs_at_most_half_a_workspace_and_row_dots_are_exact():
    from hf_heads.losses.fused_linear import _scale_by_copy, row_dots

    f32, bf16 = torch.float32, torch.bfloat16
    assert _scale_by_copy(564, 128, f32, f32)  # make demo's model: 2048 rows in chunks of 564, H = 128
    assert not _scale_by_copy(512, 512, f32, f32)  # the copy would take a whole float32 (512, V) workspace ...
    assert _scale_by_copy(512, 512, bf16, f32)  # ... in bf16 half of it
    assert not _scale_by_copy(512, 2304, bf16, f32)  # Gemma-sized: a (V, H) copy larger than the workspace
    assert not _scale_by_copy(100, 128, f32, f32)  # too few rows to pay for the copy
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(10, 4, generator=g, dtype=torch.float64), torch.randn(10, 4, generator=g)
    got = row_dots(a, b, block_rows=3)  # blocks of 3 rows: 3 + 3 + 3 + 1
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, (a * b.double()).sum(1))


FROZEN = ["plain", "target-logit-softcap-smoothing", "top-k-smoothing-target", "column-scale", "top-k", "bce"]


@pytest.mark.parametrize("options", FROZEN, ids=FROZEN)
@pytest.mark.parametrize("kernel", sorted(CHUNK_KERNELS))
def test_a_frozen_weight_gets_no_weight_product(kernel, options, monkeypatch):
    """W without a gradient (a frozen output layer: LoRA, linear probing): the kernels get no (V, H) accumulator and
    skip its product, the other gradients are the reference's; with a column scale that wants a gradient the
    accumulator stays (d s = A · w needs it) and d s is the reference's."""
    from hf_heads.losses import kernels, triton_kernel

    use_kernel(kernel, monkeypatch)
    opts = dict(OPTIONS[options])
    seen, linear_grads, sparse = [], kernels._linear_grads, kernels.EagerKernel._sparse

    def spy(grad_z, h, w, grads, *args):
        seen.append(grads.w is None)
        return linear_grads(grad_z, h, w, grads, *args)

    def spy_sparse(self, h, w, b, y, t, opts, row_weight, grads, *args):
        seen.append(grads.w is None)
        return sparse(self, h, w, b, y, t, opts, row_weight, grads, *args)

    monkeypatch.setattr(kernels, "_linear_grads", spy)
    monkeypatch.setattr(triton_kernel, "_linear_grads", spy)
    monkeypatch.setattr(kernels.EagerKernel, "_sparse", spy_sparse)
    h, w, b, t, y = _data()
    w = w.detach()
    t = t if opts.pop("target", False) else None
    s = None
    if opts.pop("scale", False):
        s = (torch.rand(V, generator=torch.Generator().manual_seed(5), dtype=torch.float64) + 0.5).requires_grad_()
    inputs = [x for x in (h, b, t, s) if x is not None]
    for reduction in ("mean", "none"):
        seen.clear()
        loss = chunked(h, w, b, y, target_logit=t, column_scale=s, reduction=reduction, chunk_size=4, **opts).sum()
        ref = naive(h, w, b, y, t, s, **opts) * (1 if reduction == "mean" else (y != -100).sum())
        for got, want in zip(torch.autograd.grad(loss, inputs), torch.autograd.grad(ref, inputs), strict=True):
            torch.testing.assert_close(got, want)
        assert seen and all(seen) == (s is None), seen  # no accumulator, unless d s needs it


class _Fills(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the shapes of the tensors the dispatched ops fill with a constant (zeros, fill_, zero_), but for
    fills with NaN (the test's stand-in for uninitialised memory)."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket)
        nan_fill = name == "aten.fill_" and len(args) > 1 and args[1] != args[1]
        if name in ("aten.zeros", "aten.zero_", "aten.fill_", "aten.new_zeros", "aten.zeros_like") and not nan_fill:
            self.shapes.append(tuple(out.shape))
        return out


@pytest.mark.parametrize("options", ["plain", "top-k", "column-scale", "target-logit-softcap-smoothing"])
@pytest.mark.parametrize("kernel", sorted(CHUNK_KERNELS))
def test_the_first_chunk_writes_the_weight_gradient_no_pass_zeroes_it(kernel, options, monkeypatch):
    """The (V, H) weight-gradient accumulator is allocated uninitialised and written by the first chunk's product
    (β = 0), the later chunks add theirs: allocated full of NaN here, the gradients are still the reference's, and
    no (V, H) buffer is filled with zeros (one pass over V·H floats saved per step); only the sparse top-k path,
    which scatters into it, zeroes it."""
    from hf_heads.losses import fused_linear

    use_kernel(kernel, monkeypatch)
    opts = dict(OPTIONS[options])
    h, w, b, t, y = _data()
    t = t if opts.pop("target", False) else None
    s = (torch.rand(V, dtype=torch.float64) + 0.5) if opts.pop("scale", False) else None
    empty = torch.empty

    def nan_filled(*shape, **kwargs):
        out = empty(*shape, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(fused_linear.torch, "empty", nan_filled)
    with _Fills() as fills:
        loss = chunked(h, w, b, y, target_logit=t, column_scale=s, chunk_size=4, **opts)
    monkeypatch.setattr(fused_linear.torch, "empty", empty)
    ref = naive(h, w, b, y, t, s, **opts)
    inputs = (h, w, b)
    for got, want in zip(torch.autograd.grad(loss, inputs), torch.autograd.grad(ref, inputs), strict=True):
        torch.testing.assert_close(got, want)
    zeroed = fills.shapes.count((V, H))
    assert zeroed == (1 if options == "top-k" else 0), fills.shapes


def _case(options: str, seed: int = 0):
    """(loss keywords, names of the differentiated inputs, (h, w, b, t, s), y) of an OPTIONS case: t and s are among
    the inputs when the case replaces the target logit / scales the columns."""
    opts = dict(OPTIONS[options])
    names = [
        "h",
        "w",
        "b",
        *(["t"] if opts.pop("target", False) else []),
        *(["s"] if opts.pop("scale", False) else []),
    ]
    if opts.get("class_weight"):
        opts["class_weight"] = CLASS_WEIGHT
    h, w, b, t, y = _data(seed)
    s = (torch.rand(V, generator=torch.Generator().manual_seed(5), dtype=torch.float64) + 0.5).requires_grad_()
    return opts, names, (h, w, b, t, s), y


def _check_against_the_reference(kernel, options, monkeypatch):
    use_kernel(kernel, monkeypatch)
    opts, names, (h, w, b, t, s), y = _case(options)
    inputs = tuple({"h": h, "w": w, "b": b, "t": t, "s": s}[n] for n in names)

    def ours(*x, reduction="mean"):
        x = dict(zip(names, x, strict=True))
        return chunked(
            x["h"], x["w"], x["b"], y, target_logit=x.get("t"), column_scale=x.get("s"), reduction=reduction,
            chunk_size=4, **opts,
        )  # fmt: skip

    loss = ours(*inputs)
    t_s = (t if "t" in names else None, s if "s" in names else None)
    ref = naive(h, w, b, y, *t_s, **opts)
    torch.testing.assert_close(loss, ref)
    for got, want in zip(torch.autograd.grad(loss, inputs), torch.autograd.grad(ref, inputs), strict=True):
        torch.testing.assert_close(got, want)
    rows = ours(*inputs, reduction="none")
    assert rows.shape == y.shape and rows[3] == 0
    torch.testing.assert_close(rows[y != -100], naive(h, w, b, y, *t_s, reduction="none", **opts))
    if opts.get("class_weight") is None:
        torch.testing.assert_close(rows.sum() / (y != -100).sum(), loss)
    assert torch.autograd.gradcheck(ours, inputs, fast_mode=True)
    if kernel not in INTERPRETED:  # the per-row losses' backward (the weighted recomputation) is the same for all
        assert torch.autograd.gradcheck(lambda *x: ours(*x, reduction="none"), inputs, fast_mode=True)


PREDICTED = ["plain", "target-logit-softcap-smoothing", "column-scale-target-softcap", "top-k-smoothing-target",
             "bce-target-softcap-column-scale", "class-weight-z-loss-top-k"]  # fmt: skip


# the compiled kernel compiles its variants with predictions per case (15-30 s) and the Triton ones run interpreted:
# each of them one case in the default suite, the others slow (make test-all); the eager kernel every case
PREDICTED_DEFAULT = {
    "eager": set(PREDICTED),
    "compiled": {"target-logit-softcap-smoothing"},
    "triton": {"target-logit-softcap-smoothing"},
    "triton-half": set(),
}


def cases_in_part(options: list[str], default: dict[str, set[str]]) -> list:
    """(kernel, options) cases, ids "kernel-options": a kernel that `default` names runs those option sets in the
    default suite and the others marked slow; any other kernel runs every set."""
    return [
        pytest.param(kernel, name, id=f"{kernel}-{name}",
                     marks=[] if name in default.get(kernel, set(options)) else [pytest.mark.slow])
        for kernel in KERNELS
        for name in options
    ]  # fmt: skip


@pytest.mark.parametrize("kernel, options", cases_in_part(PREDICTED, PREDICTED_DEFAULT))
def test_predictions_and_token_accuracy_come_from_the_training_pass(kernel, options, monkeypatch):
    """`return_predictions`: each row's argmax of the naive logits with the target's own logit (a replaced target
    logit, a margin, does not take part; bias, column scale and soft-cap do), `ignore_index` on the ignored row, the
    token accuracy, each label's rank in the argmax order and the top-k accuracy, from the same chunk products as the
    loss (no second product with W) in training ("mean" and "none") and in evaluation; the loss and its gradients are
    those without predictions."""
    use_kernel(kernel, monkeypatch)
    opts = dict(OPTIONS[options])
    t_or_none = _data(3)[3] if opts.pop("target", False) else None
    s = (torch.rand(V, generator=torch.Generator().manual_seed(5), dtype=torch.float64) + 0.5).requires_grad_()
    s = s if opts.pop("scale", False) else None
    if opts.get("class_weight"):
        opts["class_weight"] = CLASS_WEIGHT
    h, w, b, _, y = _data(3)
    z = (h @ w.T) * (1.0 if s is None else s) + b
    if opts.get("softcap"):
        z = opts["softcap"] * torch.tanh(z / opts["softcap"])
    want = torch.where(y != -100, z.argmax(1), -100)
    accuracy = (want == y)[y != -100].double().mean()
    labels = y.clamp_min(0)
    rank = (z > z.gather(1, labels[:, None])).sum(1)  # no ties in float64 random logits (the tie test has them)
    rank = torch.where(y != -100, rank, -1)
    at_3 = (rank < 3)[y != -100].double().mean()
    products = spy_on_products(monkeypatch)

    def run(reduction, predictions):
        h.grad = w.grad = b.grad = None
        out = chunked(
            h, w, b, y, target_logit=t_or_none, column_scale=s, reduction=reduction, chunk_size=4,
            return_predictions=predictions, return_target_rank=predictions, **opts,
        )  # fmt: skip
        loss = out.loss if predictions else out
        if torch.is_grad_enabled():
            loss.sum().backward()
        return out, loss, [x.grad for x in (h, w, b)]

    for reduction in ("mean", "none"):
        products.clear()
        plain, plain_loss, plain_grads = run(reduction, False)
        calls = len(products)
        out, loss, grads = run(reduction, True)
        assert len(products) == 2 * calls  # the same chunks' products, none more
        assert torch.equal(out.predictions, want) and out.predictions.shape == y.shape
        torch.testing.assert_close(out.token_accuracy.double(), accuracy)
        assert torch.equal(out.target_rank, rank)
        torch.testing.assert_close(out.accuracy_at(3).double(), at_3)
        torch.testing.assert_close(out.accuracy_at(1), out.token_accuracy)
        assert (out.lse is None) == (opts.get("criterion", "ce") != "ce")  # BCE / MSE have no log-sum-exp
        assert bool(torch.isfinite(out.z_loss).all())
        torch.testing.assert_close(loss, plain_loss)
        for got, expected in zip(grads, plain_grads, strict=True):
            torch.testing.assert_close(got, expected)
    with torch.no_grad():
        out, _, _ = run("mean", True)
    assert torch.equal(out.predictions, want)


ENTROPY = ["plain", "target-logit-softcap-smoothing", "column-scale-target-softcap", "top-k", "top-k-smoothing-target",
           "class-weight-z-loss-top-k", "class-weight-z-loss-column-scale-target"]  # fmt: skip
# as PREDICTED_DEFAULT: the compiled and Triton kernels one case each in the default suite, the others slow
ENTROPY_DEFAULT = {"compiled": {"target-logit-softcap-smoothing"}, "triton": {"target-logit-softcap-smoothing"},
                   "triton-half": set()}  # fmt: skip


@pytest.mark.parametrize("kernel, options", cases_in_part(ENTROPY, ENTROPY_DEFAULT))
def test_the_entropy_of_every_kernel_equals_the_naive_one_and_passes_gradcheck(kernel, options, monkeypatch):
    """`return_entropy`: each row's entropy of the softmax the loss takes (top k, replaced target, soft-cap, column
    scale), 0 on the ignored row, from the same pass as the loss and differentiable: loss + 0.7 Σ H and Σ H alone
    have the naive reference's gradients (float64), and gradcheck passes for H (its gradient chunk by chunk in the
    recomputing backward); "mean" and "none" losses are those without it; in evaluation H alone. The compiled kernel's
    default-suite case under dynamo's "eager" backend (its traced graph without inductor's compile time), its slow
    cases under inductor."""
    use_kernel(kernel, monkeypatch)
    if kernel == "compiled" and options in ENTROPY_DEFAULT["compiled"]:
        monkeypatch.setattr(CompiledKernel, "backend", "eager")
        monkeypatch.setattr(CompiledKernel, "_compiled", None)
    opts, names, (h, w, b, t, s), y = _case(options, seed=2)
    inputs = tuple({"h": h, "w": w, "b": b, "t": t, "s": s}[n] for n in names)
    t_s = (t if "t" in names else None, s if "s" in names else None)

    def ours(*x, reduction="mean", entropy=True):
        x = dict(zip(names, x, strict=True))
        return chunked(
            x["h"], x["w"], x["b"], y, target_logit=x.get("t"), column_scale=x.get("s"), reduction=reduction,
            chunk_size=4, return_entropy=entropy, **opts,
        )  # fmt: skip

    top_k, softcap = opts.get("top_k"), opts.get("softcap")
    want_h = naive_entropy(h, w, b, y, *t_s, top_k=top_k, softcap=softcap)
    for reduction in ("mean", "none"):
        out = ours(*inputs, reduction=reduction)
        torch.testing.assert_close(out.loss, ours(*inputs, reduction=reduction, entropy=False))
        assert out.entropy.shape == y.shape and out.entropy[3] == 0
        torch.testing.assert_close(out.entropy[y != -100], want_h)
        ref = naive(h, w, b, y, *t_s, reduction=reduction, **opts)
        got = torch.autograd.grad(out.loss.sum() + 0.7 * out.entropy.sum(), inputs)
        want = torch.autograd.grad(ref.sum() + 0.7 * want_h.sum(), inputs, retain_graph=True)
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g, e)
    alone = torch.autograd.grad(ours(*inputs).entropy.sum(), inputs)  # H alone: no loss gradient in it
    for g, e in zip(alone, torch.autograd.grad(want_h.sum(), inputs), strict=True):
        torch.testing.assert_close(g, e)
    assert torch.autograd.gradcheck(lambda *x: ours(*x).entropy, inputs, fast_mode=True)
    with torch.no_grad():
        torch.testing.assert_close(ours(*inputs).entropy[y != -100], want_h)


def test_the_ranks_are_counted_only_when_asked_for():
    """`return_predictions` alone: the argmax, no ranks (the eager kernel's rank costs passes of its own);
    `accuracy_at` then says what it needs."""
    h, w, b, _, y = _data()
    out = chunked(h, w, b, y, return_predictions=True, chunk_size=4)
    assert out.target_rank is None and out.predictions is not None
    with pytest.raises(ValueError, match=r"accuracy_at needs the ranks: call with returns=\('rank',\)"):
        out.accuracy_at(2)


def test_the_entropy_is_for_cross_entropy_only():
    h, w, b, _, y = _data()
    with pytest.raises(ValueError, match=r"returns=\['entropy'\] is for cross-entropy only, not criterion 'bce'"):
        chunked(h, w, b, y, criterion="bce", return_entropy=True)


@pytest.mark.parametrize(
    "kernel, options", cases_in_part(["target-logit-softcap-smoothing", "top-k"], ENTROPY_DEFAULT)
)
def test_a_kernels_pass_with_gradients_writes_the_row_statistics_its_pass_without_writes(kernel, options, monkeypatch):
    """A kernel called directly (as a chunk engine of one's own calls it): `loss_and_grads` given `lse`, `pred` and
    `ent` writes each row's log-sum-exp, argmax and target rank, and entropy (the naive one) as `loss` does, beside
    the same losses. The compiled kernel under dynamo's "eager" backend."""
    use_kernel(kernel, monkeypatch)
    if kernel == "compiled":
        monkeypatch.setattr(CompiledKernel, "backend", "eager")
        monkeypatch.setattr(CompiledKernel, "_compiled", None)
    run = chunk_kernel(kernel)
    opts, names, (h, w, b, t, _), y = _case(options)
    h, w, b, t = h.detach(), w.detach(), b.detach(), t.detach() if "t" in names else None
    y = y.clamp_min(0)  # a kernel's rows are all counted: the engine drops the ignored ones
    chunk = ChunkOptions(opts.get("top_k"), opts.get("label_smoothing", 0.0), opts.get("softcap"))

    def statistics() -> dict[str, torch.Tensor]:
        return {"lse": torch.empty(N, dtype=h.dtype), "pred": torch.empty(N, 2, dtype=torch.long),
                "ent": torch.empty(N, dtype=h.dtype)}  # fmt: skip

    want, got = statistics(), statistics()
    want_loss = run.loss(h, w, b, y, t, chunk, **want)
    grads = Grads(
        torch.empty_like(h), torch.empty_like(w), torch.zeros_like(b), None if t is None else torch.empty_like(t),
        torch.empty(N, V, dtype=run.workspace_dtype(chunk, V, h.dtype)), w_unset=True,
    )  # fmt: skip
    loss = run.loss_and_grads(h, w, b, y, t, chunk, torch.ones(N, dtype=h.dtype), grads, **got)
    torch.testing.assert_close(loss, want_loss)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got["ent"], naive_entropy(h, w, b, y, t, **opts))


@pytest.mark.parametrize(
    "kernel, dtype",
    [pytest.param(kernel, dtype, id=f"{kernel}-{name}",
                  marks=[pytest.mark.slow] if name == "bf16" and kernel != "eager" else [])
     for kernel in KERNELS for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bf16"))],
)  # fmt: skip
def test_an_exact_tie_predicts_the_lowest_index_as_argmax_does(kernel, dtype, monkeypatch):
    """Two classes with the same weight row have the same logit, bit for bit, in float32 and in bf16: the prediction
    is the lower index (torch.argmax), within a tile and across tiles of the Triton kernel (8 columns here), and a
    row whose label is the higher of the two is not counted correct."""
    use_kernel(kernel, monkeypatch)
    g = torch.Generator().manual_seed(4)
    w = torch.randn(V, H, generator=g)
    w[10], w[5] = w[2], w[3]  # ties across tiles (2 | 10) and within one (3, 5)
    h = torch.stack([w[2] * 4, w[3] * 4, w[2] * 4, w[3] * 4])  # rows whose maximum is the tie
    y = torch.tensor([2, 5, 10, 3])
    h, w = h.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
    out = chunked(h, w, None, y, return_target_rank=True, chunk_size=4)
    assert out.predictions.tolist() == [2, 3, 2, 3]
    assert float(out.token_accuracy) == 0.5  # rows 0 and 3
    assert out.target_rank.tolist() == [0, 1, 1, 0]  # a label tied with a lower index ranks after it
    assert float(out.accuracy_at(2)) == 1.0
    out.loss.backward()


def test_the_compiled_kernel_compiles_every_option_set_a_process_meets(monkeypatch, caplog):
    """Under dynamo's default recompile limit (8 per function) the compiled kernel ran `_grad_logits` eagerly from the
    ninth option set on, silently slower; its own compiled region has room for every variant. Dynamo's "eager"
    backend here: the same guards and recompiles without inductor's compile time."""
    use_kernel("compiled", monkeypatch)
    monkeypatch.setattr(CompiledKernel, "backend", "eager")
    monkeypatch.setattr(CompiledKernel, "_compiled", None)
    h, w, b, t, y = (x.detach().float() if x.is_floating_point() else x for x in _data(2))
    variants = list(
        itertools.product(("ce", "bce", "mse"), (None, 3.0), (False, True), (torch.float32, torch.float64))
    )
    variants += [("ce", None, False, torch.float32, 4), ("ce", 3.0, True, torch.float64, 4)]  # top-k
    with caplog.at_level(logging.WARNING, logger="torch._dynamo"):
        for criterion, softcap, use_t, dtype, *top_k in variants:
            inputs = [x.to(dtype).requires_grad_() for x in (h, w, b, t)]
            loss = chunked(
                *inputs[:3], y, target_logit=inputs[3] if use_t else None, softcap=softcap, criterion=criterion,
                top_k=top_k[0] if top_k else None, chunk_size=4,
            )  # fmt: skip
            loss.backward()
    assert len(variants) > 8
    assert not [r.getMessage() for r in caplog.records if "recompile_limit" in r.getMessage()]


def test_kernel_choice_by_name_environment_and_device(monkeypatch):
    """An explicit kernel (a loss's `impl`, a head's option) is the call's; without one the environment's debugging
    switch, else the device's automatic choice."""
    assert [chunk_kernel(k).name for k in ("eager", "compiled", "triton")] == ["eager", "compiled", "triton"]
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    assert chunk_kernel(device=torch.device("cpu")).name == "eager"
    assert automatic_kernel(torch.device("cuda")) == "triton"  # triton imports here (the dev extra)
    assert chunk_kernel(device=torch.device("cuda")).name == "triton"
    monkeypatch.setattr("hf_heads.losses.triton_kernel.triton_available", lambda: False)
    assert automatic_kernel(torch.device("cuda")) == "eager"
    monkeypatch.setenv(KERNEL_ENV, "compiled")  # the environment, where nothing is given
    assert chunk_kernel().name == "compiled" and chunk_kernel("eager").name == "eager"
    monkeypatch.setenv(KERNEL_ENV, "fast")
    allowed = "allowed: eager, compiled, triton"
    with pytest.raises(OptionError, match=f"{KERNEL_ENV}='fast' is not a chunk kernel; {allowed}"):
        chunk_kernel()
    with pytest.raises(OptionError, match="kernel='cuda' is not a chunk kernel"):
        chunk_kernel("cuda")
    with pytest.raises(
        OptionError, match="chunk_kernel='fast' is not allowed; allowed: 'eager', 'compiled', 'triton'"
    ):
        make_head(6, 13, {"family": "softmax", "chunk_kernel": "fast"})


def test_the_automatic_kernel_on_cuda_is_triton_half_for_half_products_over_a_large_vocabulary(monkeypatch):
    """Nobody chose: CUDA tensors run "triton", and "triton-half" where the products are bf16 / fp16 over at least
    `TritonKernel.half_from_classes` classes (the measured rule of docs/performance.md); float32 products, a smaller
    vocabulary, an unknown size and a CPU keep their kernel."""
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    cuda, edge = torch.device("cuda"), TritonKernel.half_from_classes
    assert 50_000 < edge < 256_000  # between the two measured rows
    assert automatic_kernel(cuda, torch.bfloat16, edge) == "triton-half"
    assert automatic_kernel(cuda, torch.float16, 256_000) == "triton-half"
    assert chunk_kernel(None, cuda, torch.bfloat16, 256_000).name == "triton-half"
    assert automatic_kernel(cuda, torch.bfloat16, edge - 1) == "triton"
    assert automatic_kernel(cuda, torch.float32, 256_000) == "triton"
    assert automatic_kernel(cuda, torch.float64, 256_000) == "triton"
    assert automatic_kernel(cuda) == "triton"
    assert automatic_kernel(torch.device("cpu"), torch.bfloat16, 256_000) == "eager"
    assert chunk_kernel("triton", cuda, torch.bfloat16, 256_000).name == "triton"  # a choice by name is kept
    monkeypatch.setenv(KERNEL_ENV, "eager")
    assert chunk_kernel(None, cuda, torch.bfloat16, 256_000).name == "eager"
    monkeypatch.delenv(KERNEL_ENV)
    monkeypatch.setattr("hf_heads.losses.triton_kernel.triton_available", lambda: False)
    assert automatic_kernel(cuda, torch.bfloat16, 256_000) == "eager"


def test_the_loss_asks_for_its_kernel_with_the_products_dtype_and_the_number_of_classes(monkeypatch):
    """The automatic choice sees what it decides on: the autocast dtype of the products (not the float32 inputs')
    and the weight's rows."""
    import hf_heads.losses.fused_linear as fused_linear

    asked = []

    def recording(name=None, device=None, gemm=None, num_classes=None):
        asked.append((name, device.type, gemm, num_classes))
        return chunk_kernel("eager")

    monkeypatch.setattr(fused_linear, "chunk_kernel", recording)
    h, w, y = torch.randn(6, 4), torch.randn(11, 4), torch.randint(0, 11, (6,))
    chunked(h, w, None, y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chunked(h, w, None, y)
    assert asked == [(None, "cpu", torch.float32, 11), (None, "cpu", torch.bfloat16, 11)]


def test_a_loss_functions_kernel_argument_beats_the_environment_and_the_heads_choice(monkeypatch):
    """`kernel=` (a name or a `ChunkKernel`) picks the kernel of that call whatever HF_HEADS_CHUNK_KERNEL and a head's
    option say; a sampling method, which runs no chunk kernel, refuses one."""
    ran = []

    class Spy(EagerKernel):  # an unregistered kernel instance, given as it is
        def loss_and_grads(self, *args, **kwargs):
            ran.append("spy")
            return super().loss_and_grads(*args, **kwargs)

    g = torch.Generator().manual_seed(0)
    h, w, y = torch.randn(7, 5, generator=g, requires_grad=True), torch.randn(11, 5, generator=g), torch.arange(7)
    monkeypatch.setenv(KERNEL_ENV, "fast")  # not a kernel: refused if the environment were read
    loss = chunked(h, w, None, y, chunk_size=3, kernel=Spy())
    margin = margin_cross_entropy(h, w, None, y, chunk_size=3, margin="cos", m=0.1, kernel="eager")
    assert ran == ["spy"] * 3  # three chunks of 3, 3 and 1 rows
    torch.testing.assert_close(loss, F.cross_entropy(h @ w.T, y))
    monkeypatch.delenv(KERNEL_ENV)
    torch.testing.assert_close(margin, margin_cross_entropy(h, w, None, y, chunk_size=3, margin="cos", m=0.1))
    noise = torch.full((11,), 1 / 11)
    with pytest.raises(OptionError, match="kernel='eager' is for the chunked passes of Full candidates"):
        sampled_loss(h, w, None, y, criterion="ce", method="is", num_samples=4, noise_probs=noise, kernel="eager")


def test_a_head_runs_the_kernel_its_option_names(monkeypatch):
    """`chunk_kernel` reaches the chunk engine from every discrete family: a triton head on CPU tensors outside the
    interpreter is refused with the reason (never run with another kernel), and computes the eager head's loss and
    gradients under the interpreter."""
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    g = torch.Generator().manual_seed(1)
    hidden, labels = torch.randn(2, 5, 6, generator=g), torch.randint(0, 13, (2, 5), generator=g)
    heads = [("softmax", {}), ("margin", {"margin": "arc", "m": 0.2}), ("sparse", {"k": 5})]
    for family, options in heads:
        results = {}
        for kernel in ("eager", "triton"):
            torch.manual_seed(0)
            head = make_head(6, 13, {"family": family, "chunk_kernel": kernel, "chunk_size": 3, **options}).train()
            if kernel == "triton":
                with monkeypatch.context() as outside:  # triton imported without its interpreter
                    outside.setattr("hf_heads.losses.triton_kernel._interpreting", lambda: False)
                    with pytest.raises(OptionError, match="kernel='triton' runs on GPU tensors, or on CPU ones when"):
                        head.loss(hidden, labels)
                    half = make_head(6, 13, {"family": family, "chunk_kernel": "triton-half", **options}).train()
                    with pytest.raises(OptionError, match="kernel='triton-half' runs on GPU tensors"):
                        half.loss(hidden, labels)  # the refusal names the kernel asked for
                monkeypatch.setattr(TritonKernel, "max_block", 8)
            loss = head.loss(hidden, labels)
            results[kernel] = (loss, *torch.autograd.grad(loss, list(head.parameters())))
        for got, want in zip(results["triton"], results["eager"], strict=True):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("options", ["plain", "target-logit-softcap-smoothing", "column-scale-target-softcap", "bce"])
def test_the_half_logits_kernel_keeps_each_chunks_logits_in_the_products_dtype(options, dtype, monkeypatch):
    """`triton-half` under autocast: each chunk's logits workspace has the products' half dtype (the GEMM's output,
    as a plain half-precision output layer rounds it), the row math and the loss stay float32; loss and gradients
    match the `triton` kernel's (float32 logits from the same half products) to half-precision rounding, and the
    gradients keep the inputs' float32. Top-k keeps float32 logits."""
    opts = dict(OPTIONS[options])
    use_t, use_s = opts.pop("target", False), opts.pop("scale", False)
    h, w, b, t, y = (x.detach().float().requires_grad_() if x.is_floating_point() else x for x in _data(3))
    s = torch.rand(V, generator=torch.Generator().manual_seed(4)) + 0.5
    workspaces = spy_on_products(monkeypatch, workspace=True)
    results = {}
    for kernel in ("triton", "triton-half"):
        use_kernel(kernel, monkeypatch)
        workspaces.clear()
        with torch.autocast("cpu", dtype=dtype):
            loss = chunked(
                h, w, b, y, target_logit=t if use_t else None, column_scale=s if use_s else None, chunk_size=4, **opts
            )
        grads = torch.autograd.grad(loss, (h, w, b))
        assert loss.dtype == torch.float32 and all(g.dtype == torch.float32 and g.isfinite().all() for g in grads)
        assert set(workspaces) == {torch.float32 if kernel == "triton" else dtype}, workspaces
        results[kernel] = (loss, *grads)
    for got, want in zip(results["triton-half"], results["triton"], strict=True):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


def test_the_triton_kernel_checks_itself_against_eager_before_its_first_use(monkeypatch):
    """On a GPU the Triton kernel compares itself with the eager one once per device before it trains anything; a
    kernel that is wrong by 1% raises (forced here on CPU, under the interpreter)."""
    use_kernel("triton", monkeypatch, max_block=1024)
    monkeypatch.setattr(TritonKernel, "_checked", set())
    kernel = CHUNK_KERNELS["triton"]
    with torch.no_grad():  # where it runs first: inside the fused loss's autograd.Function forward, or an evaluation
        kernel.self_check(torch.device("cpu"), force=True)  # the real kernel passes
    launch = TritonKernel._launch
    monkeypatch.setattr(TritonKernel, "_launch", lambda self, *a, **k: launch(self, *a, **k) * 1.01)
    monkeypatch.setattr(TritonKernel, "_checked", set())
    with pytest.raises(RuntimeError, match="the triton chunk kernel disagrees with the eager one on cpu"):
        with torch.inference_mode():
            kernel.self_check(torch.device("cpu"), force=True)


def test_the_self_check_compares_in_ieee_float32_under_tf32(monkeypatch):
    """Under TF32 (`--tf32`) the products of the two kernels it compares differ by TF32's rounding (~1e-4 on an H200),
    not by a kernel's error: the self-check runs CUDA's float32 matmuls in IEEE float32 and puts the user's setting
    back afterwards."""
    use_kernel("triton", monkeypatch, max_block=1024)
    monkeypatch.setattr(TritonKernel, "_checked", set())
    matmul = torch.backends.cuda.matmul
    seen = []
    compare = TritonKernel._compare_with_eager
    monkeypatch.setattr(
        TritonKernel, "_compare_with_eager", lambda self, *a: (seen.append(matmul.fp32_precision), compare(self, *a))
    )
    users = matmul.fp32_precision
    matmul.fp32_precision = "tf32"  # (a torch flag, not a plain attribute: monkeypatch cannot set it)
    try:
        CHUNK_KERNELS["triton"].self_check(torch.device("cpu"), force=True)
        assert seen == ["ieee"] and matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = users


def test_chunks_fit_the_memory_budget_and_cover_every_row_once():
    assert rows_per_chunk(4096, 8_000) == (1 << 25) // (4 * 8_000)  # 1048 rows of float32 logits in 32 MiB
    assert rows_per_chunk(4096, 50_000) == MIN_CHUNK_ROWS == 512  # 167 would fit: never thinner than 512 rows
    assert rows_per_chunk(4096, 1000, budget_bytes=1 << 22, itemsize=2) == (1 << 22) // (2 * 1000)
    assert rows_per_chunk(10, 50_000) == 10 and rows_per_chunk(0, 50_000) == 1
    gpu = torch.device("cuda")  # a device object only: nothing runs on it
    assert rows_per_chunk(8192, 256_000, device=gpu) == 1024  # N / 8, within 1 GiB of float32 logits
    assert rows_per_chunk(65536, 256_000, device=gpu) == (1 << 30) // (4 * 256_000)  # 1048: the 1 GiB cap
    assert rows_per_chunk(4096, 50_000, device=gpu) == 512 == rows_per_chunk(4096, 50_000, device="cpu")
    assert rows_per_chunk(8192, 256_000, device="cpu") == 512
    assert eval_rows_per_chunk(4096, 200_000, 256) == (1 << 28) // (4 * 200_000)  # 335: capped at 256 MiB
    assert eval_rows_per_chunk(4096, 200_000, 512) == 512  # ... but never below the training chunk
    assert eval_rows_per_chunk(4096, 8_000, 1048) == 4096 and eval_rows_per_chunk(100, 50, 100) == 100
    # a budget in bytes: exactly the rows that fit it in the workspace's dtype, at least one, at most every row
    assert rows_per_chunk(4096, 50_000, budget_bytes=1 << 25) == 167 and rows_per_chunk(10, 50, 1 << 30) == 10
    assert rows_per_chunk(8192, 256_000, 1 << 31, itemsize=2, device=gpu) == 4194 and rows_per_chunk(9, 99, 1) == 1
    assert eval_rows_per_chunk(4096, 200_000, 512, budget_bytes=1 << 24) == 20  # the budget, not 4 x the chunk
    seen = []
    out = map_chunks(lambda a, b_: seen.append(len(a)) or a * b_, (torch.arange(11.0),), (2.0,), 4)
    assert seen == [4, 4, 3] and torch.equal(out, torch.arange(11.0) * 2)
    for rows, step in itertools.product(range(1, 14), range(1, 6)):  # a last chunk of 1 .. step rows, or none
        sizes = []
        out = map_chunks(lambda a, seen=sizes: seen.append(len(a)) or a + 1, (torch.arange(float(rows)),), (), step)
        assert torch.equal(out, torch.arange(float(rows)) + 1), (rows, step)
        assert sizes == [step] * (rows // step) + ([rows % step] if rows % step else []), (rows, step)


@pytest.mark.parametrize(
    "setting, kernel",
    [
        pytest.param(
            s, k, id=f"{s}-{k}", marks=[pytest.mark.slow] if k == "triton-half" and s != "autocast-bf16" else []
        )
        for s in ("float32", "autocast-bf16", "bf16-model", "fp16-model")
        for k in sorted(CHUNK_KERNELS)
    ],
)  # triton-half: under autocast here, every setting in make test-all (each case is seconds in Triton's interpreter)
def test_half_precision_runs_the_products_in_half_and_the_softmax_in_float32(kernel, setting, monkeypatch):
    """Under autocast bf16 (`--bf16`) and for a model cast to bf16 / fp16 the head's products run in that dtype (no
    float32 copy of the weight); the loss (float32 under autocast, the model's dtype for a half model: torch's rule)
    is within 2% of float32 and each gradient is in its input's dtype."""
    use_kernel(kernel, monkeypatch, max_block=128)
    seen = spy_on_products(monkeypatch)
    g = torch.Generator().manual_seed(0)
    h32, w32 = torch.randn(40, 16, generator=g), torch.randn(300, 16, generator=g) * 0.3
    b32, y = torch.randn(300, generator=g) * 0.1, torch.randint(0, 300, (40,), generator=g)
    half = {"float32": torch.float32, "autocast-bf16": torch.float32, "bf16-model": torch.bfloat16}
    dtype = half.get(setting, torch.float16)
    h, w, b = (x.to(dtype).requires_grad_() for x in (h32, w32, b32))
    seen.clear()
    if setting == "autocast-bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = chunked(h, w, b, y, chunk_size=16, label_smoothing=0.1)
    else:
        loss = chunked(h, w, b, y, chunk_size=16, label_smoothing=0.1)
    loss.backward()
    product = {"float32": torch.float32, "autocast-bf16": torch.bfloat16}.get(setting, dtype)
    assert seen and all(s == (product, product) for s in seen)
    assert loss.dtype == (torch.float32 if setting in ("float32", "autocast-bf16") else dtype)
    smoothed = chunked(h32, w32, b32, y, chunk_size=16, label_smoothing=0.1)
    assert abs(loss.item() - smoothed.item()) <= 0.02 * smoothed.item()
    assert h.grad.dtype == w.grad.dtype == b.grad.dtype == dtype
    assert all(torch.isfinite(x.grad).all() for x in (h, w, b))


@pytest.mark.parametrize("kernel", ["eager", "compiled", "triton"])
@pytest.mark.parametrize("options", [{}, {"column_scale": True}], ids=["plain", "column-scale"])
def test_half_products_are_written_as_float32_logits_by_the_gemm_where_mm_can(kernel, options, monkeypatch):
    """Under autocast bf16 with float32 logits (every kernel but triton-half), each chunk's logits come from
    `mm(h, wᵀ, out_dtype=float32, out=workspace)` where the device has it (CUDA: emulated here, a CPU has no such
    overload): the GEMM writes the float32 workspace itself, with no bf16 (n, V) product and no pass casting it. The
    loss and gradients equal those of the path that rounds the product to bf16 first, to that rounding; the logits
    are not rounded to bf16 (the loss differs from that path's)."""
    from hf_heads.losses import kernels

    assert not kernels._probe_mm_out_dtype(torch.device("cpu"), torch.bfloat16)  # no such overload on a CPU
    assert not kernels.writes_half_products_in_float32(torch.zeros(3, 2), torch.bfloat16)
    use_kernel(kernel, monkeypatch, max_block=128)
    if kernel == "compiled":
        monkeypatch.setattr(CompiledKernel, "backend", "eager")
        monkeypatch.setattr(CompiledKernel, "_compiled", None)
    g = torch.Generator().manual_seed(0)
    h0, w0 = torch.randn(40, 16, generator=g), torch.randn(300, 16, generator=g) * 0.3
    b0, y = torch.randn(300, generator=g) * 0.1, torch.randint(0, 300, (40,), generator=g)
    s0 = torch.rand(300, generator=g) + 0.5
    mm, calls = torch.mm, []

    def emulated(a, b, *args, out_dtype=None, out=None, **kwargs):
        if out_dtype is None:
            return mm(a, b, *args, out=out, **kwargs)
        calls.append((a.dtype, b.dtype, out_dtype, out.dtype, tuple(out.shape)))
        return out.copy_(a.float() @ b.float())  # what cuBLAS computes: float32 sums of the half products

    results = {}
    for direct in (False, True):
        monkeypatch.setattr(kernels, "writes_half_products_in_float32", lambda out, dtype, on=direct: on)
        monkeypatch.setattr(torch, "mm", emulated)
        h, w, b = (x.clone().requires_grad_() for x in (h0, w0, b0))
        s = s0.clone().requires_grad_() if options else None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = chunked(h, w, b, y, chunk_size=16, column_scale=s)
        loss.backward()
        monkeypatch.setattr(torch, "mm", mm)
        results[direct] = [loss, h.grad, w.grad, b.grad] + ([s.grad] if options else [])
    assert calls and all(c[:4] == (torch.bfloat16, torch.bfloat16, torch.float32, torch.float32) for c in calls)
    assert sorted({c[4] for c in calls}) == [(8, 300), (16, 300)]  # every chunk of 40 rows: 16 + 16 + 8
    for got, ref in zip(results[True], results[False], strict=True):  # relative (Frobenius) error of each
        assert (got - ref).norm() <= 1e-2 * ref.norm()
    assert not torch.equal(results[True][0], results[False][0])  # the logits were not rounded to bf16 first


@pytest.mark.parametrize(
    "options", [{}, {"column_scale": True}, {"label_smoothing": 0.1}], ids=["plain", "column-scale", "smoothing"]
)
@pytest.mark.parametrize("kernel", ["compiled", "triton"])
def test_the_gradient_of_float32_logits_is_written_in_the_products_dtype(kernel, options, monkeypatch):
    """Under autocast bf16 the Triton kernel's row program (and the compiled kernel's compiled math) writes
    d loss / d z of its float32 logits straight into a bf16 block (the dtype of the next two GEMMs), so no pass
    casts it: the block the products read is bf16, and the gradients equal those of the eager kernel (which casts a
    float32 block) to bf16 rounding (d W and d h: the same rounding of the same values)."""
    from hf_heads.losses import kernels, triton_kernel

    seen, linear_grads = [], kernels._linear_grads

    def spy(grad_z, *args):
        seen.append(grad_z.dtype)
        return linear_grads(grad_z, *args)

    monkeypatch.setattr(triton_kernel if kernel == "triton" else kernels, "_linear_grads", spy)
    if kernel == "compiled":
        monkeypatch.setattr(CompiledKernel, "backend", "eager")
        monkeypatch.setattr(CompiledKernel, "_compiled", None)
    g = torch.Generator().manual_seed(0)
    h0, w0 = torch.randn(40, 16, generator=g), torch.randn(300, 16, generator=g) * 0.3
    b0, y = torch.randn(300, generator=g) * 0.1, torch.randint(0, 300, (40,), generator=g)
    s0 = torch.rand(300, generator=g) + 0.5 if options.get("column_scale") else None
    smooth = options.get("label_smoothing", 0.0)
    results = {}
    for name in ("eager", kernel):
        use_kernel(name, monkeypatch, max_block=128)
        h, w, b = (x.clone().requires_grad_() for x in (h0, w0, b0))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = chunked(h, w, b, y, chunk_size=16, column_scale=s0, label_smoothing=smooth)
        loss.backward()
        results[name] = [loss, h.grad, w.grad, b.grad]
        if name == "eager":
            seen.clear()
    assert seen and set(seen) == {torch.bfloat16}
    for got, ref in zip(results[kernel], results["eager"], strict=True):
        assert (got - ref).norm() <= 1e-2 * ref.norm()


@pytest.mark.parametrize("kernel", ["compiled", "triton", "triton-half"])
@pytest.mark.parametrize("options", ["plain", "column-scale-target-softcap", "bce-target-softcap-column-scale"])
def test_the_bias_and_column_scale_are_applied_inside_the_kernels_math(kernel, options, monkeypatch):
    """The compiled and Triton kernels apply the bias and a margin head's column scale as they read the products
    (inside the compiled function, inside the row program), not in a pass of their own over the (n, V) block: the
    product each training chunk computes is h wᵀ alone (and each evaluation chunk's, for Triton), and the loss and
    gradients are the reference's."""
    from hf_heads.losses import kernels, triton_kernel

    use_kernel(kernel, monkeypatch)
    if kernel == "compiled":
        monkeypatch.setattr(CompiledKernel, "backend", "eager")
        monkeypatch.setattr(CompiledKernel, "_compiled", None)
    raw, seen = kernels._raw_logits, []

    def spy(h, w, b, out=None, s=None):
        seen.append((b is None, s is None))
        return raw(h, w, b, out, s)

    monkeypatch.setattr(kernels, "_raw_logits", spy)
    monkeypatch.setattr(triton_kernel, "_raw_logits", spy)  # the Triton kernel's own name for it
    opts = dict(OPTIONS[options])
    h, w, b, t, y = _data()
    t = t if opts.pop("target", False) else None
    s = (torch.rand(V, dtype=torch.float64) + 0.5).requires_grad_() if opts.pop("scale", False) else None
    inputs = [x for x in (h, w, b, t, s) if x is not None]
    loss = chunked(h, w, b, y, target_logit=t, column_scale=s, chunk_size=4, **opts)
    ref = naive(h, w, b, y, t, s, **opts)
    torch.testing.assert_close(loss, ref)
    for got, want in zip(torch.autograd.grad(loss, inputs), torch.autograd.grad(ref, inputs), strict=True):
        torch.testing.assert_close(got, want)
    assert seen and set(seen) == {(True, True)}, seen
    seen.clear()
    with torch.no_grad():  # the loss-only evaluation path (the compiled kernel's is the eager one's)
        torch.testing.assert_close(chunked(h, w, b, y, target_logit=t, column_scale=s, chunk_size=4, **opts), ref)
    assert kernel == "compiled" or set(seen) == {(True, True)}, seen


@pytest.mark.parametrize("kernel", sorted(CHUNK_KERNELS))
@pytest.mark.parametrize("options", [{}, {"column_scale": True}], ids=["plain", "column-scale"])
def test_half_products_go_into_the_float32_weight_gradient_inside_the_gemm_where_addmm_can(
    kernel, options, monkeypatch
):
    """Under autocast bf16 the weight gradient's product is added into its float32 accumulator by
    `addmm(out_dtype=float32, out=acc)` where the device has it (CUDA, torch >= 2.10: emulated here, a CPU has no
    such overload): once per chunk, A = d zᵀ (V, n) times h (n, H) in bf16, the accumulator itself as `self` and
    `out`; the gradients equal those of the out-of-place path (a bf16 (V, H) product added) to bf16 rounding of that
    product. Where the overload is missing the probe says so and the out-of-place path runs."""
    from hf_heads.losses import kernels

    assert not kernels._probe_addmm_out_dtype(torch.device("cpu"), torch.bfloat16)  # NotImplementedError on a CPU
    assert not kernels.adds_half_products_in_place(torch.zeros(3, 2), torch.bfloat16)
    use_kernel(kernel, monkeypatch, max_block=128)
    g = torch.Generator().manual_seed(0)
    h0, w0, b0 = (
        torch.randn(40, 16, generator=g),
        torch.randn(300, 16, generator=g) * 0.3,
        torch.randn(300, generator=g) * 0.1,
    )
    y, s0 = torch.randint(0, 300, (40,), generator=g), torch.rand(300, generator=g) + 0.5
    addmm, calls = torch.addmm, []

    def emulated(acc, a, b, *args, beta=1.0, out_dtype=None, out=None, **kwargs):
        if out_dtype is None:
            return addmm(acc, a, b, *args, beta=beta, out=out, **kwargs)
        calls.append((acc.dtype, a.dtype, b.dtype, tuple(a.shape), tuple(b.shape), out is acc, out_dtype, beta))
        product = a.float() @ b.float()  # what cuBLAS computes: float32 sums of the half products
        return acc.copy_(product) if beta == 0 else acc.add_(product)  # β = 0: the old content is never read

    results = {}
    for in_place in (False, True):
        monkeypatch.setattr(kernels, "adds_half_products_in_place", lambda acc, dtype, on=in_place: on)
        monkeypatch.setattr(torch, "addmm", emulated)
        h, w, b = (x.clone().requires_grad_() for x in (h0, w0, b0))
        s = s0.clone().requires_grad_() if options else None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = chunked(h, w, b, y, chunk_size=16, column_scale=s)
        loss.backward()
        monkeypatch.setattr(torch, "addmm", addmm)
        results[in_place] = [loss, h.grad, w.grad, b.grad] + ([s.grad] if options else [])
    want = (torch.float32, torch.bfloat16, torch.bfloat16, (300, 16), (16, 16), True, torch.float32, 0.0)
    assert (
        len(calls) == 3
        and calls[0] == want  # the first chunk writes the accumulator (no zeroed (V, H) buffer), the others add
        and [c[7] for c in calls[1:]] == [1.0, 1.0]
        and {c[3:5] for c in calls[1:]} == {((300, 16), (16, 16)), ((300, 8), (8, 16))}
    )
    for got, ref in zip(results[True], results[False], strict=True):  # relative (Frobenius) error of each
        assert (got - ref).norm() <= 1e-2 * ref.norm()
    assert not torch.equal(results[True][2], results[False][2])  # the product was not rounded to bf16 first


def test_a_tensor_num_items_in_batch_is_never_read_on_the_host(monkeypatch):
    """The Trainer passes `num_items_in_batch` as a tensor on the device: the mean divides by it as a tensor (no
    `.item()` / `float()`, a host sync on a GPU), and the loss and gradients equal those of the same count as an
    int."""
    h, w, b, _, y = _data()
    ref = chunked(h, w, b, y, num_items_in_batch=25)
    ref_grads = torch.autograd.grad(ref, (h, w, b))

    def refuse(*args):
        raise AssertionError("num_items_in_batch read on the host")

    monkeypatch.setattr(torch.Tensor, "item", refuse)
    monkeypatch.setattr(torch.Tensor, "__float__", refuse)
    loss = chunked(h, w, b, y, num_items_in_batch=torch.tensor(25))
    grads = torch.autograd.grad(loss, (h, w, b))
    monkeypatch.undo()
    torch.testing.assert_close(loss, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want)


SYNCING_OPS = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.masked_scatter", "aten.unique")


class _HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """A CPU stand-in for `torch.cuda.set_sync_debug_mode("error")`: records every op that reads a tensor's value on
    the host on an accelerator (`.item()` / `bool()`, a boolean-mask index or select, `nonzero`, `unique`)."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        index_by_mask = name == "aten.index" and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ())
        )
        if name in SYNCING_OPS or index_by_mask:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "options", ["plain", "target-logit-softcap-smoothing", "top-k", "class-weight-z-loss-top-k", "z-loss"]
)
def test_a_training_step_on_an_accelerator_reads_nothing_on_the_host(reduction, options, monkeypatch):
    """On an accelerator (stood in for here by declaring host reads costly), the fused cross-entropy's forward and
    backward read no value on the host — no label check, no compaction of ignored rows, no count, no check of the
    class weights, no sum of them — and compute the same loss and gradients as the CPU path that compacts the rows;
    an out-of-range label is still refused."""
    from hf_heads.losses import fused_linear, kernels
    from hf_heads.losses import reduction as reduction_module

    opts = dict(OPTIONS[options])
    use_t = opts.pop("target", False)
    if opts.get("class_weight"):
        opts["class_weight"] = CLASS_WEIGHT
    h, w, b, t, y = _data()
    y[7] = -100

    def run():
        out = chunked(
            h, w, b, y, target_logit=t if use_t else None, reduction=reduction, chunk_size=4,
            num_items_in_batch=torch.tensor(9) if reduction == "mean" and "class_weight" not in opts else None,
            **opts,
        )  # fmt: skip
        loss = out.sum() if reduction == "none" else out
        return out, torch.autograd.grad(loss, (h, w, b, t), allow_unused=True)

    want, want_grads = run()
    for module in (reduction_module, fused_linear, kernels):
        monkeypatch.setattr(module, "host_reads_are_free", lambda device: False)
    with _HostReads() as reads:
        got, got_grads = run()
    assert reads.seen == []
    torch.testing.assert_close(got, want)
    for g, w_ in zip(got_grads, want_grads, strict=True):
        assert (g is None) == (w_ is None) or not (g if g is not None else w_).any()
        if g is not None and w_ is not None:
            torch.testing.assert_close(g, w_)
    y[0] = V
    with pytest.raises(RuntimeError, match="labels: a label is out of range; allowed 0 <= label < 17"):
        chunked(h, w, b, y)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_on_an_accelerator_an_ignored_rows_prediction_is_ignore_index_and_its_rank_minus_one(reduction, monkeypatch):
    """On an accelerator (stood in for here) every row is computed, the ignored ones too: their prediction is still
    `ignore_index` and their rank -1, and the predictions, ranks and token accuracy are those of the CPU path that
    compacts the rows."""
    from hf_heads.losses import fused_linear, kernels
    from hf_heads.losses import reduction as reduction_module

    h, w, b, _, y = _data(3)
    y[[0, 3, 7]] = -5
    ignored = y == -5

    def run():
        return chunked(h, w, b, y, reduction=reduction, ignore_index=-5, chunk_size=4, return_predictions=True,
                       return_target_rank=True)  # fmt: skip

    want = run()
    for module in (reduction_module, fused_linear, kernels):
        monkeypatch.setattr(module, "host_reads_are_free", lambda device: False)
    got = run()
    assert got.predictions[ignored].tolist() == [-5] * 3 and got.target_rank[ignored].tolist() == [-1] * 3
    assert torch.equal(got.predictions, want.predictions) and torch.equal(got.target_rank, want.target_rank)
    torch.testing.assert_close(got.token_accuracy, want.token_accuracy)


@pytest.mark.parametrize("items", [None, torch.tensor(9)], ids=["rows counted", "tensor num_items_in_batch"])
def test_a_divisor_counted_on_the_device_divides_in_the_losss_dtype(items, monkeypatch):
    """On an accelerator the mean's divisor is an integer tensor (the rows counted on the device, or the Trainer's
    num_items_in_batch); float64 inputs still give the float64 loss to rounding, not to a float32 reciprocal."""
    from hf_heads.losses import fused_linear, kernels
    from hf_heads.losses import reduction as reduction_module

    h, w, b, _, y = _data()
    want = chunked(h, w, b, y, chunk_size=4, num_items_in_batch=None if items is None else 9)
    for module in (reduction_module, fused_linear, kernels):
        monkeypatch.setattr(module, "host_reads_are_free", lambda device: False)
    got = chunked(h, w, b, y, chunk_size=4, num_items_in_batch=items)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-14, atol=0)


HEADS_ON_AN_ACCELERATOR = {
    "softmax": {},
    "sparse": {"k": 5},
    "margin arc, unigram, max-norm": {"margin": "arc", "m": 0.2, "word_norm": "unigram", "context_norm": "max-norm"},
    "margin lsm, log-rank": {"margin": "lsm", "m": 2, "word_norm": "log-rank"},
    "sampled ce is, unigram noise, hits removed": {
        "criterion": "ce",
        "method": "is",
        "num_samples": 6,
        "noise": "unigram",
        "remove_accidental_hits": True,
    },
    "sampled bce nce, cos margin, max-norm": {
        "criterion": "bce",
        "method": "nce",
        "num_samples": 6,
        "margin": "cos",
        "m": 0.1,
        "context_norm": "max-norm",
    },
    "sampled mse full": {"criterion": "mse", "method": "full"},
}


@pytest.mark.parametrize("name", list(HEADS_ON_AN_ACCELERATOR))
def test_a_heads_training_step_reads_nothing_on_the_host(name, monkeypatch):
    """The head's whole loss and backward (labels with padding, a tensor `num_items_in_batch`, as the Trainer passes)
    on the stood-in accelerator: no host read (margin heads: word counts checked by a device assertion, max-norm's
    batch maximum and running value kept on the device; sampled heads: the noise checked likewise, every row scored
    and the ignored ones masked), and the same loss, gradients and running max-norm as the CPU path that compacts
    the rows."""
    from hf_heads.losses import fused_linear, kernels, noise, scorer
    from hf_heads.losses import reduction as reduction_module

    family = name.split()[0]
    options = {"family": family, "chunk_size": 3, **HEADS_ON_AN_ACCELERATOR[name]}
    g = torch.Generator().manual_seed(2)
    hidden, labels = torch.randn(2, 5, 6, generator=g), torch.randint(0, 13, (2, 5), generator=g)
    labels[1, 3:] = -100
    counts = torch.arange(13, 0, -1).float() * 3

    def new_head():
        torch.manual_seed(0)
        head = make_head(6, 13, dict(options)).train()
        if head.needs_counts:
            head.set_word_counts(counts)
            head.counts()  # set once: read on the host then, not at every step
        if family == "sampled":
            head.noise_probs()  # likewise: built from the counts once
        return head

    def step(head):
        torch.manual_seed(1)  # the sampled heads' noise draws
        loss = head.loss(hidden, labels, num_items_in_batch=torch.tensor(8))
        loss.backward()
        running = getattr(head, "context_norm_running", None)
        return loss, head.weight.grad, head.bias.grad, None if running is None else running.clone()

    want = step(new_head())
    for module in (reduction_module, fused_linear, kernels, noise, scorer):
        monkeypatch.setattr(module, "host_reads_are_free", lambda device: False)
    head = new_head()
    with _HostReads() as reads:
        got = step(head)
    assert reads.seen == [] and torch.isfinite(got[0]) and got[1].abs().sum() > 0
    torch.testing.assert_close(got, want)


def test_the_gradients_computed_in_the_forward_are_scaled_by_the_incoming_gradient():
    """A reduced loss computes its gradients in the forward pass; the backward scales them by d output (here 2.5,
    then 1 and a loss used twice in one graph), and a second backward through the same graph gives the same."""
    h, w, b, t, y = _data()
    ref = naive(h, w, b, y, None)
    want = torch.autograd.grad(2.5 * ref, (h, w, b))
    loss = chunked(h, w, b, y, chunk_size=4)
    for _ in range(2):
        got = torch.autograd.grad(2.5 * loss, (h, w, b), retain_graph=True)
        for g, w_ in zip(got, want, strict=True):
            torch.testing.assert_close(g, w_)
    torch.testing.assert_close(torch.autograd.grad(loss, h, retain_graph=True)[0], want[0] / 2.5)
    torch.testing.assert_close(torch.autograd.grad(loss + loss, h)[0], 2 * want[0] / 2.5)


@pytest.mark.parametrize("kernel", ["eager", "triton"])
@pytest.mark.parametrize("options", [{}, {"z_loss": 0.01, "target": True}, {"softcap": 150.0}], ids=str)
def test_a_target_far_below_its_rows_maximum_keeps_its_loss_and_gradient(kernel, options, monkeypatch):
    """float32 logits whose target sits 95 and 130 below the row's maximum (p_y a subnormal number, and 0): the loss
    (a z-loss's lse² in it) and gradients equal the float64 naive ones (the eager kernel's softmax pass takes each
    row's loss from its target's p, and those rows' from their log-softmax instead)."""
    use_kernel(kernel, monkeypatch)
    rows = torch.tensor([[0.0, 2.0, -95.0, 1.0, 0.5], [3.0, -130.0, 0.0, 0.0, 1.0], [0.2, 0.1, 0.0, -0.3, 1.5]])
    y = torch.tensor([2, 1, 4])
    w = torch.eye(5, requires_grad=True)  # h wᵀ = h: the rows above are the logits
    h = rows.clone().requires_grad_()
    t = torch.tensor([-96.0, -131.0, 0.7], requires_grad=True) if options.get("target") else None
    ref = [x.detach().double().requires_grad_() for x in (h, w)] + [None if t is None else t.detach().double()]
    if t is not None:
        ref[2].requires_grad_()
    cap, z_loss = options.get("softcap"), options.get("z_loss", 0.0)
    kw = dict(target_logit=t, softcap=cap, z_loss=z_loss, chunk_size=2)
    loss = chunked(h, w, None, y, **kw)  # with a z-loss, lse_i² enters it
    want = naive(ref[0], ref[1], 0.0, y, ref[2], softcap=cap, z_loss=z_loss)
    assert 50 < loss.item() < 80
    torch.testing.assert_close(loss.double(), want, rtol=1e-6, atol=0)
    inputs = [x for x in (h, w, t) if x is not None]
    got = torch.autograd.grad(loss, inputs)
    wanted = torch.autograd.grad(want, [x for x in ref if x is not None])
    for g, w_ in zip(got, wanted, strict=True):
        torch.testing.assert_close(g.double(), w_, rtol=1e-4, atol=1e-6)  # float32 against float64


@pytest.mark.parametrize("refused", [False, True], ids=["this torch", "aliasing refused"])
def test_plain_cross_entropy_on_a_cpu_trains_from_softmax_written_over_the_logits(refused, monkeypatch):
    """The eager kernel's training pass of plain cross-entropy on a CPU turns each chunk's logits into p in place
    (one row-wise pass); where a torch refused that aliasing (its probe False), the log-softmax pass runs instead. The
    loss and gradients are the naive ones either way."""
    from hf_heads.losses import kernels

    monkeypatch.setattr(kernels, "_PROBED", {})
    assert kernels.softmax_in_place(torch.zeros(0, 3))  # this torch takes it
    if refused:
        monkeypatch.setitem(kernels._PROBED, ("softmax-in-place", torch.device("cpu"), torch.float64), False)
    calls = []
    original = kernels.softmax_in_place
    monkeypatch.setattr(kernels, "softmax_in_place", lambda z: calls.append(z.shape) or original(z))
    use_kernel("eager", monkeypatch)
    h, w, b, _, y = _data()
    loss = chunked(h, w, b, y, chunk_size=4)
    got = torch.autograd.grad(loss, (h, w, b))
    want = naive(h, w, b, y, None)
    torch.testing.assert_close(loss, want)
    for g, w_ in zip(got, torch.autograd.grad(want, (h, w, b)), strict=True):
        torch.testing.assert_close(g, w_)
    assert len(calls) == -(-int((y != -100).sum()) // 4) and all(c[1] == V for c in calls)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_scaling_by_d_loss_on_the_device_multiplies_or_leaves_the_gradient_as_it_is(dtype, monkeypatch):
    """The backward's multiply by d loss without a host read (Triton's program, under its interpreter here): x times
    the factor rounded to x's dtype, as `x.mul_` gives; a factor of 1 leaves every bit of x (no pass); a tensor the
    program cannot take (not contiguous) is multiplied by torch."""
    import triton

    from hf_heads.losses import triton_programs

    monkeypatch.setattr(triton_programs, "_SCALES_ON", {})
    assert triton_programs._scales_on(torch.device("cpu"))  # its first check passed: the program runs from now on
    launched = []
    program = triton_programs.program

    def spy(name="ce_per_row"):
        launched.append(name)
        return program(name)

    monkeypatch.setattr(triton_programs, "program", spy)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 4099, generator=g) * 3).to(dtype)  # crosses the 4096-entry blocks
    exact = dict(rtol=2**-7, atol=0) if dtype == torch.bfloat16 else dict(rtol=0, atol=0)  # the interpreter's bf16
    for factor in (torch.tensor(2.7), torch.tensor(-0.3, dtype=torch.float64), torch.tensor([1e-3])):  # rounds down
        got = triton_programs.scale_in_place(x.clone(), factor)
        torch.testing.assert_close(got, x.clone().mul_(factor.to(dtype)), **exact)
    assert launched == ["scale_unless_one"] * 3
    x[0, 0], x[1, 1] = float("nan"), -0.0
    stores = []
    builder = triton.runtime.interpreter.InterpreterBuilder
    original_store = builder.create_masked_store
    monkeypatch.setattr(builder, "create_masked_store", lambda *a, **k: stores.append(1) or original_store(*a, **k))
    same = triton_programs.scale_in_place(x.clone(), torch.tensor(1.0))
    assert stores == []  # nothing written at d loss = 1
    triton_programs.scale_in_place(x.clone(), torch.tensor(1.5))
    assert len(stores) == 4  # one block of 4096 entries per program
    stores.clear()
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    assert torch.equal(same.view(bits), x.view(bits))
    strided = x.clone().t()
    torch.testing.assert_close(triton_programs.scale_in_place(strided, torch.tensor(0.5)), x.t() * 0.5, equal_nan=True)
    assert len(launched) == 5 and stores == []


def test_a_scaling_program_that_fails_its_first_check_warns_and_torch_multiplies(monkeypatch):
    """Where the Triton program raises (or computes other values) on its first use on a device, a warning names it
    and every later scaling there is torch's multiply: the same gradient, never a wrong one."""
    from hf_heads.losses import triton_programs

    def broken(name="ce_per_row"):
        def launch(*args, **kwargs):
            raise RuntimeError("no such device function")

        return {(1,): launch, (2,): launch}

    monkeypatch.setattr(triton_programs, "_SCALES_ON", {})
    monkeypatch.setattr(triton_programs, "program", broken)
    x = torch.linspace(-2, 2, 10)
    with pytest.warns(UserWarning, match="RuntimeError: no such device function on cpu; the backward multiplies with"):
        got = triton_programs.scale_in_place(x.clone(), torch.tensor(3.0))
    torch.testing.assert_close(got, x * 3, rtol=0, atol=0)
    assert triton_programs._SCALES_ON == {torch.device("cpu"): False}


@pytest.mark.parametrize("d_loss", [1.0, 2.5])
def test_on_an_accelerator_the_weight_gradient_is_scaled_on_the_device(d_loss, monkeypatch):
    """With host reads avoided (an accelerator, stood in for here), the backward hands the gradients through
    `scale_in_place` with d loss as a device tensor: the same gradients as the CPU path, which reads d loss."""
    from hf_heads.losses import fused_linear, kernels
    from hf_heads.losses import reduction as reduction_module

    h, w, b, t, y = _data()
    want = torch.autograd.grad(d_loss * chunked(h, w, b, y, target_logit=t, chunk_size=4), (h, w, b, t))
    scaled = []

    def spy(x, factor):
        scaled.append((tuple(x.shape), factor.device.type, factor.shape))
        return x.mul_(factor.to(x.dtype))

    monkeypatch.setattr(fused_linear, "scale_in_place", spy)
    for module in (reduction_module, fused_linear, kernels):
        monkeypatch.setattr(module, "host_reads_are_free", lambda device: False)
    got = torch.autograd.grad(d_loss * chunked(h, w, b, y, target_logit=t, chunk_size=4), (h, w, b, t))
    for g, w_ in zip(got, want, strict=True):
        torch.testing.assert_close(g, w_)
    assert sorted(s for s, *_ in scaled) == sorted([(N, H), (V, H), (V,), (N,)])
    assert {(d, s) for _, d, s in scaled} == {("cpu", torch.Size([]))}


@pytest.mark.parametrize(
    "options",
    [
        {"margin": "arc", "m": 0.2, "word_norm": "log-unigram", "context_norm": "max-norm"},
        {"margin": "lsm", "m": 2, "word_norm": "unigram"},
        {"margin": "cos", "m": 0.1, "scale": 8.0},
    ],
    ids=["arc-log-unigram-max-norm", "lsm-unigram", "cos-scale"],
)
def test_a_half_model_runs_the_margin_products_in_half(options, monkeypatch):
    """A margin loss on a bf16 model without autocast: the products run in bf16 (no float32 copy of W), the scorer's
    factors in float32; the loss is within 2% of the float32 model's and the gradients are bf16 and finite."""

    seen = spy_on_products(monkeypatch)
    g = torch.Generator().manual_seed(0)
    h32, w32 = torch.randn(40, 16, generator=g), torch.randn(300, 16, generator=g) * 0.3
    b32, y = torch.randn(300, generator=g) * 0.1, torch.randint(0, 300, (40,), generator=g)
    counts = torch.randint(1, 1000, (300,), generator=g).float()
    kw = dict(options, word_counts=counts, chunk_size=16)
    want = margin_cross_entropy(h32, w32, b32, y, **kw)
    h, w, b = (x.to(torch.bfloat16).requires_grad_() for x in (h32, w32, b32))
    seen.clear()
    loss = margin_cross_entropy(h, w, b, y, **kw)
    loss.backward()
    assert seen and all(s == (torch.bfloat16, torch.bfloat16) for s in seen)
    assert loss.dtype == torch.bfloat16  # torch's rule for half inputs outside autocast
    assert abs(loss.item() - want.item()) <= 0.02 * want.item()
    assert h.grad.dtype == w.grad.dtype == b.grad.dtype == torch.bfloat16
    assert all(torch.isfinite(x.grad).all() for x in (h, w, b))


def test_memory_budget_sets_the_rows_per_chunk_of_every_pass_of_a_heads_loss(monkeypatch):
    """`memory_budget` (MiB of a chunk's float32 (rows, V) logits) reaches the chunk engine from the head's options:
    at V = 2^16, 1 MiB holds 4 rows, so 10 rows run as chunks of 4, 4 and 2 in training and in evaluation, with the
    loss of one (N, V) cross-entropy; a budget below one row still runs one row per chunk."""
    seen = []
    for name in ("loss", "loss_and_grads"):
        original = getattr(EagerKernel, name)
        monkeypatch.setattr(
            EagerKernel, name, lambda self, h, *a, _f=original, **k: (seen.append(h.shape[0]), _f(self, h, *a, **k))[1]
        )
    V, H = 1 << 16, 3
    hidden, labels = torch.randn(1, 10, H), torch.randint(0, V, (1, 10))
    for budget, rows in ((1, [4, 4, 2]), (None, [10])):
        torch.manual_seed(0)
        head = make_head(H, V, {"family": "softmax", "chunk_kernel": "eager", "memory_budget": budget})
        seen.clear()
        loss = head.train().loss(hidden, labels)
        loss.backward()
        assert seen == rows, budget
        want = F.cross_entropy(hidden[0] @ head.weight.T + head.bias, labels[0])
        torch.testing.assert_close(loss, want)
        seen.clear()
        with torch.no_grad():
            head.eval().loss(hidden, labels)
        assert seen == rows, budget
    seen.clear()
    w = torch.randn(V, H)
    chunked(hidden[0], w, None, labels[0], memory_budget=1, label_smoothing=0.1)
    assert seen == [4, 4, 2]
    with pytest.raises(OptionError, match=r"memory_budget=1 cannot be combined with chunk_size=3: both set the rows"):
        make_head(H, V, {"family": "sparse", "k": 2, "chunk_size": 3, "memory_budget": 1})
    with pytest.raises(OptionError, match=r"memory_budget=0 .*>= 1"):
        chunked(hidden[0], w, None, labels[0], memory_budget=0)


class _WeightSizedOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the ops whose output has `numel` elements (a (V, H) pass) and their output dtypes."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket)
        if isinstance(out, torch.Tensor) and out.numel() == self.numel and name not in self.NOT_PASSES:
            self.ops.append((name, out.dtype))
        return out

    NOT_PASSES = ("aten.empty", "aten.empty_like", "aten.detach", "aten.t", "aten.view", "aten.alias", "aten.permute")


def test_a_half_weights_gradient_is_scaled_and_rounded_in_one_pass():
    """A bf16 W's gradient leaves the float32 (V, H) accumulator scaled by d loss and rounded to bf16 in one pass (no
    bf16 copy scaled again, which also rounds twice), and W.grad is the float32 gradient times 3 rounded once."""
    torch.manual_seed(0)
    n, hidden, vocab = 12, 8, 40
    h = torch.randn(n, hidden)
    w = (torch.randn(vocab, hidden) * 0.3).bfloat16().requires_grad_()
    y = torch.randint(0, vocab, (n,))
    ops = _WeightSizedOps(w.numel())
    with ops:
        (3 * chunked(h.bfloat16(), w, None, y, chunk_size=5, kernel="eager")).backward()
    # three chunks' bf16 products (a CPU has no GEMM into float32) written, then added, into the float32
    # accumulator; then the one pass into bf16
    product = ("aten.mm", torch.bfloat16)
    into = [product, ("aten.copy_", torch.float32), *[product, ("aten.add_", torch.float32)] * 2]
    assert ops.ops == [*into, ("aten.mul", torch.bfloat16)], ops.ops
    h32, w32 = h.bfloat16().float(), w.detach().float().requires_grad_()
    want = torch.autograd.grad(3 * F.cross_entropy(h32 @ w32.T, y), w32)[0]
    torch.testing.assert_close(w.grad.float(), want, atol=2e-3, rtol=1e-2)


def test_a_column_scale_reaches_the_weights_gradient_in_the_d_loss_pass():
    """With a column scale s (a word norm) the weight's gradient s ∘ A leaves the accumulator A scaled by s and by d
    loss in one in-place pass (not one for each), and is the reference's: for 3 · loss, W.grad and s.grad."""
    torch.manual_seed(0)
    n, hidden, vocab = 12, 8, 40
    h, y = torch.randn(n, hidden, dtype=torch.float64), torch.randint(0, vocab, (n,))
    w = (torch.randn(vocab, hidden, dtype=torch.float64) * 0.3).requires_grad_()
    s = (torch.rand(vocab, dtype=torch.float64) + 0.5).requires_grad_()
    ops = _WeightSizedOps(w.numel())
    with ops:
        (3 * chunked(h, w, None, y, column_scale=s, chunk_size=5, kernel="eager")).backward()
    assert [op for op in ops.ops if op[0] == "aten.mul_"] == [("aten.mul_", torch.float64)], ops.ops
    w2, s2 = w.detach().clone().requires_grad_(), s.detach().clone().requires_grad_()
    want = torch.autograd.grad(3 * F.cross_entropy((h @ w2.T) * s2, y), (w2, s2))
    torch.testing.assert_close((w.grad, s.grad), want)
