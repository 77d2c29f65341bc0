"""Steps every run script shares: argument parsing, output-dir safety, built-in tiny backbones,
local/Hub/bundled data, metrics, and the end-of-run artefacts (plots, card, Hub export)."""

from __future__ import annotations

import json
import os
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

TINY_BACKBONES = {
    "tiny-gpt2": {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 512},
    "tiny-llama": {
        "model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 512,
    },
}  # fmt: skip


@dataclass
class RunArguments:
    """What a run does with its output directory and where its results go."""

    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Allow writing into an output_dir that already holds a run."}
    )
    hub_export_dir: str | None = field(
        default=None,
        metadata={
            "help": "Offline stand-in for --push_to_hub: write exactly what would be pushed into this directory."
        },
    )


class UsageError(ValueError):
    """A bad command line or input: reported as one line, exit status 2."""


def parse_args(dataclass_types: tuple, argv: list[str] | None = None):
    """HfArgumentParser over `dataclass_types`; a single `.json` argument is read as a config file.
    Any argument problem raises `UsageError` (one clear line, never a traceback)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = HfArgumentParser(dataclass_types)
    try:
        if len(argv) == 1 and argv[0].endswith(".json"):
            return parser.parse_json_file(json_file=Path(argv[0]).resolve())
        *outs, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except SystemExit as err:
        raise UsageError(f"invalid arguments (exit {err.code}); see --help") from None
    except (ValueError, TypeError) as err:
        raise UsageError(str(err).splitlines()[0]) from None
    if unknown:
        raise UsageError(f"unknown arguments: {' '.join(unknown)}")
    return tuple(outs)


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
    from transformers.trainer_utils import get_last_checkpoint

    if resume in (True, "True", "true"):
        path = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    else:
        path = str(resume)
    if path is None or not (Path(path) / "config.json").is_file():
        raise UsageError(f"--resume_from_checkpoint={resume!r}: no checkpoint with a config.json found (at {path})")
    saved = json.loads((Path(path) / "config.json").read_text(encoding="utf-8")).get("head")
    if saved != head:
        raise UsageError(
            f"--resume_from_checkpoint={path!r} was trained with head {saved}, but this run asks for head {head}"
        )
    return path


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def save_json(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")


def main_wrapper(main) -> None:
    """Run `main()`; a `UsageError`/`ValueError` from bad input prints one line and exits with status 2
    (set HF_HEADS_TRACEBACK=1 to see the traceback instead)."""
    try:
        main()
    except (UsageError, ValueError, FileNotFoundError, ModuleNotFoundError) as err:
        if os.environ.get("HF_HEADS_TRACEBACK"):
            raise
        print(f"error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        sys.exit(2)
