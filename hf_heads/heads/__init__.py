"""Output layers, one module per family: softmax, sparse, margin, sampled (discrete: hf_heads.heads.discrete) and
continuous. Each family module holds its options dataclass and its head class and registers them
(hf_heads.heads.registry); `make_head` builds the head of a head section, and each options class's `reference`
(over a `ReferenceBatch`) is the family's naive loss the contract suite holds the head to."""

from hf_heads.heads.base import OutputHead
from hf_heads.heads.discrete import DiscreteHead
from hf_heads.heads.options import CHECKPOINT_OPTIONS, HeadOptions, ReferenceBatch
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
    "ReferenceBatch",
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
