"""Names that moved keep working from their old paths until 0.3, each with a FutureWarning that names the new one."""

import importlib
import sys

import pytest


def _import_fresh(name: str, monkeypatch):
    """Import `name` as a first import would (its module-level warning fires again)."""
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_integrations_trl_reexports_the_trainer_beside_heads_trainer(monkeypatch):
    pytest.importorskip("trl")
    from hf_heads.training import trl

    with pytest.warns(FutureWarning, match=r"hf_heads\.training\.trl .*removed in 0\.3"):
        old = _import_fresh("hf_heads.integrations.trl", monkeypatch)
    assert old.HeadsSFTTrainer is trl.HeadsSFTTrainer and old.check_sft_options is trl.check_sft_options
