"""A run's output directory and the head it keeps: a run does not write over another unless asked, and a resumed
checkpoint or a reopened hf_heads model must have been trained with the head the run asks for."""

from __future__ import annotations

import json
from pathlib import Path

from transformers.trainer_utils import get_last_checkpoint

from hf_heads.cli.errors import UsageError
from hf_heads.heads import head_dict
from hf_heads.heads.registry import same_head


def check_output_dir(output_dir: str, overwrite: bool, resume: str | bool | None) -> None:
    """Refuse to write into a directory that holds another run (unless asked to overwrite or resume)."""
    path = Path(output_dir)
    if path.is_dir() and any(path.iterdir()) and not overwrite and not resume:
        raise UsageError(
            f"output_dir={output_dir!r} already holds files; pass --overwrite_output_dir to replace them "
            "or --resume_from_checkpoint to continue that run"
        )


def resolve_checkpoint(output_dir: str, resume: str | bool | None, head: dict) -> str | None:
    """The checkpoint to resume from (`True` means the newest in `output_dir`), after checking that it
    was trained with the same head section: resuming a margin run as a softmax run is refused."""
    if resume in (None, False, "False", "false", ""):
        return None
    if resume in (True, "True", "true"):
        path = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    else:
        path = str(resume)
    if path is None or not (Path(path) / "config.json").is_file():
        raise UsageError(f"--resume_from_checkpoint={resume!r}: no checkpoint with a config.json found (at {path})")
    saved = saved_head(path)
    if not same_head(saved, head):
        raise UsageError(
            f"--resume_from_checkpoint={path!r} was trained with head {saved}, but this run asks for head {head}"
        )
    return path


def saved_head(name_or_path: str) -> dict | None:
    """The head section of a local hf_heads model directory (None for any other model)."""
    config = Path(name_or_path) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    if data.get("model_type") != "hf_heads" or data.get("head") is None:
        return None
    return head_dict(data["head"])  # every option filled in, so a directory saved before an option existed compares


def resolve_head(name_or_path: str, requested: dict, flags_given: bool, change_head: bool = False) -> dict:
    """The head a run uses: the flags', or an hf_heads model's saved head; flags asking for another head are refused
    unless `--change_head`."""
    saved = saved_head(name_or_path)
    if change_head and (saved is None or not flags_given):
        raise UsageError(
            "--change_head continues a trained hf_heads model with the head the head flags give: "
            + (f"--model_name_or_path={name_or_path!r} is no hf_heads model" if saved is None else "give them")
        )
    if saved is None or change_head:
        return requested
    if flags_given and not same_head(saved, requested):
        raise UsageError(
            f"--model_name_or_path={name_or_path!r} is an hf_heads model with head {saved}, but the head flags ask "
            f"for {requested}; drop the head flags to use its head, pass --change_head to continue it with the "
            "flags' head, or start from its base model"
        )
    return saved


def load_trained(model_class, name_or_path: str, head: dict, change_head: bool):
    """A trained hf_heads model, with `head` in place of its own when `change_head` (its head tensors must all
    load)."""
    if not change_head:
        return model_class.from_pretrained(name_or_path)
    try:
        return model_class.from_pretrained(name_or_path, head=head)
    except ValueError as err:
        raise UsageError(f"--change_head: {err}") from None
