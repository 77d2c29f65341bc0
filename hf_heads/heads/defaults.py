"""The head of the run: the head section given on the command line, for the model classes to read.

A transformers example script parses its arguments first and builds its model afterwards, with
`AutoModelFor….from_pretrained(name, config=config)` or `from_config(config)`, calls that take no head. With
`HeadsTrainingArguments` in the script's `HfArgumentParser`, the parsed arguments register themselves here
(`set_run_head`), and the hf_heads model classes build a base checkpoint or a backbone config with the head they
name (`run_head`). The arguments last created in the process are the run's; they are held by a weak reference, so
the run's head lives exactly as long as its arguments do, and arguments without head flags name no head.
"""

from __future__ import annotations

import weakref

_run: weakref.ref | None = None


def set_run_head(arguments) -> None:
    """Make `arguments` (an object with `head_flags_given()` and `head_config()`, e.g. `HeadsTrainingArguments`)
    the run's: `run_head()` answers with their head section while they exist."""
    global _run
    _run = weakref.ref(arguments)


def run_head() -> dict | None:
    """The head section of the run's arguments when they set a head flag; None otherwise (the family's default,
    softmax, applies)."""
    arguments = _run() if _run is not None else None
    if arguments is None or not arguments.head_flags_given():
        return None
    return arguments.head_config()
