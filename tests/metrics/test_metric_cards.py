"""What each shipped `evaluate` module tells its user (description, citation, inputs, features, links) is word for word
the committed record, for every configuration a module has.

After a deliberate change to a module's documentation or features, rewrite the record with
`HF_HEADS_REWRITE_METRIC_INFO=1 pytest tests/metrics/test_metric_cards.py` and read the diff before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hf_heads.metrics import METRICS, load_metric

RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "metric_info.json"
CONFIGS = {"accuracy": ["multilabel"], "f1": ["multilabel"], "precision": ["multilabel"], "recall": ["multilabel"]}
CONFIGS["perplexity"] = ["nll"]


def _types(features):
    """A feature as plain data, whatever `datasets`' release names its classes: a dtype's name, a list of one item
    type, a dict of fields."""
    if isinstance(features, dict):
        return {key: _types(value) for key, value in features.items()}
    if isinstance(features, list):
        return [_types(value) for value in features]
    inner = getattr(features, "feature", None)  # datasets.List / Sequence
    return [_types(inner)] if inner is not None else features.dtype


def _info(name: str, config: str | None) -> dict:
    info = load_metric(name, config).info
    return {
        "module_type": info.module_type,
        "description": info.description,
        "citation": info.citation,
        "inputs_description": info.inputs_description,
        "features": _types(info.features),
        "homepage": info.homepage,
        "license": info.license,
        "codebase_urls": info.codebase_urls,
        "reference_urls": info.reference_urls,
    }


def test_every_metric_modules_information_is_the_committed_record():
    found = {
        f"{name}:{config or 'default'}": _info(name, config)
        for name in METRICS
        for config in [None, *CONFIGS.get(name, [])]
    }
    if os.environ.get("HF_HEADS_REWRITE_METRIC_INFO") == "1":
        RECORD.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    assert sorted(found) == sorted(record)
    for key, info in found.items():
        for field, value in info.items():
            assert value == record[key][field], f"{key}: {field}"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_configuration_of_a_metric_has_features_of_its_own(name):
    """A multilabel (or nll) configuration takes other inputs than the default one."""
    default = _info(name, None)["features"]
    assert all(_info(name, config)["features"] != default for config in CONFIGS[name])
