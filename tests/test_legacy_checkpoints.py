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
