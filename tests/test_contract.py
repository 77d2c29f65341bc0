"""The contract every head family keeps, run once over one list of family cases (CASES):

1. the training loss (train mode), the evaluation loss and the inference logits (eval mode) equal naive references
   written from the papers' equations on the full (N, V) logits, and so do the gradients of the training loss with
   respect to the hidden states and every head parameter;
2. float64 gradcheck of the training loss (mean, and weighted per-row losses) w.r.t. hidden states and parameters;
3. reductions: none / sum / mean / `num_items_in_batch` agree and "none" has the labels' shape, ignored rows
   (holding 1e6) change nothing and get a zero gradient, another `ignore_index` works, and a training batch with
   every row ignored has loss 0, a graph and zero gradients;
4. mixed precision as the Trainer runs it (autocast bf16, autocast fp16, a model cast to bf16), on a model of the
   case's first task: a training step, the eval loss and generate, the loss within 2% of float32, gradients finite
   in each parameter's dtype, logits in the model's dtype;
5. a model of every task the family supports (SAVED: every case at least once, the backbones of each task in turn)
   trains a step, then save_pretrained -> AutoModelFor….from_pretrained gives the same class, config, state dict
   (bit for bit), logits and generations;
6. those saved directories load where hf_heads cannot be imported (`trust_remote_code=True`) and predict the same:
   one subprocess per task for all its families (tests/export_check.py).

Head-level checks (1-3) build heads with `hf_heads.heads.make_head` and use only `loss`, `logits`, `set_word_counts`,
`set_embedding_table` and the parameter names of the saved state dict.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers
from conftest import seq2seq_batch, tiny_bert_config, tiny_enc_dec_config, tiny_gpt2_config, tiny_llama_config
from export_check import export_job, load_without_hf_heads
from references import reference_margin_logits, reference_sampled_rows
from torch import nn
from transformers import GPT2Config

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification
from hf_heads.heads import make_head
from hf_heads.modeling import export

TASKS = ("causal-lm", "seq2seq", "classification")
D = 4  # embedding dimension of the continuous cases (the naive vMF uses I_1, the Bessel function of order d/2 - 1)


@dataclass(frozen=True)
class Case:
    """A head section to check, the tasks its family supports, and whether it needs training word counts."""

    id: str
    head: dict
    tasks: tuple[str, ...] = TASKS
    counts: bool = False

    @property
    def family(self) -> str:
        return self.head["family"]


def _continuous(name: str, loss: str, **options) -> Case:
    return Case(name, {"family": "continuous", "loss": loss, "embedding_dim": D, **options}, ("seq2seq",))


CASES = [
    Case("softmax", {"family": "softmax"}),
    Case("softmax-ls", {"family": "softmax", "label_smoothing": 0.1}),
    Case("softmax-zloss", {"family": "softmax", "z_loss": 0.1}),
    Case("sparse", {"family": "sparse", "k": 5}),
    Case("sparse-zloss", {"family": "sparse", "k": 5, "z_loss": 0.1}),
    Case("sparse-ls-decode3", {"family": "sparse", "k": 5, "label_smoothing": 0.1, "decode_k": 3}),
    Case(
        "margin-arc-norms",
        {"family": "margin", "margin": "arc", "m": 0.2, "word_norm": "log-unigram", "context_norm": "max-norm"},
        counts=True,
    ),
    Case("margin-lsm", {"family": "margin", "margin": "lsm", "m": 2}),
    Case(
        "margin-arc-norms-zloss",
        {
            "family": "margin",
            "margin": "arc",
            "m": 0.2,
            "word_norm": "log-unigram",
            "context_norm": "max-norm",
            "z_loss": 0.1,
        },
        counts=True,
    ),  # fmt: skip
    Case("margin-cos-scale", {"family": "margin", "margin": "cos", "m": 0.1, "scale": 8.0}),
    Case(
        "sampled-ce-mcs",
        {"family": "sampled", "criterion": "ce", "method": "mcs", "num_samples": 5, "noise": "log-uniform"},
        counts=True,
    ),
    Case(
        "sampled-ce-is-cos",
        {
            "family": "sampled",
            "criterion": "ce",
            "method": "is",
            "num_samples": 5,
            "noise": "uniform",
            "margin": "cos",
            "m": 0.2,
            "remove_accidental_hits": True,
        },
    ),
    Case(
        "sampled-bce-nce",
        {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 5, "noise": "unigram"},
        counts=True,
    ),
    Case("sampled-mse-full", {"family": "sampled", "criterion": "mse", "method": "full"}),
    _continuous("continuous-vmf", "vmf"),
    _continuous("continuous-vmf-reg-tied", "vmf", vmf_lambda1=0.1, vmf_lambda2=0.9, tie_decoder_inputs=True),
    _continuous("continuous-smp-tied", "syn-margin-projection", tie_decoder_inputs=True),
    _continuous("continuous-smd", "syn-margin-difference"),
    _continuous("continuous-random", "margin-random", num_negatives=3),
    _continuous("continuous-most-informative", "margin-most-informative", loss_margin=0.3),
    _continuous("continuous-cosine-softmax", "cosine-softmax", logit_scale=5.0),
    _continuous("continuous-in-batch-learned-scale", "in-batch-softmax", learn_logit_scale=True),
    _continuous("continuous-vmf-released", "vmf", vmf_form="released"),
]
CASE_PARAMS = [pytest.param(case, id=case.id) for case in CASES]
SEED = 1234  # torch's global seed before every loss call: the samples / random negatives it draws


def _counts(num_classes: int) -> torch.Tensor:
    return torch.arange(num_classes, 0, -1).double() * 7  # frequency rank = id


# ================================================================== naive references (dense, float64)


def _margin_options(o: dict) -> dict:
    """The margin options of a head section, as `reference_margin_logits` takes them."""
    return {key: o[key] for key in ("margin", "m", "scale", "word_norm", "context_norm") if key in o}


def _noise(o: dict, num_classes: int, counts) -> torch.Tensor:
    """D of the sampling paper (sec. 3.2, 4.1): uniform, Zipfian over the frequency rank, smoothed unigram."""
    noise = o.get("noise", "log-uniform")
    if noise == "uniform":
        return torch.full((num_classes,), 1.0 / num_classes, dtype=torch.float64)
    if noise == "log-uniform":
        rank = torch.empty(num_classes, dtype=torch.float64)
        rank[torch.sort(counts, descending=True, stable=True).indices] = torch.arange(num_classes).double()
        return torch.log((rank + 2) / (rank + 1)) / math.log(num_classes + 1)
    probs = (counts + o.get("noise_add", 0.0)) ** o.get("noise_smoothing", 0.75)
    return probs / probs.sum()


def _corrected_log_probs(o: dict, s, D_):
    """The paper's posterior corrections (eqs. 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22), renormalised over V."""
    criterion, method = o.get("criterion", "ce"), o.get("method", "full")
    K = o.get("num_samples")
    if method == "full":
        out = s if criterion == "ce" else F.logsigmoid(s)
    elif criterion == "ce":
        out = {
            "is": s,
            "mcs": s + D_.log(),
            "cps": s + D_.log(),
            "nce": torch.sigmoid(s - torch.log(K * D_)) + D_.log(),
        }[method]
    else:
        out = {"is": s, "nce": s, "mcs": s + torch.log(K * D_), "cps": s + torch.log(s.shape[1] * D_)}[method]
    return torch.log_softmax(out, dim=-1)


def _cos_scale(o: dict, p):
    """s of the continuous head's cosine logits: exp(log s) when learned, else logit_scale."""
    return p["log_logit_scale"].exp() if "log_logit_scale" in p else o.get("logit_scale", 10.0)


def _continuous_rows(o: dict, h, y, p, table, negatives):
    """vMF NLL (Bhat et al. §2 with Kumar & Tsvetkov's λ1, λ2, or the authors' released form), the margin loss of
    Bhat et al. eq. 1, or the cross-entropy over s·cos(û, E_c) to every row / to the batch's distinct targets."""
    u_hat = h @ p["proj.weight"].T + p["proj.bias"]
    E = F.normalize(table, dim=1)
    u = E[y]
    if o["loss"] in ("cosine-softmax", "in-batch-softmax"):
        candidates = torch.arange(E.shape[0]) if o["loss"] == "cosine-softmax" else y.unique()
        z = _cos_scale(o, p) * F.normalize(u_hat, dim=1) @ E[candidates].T
        return F.cross_entropy(z, (candidates[None, :] == y[:, None]).long().argmax(1), reduction="none")
    if o.get("vmf_form") == "released":  # −log C_m(κ) + log(1 + κ)(0.2 − cos(û, u))
        kappa = u_hat.norm(dim=1)
        log_c = kappa.log() - 2 * math.log(2 * math.pi) - (torch.special.i1e(kappa).log() + kappa)
        return -log_c + torch.log1p(kappa) * (0.2 - (u_hat * u).sum(1) / kappa)
    if o["loss"] == "vmf":
        d, kappa = u_hat.shape[1], u_hat.norm(dim=1)
        assert d == 4
        log_c = (d / 2 - 1) * kappa.log() - (d / 2) * math.log(2 * math.pi) - (torch.special.i1e(kappa).log() + kappa)
        return -log_c - o.get("vmf_lambda2", 1.0) * (u_hat * u).sum(1) + o.get("vmf_lambda1", 0.0) * kappa
    margin = o.get("loss_margin", 0.5)
    n_hat = F.normalize(u_hat, dim=1)
    positive = (n_hat * u).sum(1)
    kind = o["loss"].removeprefix("syn-margin-").removeprefix("margin-")
    if kind == "random":
        return F.relu(margin + (E[negatives] * n_hat[:, None]).sum(-1) - positive[:, None]).mean(1)
    if kind == "projection":
        neg = F.normalize(n_hat - positive[:, None] * u, dim=1).detach()
    elif kind == "difference":
        neg = F.normalize(n_hat - u, dim=1).detach()
    else:  # most-informative: the row nearest to û − u, the target excluded
        scores = (n_hat - u).detach() @ E.T
        scores[torch.arange(len(y)), y] = -math.inf
        neg = E[scores.argmax(1)]
    return F.relu(margin + (neg * n_hat).sum(1) - positive)


def _training_rows(case: Case, h, y, p, counts, table, draws):
    """Per-row training criterion of valid rows h (n, H), y (n,); p: the head parameters (float64)."""
    o = case.head
    if case.family == "continuous":
        return _continuous_rows(o, h, y, p, table, draws)
    W, b = p["weight"], p.get("bias")
    eps, z_loss = o.get("label_smoothing", 0.0), o.get("z_loss", 0.0)  # z-loss: λ · lse² of the training logits
    if case.family == "softmax":
        z = h @ W.T + b
        return F.cross_entropy(z, y, label_smoothing=eps, reduction="none") + z_loss * z.logsumexp(1).square()
    if case.family == "sparse":  # eq. 5: log-sum-exp over the top k minus the target; smoothing over the top k
        z = h @ W.T + b
        top = z.topk(o["k"], dim=1).values
        lse = top.logsumexp(1)
        return (1 - eps) * (lse - z.gather(1, y[:, None]).squeeze(1)) + eps * (lse - top.mean(1)) + z_loss * lse**2
    with_margin = reference_margin_logits(h, W, b, y, counts=counts, **_margin_options(o))
    if case.family == "margin":  # the lse of the logits with the target's margin
        return F.cross_entropy(with_margin, y, reduction="none") + z_loss * with_margin.logsumexp(1).square()
    target = with_margin.gather(1, y[:, None]).squeeze(1)
    plain = reference_margin_logits(h, W, b, None, counts=counts, **_margin_options(o))
    sampled = {key: o[key] for key in ("criterion", "method", "remove_accidental_hits") if key in o}
    return reference_sampled_rows(plain, target, y, draws, _noise(o, W.shape[0], counts), **sampled)


def _eval_rows_and_logits(case: Case, h, y, valid, p, counts, table, draws, running=None):
    """(eval loss per valid row, inference logits of every row); max-norm heads use `running`, the running max ‖h‖
    (default: the max over the valid rows, which is the running value after one training step on this batch)."""
    o = case.head
    if case.family == "continuous":
        u_hat = h @ p["proj.weight"].T + p["proj.bias"]
        E = F.normalize(table, dim=1)
        if o["loss"] == "vmf":  # û·Eᵀ
            logits = u_hat @ E.T
        else:  # logit_scale · cos(û, E_c)
            logits = _cos_scale(o, p) * F.normalize(u_hat, dim=1) @ E.T
        return _continuous_rows(o, h[valid], y[valid], p, table, draws), logits
    W, b = p["weight"], p.get("bias")
    if case.family in ("softmax", "sparse"):
        z = h @ W.T + b
        if case.family == "softmax":
            return F.cross_entropy(z[valid], y[valid], reduction="none"), z
        top = z.topk(o.get("decode_k") or o["k"], dim=1)
        logits = torch.full_like(z, -math.inf).scatter(1, top.indices, top.values)
        rows = z[valid].topk(o["k"], dim=1).values.logsumexp(1) - z[valid].gather(1, y[valid, None]).squeeze(1)
        return rows, logits  # eq. 5 unsmoothed (not the NLL of the truncated distribution)
    if o.get("context_norm") == "max-norm" and running is None:
        running = h[valid].norm(dim=1).max()
    logits = reference_margin_logits(  # no margin at inference
        h, W, b, None, counts=counts, context_norm_value=running, **_margin_options(o)
    )
    if case.family == "sampled":
        logits = _corrected_log_probs(o, logits, _noise(o, W.shape[0], counts))
    return -torch.log_softmax(logits[valid], -1).gather(1, y[valid, None]).squeeze(1), logits


def _draws(case: Case, n_valid: int, num_classes: int, counts):
    """What the head draws from torch's global generator right after torch.manual_seed(SEED): the K shared samples
    of a sampled criterion, or the random negatives of margin-random."""
    o = case.head
    if case.family == "sampled" and o.get("method", "full") != "full":
        return torch.multinomial(_noise(o, num_classes, counts).float(), o["num_samples"], replacement=True)
    if o.get("loss") == "margin-random":
        return torch.randint(0, num_classes, (n_valid, o.get("num_negatives", 5)))
    return None


# ================================================================== head-level checks (items 1-3)


def _head(case: Case, hidden_size: int = 6, num_classes: int = 13, dtype=torch.float32, seed: int = 0):
    """The case's head with weights of scale 0.5 (logits far from uniform); discrete heads in chunks of 3 rows."""
    section = dict(case.head) if case.family == "continuous" else {**case.head, "chunk_size": 3}
    head = make_head(hidden_size, num_classes, section)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in head.parameters():
            param.copy_(torch.randn(param.shape, generator=g) * 0.5)
    if case.counts:
        head.set_word_counts(_counts(num_classes))
    table = None
    if case.family == "continuous":
        table = torch.randn(num_classes, D, generator=g)
        head.set_embedding_table(table)
    return head.to(dtype), table


def _batch(hidden_size: int = 6, num_classes: int = 13, seed: int = 0):
    """hidden (2, 5, H) and labels (2, 5) with two ignored positions."""
    g = torch.Generator().manual_seed(seed + 100)
    hidden = torch.randn(2, 5, hidden_size, generator=g)
    labels = torch.randint(0, num_classes, (2, 5), generator=g)
    labels[0, 3] = labels[1, 0] = -100
    return hidden, labels


def _loss(head, hidden, labels, **kwargs):
    torch.manual_seed(SEED)
    return head.loss(hidden, labels, **kwargs)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_losses_logits_and_gradients_equal_the_naive_reference(case):
    head, table = _head(case)
    hidden, labels = _batch()
    valid = labels != -100
    params = dict(head.named_parameters())
    h = hidden.clone().requires_grad_()
    head.train()
    loss = _loss(head, h, labels)
    loss.backward()

    counts = _counts(13)
    torch.manual_seed(SEED)
    draws = _draws(case, int(valid.sum()), 13, counts)
    h64 = hidden.double().requires_grad_()
    p64 = {name: p.detach().double().requires_grad_() for name, p in params.items()}
    table64 = None if table is None else table.double()
    rows = _training_rows(case, h64[valid], labels[valid], p64, counts, table64, draws)
    reference = rows.mean()
    reference.backward()
    tol = dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss.double(), reference, **tol)
    torch.testing.assert_close(h.grad.double(), h64.grad, **tol)
    for name, p in params.items():
        expected = p64[name].grad
        if expected is None:  # not used by the loss (the tied decoder-input map of a continuous head)
            assert p.grad is None or not p.grad.any(), name
        else:
            torch.testing.assert_close(p.grad.double(), expected, **tol, msg=lambda m, name=name: f"{name}: {m}")

    head.eval()
    with torch.no_grad():
        eval_loss, logits = _loss(head, hidden, labels), head.logits(hidden)
        detached = {name: p.detach() for name, p in p64.items()}
        rows, expected_logits = _eval_rows_and_logits(
            case, h64.detach().reshape(-1, 6), labels.reshape(-1), valid.reshape(-1), detached, counts, table64, draws
        )
    assert logits.dtype == torch.float32 and logits.shape == (2, 5, 13)
    torch.testing.assert_close(logits.double().reshape(-1, 13), expected_logits, **tol)
    torch.testing.assert_close(eval_loss.double(), rows.mean(), **tol)
    if case.family == "margin":
        assert loss > eval_loss  # the margin is in the training loss only
    if case.family == "continuous":  # the table is stored L2-normalised
        torch.testing.assert_close(head.state_dict()["embeddings"].norm(dim=1), torch.ones(13))


MAX_NORM_CASES = [pytest.param(case, id=case.id) for case in CASES if case.head.get("context_norm") == "max-norm"] + [
    pytest.param(
        Case(
            "sampled-ce-mcs-max-norm",
            {"family": "sampled", "criterion": "ce", "method": "mcs", "num_samples": 5, "context_norm": "max-norm"},
            counts=True,
        ),
        id="sampled-ce-mcs-max-norm",
    )
]


@pytest.mark.parametrize("case", MAX_NORM_CASES)
def test_running_max_norm_follows_its_formula_and_is_what_evaluation_uses(case):
    """max-norm's running value over several training batches is r_1 = M_1, r_t = (1 − μ) r_{t−1} + μ M_t with M_t
    the max ‖h‖ over the batch's non-ignored rows only (ignored rows hold larger norms here; a batch of padding only
    leaves r as it is); evaluation, inference
    logits and the eval loss use r_t, not the max of the batch they are given."""
    momentum = 0.3
    case = Case(case.id, {**case.head, "context_norm_momentum": momentum}, case.tasks, case.counts)
    head, table = _head(case)
    head.train()
    expected = None
    for step, scale in enumerate((1.0, 3.0, 0.5)):
        hidden, labels = _batch(seed=step)
        valid = labels != -100
        hidden = (hidden * scale).masked_fill(~valid[..., None], 50.0)  # ignored rows: the largest norms
        _loss(head, hidden, labels)
        batch_max = hidden[valid].double().norm(dim=1).max()
        expected = batch_max if expected is None else (1 - momentum) * expected + momentum * batch_max
        torch.testing.assert_close(head.context_norm_running.double(), expected, rtol=1e-6, atol=0)
    hidden, labels = _batch(seed=5)
    labels = torch.full_like(labels, -100)  # a batch of padding only (its rows' norms are not a maximum to follow)
    _loss(head, hidden, labels)
    torch.testing.assert_close(head.context_norm_running.double(), expected, rtol=1e-6, atol=0)
    head.eval()
    hidden, labels = _batch(seed=7)  # its own max differs from the running value
    valid = labels != -100
    assert abs(float(hidden[valid].norm(dim=1).max()) - float(expected)) > 0.5
    counts = _counts(13)
    torch.manual_seed(SEED)
    draws = _draws(case, int(valid.sum()), 13, counts)
    with torch.no_grad():
        eval_loss, logits = _loss(head, hidden, labels), head.logits(hidden)
        params = {name: p.detach().double() for name, p in head.named_parameters()}
        rows, expected_logits = _eval_rows_and_logits(
            case, hidden.double().reshape(-1, 6), labels.reshape(-1), valid.reshape(-1), params, counts, table, draws,
            running=expected,
        )  # fmt: skip
    tol = dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits.double().reshape(-1, 13), expected_logits, **tol)
    torch.testing.assert_close(eval_loss.double(), rows.mean(), **tol)


class _Loss(nn.Module):
    """head.loss as a module call, so torch.func.functional_call can substitute the head's parameters."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, hidden, labels, **kwargs):
        torch.manual_seed(SEED)
        return self.head.loss(hidden, labels, **kwargs)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_gradcheck_float64(case):
    if case.head.get("loss") == "syn-margin-difference":
        pytest.skip(
            "the synthetic negative u' = (û − u)/‖û − u‖ is a constant of the loss (no gradient through it), "
            "so the analytical gradient is not the derivative of the loss as a function of û; the naive "
            "reference test checks it against the same choice"
        )
    head, _ = _head(case, hidden_size=3, num_classes=7, dtype=torch.float64, seed=3)
    module = _Loss(head.train())
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    labels = torch.tensor([1, 6, -100, 0, 3])
    loss = module(hidden, labels)
    assert loss.dtype == torch.float64  # float64 in, float64 out (else finite differences are meaningless)
    loss.backward()  # which parameters the loss uses
    names = [name for name, p in module.named_parameters() if p.grad is not None]
    params = [module.get_parameter(name).detach().clone().requires_grad_() for name in names]
    row_weights = torch.arange(1.0, 6.0, dtype=torch.float64)

    def losses(h, *ps):
        state = dict(zip(names, ps, strict=True))
        mean = torch.func.functional_call(module, state, (h, labels))
        rows = torch.func.functional_call(module, state, (h, labels), {"reduction": "none"})
        return mean, (rows * row_weights).sum()

    assert torch.autograd.gradcheck(losses, (hidden, *params), fast_mode=True)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_reductions_ignored_rows_and_num_items_in_batch(case, mode):
    head, _ = _head(case)
    hidden, labels = _batch()
    valid = labels != -100
    n_valid = int(valid.sum())
    hidden = hidden.masked_fill(~valid[..., None], 1e6)  # ignored rows hold huge values: they must change nothing
    head.train()
    _loss(head, hidden, labels)  # a training step first: eval-mode max-norm uses the running maximum it records
    head.train(mode == "train")

    none = _loss(head, hidden, labels, reduction="none")
    assert none.numel() == labels.numel()  # per position (the shape: test_reduction_none_has_the_shape_of_labels)
    none = none.reshape(labels.shape)
    assert torch.isfinite(none).all() and bool((none[~valid] == 0).all())
    total = _loss(head, hidden, labels, reduction="sum")
    torch.testing.assert_close(none.sum(), total)
    torch.testing.assert_close(_loss(head, hidden, labels), total / n_valid)
    for items in (20, torch.tensor(20)):
        torch.testing.assert_close(_loss(head, hidden, labels, num_items_in_batch=items), total / 20)
    torch.testing.assert_close(_loss(head, hidden[valid], labels[valid], reduction="sum"), total)
    other_index = labels.masked_fill(~valid, -1)
    torch.testing.assert_close(_loss(head, hidden, other_index, ignore_index=-1, reduction="sum"), total)

    h = hidden.clone().requires_grad_()
    _loss(head, h, labels).backward()
    assert bool((h.grad[~valid] == 0).all()) and torch.isfinite(h.grad).all() and h.grad[valid].abs().sum() > 0

    nothing = torch.full_like(labels, -100)
    for reduction in ("mean", "sum"):
        assert _loss(head, hidden, nothing, reduction=reduction).item() == 0.0


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_reduction_none_has_the_shape_of_labels(case):
    head, _ = _head(case)
    hidden, labels = _batch()
    for mode in (True, False):
        assert _loss(head.train(mode), hidden, labels, reduction="none").shape == labels.shape


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_every_row_ignored_trains_with_zero_loss_and_zero_gradients(case):
    """A micro-batch holding only ignored positions (padding) is a training step like any other: loss 0, the graph
    kept, every gradient 0."""
    head, _ = _head(case)
    hidden, labels = _batch()
    head.train()
    for reduction in ("mean", "sum"):
        head.zero_grad()
        h = hidden.clone().requires_grad_()
        loss = _loss(head, h, torch.full_like(labels, -100), reduction=reduction)
        loss.backward()
        assert loss.item() == 0.0 and bool((h.grad == 0).all())
        assert all(p.grad is None or bool((p.grad == 0).all()) for p in head.parameters())


# ================================================================== models (items 4-6)

AUTO = {
    "causal-lm": "AutoModelForCausalLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "classification": "AutoModelForSequenceClassification",
}
CODE = {
    "causal-lm": "hf_heads_modeling_causal_lm.HeadsForCausalLM",
    "seq2seq": "hf_heads_modeling_seq2seq.HeadsForSeq2SeqLM",
    "classification": "hf_heads_modeling_classification.HeadsForSequenceClassification",
}
# backbones of each task: the cases take them in turn, so every backbone is saved and reloaded with several families
BACKBONES = {
    "causal-lm": ("gpt2-tied", "llama"),
    "seq2seq": ("bart", "t5", "marian", "bert2bert"),
    "classification": ("bert", "gpt2"),
}
LABELS = {0: "animal", 1: "plant", 2: "act", 3: "time", 4: "place", 5: "food", 6: "body"}
V_LM, V_S2S = 61, 50
GENERATE = dict(max_new_tokens=4, num_beams=3, do_sample=False)


def build_model(case: Case, task: str, backbone: str):
    """A tiny model of `task` with the case's head (dropout off), word counts and embedding table as it needs;
    `backbone` one of BACKBONES[task] (or `gpt2`, untied, for a causal LM)."""
    torch.manual_seed(0)
    if task == "causal-lm":
        if backbone == "llama":
            config = HeadsConfig(backbone=tiny_llama_config(vocab_size=V_LM).to_dict(), head=case.head)
        else:
            gpt2 = tiny_gpt2_config(vocab_size=V_LM, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0).to_dict()
            config = HeadsConfig(backbone=gpt2, head=case.head, tie_word_embeddings=backbone == "gpt2-tied")
        model = HeadsForCausalLM(config)
    elif task == "seq2seq":
        config = HeadsConfig(backbone=tiny_enc_dec_config(backbone, V_S2S, no_dropout=True), head=case.head)
        model = HeadsForSeq2SeqLM(config)
        if case.family == "continuous":
            model.head.set_embedding_table(torch.randn(V_S2S, D, generator=torch.Generator().manual_seed(1)))
    else:
        if backbone == "bert":
            encoder = tiny_bert_config(V_S2S, no_dropout=True)
        else:
            encoder = GPT2Config(
                vocab_size=V_S2S,
                n_embd=32,
                n_layer=1,
                n_head=2,
                n_positions=64,
                pad_token_id=1,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
            )
        config = HeadsConfig(
            backbone=encoder,
            head=case.head,
            id2label=LABELS,
            classifier_dropout=0.0,
            label2id={v: k for k, v in LABELS.items()},
        )
        model = HeadsForSequenceClassification(config)
    if case.counts:
        model.set_word_counts(_counts(model.head.num_classes))
    return model


def _task_batch(task: str) -> tuple[dict, torch.Tensor]:
    x, mask, y = seq2seq_batch()
    if task == "causal-lm":
        ids = torch.randint(4, V_LM, (3, 9), generator=torch.Generator().manual_seed(0))
        labels = ids.clone()
        labels[0, 6:] = -100
        return {"input_ids": ids}, labels
    if task == "seq2seq":
        return {"input_ids": x, "attention_mask": mask}, y
    return {"input_ids": x, "attention_mask": mask}, torch.tensor([0, 6, 2])


# ------------------------------------------------------------------ item 4: mixed precision

MODES = ["autocast-bf16", "autocast-fp16", "bf16-model"]
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def _precision_context(mode: str, device: str):
    if mode == "bf16-model":
        return torch.autocast(device, enabled=False)
    return torch.autocast(device, dtype=torch.bfloat16 if mode == "autocast-bf16" else torch.float16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_mixed_precision_trains_evaluates_and_generates(case, mode, device):
    """The losses compute in float32 with autocast off and hand gradients back in each tensor's own dtype; inference
    logits come back in the model's dtype; a training loss stays within 2% (relative) of float32 on the same batch."""
    task = case.tasks[0]
    model = build_model(case, task, "gpt2" if task == "causal-lm" else "bart")
    if case.family != "continuous":
        with torch.no_grad():
            model.head.get_parameter("weight").normal_(0.0, 0.3)  # logits far from uniform: precision losses show
    inputs, labels = _task_batch(task)
    model = model.to(device).train()
    batch = {k: v.to(device) for k, v in {**inputs, "labels": labels}.items()}
    prompt = {k: v.to(device) for k, v in inputs.items()}
    if task == "causal-lm":
        prompt = {"input_ids": prompt["input_ids"][:, :4], "pad_token_id": 1}
    torch.manual_seed(3)
    reference = model(**batch).loss.detach()
    if mode == "bf16-model":
        model = model.to(torch.bfloat16)
    dtype = next(model.parameters()).dtype
    with _precision_context(mode, device):
        torch.manual_seed(3)
        loss = model(**batch).loss
        loss.backward()
        model.eval()
        with torch.no_grad():
            out = model(**batch)
            generated = model.generate(**prompt, max_new_tokens=3, min_new_tokens=3, do_sample=False)
            # the first greedy token is the argmax of the model's own logits under the same precision
            if task == "causal-lm":
                first = model(input_ids=prompt["input_ids"]).logits[:, -1].argmax(-1)
            else:
                first = model(**prompt, decoder_input_ids=generated[:, :1]).logits[:, -1].argmax(-1)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert abs(loss.item() - reference.item()) <= 0.02 * abs(reference.item()), (loss.item(), reference.item())
    grads = [(p.dtype, p.grad) for p in model.parameters() if p.requires_grad and p.grad is not None]
    assert grads and all(g.dtype == d and bool(torch.isfinite(g).all()) for d, g in grads)
    assert torch.isfinite(out.loss) and out.logits.dtype == dtype
    start = prompt["input_ids"].shape[1] if task == "causal-lm" else 1
    assert generated.shape == (prompt["input_ids"].shape[0], start + 3)
    assert torch.equal(generated[:, start], first)


# ------------------------------------------------------------------ items 5-6: save, reload, load without hf_heads


def _saved_pairs() -> list[tuple[Case, str, str]]:
    """(case, task, backbone) of the models that are saved and reloaded: every case with at least one task it supports,
    every family with every task it supports (a family's cases take its tasks in turn, the spare cases the tasks in
    turn again), and each task's models its backbones in turn."""
    pairs = []
    for family in dict.fromkeys(case.family for case in CASES):
        cases = [case for case in CASES if case.family == family]
        tasks = cases[0].tasks
        for i in range(max(len(cases), len(tasks))):
            pairs.append((cases[i % len(cases)], tasks[i % len(tasks)]))
    out = []
    for task in TASKS:
        of_task = [case for case, t in pairs if t == task]
        out += [(case, task, BACKBONES[task][i % len(BACKBONES[task])]) for i, case in enumerate(of_task)]
    return out


SAVED = _saved_pairs()
EXPORT_GENERATE = dict(max_new_tokens=4, num_beams=2)


@dataclass
class Saved:
    """A trained model, the directory it was saved to, its batch and what it predicted before saving."""

    model: nn.Module
    directory: Path
    inputs: dict
    labels: torch.Tensor
    logits: torch.Tensor
    generated: torch.Tensor | None


def _train_and_save(case: Case, task: str, backbone: str, directory) -> Saved:
    model = build_model(case, task, backbone)
    inputs, labels = _task_batch(task)
    model.train()
    torch.manual_seed(1)
    out = model(**inputs, labels=labels)
    assert out.logits is None and torch.isfinite(out.loss), (case.id, task, out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.head.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
    model.eval()
    with torch.no_grad():
        logits = model(**inputs, labels=labels).logits if task == "seq2seq" else model(**inputs).logits
        generated = model.generate(**inputs, **GENERATE) if task == "seq2seq" else None
    model.save_pretrained(directory)
    return Saved(model, directory, inputs, labels, logits, generated)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """saved(case, task, backbone): the case's model of `task` after one training step, saved with save_pretrained
    (once per module and worker: the export check reuses the directories)."""
    cache, root = {}, tmp_path_factory.mktemp("contract")

    def get(case: Case, task: str, backbone: str) -> Saved:
        if (case.id, task) not in cache:
            directory = root / f"{task}_{backbone}_{case.id}".replace("-", "_")
            cache[case.id, task] = _train_and_save(case, task, backbone, directory)
        return cache[case.id, task]

    return get


@pytest.mark.parametrize("case, task, backbone", [pytest.param(*p, id=f"{p[1]}-{p[2]}-{p[0].id}") for p in SAVED])
def test_save_and_from_pretrained_give_the_same_model(case, task, backbone, saved):
    s = saved(case, task, backbone)
    config = json.loads((s.directory / "config.json").read_text())
    assert config["auto_map"][AUTO[task]] == CODE[task] and config["auto_map"]["AutoConfig"].endswith(".HeadsConfig")
    assert export.has_code(s.directory) and not hasattr(s.model.config, "auto_map")
    loaded = getattr(transformers, AUTO[task]).from_pretrained(s.directory).eval()
    assert type(loaded) is type(s.model) and loaded.config.head == s.model.config.head
    if task == "classification":
        assert loaded.config.id2label == LABELS and loaded.config.label2id["body"] == 6
    ours, theirs = s.model.state_dict(), loaded.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    with torch.no_grad():
        if task == "seq2seq":
            assert torch.equal(loaded(**s.inputs, labels=s.labels).logits, s.logits)
            assert torch.equal(loaded.generate(**s.inputs, **GENERATE), s.generated)
        else:
            assert torch.equal(loaded(**s.inputs).logits, s.logits)
    if case.head.get("context_norm") == "max-norm":  # the running max-norm of the training step was saved
        assert float(theirs["head.context_norm_running"]) > 0
    if case.family == "continuous":
        torch.testing.assert_close(theirs["head.embeddings"].norm(dim=1), torch.ones(V_S2S))


@pytest.mark.parametrize("task", TASKS)
def test_saved_models_load_without_hf_heads(task, saved, tmp_path):
    """Every saved directory of the task loads with trust_remote_code=True where hf_heads cannot be imported and
    predicts what the model predicted; without trust_remote_code transformers asks for it (the directory carries its
    code and `auto_map`), instead of suggesting to upgrade transformers."""
    cases = [(case, backbone) for case, t, backbone in SAVED if t == task]
    models = [saved(case, task, backbone) for case, backbone in cases]
    generate = EXPORT_GENERATE if task == "seq2seq" else None
    jobs = [
        export_job(s.directory, AUTO[task], s.inputs, generate=generate, refusal=i == 0) for i, s in enumerate(models)
    ]
    results = load_without_hf_heads(jobs, tmp_path)
    refused = results[0]["refused"]
    assert refused is not None and "contains custom code" in refused and "does not recognize" not in refused
    for (case, _), s, result in zip(cases, models, results, strict=True):
        with torch.no_grad():
            expected = s.model.generate(**s.inputs, **generate) if generate else s.logits
        torch.testing.assert_close(result["output"], expected, msg=lambda m, case=case: f"{case.id}: {m}")
