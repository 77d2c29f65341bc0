"""HeadsTrainer's logs say what they measure: perplexity only for language models, the training criterion named
beside `loss`, and the NLL of training batches (comparable with `eval_loss`) where the criterion is something
else."""

import math

import pytest
import torch
from conftest import tiny_llama_config
from datasets import Dataset
from transformers import BertConfig

from hf_heads import (
    HeadsConfig,
    HeadsForCausalLM,
    HeadsForSequenceClassification,
    HeadsTrainer,
    HeadsTrainingArguments,
)

SAMPLED_BCE = {"family": "sampled", "criterion": "bce", "method": "mcs", "num_samples": 8, "noise": "uniform"}


def _args(tmp_path, **kw) -> HeadsTrainingArguments:
    fields = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=6,
        per_device_eval_batch_size=6,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        learning_rate=1e-3,
        logging_steps=1,
    )
    return HeadsTrainingArguments(**{**fields, **kw})


def _lm_data(n=6, length=12):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 61, (n, length), generator=g).tolist()
    return Dataset.from_dict({"input_ids": ids, "labels": ids})


def _lm(head: dict) -> HeadsForCausalLM:
    torch.manual_seed(0)
    return HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))


def _classifier(head: dict) -> HeadsForSequenceClassification:
    torch.manual_seed(0)
    bert = BertConfig(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return HeadsForSequenceClassification(HeadsConfig(backbone=bert.to_dict(), head=head, num_labels=5))


def _class_data(n=10):
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(4, 61, (n, 8), generator=g).tolist()
    return Dataset.from_dict({"input_ids": ids, "labels": torch.randint(0, 5, (n,), generator=g).tolist()})


def test_a_classifier_logs_no_perplexity(tmp_path):
    """A 5-class classifier's eval loss is an NLL per example: exp of it is no perplexity."""
    metrics = HeadsTrainer(model=_classifier({"family": "softmax"}), args=_args(tmp_path), eval_dataset=_class_data())
    metrics = metrics.evaluate()
    assert "eval_loss" in metrics and not any("perplexity" in key for key in metrics)


def test_a_language_model_still_logs_perplexity(tmp_path):
    metrics = HeadsTrainer(model=_lm({"family": "softmax"}), args=_args(tmp_path), eval_dataset=_lm_data()).evaluate()
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]))


def _train_logs(tmp_path, model, data, **kw) -> list[dict]:
    trainer = HeadsTrainer(model=model, args=_args(tmp_path, **kw), train_dataset=data)
    trainer.train()
    return [entry for entry in trainer.state.log_history if "loss" in entry]


def test_a_sampled_bce_loss_is_named_and_has_its_nll_beside_it(tmp_path):
    """The sampled BCE criterion is not an NLL: `loss` stays the Trainer's (the criterion), `train_criterion` says what
    it is, and `train_nll` is the NLL of the inference distribution on the window's first batch: the eval loss of
    that batch under the weights it was computed with."""
    model, data = _lm(SAMPLED_BCE), _lm_data()
    batch = {k: torch.tensor(data[k]) for k in ("input_ids", "labels")}
    with torch.no_grad():
        expected = float(model.eval()(**batch).loss)  # the whole dataset is the one batch; dropout is 0
    model.train()
    logs = _train_logs(tmp_path, model, data, max_steps=2)
    assert len(logs) == 2
    for entry in logs:
        assert entry["train_criterion"] == "sampled criterion bce-mcs, K=8"
        assert math.isfinite(entry["loss"]) and math.isfinite(entry["train_nll"])
        assert list(entry)[:3] == ["loss", "train_criterion", "train_nll"]  # read beside the loss
    assert logs[0]["train_nll"] == pytest.approx(expected, abs=2e-4)
    assert logs[0]["loss"] != logs[0]["train_nll"]  # two different quantities, each under its name


def test_a_margin_classifier_logs_its_criterion_and_nll_without_perplexity(tmp_path):
    logs = _train_logs(
        tmp_path, _classifier({"family": "margin", "margin": "cos", "m": 0.2}), _class_data(), max_steps=1
    )
    assert logs[0]["train_criterion"].startswith("margin softmax cross-entropy, cos")
    assert math.isfinite(logs[0]["train_nll"])
    assert not any("perplexity" in key for entry in logs for key in entry)


@pytest.mark.parametrize(
    ("head", "criterion"),
    [({"family": "softmax"}, "cross-entropy"), ({"family": "sparse", "k": 3}, "sparse-softmax loss, eq. 5, top-3")],
)
def test_a_loss_that_is_its_eval_loss_gets_no_second_number(tmp_path, head, criterion):
    """Plain cross-entropy is the eval NLL already, and the sparse head's eq. 5 is its eval loss (its truncated NLL is
    infinite outside the top k): the criterion is named, no `train_nll` is computed."""
    logs = _train_logs(tmp_path, _lm(head), _lm_data(), max_steps=1)
    assert logs[0]["train_criterion"] == criterion and "train_nll" not in logs[0] and "loss" in logs[0]
