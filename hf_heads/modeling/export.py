"""The model code saved with every model: `config.json` gets an `auto_map` and the directory gets the code the model
needs, so that `AutoModelFor….from_pretrained(dir, trust_remote_code=True)` works where hf_heads is not installed.
`HeadsPreTrainedModel.save_pretrained` calls `save_with_code`; `export_for_hub` adds the tokenizer.

The code is copied as flat modules (`hf_heads_losses_margin.py`, ...) with their `from hf_heads.x.y import z` lines
rewritten to relative imports, which transformers' dynamic module loader follows. The modules are found by following
those imports from the model classes, so a new module needs no list to be updated.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import logging
from collections.abc import Callable
from pathlib import Path

from hf_heads.heads.registry import COPIED_FROM

logger = logging.getLogger(__name__)

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
CONFIG_MODULE = "hf_heads.modeling.configuration"
# `push_to_hub` options of `save_pretrained` that `push_to_hub()` takes as well
_HUB_OPTIONS = ("commit_message", "create_pr", "private", "revision", "commit_description", "tags", "token")


def flat_name(module: str) -> str:
    return module.replace(".", "_")


def code_modules() -> tuple[str, ...]:
    """Every hf_heads module the model classes import, directly or not (sorted)."""
    return tuple(sorted(_code_sources()))


def _exportable(module: str, source: str) -> tuple[str, list[str]]:
    """`source` with its `from hf_heads.a.b import ...` statements (found by `ast`) rewritten to `from .hf_heads_a_b
    import ...`, and the modules they import; `RuntimeError` for an hf_heads import with no flat-module form."""
    lines, imported = source.splitlines(keepends=True), []
    for node in ast.walk(ast.parse(source)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if not any(name.split(".")[0] == "hf_heads" for name in names) or getattr(node, "level", 0):
            continue
        line = lines[node.lineno - 1]
        module_name = getattr(node, "module", None) or "hf_heads"
        new = line.replace(f"from {module_name} import", f"from .{flat_name(module_name)} import", 1)
        if isinstance(node, ast.Import) or module_name == "hf_heads" or new == line:
            raise RuntimeError(
                f"{module}, line {node.lineno}: `{line.strip()}` cannot be exported with the model "
                "code; write `from hf_heads.x.y import z` on one line"
            )
        lines[node.lineno - 1] = new
        imported.append(node.module)
    return "".join(lines), imported


def _only_family(source: str, family_module: str) -> str:
    """The source of `hf_heads.heads` (the package) importing one family module, `family_module`, of the lines that
    import the families (the others are not saved with the model: their registration is not needed to load it)."""
    lines = source.splitlines(keepends=True)
    start, end = lines.index("# isort: off\n"), lines.index("# isort: on\n")
    kept = [line for line in lines[start:end] if not line.startswith("from hf_heads.heads.")
            or line.startswith(f"from {family_module} import")]  # fmt: skip
    return "".join(lines[:start] + kept + lines[end:])


def _code_sources(
    components: dict | None = None, model_class_name: str | None = None, family: str | None = None
) -> dict[str, str]:
    """module -> source with rewritten imports, for the closure of the model classes' hf_heads imports and of the
    config's `components` modules (with `model_class_name` and `family`: only what that model runs). `RuntimeError` for
    an import that cannot be rewritten, or a component from a script (`__main__`)."""
    users = sorted(set((components or {}).values()))
    for option, module in (components or {}).items():
        if module == "__main__":
            raise RuntimeError(
                f"head.{option} is defined in a script (__main__), which cannot be saved with the model; move it "
                "into a module of its own"
            )
    models = MODEL_MODULES.values() if model_class_name is None else [MODEL_MODULES[model_class_name]]
    family_module = None
    if family is not None:
        from hf_heads.heads.registry import FAMILIES

        family_module = FAMILIES[family].head.__module__
    todo, sources = [CONFIG_MODULE, *models, *users], {}
    while todo:
        module = todo.pop()
        if module not in sources:
            source = inspect.getsource(importlib.import_module(module))
            if module == "hf_heads.heads" and family_module is not None:
                source = _only_family(source, family_module)
                if family_module.startswith("hf_heads."):
                    todo.append(family_module)
            sources[module], imported = _exportable(module, source)
            todo += imported
    for module in users:
        sources[module] += f"\n{COPIED_FROM} = {module!r}  # this copy's name where it was written (hf_heads export)\n"
    if users:
        sources[CONFIG_MODULE] += "\n# the components of this model's config from outside hf_heads (hf_heads export)\n"
        sources[CONFIG_MODULE] += "".join(
            f"from .{flat_name(module)} import {COPIED_FROM} as _component_{i}  # noqa: E402, F401\n"
            for i, module in enumerate(users)
        )
    return sources


def write_code(
    directory: str | Path,
    components: dict | None = None,
    model_class_name: str | None = None,
    family: str | None = None,
) -> list[str]:
    """Copy the model code (and the config's `components` modules) into `directory` as flat modules; returns the
    names."""
    sources = _code_sources(components, model_class_name, family)  # every source first: nothing written on an error
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for module, source in sorted(sources.items()):
        name = f"{flat_name(module)}.py"
        (directory / name).write_text(source, encoding="utf-8")
        written.append(name)
    return written


def auto_map(model_class_name: str) -> dict[str, str]:
    return {
        "AutoConfig": f"{flat_name(CONFIG_MODULE)}.HeadsConfig",
        AUTO_CLASSES[model_class_name]: f"{flat_name(MODEL_MODULES[model_class_name])}.{model_class_name}",
    }


def has_code(directory: str | Path) -> bool:
    """Whether a saved model directory loads with `trust_remote_code=True` without hf_heads (its config has an
    `auto_map` whose modules are in the directory)."""
    config = Path(directory) / "config.json"
    if not config.is_file():
        return False
    mapping = json.loads(config.read_text(encoding="utf-8")).get("auto_map") or {}
    files = {value.rsplit(".", 1)[0] + ".py" for value in mapping.values() if isinstance(value, str)}
    return bool(files) and all((Path(directory) / name).is_file() for name in files)


def model_class(model) -> type:
    """The model's own class: FSDP2's `fully_shard` swaps in a subclass `FSDP<name>` defined in torch."""
    cls = type(model)
    while cls.__module__.startswith("torch.distributed.") and len(cls.__bases__) > 1:
        cls = cls.__bases__[-1]
    return cls


def save_with_code(
    model, directory: str | Path, save: Callable, *, strict: bool = False, is_main_process: bool = True, **kwargs
):
    """`save(directory, ...)` with `auto_map` in the config, then the code next to it. A model whose code cannot be
    exported is saved without them, with a warning, or, with `strict`, refused (`ValueError`)."""
    name = model_class(model).__name__
    components = getattr(model.config, "components", None)
    family = (getattr(model.config, "head", None) or {}).get("family")
    try:
        if name not in AUTO_CLASSES:
            raise RuntimeError(f"model class {name!r} is not one of {', '.join(AUTO_CLASSES)}")
        _code_sources(components, name, family)
    except (OSError, TypeError, RuntimeError) as err:
        if strict:
            raise ValueError(f"cannot export the code of {name}: {err}") from err
        logger.warning("saving %s without its code (%s): it loads with `import hf_heads` only", directory, err)
        return save(directory, is_main_process=is_main_process, **kwargs)
    if kwargs.pop("push_to_hub", False):  # save here with the code, then push what `push_to_hub()` saves (the same)
        repo_id = kwargs.pop("repo_id", Path(directory).name)
        hub = {key: kwargs.pop(key) for key in _HUB_OPTIONS if key in kwargs}
        if "token" in hub:
            kwargs["token"] = hub["token"]
        result = save_with_code(model, directory, save, is_main_process=is_main_process, **kwargs)
        if is_main_process:
            model.push_to_hub(repo_id, **hub)
        return result
    had, previous = hasattr(model.config, "auto_map"), getattr(model.config, "auto_map", None)
    model.config.auto_map = auto_map(name)
    try:
        result = save(directory, is_main_process=is_main_process, **kwargs)
    finally:
        if had:
            model.config.auto_map = previous
        else:
            del model.config.auto_map
    if is_main_process:
        write_code(directory, components, name, family)
    return result


def export_for_hub(model, directory: str | Path, tokenizer=None, **save_kwargs) -> Path:
    """Write exactly what would be pushed to the Hub: weights, config (with `auto_map`), the custom
    code and, if given, the tokenizer."""
    from transformers import PreTrainedModel

    directory = Path(directory)
    save = functools.partial(PreTrainedModel.save_pretrained, model)
    save_with_code(model, directory, save, strict=True, **save_kwargs)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return directory
