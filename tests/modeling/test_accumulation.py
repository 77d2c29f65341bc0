"""Exact gradient accumulation for every task model: `num_items_in_batch` (the Trainer's count of labelled positions
over all the micro-batches of one optimizer step) divides the summed loss in every model and family, and a
`HeadsTrainer` step over micro-batches equals one step over the whole batch."""

import pytest
import torch
from conftest import family_heads, tiny_bert_config, tiny_enc_dec_config, tiny_llama_config
from datasets import Dataset

from hf_heads import (
    HeadsConfig,
    HeadsForCausalLM,
    HeadsForSeq2SeqLM,
    HeadsForSequenceClassification,
    HeadsTrainer,
    HeadsTrainingArguments,
)

V, CLASSES = 40, 7
TASKS = {"causal": "causal-lm", "seq2seq": "seq2seq", "classification": "classification"}
HEADS = {task: family_heads(name, variants=True) for task, name in TASKS.items()}  # every family's examples
HEADS["classification"] = {  # fewer noise samples than the classes
    label: {**head, **({"num_samples": 3} if "num_samples" in head else {})}
    for label, head in HEADS["classification"].items()
}


def _model(task: str, head: dict):
    torch.manual_seed(0)
    if task == "causal":
        model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config(V), head=head))
    elif task == "seq2seq":
        model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart", V, no_dropout=True), head=head))
    else:
        config = HeadsConfig(backbone=tiny_bert_config(V, no_dropout=True), head=head, num_labels=CLASSES)
        model = HeadsForSequenceClassification(config)
    if model.head.uses_embedding_table:
        dim = model.head.options.embedding_dim
        model.head.set_embedding_table(torch.randn(V, dim, generator=torch.Generator().manual_seed(1)))
    elif model.head.needs_counts:
        model.set_word_counts(torch.arange(model.head.num_classes, 0, -1).double())
    return model


def _examples(task: str, n: int = 4) -> list[dict]:
    """n examples whose numbers of labelled positions differ (so the micro-batches of an accumulated step do)."""
    g = torch.Generator().manual_seed(2)
    rows = []
    for i in range(n):
        ids = torch.randint(4, V, (8,), generator=g)
        if task == "classification":
            rows.append({"input_ids": ids.tolist(), "labels": int(torch.randint(0, CLASSES, (), generator=g))})
            continue
        labels = (torch.randint(4, V, (6,), generator=g) if task == "seq2seq" else ids.clone()).tolist()
        cut = 2 + 2 * i  # example i keeps its first 2 + 2i labels
        rows.append({"input_ids": ids.tolist(), "labels": labels[:cut] + [-100] * (len(labels) - cut)})
    return rows


def _batch(rows: list[dict]) -> dict:
    return {key: torch.tensor([row[key] for row in rows]) for key in rows[0]}


@pytest.mark.parametrize(
    ("task", "family"), [(t, f) for t, heads in HEADS.items() for f in heads], ids=lambda x: str(x)
)
def test_num_items_in_batch_divides_the_summed_loss_in_every_task_model(task, family):
    """loss(num_items_in_batch=k) · k is the sum of the per-position losses, whatever the batch's own count, in
    training (the criterion) and in evaluation (the eval loss)."""
    model = _model(task, HEADS[task][family])
    batch = _batch(_examples(task))
    shift = 1 if task == "causal" else 0  # a causal LM predicts labels[:, 1:]
    labels = batch["labels"]
    count = int((labels[..., shift:] != -100).sum()) if labels.dim() > 1 else labels.numel()
    for training in (True, False):
        model.train(training)
        torch.manual_seed(5)  # the sampled head's noise draw
        mean = model(**batch).loss
        torch.manual_seed(5)
        divided = model(**batch, num_items_in_batch=torch.tensor(3 * count)).loss
        torch.manual_seed(5)
        divided_int = model(**batch, num_items_in_batch=3 * count).loss
        torch.testing.assert_close(divided, mean / 3)
        torch.testing.assert_close(divided_int, mean / 3)


def _trained_parameters(task: str, family: str, tmp_path, batch_size: int, accumulation: int) -> dict:
    model = _model(task, HEADS[task][family])
    args = HeadsTrainingArguments(
        output_dir=str(tmp_path / f"b{batch_size}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=0.5,
        optim="sgd",
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        seed=3,
        dataloader_drop_last=False,
    )
    rows = _examples(task)
    trainer = HeadsTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows))
    trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(range(len(rows)))
    torch.manual_seed(5)
    trainer.train()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize(
    ("task", "family"),
    [
        ("causal", "softmax"),
        ("causal", "margin-cos-log-unigram"),
        ("seq2seq", "softmax"),
        ("classification", "softmax"),
    ],
)
def test_accumulated_micro_batches_train_as_one_batch(task, family, tmp_path):
    """`HeadsTrainer`: one optimizer step over 2 micro-batches of 2 examples (gradient_accumulation_steps=2) leaves
    the same parameters as one step over the 4 examples at once, although the micro-batches hold different numbers
    of labelled positions (SGD, constant learning rate, no clipping: the update is the gradient itself). Margin
    heads with max-norm are left out: g(i) is the maximum ‖h‖ over the batch (margin paper, eq. 10), a statistic of
    the micro-batch, as batch normalisation's is."""
    whole = _trained_parameters(task, family, tmp_path, batch_size=4, accumulation=1)
    accumulated = _trained_parameters(task, family, tmp_path, batch_size=2, accumulation=2)
    start = {name: p.detach() for name, p in _model(task, HEADS[task][family]).named_parameters()}
    moved = [name for name in whole if not torch.equal(whole[name], start[name])]
    assert moved  # the step changed the model
    for name in whole:
        torch.testing.assert_close(accumulated[name], whole[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("how", ["from_base", "set_word_counts"])
def test_word_counts_the_user_set_are_kept_through_train(how, tmp_path):
    """A margin head given its word counts by the user (`from_base(word_counts=...)`, or `set_word_counts`) trains
    with those counts: `HeadsTrainer` counts the training set only for a head that has none. A head without counts
    gets the training set's."""
    from transformers import LlamaForCausalLM

    head = {"family": "margin", "margin": "cos", "m": 0.1, "word_norm": "unigram"}
    user = torch.linspace(500.0, 1.0, V).double()  # nothing like the training set's counts
    torch.manual_seed(0)
    base = tmp_path / "base"
    LlamaForCausalLM(tiny_llama_config(V)).save_pretrained(base)
    if how == "from_base":
        model = HeadsForCausalLM.from_base(str(base), head=head, word_counts=user)
    else:
        model = HeadsForCausalLM.from_base(str(base), head=head)
        model.set_word_counts(user)
    rows = _examples("causal")
    args = HeadsTrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_steps=1, report_to="none",
        use_cpu=True, disable_tqdm=True, save_strategy="no",
    )  # fmt: skip
    HeadsTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows)).train()
    torch.testing.assert_close(model.head.word_counts.double(), user)
    fresh = HeadsForCausalLM.from_base(str(base), head=head)  # no counts: the trainer counts the labels
    HeadsTrainer(model=fresh, args=args, train_dataset=Dataset.from_list(rows)).train()
    labels = torch.tensor([v for row in rows for v in row["labels"] if v != -100])
    torch.testing.assert_close(fresh.head.word_counts.double(), torch.bincount(labels, minlength=V).double())
