"""The one loss entry point, `output_loss(hidden, weight, bias, labels, *, scorer, candidates, criterion, reduction,
ignore_index, num_items_in_batch, returns, impl)` (hf_heads.losses.entry):

- every registered criterion over `Full` candidates equals its dense form written here from the equations (not from
  the library), forward and backward, in every reduction, with ignored rows and `num_items_in_batch`, and passes
  float64 gradcheck; the extras `returns` asks for (predictions, accuracy, ranks, log-sum-exp, z-loss, entropy) equal
  their dense forms in every reduction;
- every preset (hf_heads.losses.presets) is the entry with its parts filled in;
- every field of the parts changes the loss for some input (or is refused), and the module form passes each of its
  constructor arguments on;
- the kernel is chosen in one place (`impl`; the environment only when none is given), and candidates that run no
  kernel refuse one; the heads pass their `chunk_kernel` option where their loss runs one.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F

from hf_heads.components import REGISTRIES
from hf_heads.heads import make_head
from hf_heads.losses import (
    CHUNK_KERNELS,
    BinaryCrossEntropy,
    Correction,
    CrossEntropy,
    Impl,
    MeanSquaredError,
    OptionError,
    OutputLayerLoss,
    Sampled,
    Scorer,
    output_loss,
    presets,
)
from hf_heads.losses.chunks import KERNEL_ENV
from hf_heads.losses.kernels import EagerKernel

V, H, N = 13, 6, 9


def _data(seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, generator=g, dtype=dtype).requires_grad_()
    w = (torch.randn(V, H, generator=g, dtype=dtype) * 0.8).requires_grad_()
    b = (torch.randn(V, generator=g, dtype=dtype) * 0.3).requires_grad_()
    y = torch.randint(0, V, (N,), generator=g)
    y[2] = y[6] = -100
    return h, w, b, y


# ----------------------------------------------------------------------------- dense forms, from the equations


def dense_rows(criterion, z, y):
    """The per-row training loss (N,) of `criterion` over the dense logits z (N, V) (0 on ignored rows), written from
    the papers' equations with torch alone."""
    valid = y != -100
    yy = torch.where(valid, y, 0)
    if isinstance(criterion, BinaryCrossEntropy):  # sampling paper eq. 3
        onehot = F.one_hot(yy, V).to(z)
        rows = -(onehot * F.logsigmoid(z) + (1 - onehot) * F.logsigmoid(-z)).sum(1)
    elif isinstance(criterion, MeanSquaredError):  # eq. 1
        rows = (torch.sigmoid(z) - F.one_hot(yy, V).to(z)).square().sum(1)
    else:
        c = criterion
        support = z if c.top_k is None else z.topk(c.top_k, dim=1).values  # sparse-softmax eq. 5's support
        lse = torch.logsumexp(support, 1)
        nll = lse - z.gather(1, yy[:, None]).squeeze(1)
        rows = (1 - c.label_smoothing) * nll + c.label_smoothing * (lse - support.mean(1)) + c.z_loss * lse.square()
        p = torch.softmax(support, 1)
        rows = rows + c.confidence_penalty * (p * torch.log_softmax(support, 1)).sum(1)
        if c.class_weight is not None:
            rows = rows * c.class_weight.to(z)[yy]
    return torch.where(valid, rows, 0.0)


def dense_reduce(criterion, rows, y, reduction, num_items_in_batch=None):
    """`F.cross_entropy`'s reductions: the class-weighted mean divides by Σ a[y] (the Trainer's count instead when
    given), the confidence penalty's entropy by the labelled rows."""
    valid = y != -100
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    if num_items_in_batch is not None:
        return rows.sum() / num_items_in_batch
    weight = getattr(criterion, "class_weight", None)
    if weight is None or not isinstance(criterion, CrossEntropy) or criterion.confidence_penalty:
        return rows.sum() / valid.sum()
    return rows.sum() / weight.to(rows)[y[valid]].sum()


CRITERIA = {
    "ce": CrossEntropy(),
    "ce-smoothing": CrossEntropy(label_smoothing=0.1),
    "ce-top-k": CrossEntropy(top_k=4),
    "ce-z-loss": CrossEntropy(z_loss=0.3),
    "ce-penalty": CrossEntropy(confidence_penalty=0.4),
    "ce-class-weight": CrossEntropy(class_weight=torch.linspace(0.2, 2.0, V, dtype=torch.float64)),
    "ce-top-k-smoothing-z-loss": CrossEntropy(top_k=5, label_smoothing=0.2, z_loss=0.1),
    "bce": BinaryCrossEntropy(),
    "mse": MeanSquaredError(),
}


def test_every_registered_criterion_has_a_case():
    assert {type(c) for c in CRITERIA.values()} == set(REGISTRIES["criterion"].values())


@pytest.mark.parametrize("name", list(CRITERIA))
@pytest.mark.parametrize("reduction", ["mean", "sum", "none", "items"])
def test_full_candidates_equal_the_dense_criterion(name, reduction):
    criterion = CRITERIA[name]
    h, w, b, y = _data()
    items = 11 if reduction == "items" else None
    red = "mean" if reduction == "items" else reduction
    got = output_loss(
        h, w, b, y, criterion=criterion, reduction=red, num_items_in_batch=items, impl=Impl(chunk_size=4)
    )
    # the penalty's entropy averages over the labelled rows whatever the class weights; the criteria here have none
    want = dense_reduce(criterion, dense_rows(criterion, h @ w.T + b, y), y, red, items)
    torch.testing.assert_close(got, want)
    probe = torch.randn_like(got)
    g_got = torch.autograd.grad((got * probe).sum(), (h, w, b))
    g_want = torch.autograd.grad((want * probe).sum(), (h, w, b))
    torch.testing.assert_close(g_got, g_want)
    assert got.shape == (() if red != "none" else y.shape)


@pytest.mark.parametrize("name", ["ce-top-k-smoothing-z-loss", "ce-penalty", "bce", "mse", "ce-class-weight"])
def test_full_candidates_pass_gradcheck(name):
    criterion = CRITERIA[name]
    h, w, b, y = _data(1)
    assert torch.autograd.gradcheck(
        lambda h_, w_, b_: output_loss(h_, w_, b_, y, criterion=criterion, impl=Impl(chunk_size=4)), (h, w, b)
    )


def test_a_margin_scorer_is_eq_13_over_every_class():
    """With a scorer (ArcFace, log-unigram word norm, max-norm) the loss is the cross-entropy of eq. 13's logits: the
    target's φ(θ) = cos(θ + m), f(c) = log c_c, g = the batch's max ‖h‖ over labelled rows, written here."""
    h, w, b, y = _data(2)
    counts = torch.arange(1.0, V + 1, dtype=torch.float64) * 3
    scorer = Scorer.from_options("arc", 0.3, word_norm="log-unigram", context_norm="max-norm").given(
        word_counts=counts
    )
    got = output_loss(h, w, b, y, scorer=scorer, impl=Impl(chunk_size=4))
    valid = y != -100
    yy = torch.where(valid, y, 0)
    cos = (h @ w.T) / (h.norm(dim=1)[:, None] * w.norm(dim=1)[None, :])
    g = h[valid].norm(dim=1).max()
    f = torch.log(counts)
    logits = g * f[None, :] * cos
    theta = torch.acos(cos.gather(1, yy[:, None]).squeeze(1).clamp(-1, 1))
    target = g * f[yy] * torch.cos(theta + 0.3)
    logits = logits.scatter(1, yy[:, None], target[:, None]) + b
    want = F.cross_entropy(logits, y)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, (h, w, b)), torch.autograd.grad(want, (h, w, b)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_extras_of_returns_equal_their_dense_forms(reduction):
    """predictions (argmax, the lowest index on a tie) and token accuracy over the labelled rows, each label's rank
    (the classes before it in the argmax order), each row's log-sum-exp, the z-loss term reduced as the loss, each
    row's entropy — 0 / -1 / ignore_index on ignored rows — in every reduction, beside the same loss."""
    h, w, b, y = _data(3)
    criterion = CrossEntropy(z_loss=0.2)
    out = output_loss(h, w, b, y, criterion=criterion, reduction=reduction, impl=Impl(chunk_size=4),
                      returns=("predictions", "rank", "lse", "z_loss", "entropy"))  # fmt: skip
    z = (h @ w.T + b).detach()
    valid = y != -100
    yy = torch.where(valid, y, 0)
    lse = torch.logsumexp(z, 1)
    pred = z.argmax(1)
    own = z.gather(1, yy[:, None])
    before = torch.arange(V)[None, :] < yy[:, None]
    rank = torch.where(before, z >= own, z > own).sum(1)
    p = torch.softmax(z, 1)
    entropy = -(p * torch.log_softmax(z, 1)).sum(1)
    assert torch.equal(out.predictions, torch.where(valid, pred, -100))
    torch.testing.assert_close(out.token_accuracy, ((pred == y) & valid).sum() / valid.sum())
    assert torch.equal(out.target_rank, torch.where(valid, rank, -1))
    torch.testing.assert_close(out.lse, torch.where(valid, lse, 0.0))
    torch.testing.assert_close(out.entropy.detach(), torch.where(valid, entropy, 0.0))
    z_rows = torch.where(valid, 0.2 * lse.square(), 0.0)
    torch.testing.assert_close(out.z_loss, dense_reduce(criterion, z_rows, y, reduction))
    plain = output_loss(h, w, b, y, criterion=criterion, reduction=reduction, impl=Impl(chunk_size=4))
    torch.testing.assert_close(out.loss, plain)
    torch.testing.assert_close(out.accuracy_at(1), out.token_accuracy)
    torch.testing.assert_close(out.accuracy_at(V), (valid.sum() / valid.sum()).to(out.token_accuracy.dtype))
    for k in (0, 1.5):
        with pytest.raises(OptionError, match=f"^k={k} "):
            out.accuracy_at(k)


def test_the_ranks_are_capped_at_top_k_only_when_top_k_rank_is_asked_for_without_rank():
    """Under a sparse (top-k) cross-entropy, "top_k_rank" gives min(rank, k); asked for beside "rank", the ranks are
    the full ones "rank" alone gives."""
    h, w, b, y = _data(4)
    k = 2
    criterion = CrossEntropy(top_k=k)
    z = (h @ w.T + b).detach()
    valid = y != -100
    yy = torch.where(valid, y, 0)
    own = z.gather(1, yy[:, None])
    before = torch.arange(V)[None, :] < yy[:, None]
    rank = torch.where(valid, torch.where(before, z >= own, z > own).sum(1), -1)
    assert int(rank.max()) > k  # some label outside the top k

    def ranks(returns):
        return output_loss(h, w, b, y, criterion=criterion, impl=Impl(chunk_size=4), returns=returns).target_rank

    assert torch.equal(ranks(("rank",)), rank)
    assert torch.equal(ranks(("rank", "top_k_rank")), rank)
    assert torch.equal(ranks(("top_k_rank",)), torch.where(valid, rank.clamp_max(k), -1))


def test_a_sigmoid_criterion_refuses_softmax_extras():
    h, w, b, y = _data()
    with pytest.raises(OptionError, match=r"returns=\['lse'\] is for cross-entropy only, not criterion 'bce'"):
        output_loss(h, w, b, y, criterion=BinaryCrossEntropy(), returns=("lse",))
    with pytest.raises(TypeError):
        BinaryCrossEntropy(top_k=3)  # a cross-entropy option: not a field of the type


@pytest.mark.parametrize("name", ["bce", "mse"])
def test_a_sigmoid_criterion_s_per_class_terms_add_up_to_its_rows(name):
    """What blocks of classes (row chunks, vocabulary shards) add up: Σ_c negative(z_c) + positive(z_y) −
    negative(z_y) is the row's loss of eq. 3 (BCE) or eq. 1 (MSE), and `terms` gives those losses with their gradient
    d loss / d z, z left as it was."""
    criterion = CRITERIA[name]
    g = torch.Generator().manual_seed(2)
    z = (torch.randn(N, V, generator=g, dtype=torch.float64) * 3).requires_grad_()
    y = torch.randint(0, V, (N,), generator=g)
    want = dense_rows(criterion, z, y)
    z_y = z.gather(1, y[:, None]).squeeze(1)
    summed = criterion.negative(z).sum(1) + criterion.positive(z_y) - criterion.negative(z_y)
    torch.testing.assert_close(summed, want)
    before = z.detach().clone()
    loss, grad = criterion.terms(z.detach(), y)
    torch.testing.assert_close(loss, want.detach())
    torch.testing.assert_close(grad, torch.autograd.grad(want.sum(), z)[0])
    assert torch.equal(z.detach(), before)


def test_the_cross_entropy_has_no_per_class_terms_and_says_so():
    z, y = torch.zeros(2, V), torch.tensor([0, 1])
    for hook in (CrossEntropy.negative, CrossEntropy.positive):
        with pytest.raises(NotImplementedError) as raised:
            hook(z)
        assert str(raised.value) == "a softmax criterion has no per-class terms"
    with pytest.raises(NotImplementedError) as raised:
        CrossEntropy().terms(z, y)
    assert str(raised.value) == "a softmax criterion runs the chunk kernels' softmax path"


# ----------------------------------------------------------------------------- sampled candidates and posteriors


def test_sampled_candidates_equal_ce_is_written_from_eq_13():
    """CE-IS over the target and K given samples: −s_y + log(exp(s_y)/(K·D(y)) + Σ_k exp(s_k)/(K·D(k))) (eq. 13, the
    target kept among the candidates), per labelled row, averaged."""
    h, w, b, y = _data(4)
    noise = torch.softmax(torch.linspace(0, 2, V, dtype=torch.float64), 0)
    samples = torch.tensor([0, 3, 3, 7, 12])
    got = output_loss(h, w, b, y, candidates=Sampled("is", 5, noise, samples=samples))
    s = h @ w.T + b
    valid = y != -100
    rows = []
    for i in torch.nonzero(valid).squeeze(1).tolist():
        t = s[i, y[i]]
        terms = torch.cat([(t - torch.log(5 * noise[y[i]]))[None], s[i, samples] - torch.log(5 * noise[samples])])
        rows.append(-t + torch.logsumexp(terms, 0))
    want = torch.stack(rows).mean()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, (h, w, b)), torch.autograd.grad(want, (h, w, b)))


def test_a_posterior_scorer_gives_the_nll_of_the_corrected_distribution():
    """A `Correction` as the scorer's posterior (BCE-MCS: log p̃ = s + log(K·D(c)), eq. 8): the NLL of
    softmax(s + log(K·D)) over every class."""
    h, w, b, y = _data(5)
    noise = torch.softmax(torch.linspace(0, 1, V, dtype=torch.float64), 0)
    scorer = Scorer().given(posterior=Correction("bce", "mcs", 4, noise))
    got = output_loss(h, w, b, y, scorer=scorer, impl=Impl(chunk_size=3))
    want = F.cross_entropy(h @ w.T + b + torch.log(4 * noise), y)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, (h, w, b)), torch.autograd.grad(want, (h, w, b)))
    with pytest.raises(ValueError, match="a scorer's posterior takes plain cross-entropy"):
        output_loss(h, w, b, y, scorer=scorer, criterion=CrossEntropy(z_loss=0.1))


# ----------------------------------------------------------------------------- presets


def test_every_preset_is_the_entry_with_its_parts():
    h, w, b, y = _data(6)
    noise = torch.full((V,), 1 / V, dtype=torch.float64)
    impl = Impl(chunk_size=4)
    cases = [
        (presets.fused_linear_cross_entropy(h, w, b, y, label_smoothing=0.1, z_loss=0.2, softcap=3.0, impl=impl),
         output_loss(h, w, b, y, scorer=Scorer(softcap=3.0), criterion=CrossEntropy(label_smoothing=0.1, z_loss=0.2),
                     impl=impl)),
        (presets.sparse_linear_cross_entropy(h, w, b, y, 4, label_smoothing=0.1, impl=impl),
         output_loss(h, w, b, y, criterion=CrossEntropy(top_k=4, label_smoothing=0.1), impl=impl)),
        (presets.margin_cross_entropy(h, w, b, y, margin="cos", m=0.2, scale=4.0, impl=impl),
         output_loss(h, w, b, y, scorer=Scorer.from_options("cos", 0.2, 4.0), impl=impl)),
        (presets.sampled_loss(h, w, b, y, criterion="bce", method="full", impl=impl),
         output_loss(h, w, b, y, criterion=BinaryCrossEntropy(), impl=impl)),
        (presets.corrected_nll(h, w, b, y, criterion="ce", method="mcs", num_samples=3, noise_probs=noise, impl=impl),
         output_loss(h, w, b, y, scorer=Scorer().given(posterior=Correction("ce", "mcs", 3, noise)), impl=impl)),
    ]  # fmt: skip
    for got, want in cases:
        torch.testing.assert_close(got, want)
    torch.manual_seed(0)
    got = presets.sampled_loss(h, w, b, y, criterion="ce", method="nce", num_samples=4, noise_probs=noise)
    torch.manual_seed(0)
    want = output_loss(h, w, b, y, candidates=Sampled("nce", 4, noise))
    torch.testing.assert_close(got, want)


# ----------------------------------------------------------------------------- every field reaches the loss


def test_every_field_of_the_cross_entropy_changes_the_loss():
    """Flipping each field of `CrossEntropy` from its default changes the loss on some input (a field that the
    criterion dropped on its way to the kernels would leave it equal)."""
    h, w, b, y = _data(7)
    base = output_loss(h, w, b, y, criterion=CrossEntropy())
    flips = {"top_k": 3, "label_smoothing": 0.2, "z_loss": 0.5, "confidence_penalty": 0.5,
             "class_weight": torch.linspace(0.1, 3.0, V, dtype=torch.float64)}  # fmt: skip
    assert set(flips) == {f.name for f in dataclasses.fields(CrossEntropy)}
    for name, value in flips.items():
        got = output_loss(h, w, b, y, criterion=CrossEntropy(**{name: value}))
        assert not torch.allclose(got, base), name


def test_the_module_passes_every_constructor_argument_on():
    """`OutputLayerLoss(...)` computes `output_loss` with the same arguments: each argument flipped from its default
    changes its result as it changes the function's."""
    h, w, b, y = _data(8)
    noise = torch.full((V,), 1 / V, dtype=torch.float64)
    flips = {
        "scorer": Scorer(softcap=2.0), "candidates": Sampled("mcs", 4, noise, samples=torch.tensor([1, 2, 3, 4])),
        "criterion": MeanSquaredError(), "reduction": "sum", "ignore_index": 5, "returns": ("predictions",),
        "impl": Impl(kernel="eager", chunk_size=2),
    }  # fmt: skip
    import inspect

    assert set(flips) == set(inspect.signature(OutputLayerLoss.__init__).parameters) - {"self"}
    base = OutputLayerLoss()(h, w, b, y)
    torch.testing.assert_close(base, output_loss(h, w, b, y))
    for name, value in flips.items():
        module = OutputLayerLoss(**{name: value})
        labels = torch.where(y == -100, 5, y) if name == "ignore_index" else y  # padded with 5: 5 is ignored too
        got = module(h, w, b, labels, 7)
        want = output_loss(h, w, b, labels, num_items_in_batch=7, **{name: value})
        got, want = (got.loss, want.loss) if name == "returns" else (got, want)
        torch.testing.assert_close(got, want)
        if name != "impl":  # how, not what: the same loss
            assert name == "returns" or not torch.allclose(got.sum(), base.sum()), name
        else:
            torch.testing.assert_close(got, output_loss(h, w, b, y, num_items_in_batch=7))


def test_the_parts_are_checked_by_type_and_returns_by_name():
    h, w, b, y = _data()
    with pytest.raises(OptionError, match="criterion='ce' must be a Criterion"):
        output_loss(h, w, b, y, criterion="ce")
    with pytest.raises(OptionError, match="candidates='Scorer' must be a Candidates"):
        output_loss(h, w, b, y, candidates=Scorer())
    with pytest.raises(OptionError, match="returns='logits' is not allowed; allowed: 'lse'"):
        output_loss(h, w, b, y, returns=("logits",))
    with pytest.raises(OptionError, match="num_samples=0 must be >= 1"):
        Sampled("is", 0, torch.full((V,), 1 / V))
    with pytest.raises(OptionError, match="^top_k=0 must be >= 1$"):  # an empty support: no loss to compute
        CrossEntropy(top_k=0)
    with pytest.raises(OptionError, match="method='full' draws no samples"):
        Sampled("full", 3, torch.full((V,), 1 / V))


# ----------------------------------------------------------------------------- the kernel: one place


class Spy(EagerKernel):
    """The eager kernel, counting the chunks it computes."""

    name = "test-entry-spy"
    calls: ClassVar[list] = []

    def loss_and_grads(self, h, *args, **kwargs):
        Spy.calls.append(h.shape[0])
        return super().loss_and_grads(h, *args, **kwargs)


def test_an_explicit_kernel_wins_over_the_environment_which_wins_over_the_automatic_choice(monkeypatch):
    h, w, b, y = _data()
    spy = dataclasses.dataclass(frozen=True)(Spy)()
    Spy.calls.clear()
    monkeypatch.setenv(KERNEL_ENV, "compiled")
    output_loss(h, w, b, y, impl=Impl(kernel=spy, chunk_size=4))
    assert Spy.calls == [4, 3]  # 7 labelled rows
    monkeypatch.setenv(KERNEL_ENV, "no-such-kernel")
    with pytest.raises(OptionError, match=f"{KERNEL_ENV}='no-such-kernel' is not a chunk kernel"):
        output_loss(h, w, b, y)  # no kernel given: the environment's
    output_loss(h, w, b, y, impl="eager")  # given: the environment is not read
    with pytest.raises(OptionError, match="kernel='eager' is for the chunked passes of Full candidates"):
        output_loss(h, w, b, y, candidates=Sampled("is", 3, torch.full((V,), 1 / V)), impl="eager")
    assert "eager" in CHUNK_KERNELS


def test_the_heads_pass_their_kernel_option_where_their_loss_runs_one(monkeypatch):
    """The softmax, sparse and margin heads give `output_loss` the kernel their `chunk_kernel` option names; a
    sampled head with a sampling method gives none (its K candidates run no kernel), and so does its eval loss (the
    corrected NLL's chunks are eager)."""
    from hf_heads.heads import discrete

    seen = []
    real = discrete.output_loss

    def spy(*args, impl=None, **kwargs):
        seen.append(impl.kernel)
        return real(*args, impl=impl, **kwargs)

    monkeypatch.setattr(discrete, "output_loss", spy)
    hidden, labels = torch.randn(5, 6), torch.randint(0, 13, (5,))
    for section in ({"family": "softmax"}, {"family": "sparse", "k": 4}, {"family": "margin", "margin": "arc"}):
        seen.clear()
        make_head(6, 13, {**section, "chunk_kernel": "compiled"}).train().loss(hidden, labels)
        assert seen == ["compiled"], section
    head = make_head(6, 13, {"family": "sampled", "criterion": "ce", "method": "is", "num_samples": 4,
                             "noise": "uniform", "chunk_kernel": "compiled"})  # fmt: skip
    seen.clear()
    head.train().loss(hidden, labels)
    head.eval().loss(hidden, labels)
    assert seen == [None, None]
