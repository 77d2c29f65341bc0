"""hf_heads: margin, sampled, sparse and continuous-output heads for Hugging Face Transformers.

Importing hf_heads registers `HeadsConfig` and the model classes with the `Auto*` classes. The trainer
classes and training arguments (`HeadsTrainer`, `HeadsSeq2SeqTrainer`, `HeadsTrainingArguments`,
`HeadsSeq2SeqTrainingArguments`) are importable from here too, but load `hf_heads.training` (and the
transformers Trainer) only on first access, so `import hf_heads` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hf_heads.modeling import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification

if TYPE_CHECKING:
    from hf_heads.training import (
        HeadsSeq2SeqTrainer,
        HeadsSeq2SeqTrainingArguments,
        HeadsTrainer,
        HeadsTrainingArguments,
    )

__version__ = "0.1.0"

# name -> module that defines it, imported on first attribute access (PEP 562)
_LAZY_ATTRIBUTES = {
    "HeadsSeq2SeqTrainer": "hf_heads.training",
    "HeadsSeq2SeqTrainingArguments": "hf_heads.training",
    "HeadsTrainer": "hf_heads.training",
    "HeadsTrainingArguments": "hf_heads.training",
}

__all__ = [
    "HeadsConfig",
    "HeadsForCausalLM",
    "HeadsForSeq2SeqLM",
    "HeadsForSequenceClassification",
    "HeadsSeq2SeqTrainer",
    "HeadsSeq2SeqTrainingArguments",
    "HeadsTrainer",
    "HeadsTrainingArguments",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY_ATTRIBUTES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRIBUTES))
