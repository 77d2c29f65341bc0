"""HF model classes: `HeadsConfig` and one `PreTrainedModel` per task, registered with the Auto classes."""

from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

from hf_heads.modeling.causal_lm import HeadsForCausalLM
from hf_heads.modeling.classification import HeadsForSequenceClassification
from hf_heads.modeling.configuration import HeadsConfig
from hf_heads.modeling.seq2seq import HeadsForSeq2SeqLM

AutoConfig.register(HeadsConfig.model_type, HeadsConfig, exist_ok=True)
AutoModelForCausalLM.register(HeadsConfig, HeadsForCausalLM, exist_ok=True)
AutoModelForSeq2SeqLM.register(HeadsConfig, HeadsForSeq2SeqLM, exist_ok=True)
AutoModelForSequenceClassification.register(HeadsConfig, HeadsForSequenceClassification, exist_ok=True)

__all__ = ["HeadsConfig", "HeadsForCausalLM", "HeadsForSeq2SeqLM", "HeadsForSequenceClassification"]
