"""Every flag hf_heads' run scripts define — its default, choices and help text — is the committed record (not its
type: transformers' HfArgumentParser rewrites a field's annotation in place, differently across releases).

Covers the argument classes of hf_heads.cli, of the run scripts and hf_heads.training's (the head flags and the run
defaults), not the fields they inherit from transformers' `TrainingArguments`. After a deliberate change, rewrite the
record with `HF_HEADS_REWRITE_ARGUMENTS=1 pytest tests/cli/test_argument_record.py` and read the diff before
committing it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from test_api_record import _default
from test_cli_guards import _argument_classes
from transformers import Seq2SeqTrainingArguments

from hf_heads.training.arguments import HeadsSeq2SeqTrainingArguments, HeadsTrainingArguments

RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "run_arguments.json"
UPSTREAM = {f.name: f for f in dataclasses.fields(Seq2SeqTrainingArguments)}


def _own(field: dataclasses.Field) -> bool:
    """A field hf_heads defines: not transformers' as it is (a changed default or help text is hf_heads')."""
    upstream = UPSTREAM.get(field.name)
    return upstream is None or (_default(upstream), upstream.metadata) != (_default(field), field.metadata)


def _record() -> dict:
    found = [*_argument_classes().values(), HeadsTrainingArguments, HeadsSeq2SeqTrainingArguments]
    classes = {f"{cls.__module__.removeprefix('_script_')}.{cls.__qualname__}": cls for cls in found}  # each once
    record = {}
    for where, cls in sorted(classes.items()):
        record[where] = {
            f.name: {
                "default": _default(f),
                **{key: str(value) for key, value in sorted(f.metadata.items())},
            }
            for f in dataclasses.fields(cls)
            if _own(f)
        }
    return record


def test_every_flag_of_the_run_scripts_is_the_committed_record():
    found = _record()
    if os.environ.get("HF_HEADS_REWRITE_ARGUMENTS") == "1":
        RECORD.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    assert sorted(found) == sorted(record)
    for where, fields in found.items():
        assert sorted(fields) == sorted(record[where]), where
        for name, field in fields.items():
            assert field == record[where][name], f"{where}.{name}"
