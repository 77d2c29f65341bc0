"""Checkpoints written by an earlier hf_heads (tests/fixtures/legacy, made by make_legacy_checkpoints.py from
commit a62673e) load unchanged with today's code and predict the same logits, for every family and task."""

from pathlib import Path

import pytest
import torch
from fixtures.make_legacy_checkpoints import CASES, inputs

from hf_heads import HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy"
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
    from hf_heads.cli.resume import resolve_head, saved_head
    from hf_heads.heads import head_dict
    from hf_heads.heads.registry import same_head

    head = CASES["causal-margin"][1]
    saved = saved_head(str(LEGACY / "causal-margin"))
    assert saved == head_dict(head) and "warm_start_gain" in saved
    assert resolve_head(str(LEGACY / "causal-margin"), head_dict(head), flags_given=True) == saved
    assert same_head({**saved, "warm_start_gain": 0.3}, saved)  # fitted by from_base, not a user's choice
    assert not same_head({**saved, "m": 0.3}, saved)


def test_a_trained_model_continues_with_another_head_only_when_asked(tmp_path):
    """`--change_head` (`from_pretrained(path, head=...)`): a softmax model fine-tuned with sparse-softmax loads its
    trained weight and bias into the sparse head and predicts the same top-1; without the flag, head flags that ask
    for another head are refused; a head that would drop a trained tensor (no bias) is refused."""
    from conftest import tiny_enc_dec_config

    from hf_heads import HeadsConfig
    from hf_heads.cli.errors import UsageError
    from hf_heads.cli.resume import load_trained, resolve_head
    from hf_heads.heads import head_dict

    torch.manual_seed(0)
    softmax = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config(), head={"family": "softmax"})).eval()
    softmax.save_pretrained(tmp_path)
    sparse = head_dict({"family": "sparse", "k": 5})
    with pytest.raises(UsageError, match="pass --change_head"):
        resolve_head(str(tmp_path), sparse, flags_given=True)
    with pytest.raises(UsageError, match="--change_head .* give them"):
        resolve_head(str(tmp_path), sparse, flags_given=False, change_head=True)
    with pytest.raises(UsageError, match="no hf_heads model"):
        resolve_head("tiny-bart", sparse, flags_given=True, change_head=True)
    head = resolve_head(str(tmp_path), sparse, flags_given=True, change_head=True)
    model = load_trained(HeadsForSeq2SeqLM, str(tmp_path), head, change_head=True).eval()
    assert model.config.head["family"] == "sparse" and model.config.head["k"] == 5
    assert torch.equal(model.head.weight, softmax.head.weight) and torch.equal(model.head.bias, softmax.head.bias)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        a, b = softmax(input_ids=ids, decoder_input_ids=ids).logits, model(input_ids=ids, decoder_input_ids=ids).logits
    assert torch.equal(a.argmax(-1), b.argmax(-1))
    no_bias = head_dict({"family": "softmax", "bias": False})
    with pytest.raises(UsageError, match="head.bias.*refusing to drop"):
        load_trained(HeadsForSeq2SeqLM, str(tmp_path), no_bias, change_head=True)
