"""The body and the output layer of a transformers task model (`*ForCausalLM`, `*ForConditionalGeneration`,
`*ForSequenceClassification`): `backbone_of` (its body), `sharing` (another Auto class of its config holding its own
tensors) and `final_projection` (a sequence classifier's last linear layer). `from_base` wraps a checkpoint with them;
`to_base` (hf_heads.modeling.base_export) places a backbone back into its base class with them."""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel


def backbone_of(lm: PreTrainedModel) -> PreTrainedModel:
    """The backbone inside a task model (`*ForCausalLM`, `*ForConditionalGeneration`) that returns its final hidden
    states: `lm.base_model`, or, for task models that have no separate base model (`T5ForConditionalGeneration`'s
    `base_model` is the task model itself), an `AutoModel` of the same config whose parameters and buffers are
    the task model's own (shared, not copied)."""
    base = lm.base_model
    if base is not lm:
        return base
    bodies = [child for child in lm.children() if isinstance(child, PreTrainedModel)]
    if len(bodies) == 1 and getattr(bodies[0].config, "is_encoder_decoder", False) == lm.config.is_encoder_decoder:
        return bodies[0]  # a body under another name than base_model_prefix (Llama4ForCausalLM.model)
    return sharing(AutoModel, lm)


def sharing(auto_class, lm: PreTrainedModel) -> PreTrainedModel:
    """`auto_class.from_config(lm.config)` built without allocating, holding `lm`'s own parameters and buffers under
    the same names (shared, not copied; `lm` is left as it is). Raises when it has a tensor `lm` lacks."""
    with torch.device("meta"):
        model = auto_class.from_config(lm.config, dtype=lm.dtype)
    own = dict(lm.named_parameters(remove_duplicate=False)) | dict(lm.named_buffers(remove_duplicate=False))
    tensors = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))
    for name, tensor in tensors:
        if name not in own:
            raise ValueError(
                f"cannot wrap {type(lm).__name__}: its {type(model).__name__} has {name!r}, which {type(lm).__name__} "
                "lacks"
            )
        module_name, _, leaf = name.rpartition(".")
        module = model.get_submodule(module_name) if module_name else model
        (module._parameters if isinstance(tensor, nn.Parameter) else module._buffers)[leaf] = own[name]
    for module in model.modules():  # trained weights: the wrapping model's post_init must not initialise them again
        module._is_hf_initialized = True
    return model.train(lm.training)


def final_projection(classifier: PreTrainedModel) -> str:
    """The module name of a sequence classifier's final (C, H) projection: the last `nn.Linear` with C outputs
    outside its base model (BERT `classifier`, RoBERTa / ELECTRA `classifier.out_proj`, GPT-2 / Llama `score`, ...)."""
    base = classifier.base_model_prefix
    found = [
        name
        for name, module in classifier.named_modules()
        if isinstance(module, nn.Linear)
        and module.out_features == classifier.config.num_labels
        and not (name == base or name.startswith(f"{base}."))
    ]
    if not found:
        raise ValueError(
            f"{type(classifier).__name__} has no final (num_labels={classifier.config.num_labels}, H) projection "
            "outside its base model: hf_heads cannot take its classifier over"
        )
    return found[-1]
