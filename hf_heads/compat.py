"""hf_heads' own deprecated names and call forms, in one place: each keeps working, with a FutureWarning that names
its replacement, until the release `REMOVAL`, when this module's tables are emptied and the old modules deleted.

    moved names     `MOVED_NAMES`: {module: {old name: (what to use instead, the value)}}; such a module's
                    `__getattr__` is `moved_names("<its name>")` (PEP 562; by name: a saved copy of the module
                    runs under another `__name__`)
    moved modules   `MOVED_MODULES`: {old module: (its new home, {new module: names})}; the old module's body is
                    `globals().update(moved_module("<its name>"))`
    call forms      `positional_arguments` (MarginCrossEntropy's old positional order), `run_script_base_model`
                    (`write_model_card(base_model=<a run script's model name>)`), `keyword_rows_hook` (a head
                    family's loss hook written as `(hidden, labels, **rows)`), `renamed_keyword` (the losses' `spec`
                    for `scorer`, `logit_scale` for `logit_multiplier`) and `renamed_attribute`
                    (`MarginCrossEntropy.spec`)

(Names that moved between transformers releases are another matter: hf_heads.modeling.compat.)

It imports nothing of hf_heads when it is imported: a new home is imported when an old name is used, so every layer
can keep its old names without an import that points upwards (tests/test_layers.py lists these arrows).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import warnings
from collections.abc import Callable
from typing import Any

REMOVAL = "0.3"


def _attribute(module: str, name: str) -> Callable[[], Any]:
    return lambda: getattr(importlib.import_module(module), name)


def _head_families() -> dict[str, type]:
    heads = importlib.import_module("hf_heads.heads")
    return {name: entry.options for name, entry in heads.FAMILIES.items()}


def _option_help() -> Callable[[str], dict[str, str]]:
    family = importlib.import_module("hf_heads.heads").family

    def option_help(name: str) -> dict[str, str]:
        """{option: help text (default)} of a family."""
        out = {}
        for f in dataclasses.fields(family(name).options):
            default = f.default if not callable(f.default_factory) else f.default_factory()
            out[f.name] = f"{f.metadata.get('help', '')} (default: {default!r})"
        return out

    return option_help


def _margin_spec() -> Callable:
    scorer = importlib.import_module("hf_heads.losses.scorer")

    def MarginSpec(*args, logit_scale: float = 1.0, **options):  # noqa: N802 (its old name)
        """The `Scorer` of these options, with the argument order (margin, m, scale, word_norm, context_norm, gain,
        logit_scale, softcap) of the old name of `Scorer.from_options`; `logit_scale` is `logit_multiplier`."""
        if len(args) > 6:  # logit_scale (and softcap) given by position
            logit_scale, options = args[6], {**options, **dict(zip(["softcap"], args[7:], strict=False))}
        importlib.import_module("hf_heads.losses.transforms").check_transform(logit_scale, None, "logit_scale")
        return scorer.Scorer.from_options(*args[:6], logit_multiplier=logit_scale, **options)

    return MarginSpec


_MARGIN_SPEC = (
    "hf_heads.losses.Scorer.from_options (its keyword logit_multiplier is the old logit_scale)",
    _margin_spec,
)

MOVED_NAMES: dict[str, dict[str, tuple[str, Callable[[], Any]]]] = {
    "hf_heads.losses": {"MarginSpec": _MARGIN_SPEC},
    "hf_heads.losses.scorer": {"MarginSpec": _MARGIN_SPEC},
    "hf_heads.losses.margin": {"MarginSpec": _MARGIN_SPEC},
    "hf_heads.heads": {
        "HEAD_FAMILIES": (
            "hf_heads.heads.FAMILIES (family -> HeadFamily; the options class is its .options)",
            _head_families,
        ),
        "option_help": (
            "dataclasses.fields(hf_heads.heads.family(name).options) (each field's help text is in its metadata)",
            _option_help,
        ),
    },
    "hf_heads.training.cards": {  # the run scripts' model names and how a card names them
        name: (f"hf_heads.cli.backbones.{name}", _attribute("hf_heads.cli.backbones", name))
        for name in ("HUB_IDS", "BUILT_FROM_CONFIG")
    },
}

MOVED_MODULES: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "hf_heads.training.runs": (
        "the package hf_heads.cli (hf_heads.cli.backbones, .errors, .resume, .runs)",
        {
            "hf_heads.cli.backbones": (
                "PACKAGED_MODELS",
                "TINY_BACKBONES",
                "TINY_ENCODERS",
                "TINY_SEQ2SEQ",
                "packaged_model_path",
                "tiny_backbone_config",
            ),
            "hf_heads.cli.errors": ("UsageError", "load_hub_dataset", "loading_model", "main_wrapper"),
            "hf_heads.cli.resume": (
                "check_output_dir",
                "resolve_checkpoint",
                "resolve_head",
                "same_head",
                "saved_head",
            ),
            "hf_heads.cli.runs": (
                "RunArguments",
                "check_vocab",
                "ensure_word_counts",
                "finish_run",
                "load_local_files",
                "parse_args",
                "peak_rss_mib",
                "save_json",
                "train_block",
                "truncate_splits",
            ),
        },
    ),
    "hf_heads.integrations.trl": (
        "hf_heads.training.trl (import HeadsSFTTrainer from there)",
        {"hf_heads.training.trl": ("HeadsSFTTrainer", "check_sft_options")},
    ),
}


def moved_names(module: str) -> Callable[[str], Any]:
    """The `__getattr__` of `module`: each of its moved names (`MOVED_NAMES[module]`) with a FutureWarning, any other
    name an AttributeError."""
    table = MOVED_NAMES[module]

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        replacement, value = table[name]
        warnings.warn(
            f"{module}.{name} is deprecated and will be removed in {REMOVAL}; use {replacement}",
            FutureWarning,
            stacklevel=2,
        )
        return value()

    return __getattr__


def moved_module(module: str) -> dict[str, Any]:
    """The names an old module re-exports from its new home (with `__all__`), warning once per import (the frame
    that warns is the old module's body, whose importer the warning names)."""
    home, names = MOVED_MODULES[module]
    warnings.warn(f"{module} moved to {home} and will be removed in {REMOVAL}", FutureWarning, stacklevel=3)
    out: dict[str, Any] = {}
    for new, moved in names.items():
        source = importlib.import_module(new)
        out.update({name: getattr(source, name) for name in moved})
    return {**out, "__all__": list(out)}


def positional_arguments(owner: str, order: tuple[str, ...], args: tuple) -> dict[str, Any]:
    """{name: value} of arguments given in the old positional `order` of `owner` (a FutureWarning naming them); more
    than `order` holds is a TypeError."""
    if len(args) > len(order):
        raise TypeError(f"{owner} takes at most {len(order)} positional arguments")
    names = ", ".join(order[: len(args)])
    warnings.warn(
        f"{owner}'s positional arguments are deprecated and will be removed in {REMOVAL}: pass {names} by keyword",
        FutureWarning,
        stacklevel=3,
    )
    return dict(zip(order, args, strict=False))


def run_script_base_model(base_model: str) -> tuple[str, bool]:
    """Before 0.3, `write_model_card(base_model=...)` may still be a run script's model name (`tiny-gpt2`, `minilm`):
    (its Hub id or the name, whether it is built from a config), with a FutureWarning when it is one."""
    backbones = importlib.import_module("hf_heads.cli.backbones")  # the run scripts' names live there
    if base_model not in backbones.HUB_IDS and base_model not in backbones.BUILT_FROM_CONFIG:
        return base_model, False
    resolved = backbones.card_base_model(base_model)
    warnings.warn(
        f"write_model_card(base_model={base_model!r}) names a run script's model; pass "
        f"base_model={resolved['base_model']!r}, built_from_config={resolved['built_from_config']} "
        f"(hf_heads.cli.backbones.card_base_model gives both). Run-script names will not be recognised from {REMOVAL}",
        FutureWarning,
        stacklevel=3,
    )
    return resolved["base_model"], resolved["built_from_config"]


def keyword_rows_hook(cls: type, name: str, hook: Callable) -> Callable:
    """A head family's loss hook `name` as the heads call it, `hook(self, hidden, labels, rows)` with `rows` a
    `LossRows`: the hook itself, or, where it is written in the form of releases before 0.2, `(hidden, labels,
    **rows)` (no third positional parameter), a wrapper that passes it `**rows.kwargs()`, with a FutureWarning
    naming the class when the class is defined."""
    params = list(inspect.signature(hook).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 4 or any(p.kind is p.VAR_POSITIONAL for p in params):  # (self, hidden, labels, rows)
        return hook
    warnings.warn(
        f"{cls.__qualname__}.{name}(hidden, labels, **rows) is deprecated and will not be called so from {REMOVAL}: "
        "write it as (hidden, labels, rows), rows a hf_heads.losses.LossRows (pass rows.kwargs() to a loss function)",
        FutureWarning,
        stacklevel=4,
    )

    @functools.wraps(hook)
    def adapted(self, hidden, labels, rows):
        return hook(self, hidden, labels, **rows.kwargs())

    return adapted


def renamed_keyword(owner: str, old: str, new: str, value: Any, new_value: Any, new_default: Any) -> Any:
    """The value of `owner`'s keyword argument `new` where a caller gave it under its old name `old` (`value`), with
    a FutureWarning; `new` given too (`new_value` not its default) is a TypeError."""
    if new_value is not new_default and new_value != new_default:
        raise TypeError(f"{owner}: give {new} or its old name {old}, not both")
    message = f"{owner}({old}=...) is deprecated and will be removed in {REMOVAL}: use {new}=..."
    warnings.warn(message, FutureWarning, stacklevel=3)
    return value


def renamed_attribute(owner: str, old: str, new: str, value: Any) -> Any:
    """`value`, read through the old attribute name `old` of `owner` (now `new`), with a FutureWarning."""
    warnings.warn(
        f"{owner}.{old} is deprecated and will be removed in {REMOVAL}: use {owner}.{new}", FutureWarning, stacklevel=3
    )
    return value
