"""Every constructor argument of every loss module and every field of every part of the loss entry changes the loss
for some input, or is refused by name, or is declared output-neutral and checked to be so.

The arguments come from the modules' signatures (every `nn.Module` hf_heads.losses exports) and the fields from the
parts' dataclasses (every `Scorer`, `Candidates`, `Criterion`, `Impl` and `Correction` class it exports), never from
a hand list: a module or a part exported later, or a field added to one, that this file cannot flip fails the test.
A flipped value is built from the field's default (a bool negated, a number moved, a string to every value its
refusal of an unknown one lists, a registered component to every other one of its kind); a data field (a tensor, a
generator, a posterior) takes the value in `DATA`. The flipped object's loss (per row, reduction "none" where the
call takes one) must differ from the default's, in value or dtype, or the flip must raise an error naming the field.
A wrapper that does not pass an argument on to its function fails here (the loss does not move).
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

import hf_heads.losses as losses
from hf_heads.components import REGISTRIES, Component, make_component
from hf_heads.losses import (
    Candidates,
    Correction,
    Criterion,
    CrossEntropy,
    Full,
    Impl,
    Sampled,
    Scorer,
    output_loss,
)
from hf_heads.validation import OptionError

V, H, N = 11, 6, 10
LABELS = torch.tensor([0, 3, -100, 7, 0, 10, 2, -100, 5, 1])  # class 0 present: an ignore_index of 0 changes rows


def _tensors() -> dict:
    gen = torch.Generator().manual_seed(7)
    hidden = torch.randn(N, H, generator=gen, dtype=torch.float64)
    weight = torch.randn(V, H, generator=gen, dtype=torch.float64)
    bias = torch.randn(V, generator=gen, dtype=torch.float64) * 0.3
    table = torch.nn.functional.normalize(torch.randn(V, H, generator=gen, dtype=torch.float64), dim=1)
    return {"hidden": hidden, "weight": weight, "bias": bias, "labels": LABELS, "table": table}


COUNTS = torch.tensor([50.0, 30, 20, 12, 9, 7, 5, 4, 3, 2, 1], dtype=torch.float64)
UNIFORM = torch.full((V,), 1.0 / V, dtype=torch.float64)
UNIGRAM = COUNTS / COUNTS.sum()

# data fields: {name: the value a flip gives} (the default is None, or the value the base object holds)
DATA = {
    "word_counts": COUNTS.flip(0),  # the base scorer holds COUNTS (a word norm reads them)
    "context_norm_value": torch.tensor(0.5, dtype=torch.float64),
    "posterior": Correction(CrossEntropy(), "mcs", 4, UNIGRAM),  # s + log D(c) (eq. 10): not the identity
    "class_weight": torch.linspace(0.5, 2.0, V, dtype=torch.float64),
    "noise_probs": UNIGRAM.flip(0),  # the base Sampled holds UNIFORM, the base Correction UNIGRAM
    "samples": torch.tensor([1, 4, 6, 9]),
    "generator": torch.Generator().manual_seed(99),  # the base draws with seed 0
}
# fields that by design cannot change the loss: {qualified name: why}; each is checked to give the same loss
OUTPUT_NEUTRAL = {
    "Impl.kernel": "the implementation of the chunked loss's per-chunk work: every kernel computes the same loss",
    "Impl.chunk_size": "rows per chunk: every chunking sums the same rows",
    "Impl.memory_budget": "rows per chunk from a budget of bytes: as Impl.chunk_size",
    "OutputLayerLoss.impl": "as Impl.kernel / Impl.chunk_size",
}
# {qualified name: fields the base object and the flipped one both get, so that the field acts}
COMPANIONS = {
    "Scorer.word_counts": {"word_norm": "log-unigram"},
    "Scorer.context_norm_value": {"context_norm": "max-norm"},
    "Scorer.word_norm": {},
}


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _base(cls) -> object:
    """The default object of an exported part class, with what its required fields need."""
    if issubclass(cls, Sampled):
        return Sampled("is", 4, UNIFORM, generator=_generator())
    if cls is Correction:
        return Correction(CrossEntropy(), "nce", 4, UNIGRAM)  # σ(s − log K·D(c)) + log D(c) (eq. 22) reads K and D
    if cls is Scorer:
        return Scorer(word_counts=COUNTS)
    return cls()


def _loss_of(part) -> torch.Tensor:
    """The per-row loss (reduction "none") of the entry with `part` in its place (the others at their defaults)."""
    t = _tensors()
    kwargs: dict = {"reduction": "none"}
    if isinstance(part, Scorer):
        kwargs["scorer"] = part
    elif isinstance(part, Correction):
        kwargs["scorer"] = Scorer().given(posterior=part)
    elif isinstance(part, Candidates):
        kwargs["candidates"] = part
    elif isinstance(part, Criterion):
        kwargs["criterion"] = part
        if not part.softmax:  # a sigmoid criterion runs over sampled candidates or every class
            kwargs["candidates"] = Full()
    elif isinstance(part, Impl):
        kwargs["impl"] = part
    else:
        raise AssertionError(f"no way to call the loss entry with a {type(part).__name__}")
    return output_loss(t["hidden"], t["weight"], t["bias"], t["labels"], **kwargs)


def _allowed_strings(build, name: str) -> list[str]:
    """The values a string option allows, read from its refusal of an unknown one (at construction or at the call)."""
    with pytest.raises((OptionError, ValueError)) as info:
        build("not-a-value-of-any-option")
    message = str(info.value)
    assert name in message, f"the refusal of an unknown {name} does not name it: {message}"
    return [s for s in message.replace('"', "'").split("'")[1::2] if s and s != "not-a-value-of-any-option"]


def _flips(qualified: str, name: str, default, build, annotation: str) -> list:  # build: a value to its loss
    """The values a field or argument is flipped to."""
    if name in DATA:
        return [DATA[name]]
    if default is None:
        return [_optional_flip(qualified, annotation)]
    if isinstance(default, Component):
        kind = default.kind
        return [make_component(kind, n, **REGISTRIES[kind][n].example) for n in REGISTRIES[kind] if n != default.name]
    if isinstance(default, bool):
        return [not default]
    if isinstance(default, int) and name == "ignore_index":
        return [0]
    if isinstance(default, int | float):
        return [default + 0.3 if isinstance(default, float) else default + 1]
    if isinstance(default, str):
        return [s for s in _allowed_strings(build, name) if s != default]
    if isinstance(default, tuple):  # returns: every value it allows
        return [(r,) for r in losses.RETURNS]
    raise AssertionError(f"{qualified}: no flip for a default of type {type(default).__name__}; add it to DATA")


OPTIONAL = {  # a field whose default is None (a kernel: `object`): the value a flip gives, by its annotation
    "int": 3,
    "float": 3.0,
    "Scorer": Scorer.from_options(margin="arc", m=0.2),
    "Candidates": Sampled("mcs", 4, UNIFORM, generator=_generator()),
    "Criterion": CrossEntropy(label_smoothing=0.2),
    "torch.dtype": torch.float32,
    "Impl": Impl(kernel="triton", chunk_size=3),
    "object": "triton",  # Impl.kernel: the Triton kernel (under Triton's interpreter on a CPU) against the eager one
}


def _optional_flip(qualified: str, annotation: str):
    for key, value in OPTIONAL.items():
        if annotation.split(" | ")[0] == key:
            return value
    raise AssertionError(f"{qualified}: no flip for an optional field annotated {annotation!r}; add it to OPTIONAL")


def _differs(a, b) -> bool:
    if type(a) is not type(b):  # a tensor against a LossResult: `returns` reached the entry
        return True
    a = a.loss if isinstance(a, tuple) else a
    b = b.loss if isinstance(b, tuple) else b
    return a.dtype != b.dtype or a.shape != b.shape or not torch.allclose(a.double(), b.double(), rtol=1e-9, atol=0)


def _exported(kind: type) -> list[type]:
    out = []
    for name in losses.__all__:
        obj = getattr(losses, name)
        if inspect.isclass(obj) and issubclass(obj, kind) and not inspect.isabstract(obj):
            out.append(obj)
    return out


PART_CLASSES = [c for c in _exported(object) if dataclasses.is_dataclass(c) and issubclass(
    c, (Scorer, Candidates, Criterion, Impl, Correction))]  # fmt: skip
PART_FIELDS = [(c, f.name) for c in PART_CLASSES for f in dataclasses.fields(c)]


def _check_flip(qualified: str, name: str, build, call, base_value, annotation: str) -> None:
    default_loss = call(build(base_value))
    flips = _flips(qualified, name, base_value, lambda v: call(build(v)), annotation)
    assert flips, f"{qualified}: nothing to flip to"
    for value in flips:
        try:
            flipped = build(value)
            loss = call(flipped)
        except (OptionError, ValueError, TypeError) as error:
            assert name in str(error) or (isinstance(value, Component) and value.name in str(error)), (
                f"{qualified}={value!r} is refused without naming it: {error}"
            )
            continue
        if qualified in OUTPUT_NEUTRAL:
            assert not _differs(loss, default_loss), f"{qualified} is declared output-neutral but moved the loss"
        else:
            assert _differs(loss, default_loss), f"{qualified}={value!r} leaves the loss unchanged"


@pytest.mark.parametrize("cls,name", PART_FIELDS, ids=[f"{c.__name__}.{n}" for c, n in PART_FIELDS])
def test_every_field_of_every_loss_part_changes_the_loss_or_is_refused(cls, name):
    qualified = f"{cls.__name__}.{name}"
    base = _base(cls)
    companions = COMPANIONS.get(qualified, {})
    if companions:
        base = dataclasses.replace(base, **companions) if not isinstance(base, Scorer) else Scorer.from_options(
            **companions).given(word_counts=COUNTS)  # fmt: skip
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    if isinstance(base, Scorer) and name in ("word_counts", "context_norm_value", "posterior"):
        build = lambda v: base.given(**{name: v})  # noqa: E731 (compare=False data: `given` sets it)
    else:
        build = lambda v: dataclasses.replace(base, **{name: v})  # noqa: E731
    _check_flip(qualified, name, build, _loss_of, getattr(base, name), str(field.type))


# ------------------------------------------------------------------------------------------- the nn.Module forms
# {module: (the constructor's required arguments, its call on the test tensors)}; a module missing here fails
CALLS = {
    "OutputLayerLoss": ({}, lambda m, t: m(t["hidden"], t["weight"], t["bias"], t["labels"])),
    "SparseSoftmaxCrossEntropy": ({"k": 3}, lambda m, t: m(t["hidden"] @ t["weight"].T, t["labels"])),
    "CosineSoftmaxLoss": ({}, lambda m, t: m(t["hidden"], t["labels"], t["table"])),
    "InBatchSoftmaxLoss": ({}, lambda m, t: m(t["hidden"], t["labels"], t["table"], generator=_generator())),
}
MODULES = _exported(torch.nn.Module)
MODULE_ARGS = [
    (cls, name)
    for cls in MODULES
    for name in inspect.signature(cls.__init__).parameters
    if name not in ("self", "args", "kwargs")
]


def test_every_exported_loss_module_has_a_call():
    assert {cls.__name__ for cls in MODULES} == set(CALLS), "a loss module without a call in CALLS, or a stale one"


@pytest.mark.parametrize("cls,name", MODULE_ARGS, ids=[f"{c.__name__}.{n}" for c, n in MODULE_ARGS])
def test_every_argument_of_every_loss_module_changes_the_loss_or_is_refused(cls, name):
    qualified = f"{cls.__name__}.{name}"
    required, call = CALLS[cls.__name__]
    parameter = inspect.signature(cls.__init__).parameters[name]
    default = required[name] if name in required else parameter.default
    assert default is not inspect.Parameter.empty, f"{qualified}: a required argument without a value in CALLS"
    base_kwargs = dict(required)
    if name != "reduction" and "reduction" in inspect.signature(cls.__init__).parameters:
        base_kwargs["reduction"] = "none"  # per-row losses: a change on any row shows

    def build(value):
        return cls(**{**base_kwargs, name: value})

    def run(module):
        return call(module, _tensors())

    _check_flip(qualified, name, build, run, default, str(parameter.annotation))
