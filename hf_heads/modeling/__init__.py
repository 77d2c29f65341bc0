"""HF model classes: `HeadsConfig` and one `PreTrainedModel` per task, registered with the Auto classes."""

from transformers import AutoConfig, AutoModelForCausalLM

from hf_heads.modeling.causal_lm import HeadsForCausalLM
from hf_heads.modeling.configuration import HeadsConfig

AutoConfig.register(HeadsConfig.model_type, HeadsConfig, exist_ok=True)
AutoModelForCausalLM.register(HeadsConfig, HeadsForCausalLM, exist_ok=True)

__all__ = ["HeadsConfig", "HeadsForCausalLM"]
