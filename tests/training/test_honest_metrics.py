"""HeadsTrainer's logs say what they measure: perplexity only for language models, the training criterion named
beside `loss`, and the NLL of training batches (comparable with `eval_loss`) where the criterion is something
else."""

import logging
import math

import pytest
import torch
from conftest import tiny_llama_config
from datasets import Dataset
from transformers import BertConfig, HfArgumentParser, LlamaForCausalLM

from hf_heads import (
    HeadsConfig,
    HeadsForCausalLM,
    HeadsForSequenceClassification,
    HeadsTrainer,
    HeadsTrainingArguments,
)
from hf_heads.losses.presets import sparse_linear_cross_entropy

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
    """Plain cross-entropy is the eval NLL already; the sparse head's NLL is infinite wherever a label falls outside
    its top k (its evaluation says how often, `eval_in_top_k`): the criterion is named, no `train_nll` is computed."""
    logs = _train_logs(tmp_path, _lm(head), _lm_data(), max_steps=1)
    assert logs[0]["train_criterion"] == criterion and "train_nll" not in logs[0] and "loss" in logs[0]


def _sparse_script_run(tmp_path, argv: list[str]) -> tuple[dict, HeadsForCausalLM, dict]:
    """What transformers' run_clm.py does with the one-line swap: parse the flags, wrap the checkpoint, evaluate,
    print perplexity = math.exp(eval_loss)."""
    path = tmp_path / "base"
    torch.manual_seed(0)
    LlamaForCausalLM(tiny_llama_config()).save_pretrained(path)
    common = ["--output_dir", str(tmp_path / "out"), "--report_to", "none", "--use_cpu", "true"]
    common += ["--per_device_eval_batch_size", "3", "--disable_tqdm", "true"]
    (training_args,) = HfArgumentParser(HeadsTrainingArguments).parse_args_into_dataclasses(args=[*argv, *common])
    model = HeadsForCausalLM.from_pretrained(str(path))
    data = _lm_data()
    metrics = HeadsTrainer(model=model, args=training_args, eval_dataset=data).evaluate()
    try:
        metrics["perplexity"] = math.exp(metrics["eval_loss"])  # run_clm's line
    except OverflowError:
        metrics["perplexity"] = float("inf")
    return metrics, model, data


def _truncated_nll(model, data, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(−log p(label) under the top-k truncated softmax of the model's full logits, the label's rank), per position."""
    ids = torch.tensor(data["input_ids"])
    with torch.no_grad():
        hidden = model.backbone(input_ids=ids).last_hidden_state[:, :-1]
        z = hidden @ model.head.weight.T + (0 if model.head.bias is None else model.head.bias)  # (B, T-1, V)
    labels = ids[:, 1:]
    target = z.gather(-1, labels[..., None]).squeeze(-1)
    rank = (z > target[..., None]).sum(-1)  # classes scored above the label
    nll = z.topk(k, dim=-1).values.logsumexp(-1) - target
    return torch.where(rank < k, nll, torch.full_like(nll, float("inf"))), rank


@pytest.mark.parametrize("k", [3, 61])  # 61: every class (the vocabulary), so every label inside
def test_a_script_prints_the_sparse_models_own_perplexity(tmp_path, k):
    """run_clm's perplexity line is exp of `eval_loss`: a sparse head's eval loss is the NLL of its truncated
    distribution (eq. 4), so the line prints that distribution's perplexity — infinite once a label falls outside
    its top k — and the evaluation reports eq. 5's loss (`eval_sparse_loss`) and the share of labels inside the top k
    (`eval_in_top_k`) beside it, which HeadsTrainer's own logs show as eval_perplexity too."""
    metrics, model, data = _sparse_script_run(tmp_path, ["--head", "sparse", "--k", str(k)])
    nll, rank = _truncated_nll(model, data, k)
    inside = float((rank < k).double().mean())
    assert metrics["eval_in_top_k"] == pytest.approx(inside)
    assert metrics["eval_loss"] == pytest.approx(float(nll.mean()), rel=1e-5)
    if k == 3:
        assert 0 < inside < 1 and metrics["perplexity"] == math.inf
        assert math.isfinite(metrics["eval_sparse_loss"]) and metrics["eval_perplexity"] == math.inf
    else:
        assert inside == 1.0 and metrics["perplexity"] == pytest.approx(metrics["eval_perplexity"])
        assert metrics["perplexity"] == pytest.approx(math.exp(float(nll.mean())), rel=1e-5)
    ids = torch.tensor(data["input_ids"])
    hidden = model.backbone(input_ids=ids).last_hidden_state[:, :-1]
    with torch.no_grad():
        eq5 = sparse_linear_cross_entropy(hidden, model.head.weight, model.head.bias, ids[:, 1:], k)
    assert metrics["eval_sparse_loss"] == pytest.approx(float(eq5), rel=1e-5)


def test_a_sparse_head_over_fewer_classes_than_k_says_it_is_softmax(caplog):
    """The default k = 20 on a 5-class task keeps every logit: the head is plain softmax there, and says so."""
    with caplog.at_level(logging.WARNING, logger="hf_heads.heads.sparse"):
        _classifier({"family": "sparse"})
    assert "sparse head with k=20 and decode_k=20 over 5 classes keeps every logit" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_heads.heads.sparse"):
        _classifier({"family": "sparse", "k": 3, "decode_k": 5})
    assert "decode_k=5 over 5 classes" in caplog.text and "k=3" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_heads.heads.sparse"):
        _classifier({"family": "sparse", "k": 3})
    assert caplog.text == ""


def test_each_training_log_carries_the_heads_diagnostics_of_that_step(tmp_path):
    """Beside every training `loss` the Trainer's logs carry the head's diagnostics (output-vector norms, the sampled
    head's log-normaliser) as the head reports them when the entry is logged, rounded to 4 decimals as `train_nll`
    is."""
    model = _lm(SAMPLED_BCE)
    reported, diagnostics = [], model.head.diagnostics
    model.head.diagnostics = lambda: reported.append(diagnostics()) or reported[-1]
    logs = _train_logs(tmp_path, model, _lm_data(), max_steps=2)
    assert len(logs) == len(reported) == 2 and reported[0] != reported[1]  # the head changed in between
    for entry, values in zip(logs, reported, strict=True):
        assert {"head/weight_norm_mean", "head/weight_norm_std"} <= set(values)
        assert {key: entry[key] for key in values} == {key: round(value, 4) for key, value in values.items()}
        assert any(round(value, 4) != value for value in values.values())  # rounding shows
