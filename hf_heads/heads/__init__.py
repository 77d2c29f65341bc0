"""Output layers: `DiscreteHead` (softmax, margin, sampled, sparse) and `ContinuousHead` (continuous)."""

from torch import nn

from hf_heads.heads.continuous import ContinuousHead
from hf_heads.heads.discrete import DiscreteHead
from hf_heads.heads.options import (
    HEAD_FAMILIES,
    ContinuousHeadOptions,
    MarginHeadOptions,
    SampledHeadOptions,
    SoftmaxHeadOptions,
    SparseHeadOptions,
    head_dict,
    head_options,
)


def make_head(hidden_size: int, num_classes: int, head: dict | None) -> nn.Module:
    """The head module for a head section: `ContinuousHead` for the continuous family, else `DiscreteHead`."""
    family = (head or {}).get("family", "softmax")
    return (ContinuousHead if family == "continuous" else DiscreteHead)(hidden_size, num_classes, head)


__all__ = [
    "HEAD_FAMILIES",
    "ContinuousHead",
    "ContinuousHeadOptions",
    "DiscreteHead",
    "MarginHeadOptions",
    "SampledHeadOptions",
    "SoftmaxHeadOptions",
    "SparseHeadOptions",
    "head_dict",
    "head_options",
    "make_head",
]
