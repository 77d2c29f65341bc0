"""Output layers, one module per family: softmax, sparse, margin, sampled (discrete: hf_heads.heads.discrete) and
continuous. Each family module holds its options dataclass and its head class and registers them
(hf_heads.heads.registry); `make_head` builds the head of a head section."""

import warnings
from dataclasses import fields

from hf_heads.heads.base import OutputHead
from hf_heads.heads.discrete import DiscreteHead
from hf_heads.heads.options import CHECKPOINT_OPTIONS, HeadOptions
from hf_heads.heads.registry import FAMILIES, family, head_dict, head_options, make_head

# Each family module registers itself on import: this order is the order of help texts and error messages.
# isort: off
from hf_heads.heads.softmax import SoftmaxHead, SoftmaxHeadOptions
from hf_heads.heads.margin import MarginHead, MarginHeadOptions
from hf_heads.heads.sampled import SampledHead, SampledHeadOptions
from hf_heads.heads.sparse import SparseHead, SparseHeadOptions
from hf_heads.heads.continuous import ContinuousHead, ContinuousHeadOptions
# isort: on

__all__ = [
    "CHECKPOINT_OPTIONS",
    "FAMILIES",
    "ContinuousHead",
    "ContinuousHeadOptions",
    "DiscreteHead",
    "HeadOptions",
    "MarginHead",
    "MarginHeadOptions",
    "OutputHead",
    "SampledHead",
    "SampledHeadOptions",
    "SoftmaxHead",
    "SoftmaxHeadOptions",
    "SparseHead",
    "SparseHeadOptions",
    "family",
    "head_dict",
    "head_options",
    "make_head",
]


def _option_help(name: str) -> dict[str, str]:
    """{option: help text (default)} of a family."""
    out = {}
    for f in fields(family(name).options):
        default = f.default if not callable(f.default_factory) else f.default_factory()
        out[f.name] = f"{f.metadata.get('help', '')} (default: {default!r})"
    return out


# deprecated name -> (what to use instead, its value); removed in 0.3
_DEPRECATED = {
    "HEAD_FAMILIES": (
        "hf_heads.heads.FAMILIES (family -> HeadFamily; the options class is its .options)",
        lambda: {name: entry.options for name, entry in FAMILIES.items()},
    ),
    "option_help": (
        "dataclasses.fields(hf_heads.heads.family(name).options) (each field's help text is in its metadata)",
        lambda: _option_help,
    ),
}


def __getattr__(name: str):
    if name not in _DEPRECATED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    replacement, value = _DEPRECATED[name]
    warnings.warn(
        f"hf_heads.heads.{name} is deprecated and will be removed in 0.3; use {replacement}",
        FutureWarning,
        stacklevel=2,
    )
    return value()
