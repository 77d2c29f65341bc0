"""PEFT adapters on hf_heads models.

- Default targets: PEFT picks LoRA's default `target_modules` by `config.model_type`, `hf_heads` whatever the backbone;
  `with_backbone_targets` fills them with PEFT's default for the backbone, restricted to `backbone.` so the head is
  never matched by name (`model.add_adapter` and `HeadsSFTTrainer(peft_config=...)` call it).
- `model.add_adapter(config)` injects through PEFT itself, without transformers' PEFT version gate (transformers 5.24
  asks for a PEFT release that is not published).
- LoRA on the head: `LoraConfig(target_parameters=["head.weight"])` trains W + (α/r)·B·A inside the head's forward, so
  every criterion reads it without the (N, V) logits; `modules_to_save=["head"]` trains and saves the whole head.
"""

from __future__ import annotations

import re

from peft import PeftConfig, inject_adapter_in_model
from peft.tuners.tuners_utils import BaseTunerLayer
from peft.utils import ModulesToSaveWrapper
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING


def backbone_target_modules(model) -> str:
    """PEFT's default LoRA targets for the backbone of an hf_heads `model`, as a regex over module names under
    `backbone.`; raises a clear error when PEFT has no default for that backbone (as PEFT does for a bare model)."""
    backbone = model.config.backbone
    backbone_type = backbone.get("model_type") if isinstance(backbone, dict) else backbone.model_type
    names = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(backbone_type)
    if names is None:
        raise ValueError(
            f"PEFT has no default LoRA target_modules for the backbone model_type={backbone_type!r}: give "
            "LoraConfig(target_modules=[...]) (module names inside model.backbone)"
        )
    if isinstance(names, str):  # already a regex over full module names
        return rf"backbone\.(?:{names})"
    return r"backbone\..*\.(?:" + "|".join(re.escape(n) for n in sorted(names)) + ")"


def with_backbone_targets(peft_config: PeftConfig, model) -> PeftConfig:
    """`peft_config` with `target_modules` set to the backbone's PEFT default when it names neither `target_modules`
    nor `target_parameters`; as is otherwise. Refuses LoRA on the weight of a head that has none."""
    refuse_head_lora(peft_config, model)
    if getattr(peft_config, "target_modules", True) is not None or getattr(peft_config, "target_parameters", None):
        return peft_config
    peft_config.target_modules = backbone_target_modules(model)
    return peft_config


def add_adapter(model, adapter_config: PeftConfig, adapter_name: str | None = None) -> None:
    """`PeftAdapterMixin.add_adapter` of transformers, step for step, with the backbone's default targets filled in
    (`with_backbone_targets`) and the adapter injected by PEFT itself (no transformers version gate; see above)."""
    if not isinstance(adapter_config, PeftConfig):
        raise TypeError(
            f"adapter_config should be an instance of peft.PeftConfig, got {type(adapter_config).__name__}"
        )
    adapter_name = adapter_name or "default"
    if getattr(model, "_hf_peft_config_loaded", False) and adapter_name in model.peft_config:
        raise ValueError(f"an adapter named {adapter_name!r} already exists: pass another adapter_name")
    adapter_config = with_backbone_targets(adapter_config, model)
    adapter_config.base_model_name_or_path = model.__dict__.get("name_or_path", None)
    inject_adapter_in_model(adapter_config, model, adapter_name)
    model._hf_peft_config_loaded = True
    for module in model.modules():  # make it the active adapter, as transformers' set_adapter does
        if isinstance(module, BaseTunerLayer | ModulesToSaveWrapper):
            module.set_adapter(adapter_name)


def refuse_head_lora(peft_config: PeftConfig, model) -> None:
    """A `target_parameters` entry naming the head's weight on a head without a (V, H) output matrix: clear error."""
    targets = getattr(peft_config, "target_parameters", None) or []
    if any(t.startswith("head.") for t in targets) and not model.head.has_output_matrix:
        raise ValueError(
            f"target_parameters={targets}: a {model.head.family} head has no (V, H) output weight to adapt; use "
            "modules_to_save=['head'] to train the whole head"
        )
