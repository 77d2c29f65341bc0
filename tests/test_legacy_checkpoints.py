"""Checkpoints written by an earlier hf_heads (tests/fixtures/legacy, made by make_legacy_checkpoints.py from
commit a62673e) load unchanged with today's code and predict the same logits, for every family and task."""

from pathlib import Path

import pytest
import torch
from fixtures.make_legacy_checkpoints import CASES, inputs

from hf_heads import HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification

LEGACY = Path(__file__).parent / "fixtures" / "legacy"
CLASSES = {"causal": HeadsForCausalLM, "seq2seq": HeadsForSeq2SeqLM, "classification": HeadsForSequenceClassification}


@pytest.mark.parametrize("name", sorted(CASES))
def test_legacy_checkpoint_loads_and_predicts_the_same_logits(name):
    task, head = CASES[name]
    expected = torch.load(LEGACY / name / "expected_logits.pt")
    model = CLASSES[task].from_pretrained(LEGACY / name).eval()
    assert model.config.head["family"] == head["family"]
    with torch.no_grad():
        logits = model(**inputs(task)).logits
    torch.testing.assert_close(logits, expected["logits"], rtol=1e-5, atol=1e-5)


def test_run_scripts_compare_a_legacy_head_section_with_todays_flags():
    """A run directory saved before an option existed (no `warm_start_gain` / `decode_k` in its head section) is the
    same head as today's flags for it: reopening or resuming it with those flags is not refused."""
    from hf_heads.cli.resume import resolve_head, same_head, saved_head
    from hf_heads.heads import head_dict

    head = CASES["causal-margin"][1]
    saved = saved_head(str(LEGACY / "causal-margin"))
    assert saved == head_dict(head) and "warm_start_gain" in saved
    assert resolve_head(str(LEGACY / "causal-margin"), head_dict(head), flags_given=True) == saved
    assert same_head({**saved, "warm_start_gain": 0.3}, saved)  # fitted by from_base, not a user's choice
    assert not same_head({**saved, "m": 0.3}, saved)
