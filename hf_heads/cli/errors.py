"""How a run script reports bad input: one line, exit status 2, never a traceback (`UsageError`, `main_wrapper`); a
model or dataset the Hub cannot give says what works offline; a head option from a flag is named by the flag.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets
import huggingface_hub
import transformers
from datasets.exceptions import DatasetNotFoundError
from huggingface_hub import constants

from hf_heads.cli.backbones import PACKAGED_MODELS
from hf_heads.validation import OptionError


class UsageError(ValueError):
    """A bad command line or input: reported as one line, exit status 2."""


def _offline() -> bool:
    """Whether the Hugging Face Hub is switched off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE / TRANSFORMERS_OFFLINE)."""
    flags = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    on = ("1", "ON", "YES", "TRUE")
    return bool(constants.HF_HUB_OFFLINE) or any(os.environ.get(flag, "").upper() in on for flag in flags)


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_hub_dataset(name: str, config_name: str | None, builtin: Iterable[str], flag: str = "--dataset_name"):
    """`datasets.load_dataset(name, config_name)`; a name the Hub cannot give is one `UsageError` listing the
    built-ins."""
    try:
        return datasets.load_dataset(name, config_name)
    except (ConnectionError, DatasetNotFoundError) as err:
        builtin = list(builtin)
        why = (
            "Hub datasets need a network (Hugging Face offline mode is on: HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)"
            if _offline()
            else "the Hub could not be reached"
            if isinstance(err, ConnectionError)
            else f"the Hub has no such dataset ({str(err).splitlines()[0]})"
        )
        raise UsageError(
            f"{flag}={name!r} is not a built-in corpus{_did_you_mean(name, builtin)}, and {why}; built-in corpora: "
            f"{', '.join(builtin)}; or give local files (--train_file / --validation_file)"
        ) from err


@contextmanager
def loading_model(flag: str, name: str, builtin: Iterable[str]) -> Iterator[None]:
    """Around `from_pretrained` of `name` (given by `flag`): a model transformers cannot find becomes one `UsageError`
    line that says what works offline."""
    try:
        yield
    except OSError as err:
        if isinstance(err, FileNotFoundError) and not _is_hub_error(err):
            raise
        if Path(name).exists():  # a local directory that is not a model: transformers' own first line says why
            raise UsageError(f"{flag}={name!r}: {str(err).splitlines()[0]}") from err
        builtin = list(builtin)
        reason = (
            "Hugging Face offline mode is on (HF_HUB_OFFLINE), so Hub ids load only from the local cache"
            if _offline()
            else "the Hub could not be reached or has no such model"
        )
        works = "a local directory" + (f" or a built-in model: {', '.join(builtin)}" if builtin else "")
        raise UsageError(
            f"{flag}={name!r} is not a local directory{_did_you_mean(name, builtin)}, and {reason}; "
            f"offline, use {works}"
        ) from err


def _is_hub_error(err: BaseException) -> bool:
    """Whether `err` was raised inside transformers / huggingface_hub / datasets (a model or file they could not
    find), as opposed to the script's own I/O."""
    tb, last = err.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return False
    filename = os.path.realpath(last.tb_frame.f_code.co_filename)
    return any(filename.startswith(folder) for folder in _hub_package_folders())


@functools.cache
def _hub_package_folders() -> tuple[str, ...]:
    """The installed transformers / huggingface_hub / datasets packages' folders (each ending in a separator): a
    user's own folder that happens to be named `datasets/` is none of them."""
    folders = []
    for module in (transformers, huggingface_hub, datasets):
        folders += [os.path.join(os.path.realpath(folder), "") for folder in module.__path__]
    return tuple(folders)


def _head_flags() -> dict[str, str]:
    """{head option: the flag that sets it} (`chunk_size` -> `--loss_chunk_size`)."""
    from hf_heads.training.arguments import FLAG_TO_OPTION

    return {option: f"--{flag}" for flag, option in FLAG_TO_OPTION.items()}


def _given(flag: str, argv: Iterable[str]) -> bool:
    return any(word == flag or word.startswith(f"{flag}=") for word in argv)


def flag_error(err: OptionError, argv: Iterable[str]) -> OptionError:
    """`err` as a run script's user should read it when the option came from a command-line flag: named by the flag,
    the options its message lists shown as the flags that set them (`allowed: chunk_size` becomes `flags:
    --loss_chunk_size`). Any other error (an option from a config file or a checkpoint) is returned as it is."""
    flags = _head_flags()
    option = err.field.removeprefix("head.")
    flag = flags.get(option)
    from_flag = err.name.startswith("--") or (
        flag is not None and err.name in (option, f"head.{option}") and _given(flag, argv)
    )
    if not from_flag:
        return err
    allowed = err.allowed
    before, sep, listed = allowed.rpartition("; allowed: ")
    names = [name.strip() for name in listed.split(",")]
    if sep and all(re.fullmatch(r"\w+", name) for name in names):  # a list of option names (values are quoted)
        allowed = f"{before}; flags: {', '.join(flags[name] for name in names if name in flags)}"
    renamed = {option: f for option, f in flags.items() if f != f"--{option}"}
    allowed = re.sub(
        r"(?<![\w-])(\w+)=", lambda m: f"{renamed[m[1]]}=" if m[1] in renamed else m[0], allowed
    )  # e.g. "needs chunk_size=..." in prose
    name = err.name if err.name.startswith("--") else flag
    return type(err)(err.field, err.value, allowed, name)


def _close_process_group() -> None:
    """Destroy a distributed run's default process group once `main` returned: left to interpreter shutdown, gloo's
    worker threads can abort a successful run (SIGABRT)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main_wrapper(main) -> None:
    """Run `main()`, then close the process group (after success only: a failed rank may leave others inside a
    collective); bad input (`UsageError`, `ValueError`, a model the Hub cannot give) prints one line and exits with
    status 2 (HF_HEADS_TRACEBACK=1 shows the traceback)."""
    try:
        main()
        _close_process_group()
    except (UsageError, ValueError, FileNotFoundError, ModuleNotFoundError) as err:
        if os.environ.get("HF_HEADS_TRACEBACK"):
            raise
        if isinstance(err, OptionError):
            err = flag_error(err, sys.argv[1:])
        print(f"error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:  # transformers / huggingface_hub could not find a model or file (e.g. a Hub id offline)
        if os.environ.get("HF_HEADS_TRACEBACK") or not _is_hub_error(err):
            raise
        offline = " (Hugging Face offline mode is on: Hub ids load only from the local cache)" if _offline() else ""
        print(
            f"error: {str(err).splitlines()[0]}{offline}; offline, models load from local directories, the "
            f"built-in tiny backbones and the packaged models ({', '.join(PACKAGED_MODELS)})",
            file=sys.stderr,
        )
        sys.exit(2)
