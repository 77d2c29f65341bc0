"""DeepSpeed ZeRO-3: what an hf_heads model does where its parameters are partitioned over the processes.

Under ZeRO-3 (`deepspeed.initialize` with `zero_optimization.stage: 3`, the Trainer's `deepspeed=` config, `accelerate
launch --use_deepspeed --zero_stage 3`) each process holds a slice of every parameter, and the parameter itself is an
empty (0,) tensor except while the module that owns it runs: DeepSpeed's hooks gather a module's own parameters before
its forward and again before its backward, and free them after. The models call the head as a module
(`self.head(hidden, labels)`, `OutputHead.forward`), so the chunked loss reads W (V, H) and its bias gathered in the
forward and in the backward (where `reduction="none"` recomputes each chunk from W), and nothing else in a model's
forward reads the head's parameters: the head's V is a number recorded when it is built (`DiscreteHead.num_classes`),
because a parameter read during another module's forward is gathered whole by DeepSpeed for the rest of that forward
(an "external parameter" of the module), which would hold W during the whole backbone.

What runs outside every forward and reads the head's tensors gathers them with `gathered` (the trainer's
diagnostics); `from_base` of a checkpoint that transformers loaded partitioned is not handled. Without DeepSpeed (or
with ZeRO-1 / ZeRO-2, which partition the optimizer state and the gradients, not the parameters) it does nothing.
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
    """Inside: the ZeRO-3 partitioned tensors among `params` gathered whole on this process
    (`deepspeed.zero.GatheredParameters`, a collective: every process must enter), partitioned again on exit (changes
    made inside are dropped: it is for reading). A no-op for the others (None, unpartitioned tensors, a DTensor)."""
    partitioned = [p for p in params if is_partitioned(p)]
    if not partitioned:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(partitioned):
        yield


def new_backbone(config: PretrainedConfig, auto_class=AutoModel) -> PreTrainedModel:
    """`auto_class.from_config(config)` (a backbone, or an encoder-decoder's encoder or decoder), built as the model
    around it is built. Inside transformers' ZeRO-3 construction (`from_pretrained` / `from_config` of an hf_heads
    model while a ZeRO-3 config is active: its `deepspeed.zero.Init`) it is partitioned with the rest of the model.
    Called from the model's class itself (`HeadsForCausalLM(config)`) while a ZeRO-3 config is active, it is built
    whole, as transformers' own task classes build their body when called directly: on its own `from_config` would
    partition the backbone and leave the model's `post_init` to initialise (0,) tensors (`IndexError` in the
    embedding's padding row); the DeepSpeed engine partitions the whole model when it starts."""
    from transformers import modeling_utils
    from transformers.integrations import is_deepspeed_zero3_enabled

    built_whole = getattr(modeling_utils, "set_zero3_state", None)  # transformers' mark of a ZeRO-3 init under way
    if built_whole is None or not is_deepspeed_zero3_enabled() or getattr(modeling_utils, "_is_ds_init_called", True):
        return auto_class.from_config(config)
    with built_whole():
        return auto_class.from_config(config)
