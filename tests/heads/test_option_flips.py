"""Every option changes the output, or is refused by name, or is declared output-neutral and checked to be so.

The fields come from the dataclasses themselves (each head family's options class in the FAMILIES registry, each
registered component's parameters in REGISTRIES: margins, norms, sampling methods, noises, continuous losses,
kernels), never from a hand list. Each field is flipped to another allowed value built from its type (a bool
negated, a number moved, a string to each value its refusal of an unknown one lists, a component to every other
registered one at its `example`); the flipped head must give another training loss, evaluation loss or logits on
a small random batch than the default's, or be refused with an `OptionError` naming the field. A field that needs
another option to act gets it in both heads (`COMPANIONS`), and is flipped without it too. A field that by design
cannot change the output is in `OUTPUT_NEUTRAL`, with its reason, and must give the same results. A field added
later that fits none of these fails the test."""

from __future__ import annotations

import dataclasses
import re
import typing
import zlib

import pytest
import torch
from conftest import tiny_enc_dec_config

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM
from hf_heads.components import REGISTRIES, component_config, make_component
from hf_heads.heads import FAMILIES, head_dict, head_options, make_head
from hf_heads.heads.registry import COMPONENT
from hf_heads.validation import OptionError

V, H = 13, 6
SEED = 1234

# options that cannot change a result by design: {name: why}; each is checked to give the same results
OUTPUT_NEUTRAL = {
    "chunk_size": "rows per chunk of the chunked loss: every chunking sums the same rows",
    "memory_budget": "the rows per chunk from a budget of bytes: as chunk_size",
    "chunk_kernel": "the implementation of the chunked loss's per-chunk work: every kernel computes the same loss",
    "embedding_name": "which table the trainer builds for a continuous head: a head given its table never reads it",
    "word2vec_dim": "the size of the table trained on the targets (embedding_name=word2vec-targets): as above",
}
# options whose effect is in the model around the head, not in the head: checked on a model (`test_model_level`)
MODEL_LEVEL = {"tie_decoder_inputs": "the decoder reads the embedding table instead of its own input embeddings"}
# the checkpoint's output transforms set by from_base: options like any other here
# {field: options both objects get, so that the field acts (the field is also flipped without them: then it must
# act or be refused)}
COMPANIONS = {
    "context_norm_momentum": {"context_norm": "max-norm"},  # the momentum of max-norm's running statistic
    "learn_logit_scale": {"loss": "cosine-softmax"},  # a loss with a scale to learn
    "logit_scale": {"loss": "cosine-softmax"},  # s of the scaled-cosine losses
}
# kernels flipped to in the neutrality check: the others take a compilation (compiled) or need a GPU (triton-half)
CPU_KERNELS = ("eager", "triton")


# ----------------------------------------------------------------------------------------------- flipped values


def _allowed_strings(build, name: str) -> list[str]:
    """The values a string option allows, read from its refusal of an unknown one (which must name the field)."""
    with pytest.raises(OptionError) as info:
        build("not-a-value-of-any-option")
    assert info.value.field == name, f"{name}: an unknown value was refused naming {info.value.field!r}"
    return re.findall(r"'([^']+)'", info.value.allowed)


def alternatives(owner: type, f: dataclasses.Field, current, build) -> list:
    """Other allowed values of field `f` of `owner` (currently `current`) built from its type and registry;
    `build(value)` constructs the owner with the field set to `value` (to read what a string allows)."""
    kind = f.metadata.get(COMPONENT)
    if kind:
        name = None if current is None else make_component(kind, current, field=f.name).name
        kernels = CPU_KERNELS if kind == "kernel" else REGISTRIES[kind]
        return [component_config(REGISTRIES[kind][n](**REGISTRIES[kind][n].example)) for n in kernels if n != name]
    hint = typing.get_type_hints(owner)[f.name]
    types = [t for t in (typing.get_args(hint) or (hint,)) if t is not type(None)]
    types = [typing.get_origin(t) or t for t in types]
    out = []
    for t in types:
        if t is bool:
            out.append(not current)
        elif t is int and not isinstance(current, bool):
            out.append(3 if current is None else current // 2 if current > 2 else current + 1)
        elif t is float:
            out.append(2.0 if current is None else 0.3 if current == 0 else current * 0.5)
        elif t is list:
            out.append([round(0.5 + i / V, 3) for i in range(V)])  # one number per class
        elif t is str:
            out += [v for v in _allowed_strings(build, f.name) if v != current]
        elif t is torch.Tensor:
            out.append(torch.rand(current.shape if isinstance(current, torch.Tensor) else V) + 0.5)
        elif t is not dict:  # dict: a component's config, covered by its str form
            raise TypeError(f"{owner.__name__}.{f.name}: no flipped value for type {hint}: extend `alternatives`")
    out = [v for v in out if not (type(v) is type(current) and v == current)]
    assert out, f"{owner.__name__}.{f.name}={current!r}: no other allowed value"
    return out


# ------------------------------------------------------------------------------------------------ comparing results


def _flat(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value.detach()]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _flat(v)]
    return [] if value is None else [value]


def differs(a, b) -> bool:
    """Whether two results (tensors, or tuples of them) differ in structure, dtype, shape or value."""
    a, b = _flat(a), _flat(b)
    if len(a) != len(b):
        return True
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            if x != y:
                return True
        elif x.dtype != y.dtype or x.shape != y.shape:
            return True
        elif not torch.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
            return True
    return False


def check_flip(name: str, run, default, flipped) -> None:
    """`run(default)` and `run(flipped)` differ, or `run(flipped)` is refused naming `name`; an output-neutral
    field gives the same results."""
    expected = run(default)
    try:
        got = run(flipped)
    except OptionError as err:
        named = name == err.field or f"{name}=" in str(err)  # the field, or a combination that names it
        assert named, f"{name}={flipped!r} is refused without naming it: {err}"
        assert name not in OUTPUT_NEUTRAL, f"output-neutral {name}={flipped!r} is refused: {err}"
        return
    if name in OUTPUT_NEUTRAL:
        torch.testing.assert_close(got, expected, msg=lambda m: f"output-neutral {name}={flipped!r}: {m}")
    else:
        assert differs(expected, got), f"{name}: {flipped!r} gives the same loss, eval loss and logits as {default!r}"


# ------------------------------------------------------------------------------------------------------------ heads


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    hidden, labels = torch.randn(2, 5, H, generator=g) * 2, torch.randint(0, V, (2, 5), generator=g)
    labels[0, 3] = -100
    return hidden, labels


def head_results(section: dict) -> list[torch.Tensor]:
    """The training loss, the evaluation loss and the logits of the head `section` names on a batch, then again on
    another batch after one SGD step on the first's training loss (a running statistic, a learned scale). Weights
    are filled by name, so two heads with the same tensors start alike; the word counts, table (of the options'
    dimension) and output vocabulary a head uses are given."""
    head = make_head(H, V, section)
    with torch.no_grad():
        for name, param in head.named_parameters():
            if name.rsplit(".", 1)[-1] in ("weight", "bias"):
                g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
                param.copy_(torch.randn(param.shape, generator=g) * 0.5)
    counts = torch.arange(V, 0, -1).double() * 7
    if head.has_output_matrix:
        head.set_word_counts(counts)
    if head.uses_embedding_table:
        table = torch.randn(V, head.options.embedding_dim, generator=torch.Generator().manual_seed(5))
        frequency = head.options.center_embeddings == "frequency"
        head.set_embedding_table(table, counts if frequency else None)
        if head.options.output_vocabulary == "targets":
            head.set_output_vocabulary(torch.arange(0, V, 2))
    out = []
    for step in (0, 1):
        hidden, labels = _batch(step)
        head.train()
        torch.manual_seed(SEED)
        loss = head.loss(hidden, labels)
        head.eval()
        with torch.no_grad():
            torch.manual_seed(SEED)
            out += [loss.detach(), head.loss(hidden, labels), head.logits(hidden)]
        if step == 0:
            loss.backward()
            with torch.no_grad():
                for param in head.parameters():
                    if param.grad is not None:
                        param -= 0.5 * param.grad
    return out


def _base(name: str, **companions) -> dict:
    """A family's representative head section (its first example) with `companions`, every option written out."""
    return head_dict({"family": name, **next(iter(FAMILIES[name].options.examples.values())), **companions})


def _head_fields() -> list:
    return [
        pytest.param(name, f.name, id=f"{name}-{f.name}")
        for name, entry in FAMILIES.items()
        for f in dataclasses.fields(entry.options)
    ]


@pytest.mark.parametrize(("family_name", "field"), _head_fields())
def test_every_head_option_changes_the_head_or_is_refused(family_name, field):
    """Each option of each registered family's options class, flipped to every other allowed value on the family's
    representative head (plus its `COMPANIONS`), changes the training loss, the evaluation loss or the logits, or
    is refused naming the option; an `OUTPUT_NEUTRAL` one gives the same results; a `MODEL_LEVEL` one changes the
    head's tensors (its model-level effect is `test_model_level_options_change_the_model`)."""
    options = FAMILIES[family_name].options
    f = next(f for f in dataclasses.fields(options) if f.name == field)
    bases = [_base(family_name)] + ([_base(family_name, **COMPANIONS[field])] if field in COMPANIONS else [])
    for base in bases:  # without its companion a field must act or be refused too
        current = base[field]

        def build(value, base=base):
            return head_options({**base, field: value})

        for value in alternatives(options, f, current, build):
            if field in MODEL_LEVEL:
                a, b = make_head(H, V, base), make_head(H, V, {**base, field: value})
                assert {n for n, _ in a.named_parameters()} != {n for n, _ in b.named_parameters()}, field
                continue
            check_flip(field, head_results, {**base, field: current}, {**base, field: value})


def _component_params() -> list:
    """(family, option, component, parameter): each parameter of each registered component, on the first family
    with an option of that component's kind."""
    out, seen = [], set()
    for name, entry in FAMILIES.items():
        for f in dataclasses.fields(entry.options):
            kind = f.metadata.get(COMPONENT)
            if not kind or kind in seen:
                continue
            seen.add(kind)
            for cname, cls in REGISTRIES[kind].items():
                for p in dataclasses.fields(cls):
                    out.append(pytest.param(name, f.name, cname, p.name, id=f"{name}-{f.name}-{cname}-{p.name}"))
    return out


@pytest.mark.parametrize(("family_name", "option", "component", "parameter"), _component_params())
def test_every_component_parameter_changes_the_head_or_is_refused(family_name, option, component, parameter):
    """Each parameter of each registered component (a margin's m, a noise's smoothing, a continuous loss's margin
    or λ, ...), flipped on its `example` in the representative head of a family that takes the component, changes
    the head's results or is refused naming the parameter."""
    kind = next(f.metadata[COMPONENT] for f in dataclasses.fields(FAMILIES[family_name].options) if f.name == option)
    cls = REGISTRIES[kind][component]
    f = next(p for p in dataclasses.fields(cls) if p.name == parameter)
    example = {**cls.example}
    current = example.get(parameter, f.default)
    base = _base(family_name)

    def section(value):
        return {**base, option: {"type": component, **example, parameter: value}}

    def build(value):
        return make_component(kind, section(value)[option], field=option)

    for value in alternatives(cls, f, current, build):
        check_flip(parameter, head_results, section(current), section(value))


@pytest.mark.parametrize("field", sorted(MODEL_LEVEL))
def test_model_level_options_change_the_model(field):
    """A `MODEL_LEVEL` option changes the loss of the model around the head (each is an option of some family)."""
    name = next(n for n, e in FAMILIES.items() if field in {f.name for f in dataclasses.fields(e.options)})
    options = FAMILIES[name].options
    f = next(f for f in dataclasses.fields(options) if f.name == field)
    base = _base(name)
    current = base[field]
    x = torch.randint(4, 40, (2, 6), generator=torch.Generator().manual_seed(0))

    def run(section):
        torch.manual_seed(0)
        model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart", vocab_size=40), head=section))
        if model.head.uses_embedding_table:
            dim = model.head.options.embedding_dim
            model.head.set_embedding_table(torch.randn(40, dim, generator=torch.Generator().manual_seed(1)))
        with torch.no_grad():
            return model.eval()(input_ids=x, labels=x).loss

    for value in alternatives(options, f, current, lambda v: head_options({**base, field: v})):
        assert differs(run({**base, field: current}), run({**base, field: value})), field


def test_every_neutral_companion_and_model_level_name_is_an_option():
    """The hand-kept sets name options that exist (a renamed option cannot leave a stale exemption behind)."""
    names = {f.name for e in FAMILIES.values() for f in dataclasses.fields(e.options)}
    assert set(OUTPUT_NEUTRAL) <= names, set(OUTPUT_NEUTRAL) - names
    assert set(MODEL_LEVEL) | set(COMPANIONS) <= names
