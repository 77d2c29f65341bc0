"""nn.Modules that own the output parameters and call the losses (they know nothing of tasks)."""

from hf_heads.heads.discrete import DiscreteHead
from hf_heads.heads.options import HEAD_FAMILIES, MarginHeadOptions, SoftmaxHeadOptions, head_dict, head_options

__all__ = ["HEAD_FAMILIES", "DiscreteHead", "MarginHeadOptions", "SoftmaxHeadOptions", "head_dict", "head_options"]
