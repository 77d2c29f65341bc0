"""The built-in options a user can set — every head family's options and every registered component's parameters,
their types and defaults, the paper each head names and what its inference logits are — are the committed record.

After a deliberate change, rewrite the record with `HF_HEADS_REWRITE_API=1 pytest tests/heads/test_api_record.py` and
read the diff (and the CHANGELOG) before committing it: a changed default changes every model trained without it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from hf_heads.components import REGISTRIES
from hf_heads.heads.registry import FAMILIES

RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "api_record.json"


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return repr(field.default_factory())
    return "(required)"


def _fields(cls: type) -> dict:
    return {f.name: {"type": str(f.type), "default": _default(f)} for f in dataclasses.fields(cls) if f.init}


def _built_in(cls: type) -> bool:
    return cls.__module__.startswith("hf_heads.")


def _record() -> dict:
    families = {
        name: {
            "options": _fields(family.options),
            "paper": str(family.head.paper),
            "logits_note": family.head.logits_note if isinstance(family.head.logits_note, str) else "(per head)",
        }
        for name, family in FAMILIES.items()
        if _built_in(family.head)
    }
    components = {
        kind: {
            name: {
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "parameters": _fields(cls) if dataclasses.is_dataclass(cls) else {},
                "example": repr(getattr(cls, "example", {})),
            }
            for name, cls in registry.items()
            if _built_in(cls)
        }
        for kind, registry in REGISTRIES.items()
    }
    return {"families": families, "components": components}


def test_the_built_in_options_and_their_defaults_are_the_committed_record():
    found = _record()
    if os.environ.get("HF_HEADS_REWRITE_API") == "1":
        RECORD.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    for part in ("families", "components"):
        assert sorted(found[part]) == sorted(record[part]), part
        for name, entry in found[part].items():
            assert entry == record[part][name], f"{part}: {name}"
