"""HeadsTrainer's additions against naive references: word counts over a training set of many batches, perplexity
logged only where the eval loss is an NLL, and accuracy@k reported under the prefix of the loop that computed it."""

import math

import pytest
import torch
from conftest import seq2seq_batch, tiny_enc_dec_config, tiny_llama_config
from datasets import Dataset
from test_run_clm import _lm_dataset

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsTrainer, HeadsTrainingArguments
from hf_heads.data import label_counts


def test_label_counts_of_a_dataset_longer_than_one_batch():
    """label_counts reads the dataset 1000 rows at a time: every batch counts, not only the last one, summed in
    float64 (exact past 2**24 labels of a class, where float32 stops counting one by one)."""
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 7, (2500, 3), generator=g)
    labels[::5, 0] = -100
    got = label_counts(Dataset.from_dict({"labels": labels.tolist()}), 7)
    kept = labels[labels != -100]
    assert got.dtype == torch.float64 and got.tolist() == [float((kept == c).sum()) for c in range(7)]
    assert got.sum() == kept.numel()


def _trainer(tmp_path, head: dict) -> HeadsTrainer:
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
    args = HeadsTrainingArguments(
        output_dir=str(tmp_path),
        per_device_eval_batch_size=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        eval_accuracy_top_k=[1, 3],
    )
    return HeadsTrainer(model=model, args=args, eval_dataset=_lm_dataset(n=6))


def test_a_trainer_given_no_arguments_evaluates_with_the_transformers_defaults(tmp_path, monkeypatch):
    """HeadsTrainer(model=...) without `args` takes transformers' default arguments, as the Trainer does (no label
    smoothing among them, so nothing to refuse)."""
    monkeypatch.chdir(tmp_path)  # the default output directory is relative
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"}))
    trainer = HeadsTrainer(model=model, eval_dataset=_lm_dataset(n=6))
    assert trainer.args.label_smoothing_factor == 0.0
    assert math.isfinite(trainer.evaluate()["eval_loss"])


def test_perplexity_is_logged_for_an_nll_eval_loss_only(tmp_path):
    """exp(eval_loss) is a perplexity when the eval loss is the NLL of the inference distribution (softmax; sparse:
    the NLL of its truncated distribution, eq. 4), not for a continuous head, whose eval loss is its vMF / margin
    training loss over embeddings."""
    softmax = _trainer(tmp_path / "softmax", {"family": "softmax"}).evaluate()
    assert softmax["eval_perplexity"] == pytest.approx(math.exp(softmax["eval_loss"]))
    sparse = _trainer(tmp_path / "sparse", {"family": "sparse", "k": 3}).evaluate()
    assert sparse["eval_perplexity"] == (
        math.inf if sparse["eval_loss"] == math.inf else pytest.approx(math.exp(sparse["eval_loss"]))
    )
    torch.manual_seed(0)
    head = {"family": "continuous", "loss": "vmf", "embedding_dim": 8}
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config(), head=head))
    model.head.set_embedding_table(torch.randn(50, 8, generator=torch.Generator().manual_seed(1)))
    x, mask, y = seq2seq_batch()
    data = Dataset.from_dict({"input_ids": x.tolist(), "attention_mask": mask.tolist(), "labels": y.tolist()})
    args = HeadsTrainingArguments(
        output_dir=str(tmp_path / "continuous"),
        per_device_eval_batch_size=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    continuous = HeadsTrainer(model=model, args=args, eval_dataset=data).evaluate()
    assert "eval_loss" in continuous and not any(key.endswith("perplexity") for key in continuous)


def test_predict_reports_accuracy_at_k_under_its_own_prefix(tmp_path):
    """`predict(metric_key_prefix="test")` reports test_accuracy@k (the same numbers as evaluate() on the same data),
    never an eval_ key."""
    trainer = _trainer(tmp_path, {"family": "softmax"})
    evaluated = trainer.evaluate()
    predicted = trainer.predict(trainer.eval_dataset, metric_key_prefix="test").metrics
    assert not any(key.startswith("eval_") for key in predicted)
    for k in (1, 3):
        assert predicted[f"test_accuracy@{k}"] == pytest.approx(evaluated[f"eval_accuracy@{k}"])
    assert 0.0 <= predicted["test_accuracy@1"] <= predicted["test_accuracy@3"] <= 1.0


def test_a_transformers_model_trains_and_evaluates_under_heads_trainer_with_its_perplexity(tmp_path):
    """A plain transformers causal LM (no head): HeadsTrainer trains and evaluates it as the Trainer does, and logs
    its perplexity, exp(eval_loss), as for any language model."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama_config())
    args = HeadsTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=1,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
    )
    before = model.lm_head.weight.detach().clone()
    trainer = HeadsTrainer(model=model, args=args, train_dataset=_lm_dataset(n=4), eval_dataset=_lm_dataset(n=4))
    trainer.train()
    assert not torch.equal(model.lm_head.weight, before)
    metrics = trainer.evaluate()
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]))
    assert not any("accuracy" in key for key in metrics)


def test_training_a_head_that_needs_word_counts_without_a_training_set_is_refused(tmp_path):
    torch.manual_seed(0)
    head = {"family": "margin", "margin": "cos", "m": 0.1, "word_norm": "log-unigram"}
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
    args = HeadsTrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to="none", use_cpu=True,
                                  disable_tqdm=True, save_strategy="no")  # fmt: skip
    trainer = HeadsTrainer(model=model, args=args)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as refused:
        trainer.train()
    assert str(refused.value) == "this head needs word counts: give a train_dataset or call model.set_word_counts(...)"
    assert not model.head.has_word_counts
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
