"""hf_heads: margin, sampled, sparse and continuous-output heads for Hugging Face Transformers.

Importing hf_heads registers `HeadsConfig` and the model classes with the `Auto*` classes.
"""

from hf_heads.modeling import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification

__version__ = "0.1.0"
__all__ = [
    "HeadsConfig",
    "HeadsForCausalLM",
    "HeadsForSeq2SeqLM",
    "HeadsForSequenceClassification",
    "__version__",
]
