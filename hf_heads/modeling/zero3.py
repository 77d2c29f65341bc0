"""DeepSpeed ZeRO-3: what an hf_heads model does where its parameters are partitioned over the processes.

Under ZeRO-3 a parameter is an empty (0,) tensor except while the module that owns it runs (DeepSpeed's hooks gather a
module's own parameters before its forward and backward). The models call the head as a module, so the chunked loss
reads W (V, H) gathered in the forward and in the backward, and nothing else in a forward reads the head's parameters:
the head's V is a number recorded when it is built (`DiscreteHead.num_classes`), because a parameter read during
another module's forward is gathered whole for the rest of that forward, which would hold W during the whole backbone.
What runs outside every forward gathers them with `gathered`. Without ZeRO-3 it does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from transformers import AutoModel, PretrainedConfig, PreTrainedModel


def is_partitioned(tensor: torch.Tensor | None) -> bool:
    """Whether `tensor` is a parameter DeepSpeed ZeRO-3 partitions (it carries DeepSpeed's `ds_id`)."""
    return tensor is not None and hasattr(tensor, "ds_id")


@contextlib.contextmanager
def gathered(params: Iterable[torch.Tensor | None]) -> Iterator[None]:
    """Inside: the ZeRO-3 partitioned tensors among `params` gathered whole (a collective: every process must enter),
    for reading (changes are dropped). A no-op for other tensors."""
    partitioned = [p for p in params if is_partitioned(p)]
    if not partitioned:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(partitioned):
        yield


def new_backbone(config: PretrainedConfig, auto_class=AutoModel) -> PreTrainedModel:
    """`auto_class.from_config(config)`, built as the model around it is built: partitioned with the rest of the model
    inside transformers' ZeRO-3 construction (`deepspeed.zero.Init`); built whole when the model's class is called
    directly while a ZeRO-3 config is active, as transformers' own task classes do (on its own `from_config` would
    partition it and leave `post_init` to initialise (0,) tensors)."""
    from transformers import modeling_utils
    from transformers.integrations import is_deepspeed_zero3_enabled

    built_whole = getattr(modeling_utils, "set_zero3_state", None)  # transformers' mark of a ZeRO-3 init under way
    if built_whole is None or not is_deepspeed_zero3_enabled() or getattr(modeling_utils, "_is_ds_init_called", True):
        return auto_class.from_config(config)
    with built_whole():
        return auto_class.from_config(config)
