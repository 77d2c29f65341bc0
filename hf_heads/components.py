"""Components: one kind of plugin for every point of a head that varies.

A component is a frozen dataclass registered with `register(kind)`: its fields are its parameters (validated in
`check`), its class variable `name` the value a config or a flag gives, and it defines its kind's reference, the naive
dense computation the contract suite compares the library with. The kinds and their bases:

    margin           hf_heads.losses.scorer.Margin          φ of the target (margin paper eq. 14); reference `phi`
    word_norm        hf_heads.losses.scorer.WordNorm        f(c) (eq. 9)
    context_norm     hf_heads.losses.scorer.ContextNorm     g(i) (eq. 10)
    sampling_method  hf_heads.losses.sampled.SamplingMethod candidate terms and posterior correction (sampling paper)
    noise            hf_heads.losses.noise.Noise            the noise distribution D (sampling paper sec. 3.2, 4.1)
    criterion        hf_heads.losses.parts.Criterion        the criterion over a row's candidate logits
    continuous_loss  hf_heads.losses.continuous_losses.ContinuousLoss  (Kumar & Tsvetkov eq. 3, Bhat et al. eq. 1)
    kernel           hf_heads.losses.chunks.ChunkKernel     the per-chunk work of the fused loss

A config writes a component as its name, or `{"type": name, **parameters}`; a flag also as `arc-cos:m1=0.2,m2=0.1`.
This module imports nothing from hf_heads but `hf_heads.validation`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Callable
from typing import Any, ClassVar

from hf_heads.validation import OptionError, check_number

KINDS = ("margin", "word_norm", "context_norm", "sampling_method", "noise", "criterion", "continuous_loss", "kernel")
# kinds whose registry lives above this floor, registered through the same `register(kind)`: {kind: the decorator
# its registry's module installs when it is imported} ("family": hf_heads.heads.registry, a head class and its options)
KIND_HOOKS: dict[str, Callable[[type], type]] = {}
REGISTRIES: dict[str, dict[str, type]] = {kind: {} for kind in KINDS}  # kind -> {name: class}, registration order
_BASES: dict[str, type] = {}  # kind -> its base class (set by `component_base`)


class Component:
    """Base of every component. `name` is the option value; `example` the parameters the contract suite runs it with;
    `check` validates the parameters (`__post_init__` calls it)."""

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    example: ClassVar[dict] = {}

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # each parameter of its annotated type (`coerce`)
            object.__setattr__(self, f.name, coerce(type(self), f.name, getattr(self, f.name)))
        self.check()

    def check(self) -> None:
        """Raise `OptionError` naming a parameter, its value and what is allowed, for rules beyond the parameters'
        types (`__post_init__` has checked those)."""

    def parameters(self) -> dict[str, Any]:
        """{parameter: value} (the dataclass fields)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def describe(self) -> str:
        """A short label: the name, then each parameter as name=value."""
        return " ".join([self.name, *(f"{k}={v}" for k, v in self.parameters().items())])


def annotation_types(cls: type, name: str) -> set[str]:
    """{"int", "None", ...}: the types of a dataclass field's annotation (annotations may be strings), read once
    per class (then kept on it)."""
    cached = cls.__dict__.get("_annotation_types")
    if cached is None:
        cached = {}
        for key, hint in typing.get_type_hints(cls).items():
            args = typing.get_args(hint) or (hint,)
            cached[key] = {getattr(a, "__name__", str(a)).replace("NoneType", "None") for a in args}
        cls._annotation_types = cached
    return cached.get(name, set())


def coerce(cls: type, name: str, value):
    """`value` for field `name` of the dataclass `cls`, an integral float made an int for an `int` field (a JSON or
    command-line round trip gives 2.0); refuses a value of the wrong type or a number that is not finite."""
    kinds = annotation_types(cls, name)
    if value is None and "None" in kinds:
        return None
    if isinstance(value, str) and "str" in kinds:  # text where text is allowed (`str | int`: "auto" or a number)
        return value
    if "bool" in kinds:
        if not isinstance(value, bool):
            raise OptionError(name, value, "must be true or false")
        return value
    if "int" in kinds:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        check_number(name, value, minimum=None, integer=True)
    elif "float" in kinds:
        check_number(name, value)
    elif "list" in kinds and isinstance(value, (list, tuple)):
        return list(value)
    elif "dict" in kinds and isinstance(value, dict):
        return value
    elif "str" in kinds and not isinstance(value, str):
        raise OptionError(name, value, "must be a string")
    return value


def parse_value(text: str):
    """A value written on a command line: its JSON value (a number, true / false, an object, ...), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text.strip()


REFERENCE = "its reference (the naive computation the contract suite compares the library with)"
RESERVED_PARAMETERS = ("type",)  # a component's config dict names its class under "type" (`component_config`)
_REQUIRES: dict[str, str] = {}  # kind -> what its abstract methods are, for `register`'s refusal


def component_base(kind: str, requires: str = REFERENCE):
    """Class decorator: make `cls` the base class of the components of `kind` (one per kind); `requires` says what
    its abstract methods are (default: the reference)."""
    if kind not in KINDS:
        raise ValueError(f"unknown component kind {kind!r}; kinds: {', '.join(KINDS)}")

    def decorate(cls: type) -> type:
        cls.kind = kind
        _BASES[kind] = cls
        _REQUIRES[kind] = requires
        return cls

    return decorate


def register(kind: str):
    """Class decorator: register the component class `cls` (with a `name` and its reference defined) under `cls.name`.
    A reloaded module's class replaces its old one (`same_class`); another class under a taken name, or a parameter
    named as a config key, is refused. `register("family")` registers a head family (registry.register_head)."""
    if kind in KIND_HOOKS:
        return KIND_HOOKS[kind]
    if kind not in KINDS:
        raise ValueError(f"unknown component kind {kind!r}; kinds: {', '.join((*KINDS, *KIND_HOOKS))}")

    def decorate(cls: type) -> type:
        base = _BASES.get(kind)
        if not (isinstance(cls, type) and base is not None and issubclass(cls, base)) or not cls.name:
            raise TypeError(
                f"register({kind!r}) takes a {getattr(base, '__name__', base)} subclass with a name, got {cls!r}"
            )
        if "__dataclass_params__" not in cls.__dict__ or not cls.__dataclass_params__.frozen:
            raise TypeError(
                f"register({kind!r}): {cls.__qualname__} must be a frozen dataclass (@dataclass(frozen=True))"
            )
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(cls.__abstractmethods__))
            raise TypeError(
                f"register({kind!r}): {cls.__qualname__} does not define {missing}: every {kind} component defines "
                f"{_REQUIRES[kind]}"
            )
        reserved = [f.name for f in dataclasses.fields(cls) if f.name in RESERVED_PARAMETERS]
        if reserved:
            raise TypeError(
                f"register({kind!r}): {cls.__qualname__} has a parameter named {reserved[0]!r}, the key under which a "
                f"config names the {kind}'s class: rename the parameter"
            )
        check_free(REGISTRIES[kind], cls.name, cls, kind)
        if dataclasses.fields(cls):  # read the parameters' annotations while the defining module is importable
            annotation_types(cls, "")
        REGISTRIES[kind][cls.name] = cls
        return cls

    return decorate


def same_class(a: type, b: type) -> bool:
    """Whether two classes are one class of one module: the same object, or the class of a module reloaded
    (`importlib.reload`) and its former self (the same module and qualified name)."""
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def check_free(registry: dict, name: str, cls: type, kind: str) -> None:
    """Refuse (`ValueError`) to register `cls` under `name` where another class (not a reloaded module's former self)
    holds it."""
    taken = registry.get(name)
    if taken is not None and not same_class(taken, cls):
        raise ValueError(
            f"{kind} {name!r} is already registered by {taken.__module__}.{taken.__qualname__}; "
            f"{cls.__module__}.{cls.__qualname__} cannot take its name: register it under another name"
        )


def component_class(kind: str, name: str, field: str | None = None) -> type:
    """The registered class `name` of `kind` (`OptionError` on `field`, default the kind, listing the names)."""
    registry = REGISTRIES[kind]
    if name not in registry:
        raise OptionError(field or kind, name, f"is not allowed; allowed: {', '.join(map(repr, registry))}")
    return registry[name]


def parse_flag(text: str, texts: dict[str, str] | None = None) -> str | dict:
    """A component as written on a command line: `name`, `name:p=1,q=0.5` or a JSON object, as a config value;
    `texts` (when given) gets each `name:p=v` parameter's text as written."""
    text = text.strip()
    if text.startswith("{"):
        return json.loads(text)
    if ":" not in text:
        return text
    name, _, rest = text.partition(":")
    out: dict[str, Any] = {"type": name.strip()}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise OptionError(name, text, "must be written name:parameter=value,parameter=value")
        out[key.strip()] = parse_value(value)
        if texts is not None:
            texts[key.strip()] = value.strip()
    return out


def make_component(kind: str, value, *, field: str | None = None, **extra):
    """The component of a config value: an instance (as it is), a name, `{"type": name, **parameters}` or a
    command-line string; `extra`: parameters given apart (the flat `m`). Errors name `field` or `field.parameter`."""
    base = _BASES[kind]
    field = field or kind
    if isinstance(value, base):
        return value
    texts: dict[str, str] = {}
    if isinstance(value, str):
        value = parse_flag(value, texts)
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise OptionError(field, value, f"must be a {kind} name or a dict with its 'type' and its parameters")
    params = dict(value)
    cls = component_class(kind, params.pop("type"), field)
    allowed = [f.name for f in dataclasses.fields(cls)]
    for key, text in texts.items():  # a text parameter written `tag=3` on a command line is the text "3"
        kinds = annotation_types(cls, key) if key in allowed else set()
        if "str" in kinds and not kinds & {"bool", "int", "float", "list", "dict"} and params[key] is not None:
            params[key] = params[key] if isinstance(params[key], str) else text  # `tag="3"`: the JSON string
    params.update({k: v for k, v in extra.items() if k in allowed and k not in params})
    for key in params:
        if key not in allowed:
            text = f"is not a parameter of {kind} {cls.name!r}; allowed: {', '.join(allowed) or 'none'}"
            raise OptionError(key, params[key], text, f"{field}.{key}")
    try:
        return cls(**params)
    except OptionError as err:
        raise err.renamed(f"{field}.{err.field}") from None
    except TypeError as err:
        raise OptionError(field, value, f"cannot be built: {err}") from None


def component_config(component: Component) -> str | dict:
    """The config value of a component: its name when it has no parameters, else {"type": name, **parameters}."""
    params = component.parameters()
    return {"type": component.name, **params} if params else component.name
