"""Hub export: weights + config with `auto_map` + the custom code, so that
`AutoModelFor….from_pretrained(dir, trust_remote_code=True)` works where hf_heads is not installed.

The code a model needs is copied as flat modules (`hf_heads_losses_margin.py`, ...) with its
`from hf_heads.x.y import z` lines rewritten to relative imports, which transformers' dynamic
module loader follows.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

# Modules a saved model needs at load time, in dependency order (they import only torch,
# transformers and each other through full `from hf_heads.… import …` lines).
CODE_MODULES = (
    "hf_heads.losses._checks",
    "hf_heads.losses.fused_linear",
    "hf_heads.losses.margin",
    "hf_heads.losses.noise",
    "hf_heads.losses.sampled",
    "hf_heads.losses.sparse",
    "hf_heads.losses.continuous",
    "hf_heads.heads.options",
    "hf_heads.heads.discrete",
    "hf_heads.heads.continuous",
    "hf_heads.heads",
    "hf_heads.modeling.configuration",
    "hf_heads.modeling.base",
    "hf_heads.modeling.causal_lm",
    "hf_heads.modeling.classification",
    "hf_heads.modeling.seq2seq",
)
AUTO_CLASSES = {
    "HeadsForCausalLM": "AutoModelForCausalLM",
    "HeadsForSeq2SeqLM": "AutoModelForSeq2SeqLM",
    "HeadsForSequenceClassification": "AutoModelForSequenceClassification",
}
MODEL_MODULES = {
    "HeadsForCausalLM": "hf_heads.modeling.causal_lm",
    "HeadsForSeq2SeqLM": "hf_heads.modeling.seq2seq",
    "HeadsForSequenceClassification": "hf_heads.modeling.classification",
}
_IMPORT = re.compile(r"^from (hf_heads(?:\.\w+)+) import", re.M)


def flat_name(module: str) -> str:
    return module.replace(".", "_")


def write_code(directory: str | Path) -> list[str]:
    """Copy the model code into `directory` as flat modules with relative imports; returns the file names."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for module in CODE_MODULES:
        source = inspect.getsource(importlib.import_module(module))
        for imported in _IMPORT.findall(source):
            if imported not in CODE_MODULES:
                raise RuntimeError(f"{module} imports {imported}, which is not exported with the model code")
        source = _IMPORT.sub(lambda match: f"from .{flat_name(match.group(1))} import", source)
        name = f"{flat_name(module)}.py"
        (directory / name).write_text(source, encoding="utf-8")
        written.append(name)
    return written


def auto_map(model_class_name: str) -> dict[str, str]:
    return {
        "AutoConfig": f"{flat_name('hf_heads.modeling.configuration')}.HeadsConfig",
        AUTO_CLASSES[model_class_name]: f"{flat_name(MODEL_MODULES[model_class_name])}.{model_class_name}",
    }


def export_for_hub(model, directory: str | Path, tokenizer=None, **save_kwargs) -> Path:
    """Write exactly what would be pushed to the Hub: weights, config (with `auto_map`), the custom
    code and, if given, the tokenizer."""
    directory = Path(directory)
    name = type(model).__name__
    if name not in AUTO_CLASSES:
        raise ValueError(f"model class {name!r} cannot be exported; exportable: {', '.join(AUTO_CLASSES)}")
    model.config.auto_map = auto_map(name)
    try:
        model.save_pretrained(directory, **save_kwargs)
    finally:
        del model.config.auto_map
    write_code(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return directory
