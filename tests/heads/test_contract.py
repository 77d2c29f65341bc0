"""The contract every head family keeps, run over the family cases generated from the registries (CASES): each
registered family's `examples` and `contract_examples`, and every registered component of each kind the family adds
(margins and norms, sampling methods and noises, continuous losses), those of the user's package under
tests/extension included (registered for each test of this module), in the family's first example — a family or a
component registered by a user's package is run with no edit here:

1. the training loss (train mode), the evaluation loss and the inference logits (eval mode) equal the family's
   naive reference (`HeadOptions.reference`: its papers' equations on the full (N, V) logits, from its components'
   own references), and so do the gradients of the training loss with respect to the hidden states and every head
   parameter; the plain output layer of `linear_form()` (what the export to the base architecture writes) gives that
   inference distribution, or its refusal names the nearest exact choice;
2. float64 gradcheck of the training loss (mean, and weighted per-row losses) w.r.t. hidden states and parameters;
3. reductions: none / sum / mean / `num_items_in_batch` agree and "none" has the labels' shape, ignored rows
   (holding 1e6) change nothing and get a zero gradient, another `ignore_index` works, and a training batch with
   every row ignored has loss 0, a graph and zero gradients;
4. mixed precision as the Trainer runs it (autocast bf16, autocast fp16, a model cast to bf16), on a model of the
   case's first task (the families' own settings, MODEL_CASES): a training step, the eval loss and generate, the
   loss within 2% of float32, gradients finite in each parameter's dtype, logits in the model's dtype;
5. a model of every task the family supports (SAVED: every case at least once, the backbones of each task in turn)
   trains a step, then save_pretrained -> AutoModelFor….from_pretrained gives the same class, config, state dict
   (bit for bit), logits and generations;
6. those saved directories load where hf_heads cannot be imported (`trust_remote_code=True`) and predict the same:
   one subprocess per task for all its families (tests/export_check.py).

Head-level checks (1-3) build heads with `hf_heads.heads.make_head` and use only `loss`, `logits`, `set_word_counts`,
`set_embedding_table` and the parameter names of the saved state dict.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers
from conftest import seq2seq_batch, tiny_bert_config, tiny_enc_dec_config, tiny_gpt2_config, tiny_llama_config
from export_check import export_job, load_without_hf_heads
from extensions import EXTENSIONS
from torch import nn
from transformers import GPT2Config

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification
from hf_heads.components import REGISTRIES, component_config
from hf_heads.heads import FAMILIES, head_dict, head_options, make_head
from hf_heads.heads.options import COMPONENT, ReferenceBatch
from hf_heads.losses.transforms import transform_logits
from hf_heads.modeling import export
from hf_heads.validation import OptionError

TASKS = ("causal-lm", "seq2seq", "classification")
D = 4  # the embedding dimension of the tables given to a head that uses one
SKIPPED_KINDS = ("kernel",)  # run by tests/losses/test_kernels.py (every kernel computes the same loss)


@dataclass(frozen=True)
class Case:
    """A head section to check, the tasks its family supports, whether it needs training word counts, and whether
    the model checks (items 4-6) run it too (a family's `examples` and `contract_examples`; the components swept
    in below run the head-level checks)."""

    id: str
    head: dict
    tasks: tuple[str, ...] = TASKS
    counts: bool = False
    models: bool = True

    @property
    def family(self) -> str:
        return self.head["family"]

    @property
    def options(self):
        with _extensions_registered():  # also where the cases are collected
            return head_options(self.head)


def _own_component_fields(options: type) -> list:
    """The fields of a family's options class that name a component and that the family adds to its parent's."""
    parent = {f.name for f in fields(options.__mro__[1])} if is_dataclass(options.__mro__[1]) else set()
    return [f for f in fields(options) if f.metadata.get(COMPONENT) and f.name not in parent]


def _cases() -> list[Case]:
    """From the registries: every family's `examples` and `contract_examples`, then, for each component option the
    family adds (the margin family's margin and norms, the sampled family's method and noise, the continuous
    family's loss), every registered component of its kind at its `example` in the family's first example, where
    that is a valid head (test_every_component_reaches_a_head_case checks that each one reaches a case)."""
    out: dict[str, Case] = {}

    def add(label: str, section: dict, name: str, models: bool) -> None:
        head = {"family": name, **section}
        try:
            options = head_options(head)
        except OptionError:
            if models:
                raise  # a family's own examples are valid heads
            return
        if label not in out and head_dict(head) not in [head_dict(case.head) for case in out.values()]:
            out[label] = Case(label, head, FAMILIES[name].head.tasks, options.needs_counts, models)

    for name, entry in FAMILIES.items():
        settings = {**entry.options.examples, **entry.options.contract_examples}
        for label, section in settings.items():
            add(label, section, name, True)
        first = head_dict({"family": name, **next(iter(entry.options.examples.values()))})  # nested, with defaults
        first.pop("family")
        for f in _own_component_fields(entry.options):
            kind = f.metadata[COMPONENT]
            if kind in SKIPPED_KINDS:
                continue
            for cls in REGISTRIES[kind].values():
                value = component_config(cls(**cls.example))
                add(f"{name}-{f.name}-{cls.name}", {**first, f.name: value}, name, False)
    return list(out.values())


@contextlib.contextmanager
def _extensions_registered():
    """The components of tests/extension registered (extensions.py keeps them out of the registries otherwise)."""
    before = {kind: dict(registry) for kind, registry in REGISTRIES.items()}
    for kind, classes in EXTENSIONS.items():
        REGISTRIES[kind].update({cls.name: cls for cls in classes})
    try:
        yield
    finally:
        for kind, registry in REGISTRIES.items():
            registry.clear()
            registry.update(before[kind])


@pytest.fixture(autouse=True)
def extension_components():
    with _extensions_registered():
        yield


with _extensions_registered():
    CASES = _cases()
CASE_PARAMS = [pytest.param(case, id=case.id) for case in CASES]
MODEL_CASES = [case for case in CASES if case.models]
SEED = 1234  # torch's global seed before every loss call: the samples / random negatives it draws


def _counts(num_classes: int) -> torch.Tensor:
    return torch.arange(num_classes, 0, -1).double() * 7  # frequency rank = id


def test_every_component_reaches_a_head_case():
    """Each registered component of a kind a family adds (margins, norms, sampling methods, noises, continuous
    losses) is in at least one head case."""
    used = {}
    for case in CASES:
        options = case.options
        for f in fields(options):
            kind = f.metadata.get(COMPONENT)
            if kind and getattr(options, f.name) is not None:
                used.setdefault(kind, set()).add(options.component(f.name).name)
    for entry in FAMILIES.values():
        for f in _own_component_fields(entry.options):
            kind = f.metadata[COMPONENT]
            if kind not in SKIPPED_KINDS:
                assert set(REGISTRIES[kind]) <= used.get(kind, set()), (kind, set(REGISTRIES[kind]) - used[kind])


def _reference(case: Case, head, hidden, labels, table, training: bool, running=None):
    """The family's reference (`HeadOptions.reference`) on float64 copies of the head's parameters and buffers
    (returned with it: the parameters require grad), hidden (N, H) and labels (N,), with torch's global generator
    seeded as before the head's loss."""
    params = {name: p.detach().double().requires_grad_(p.requires_grad) for name, p in head.named_parameters()}
    params.update({name: b.detach() if b.dtype == torch.bool else b.detach().double()
                   for name, b in head.named_buffers()})  # fmt: skip
    batch = ReferenceBatch(
        hidden, labels, params, training, counts=_counts(head.num_classes) if case.counts else None,
        table=None if table is None else table.double(), running=running,
    )  # fmt: skip
    torch.manual_seed(SEED)
    rows, logits = head.options.reference(batch)
    return rows, logits, params


# ================================================================== head-level checks (items 1-3)


def _head(case: Case, hidden_size: int = 6, num_classes: int = 13, dtype=torch.float32, seed: int = 0):
    """The case's head with weights of scale 0.5 (logits far from uniform); heads with a chunked loss in chunks of 3
    rows; a head that uses an embedding table gets one of dimension D (returned with the head)."""
    options = case.options
    section = {**case.head, "chunk_size": 3} if "chunk_size" in {f.name for f in fields(options)} else case.head
    head = make_head(hidden_size, num_classes, section)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in head.parameters():
            param.copy_(torch.randn(param.shape, generator=g) * 0.5)
    if case.counts:
        head.set_word_counts(_counts(num_classes))
    table = None
    if head.uses_embedding_table:
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
    valid = labels.reshape(-1) != -100
    params = dict(head.named_parameters())
    h = hidden.clone().requires_grad_()
    head.train()
    loss = _loss(head, h, labels)
    loss.backward()

    h64 = hidden.double().reshape(-1, 6).requires_grad_()
    rows, _, p64 = _reference(case, head, h64, labels.reshape(-1), table, training=True)
    assert rows.shape == (int(valid.sum()),)
    reference = rows.mean()
    reference.backward()
    tol = dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss.double(), reference, **tol)
    torch.testing.assert_close(h.grad.double().reshape(-1, 6), h64.grad, **tol)
    for name, p in params.items():
        expected = p64[name].grad
        if expected is None:  # not used by the loss (the tied decoder-input map of a continuous head)
            assert p.grad is None or not p.grad.any(), name
        else:
            torch.testing.assert_close(p.grad.double(), expected, **tol, msg=lambda m, name=name: f"{name}: {m}")

    head.eval()
    with torch.no_grad():
        eval_loss, logits = _loss(head, hidden, labels), head.logits(hidden)
        eval_rows = _loss(head, hidden, labels, reduction="none").reshape(-1)[labels.reshape(-1) != -100]
        rows, expected_logits, _ = _reference(
            case, head, hidden.double().reshape(-1, 6), labels.reshape(-1), table, training=False
        )
    assert logits.dtype == torch.float32 and logits.shape == (2, 5, 13)
    torch.testing.assert_close(logits.double().reshape(-1, 13), expected_logits, **tol)
    torch.testing.assert_close(eval_loss.double(), rows.mean(), **tol)
    torch.testing.assert_close(eval_rows.double(), rows, **tol)  # row by row (a sparse head's +inf rows among them)
    if head.uses_embedding_table:  # the table is stored L2-normalised
        torch.testing.assert_close(head.state_dict()["embeddings"].norm(dim=1), torch.ones(13))


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_linear_form_gives_the_inference_distribution_or_names_the_nearest_choice(case):
    """softmax(transform(h W'ᵀ + b')) of the head's `linear_form()` (W', b'; `transform` the head's output transform,
    which the base architecture applies) is the reference's inference distribution; or `linear_form` refuses with a
    ValueError naming the nearest exact choice."""
    head, table = _head(case)
    head.eval()
    try:
        weight, bias = head.linear_form()  # (V, H), (V,) or None
    except ValueError as err:
        assert "Nearest exact choice" in str(err), str(err)
        return
    hidden, labels = _batch()
    h = hidden.double().reshape(-1, 6)  # (N, H)
    z = h @ weight.double().T + (0.0 if bias is None else bias.double())  # (N, V)
    options = head.options
    z = transform_logits(z, getattr(options, "logit_multiplier", 1.0), getattr(options, "logit_softcap", None))
    _, expected, _ = _reference(case, head, h, labels.reshape(-1), table, training=False)
    torch.testing.assert_close(torch.log_softmax(z, -1), torch.log_softmax(expected, -1), rtol=1e-5, atol=1e-6)


MAX_NORM_CASES = [
    pytest.param(case, id=case.id) for case in CASES if getattr(case.options, "batch_context_norm", False)
]


@pytest.mark.parametrize("case", MAX_NORM_CASES)
def test_a_running_batch_context_norm_follows_its_statistic_and_is_what_evaluation_uses(case):
    """A batch context norm's running value over several training batches is r_1 = M_1, r_t = (1 − μ) r_{t−1} + μ M_t
    with M_t the norm's batch statistic over the batch's non-ignored rows only (max-norm: max ‖h‖; taken from the
    component's own `reference`, so any registered batch norm is held to its definition; ignored rows hold larger
    norms here; a batch of padding only leaves r as it is); evaluation, inference logits and the eval loss use r_t,
    not the statistic of the batch they are given."""
    momentum = 0.3
    case = Case(case.id, {**case.head, "context_norm_momentum": momentum}, case.tasks, case.counts)
    head, table = _head(case)
    norm = head.options.scorer().context_norm

    def statistic(hidden, valid):  # M: the reference's g, one value for every row of the batch
        flat, counted = hidden.reshape(-1, hidden.shape[-1]).double(), valid.reshape(-1)
        return norm.reference(flat, counted)[counted][0]

    head.train()
    expected = None
    for step, scale in enumerate((1.0, 3.0, 0.5)):
        hidden, labels = _batch(seed=step)
        valid = labels != -100
        hidden = (hidden * scale).masked_fill(~valid[..., None], 50.0)  # ignored rows: the largest norms
        _loss(head, hidden, labels)
        batch_stat = statistic(hidden, valid)
        expected = batch_stat if expected is None else (1 - momentum) * expected + momentum * batch_stat
        torch.testing.assert_close(head.context_norm_running.double(), expected, rtol=1e-6, atol=0)
    hidden, labels = _batch(seed=5)
    labels = torch.full_like(labels, -100)  # a batch of padding only (its rows' norms are not a statistic to follow)
    _loss(head, hidden, labels)
    torch.testing.assert_close(head.context_norm_running.double(), expected, rtol=1e-6, atol=0)
    head.eval()
    hidden, labels = _batch(seed=7)  # its own statistic differs from the running value
    valid = labels != -100
    hidden = hidden * 2.0
    assert abs(float(statistic(hidden, valid)) - float(expected)) > 0.5
    with torch.no_grad():
        eval_loss, logits = _loss(head, hidden, labels), head.logits(hidden)
        eval_rows = _loss(head, hidden, labels, reduction="none").reshape(-1)[labels.reshape(-1) != -100]
        rows, expected_logits, _ = _reference(
            case, head, hidden.double().reshape(-1, 6), labels.reshape(-1), table, training=False, running=expected
        )
    tol = dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits.double().reshape(-1, 13), expected_logits, **tol)
    torch.testing.assert_close(eval_loss.double(), rows.mean(), **tol)
    torch.testing.assert_close(eval_rows.double(), rows, **tol)


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
    options = case.options
    components = [
        f.name for f in fields(options) if f.metadata.get(COMPONENT) and getattr(options, f.name) is not None
    ]
    inexact = [
        f"{name}={getattr(options, name)!r}"
        for name in components
        if not getattr(options.component(name), "exact_gradient", True)
    ]
    if inexact:
        pytest.skip(
            f"{', '.join(inexact)} has a term of the prediction without a gradient (as the synthetic negative "
            "u' = (û − u)/‖û − u‖), so the analytical gradient is not the derivative of the loss; the naive "
            "reference test checks it against the same choice"
        )
    head, _ = _head(case, hidden_size=3, num_classes=13, dtype=torch.float64, seed=3)  # K < 13 samples
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
    # finite, or +inf where the head's distribution gives the label probability 0 (a sparse head's eval NLL)
    infinite = torch.isinf(none) & (none > 0) & (mode == "eval") & head.support_is_truncated
    assert bool((torch.isfinite(none) | infinite).all()) and bool((none[~valid] == 0).all())
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
        if model.head.uses_embedding_table:
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
@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in MODEL_CASES])
def test_mixed_precision_trains_evaluates_and_generates(case, mode, device):
    """The losses compute in float32 with autocast off and hand gradients back in each tensor's own dtype; inference
    logits come back in the model's dtype; a training loss stays within 2% (relative) of float32 on the same batch."""
    task = case.tasks[0]
    model = build_model(case, task, "gpt2" if task == "causal-lm" else "bart")
    if model.head.has_output_matrix:
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
    # finite, or +inf for a sparse head's eval NLL where a label falls outside its top decode_k
    assert torch.isfinite(out.loss) or (model.head.support_is_truncated and float(out.loss) == float("inf"))
    assert out.logits.dtype == dtype
    start = prompt["input_ids"].shape[1] if task == "causal-lm" else 1
    assert generated.shape == (prompt["input_ids"].shape[0], start + 3)
    assert torch.equal(generated[:, start], first)


# ------------------------------------------------------------------ items 5-6: save, reload, load without hf_heads


def _saved_pairs() -> list[tuple[Case, str, str]]:
    """(case, task, backbone) of the models that are saved and reloaded: every case with at least one task it supports,
    every family with every task it supports (a family's cases take its tasks in turn, the spare cases the tasks in
    turn again), and each task's models its backbones in turn."""
    pairs = []
    for family in dict.fromkeys(case.family for case in MODEL_CASES):
        cases = [case for case in MODEL_CASES if case.family == family]
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
    train_loss: torch.Tensor  # of the training forward after torch.manual_seed(1)
    eval_loss: torch.Tensor


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
        eval_loss = model(**inputs, labels=labels).loss
    model.save_pretrained(directory)
    return Saved(model, directory, inputs, labels, logits, generated, out.loss.detach(), eval_loss)


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
    if getattr(case.options, "batch_context_norm", False):  # the running max-norm of the training step was saved
        assert float(theirs["head.context_norm_running"]) > 0
    if loaded.head.uses_embedding_table:
        torch.testing.assert_close(theirs["head.embeddings"].norm(dim=1), torch.ones(V_S2S))


@pytest.mark.parametrize("task", TASKS)
def test_saved_models_load_without_hf_heads(task, saved, tmp_path):
    """Every saved directory of the task loads with trust_remote_code=True where hf_heads (and triton) cannot be
    imported, predicts what the model predicted, and evaluates and trains with labels as it did (the same losses,
    finite gradients); without trust_remote_code transformers asks for it (the directory carries its code and
    `auto_map`), instead of suggesting to upgrade transformers."""
    cases = [(case, backbone) for case, t, backbone in SAVED if t == task]
    models = [saved(case, task, backbone) for case, backbone in cases]
    generate = EXPORT_GENERATE if task == "seq2seq" else None
    jobs = [
        export_job(s.directory, AUTO[task], s.inputs, generate=generate, refusal=i == 0, labels=s.labels)
        for i, s in enumerate(models)
    ]
    results = load_without_hf_heads(jobs, tmp_path)
    refused = results[0]["refused"]
    assert refused is not None and "contains custom code" in refused and "does not recognize" not in refused
    for (case, _), s, result in zip(cases, models, results, strict=True):
        with torch.no_grad():
            expected = s.model.generate(**s.inputs, **generate) if generate else s.logits
        torch.testing.assert_close(result["output"], expected, msg=lambda m, case=case: f"{case.id}: {m}")
        torch.testing.assert_close(result["eval_loss"], s.eval_loss, msg=lambda m, case=case: f"{case.id}: {m}")
        torch.testing.assert_close(result["train_loss"], s.train_loss, msg=lambda m, case=case: f"{case.id}: {m}")
        assert result["grads_finite"], case.id


@pytest.mark.parametrize(
    "head",
    [
        {"family": "margin", "margin": {"type": "arc", "m": 0.2}, "logit_softcap": 2.0},
        {"family": "margin", "margin": {"type": "cos", "m": 0.1}, "scale": 8.0, "logit_multiplier": 0.5,
         "logit_softcap": 3.0},
    ],
    ids=["arc-softcap", "cos-scale-multiplier-softcap"],
)  # fmt: skip
def test_a_soft_capped_margin_head_equals_its_reference(head):
    """The soft-cap cap · tanh(l / cap) of the checkpoint's transform, on the margin family's scores with and without
    the margin: the head's loss, gradients and logits are its reference's."""
    test_losses_logits_and_gradients_equal_the_naive_reference(Case("margin-softcap", head))


def test_the_softmax_reference_refuses_a_training_loss_with_class_weights():
    """Class weights reweight the mean over rows, not a row's loss: the per-row training reference has none to give
    (the evaluation reference, the bare NLL, is given)."""
    options = head_options({"family": "softmax", "class_weights": [1.0, 2.0, 0.5]})
    params = {"weight": torch.randn(3, 4), "bias": torch.zeros(3)}
    batch = dict(hidden=torch.randn(2, 4), labels=torch.tensor([0, 2]), params=params)
    with pytest.raises(NotImplementedError) as refused:
        options.reference(ReferenceBatch(**batch, training=True))
    assert str(refused.value) == "the family reference has no class weights: they reweight the mean, not a row"
    rows, logits = options.reference(ReferenceBatch(**batch, training=False))
    torch.testing.assert_close(rows, F.cross_entropy(logits, batch["labels"], reduction="none"))
