"""Every path that consumes labels, with ignored rows (-100), with a batch of padding only, and without an
attention mask on padded input; generated over the registered head families (conftest.family_heads).

- ignored rows: the loss, the eval loss and the recorded statistics of a batch equal those of the batch without
  its ignored rows (the ignored positions are neither counted nor read: max-norm's batch maximum included);
- padding only (every label -100): the loss is 0 with finite, zero gradients, in training, in evaluation, with
  `logits_skipped` and `statistics_recorded`, and with `num_items_in_batch=0` (an accumulation window of padding).
  transformers' own models return NaN there (a mean over no position); hf_heads defines it as the sum over no
  position, 0, so a padding-only batch leaves the weights as they are instead of poisoning them with NaN;
- word counts (`hf_heads.data.label_counts`, what `HeadsTrainer` / `prepare_head` set) skip -100;
- the warm-start calibration (`calibrate_warm_start`, `prepare_head`) fits on the labelled positions only, and
  refuses a batch of padding only instead of fitting a gain / bias shift on no position;
- without attention_mask on padded input the models give what transformers' own models give for the same call
  (the padding is attended to), and the classifier's last-token pooling finds the last non-pad token by
  `config.pad_token_id` as `GPT2ForSequenceClassification` does, refusing, as it does, a batch it cannot pool."""

from __future__ import annotations

import datasets
import pytest
import torch
from conftest import (
    family_heads,
    seq2seq_batch,
    tiny_bert_config,
    tiny_enc_dec_config,
    tiny_gpt2_config,
    tiny_llama_config,
)
from transformers import (
    BartForConditionalGeneration,
    BertForSequenceClassification,
    GPT2ForSequenceClassification,
    GPT2LMHeadModel,
    LlamaForCausalLM,
)

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification
from hf_heads.data import label_counts
from hf_heads.heads import head_options
from hf_heads.training import prepare_head

V, C = 50, 10  # vocabulary of the language models, classes of the classifier
MODELS = {
    "causal-lm": HeadsForCausalLM,
    "seq2seq": HeadsForSeq2SeqLM,
    "classification": HeadsForSequenceClassification,
}
CASES = [(task, label) for task in MODELS for label in family_heads(task)]  # every family, on every task it runs
COUNTS = torch.arange(1, V + 1, dtype=torch.float64).flip(0)


def _head(task: str, label: str) -> dict:
    return family_heads(task)[label]


def _model(task: str, head: dict, counts: bool = True):
    """A tiny model of `task` without dropout (train-mode losses depend on the weights and the RNG only), with the
    word counts (unless not `counts`) / embedding table its head needs."""
    torch.manual_seed(0)
    if task == "causal-lm":
        config = HeadsConfig(backbone=tiny_gpt2_config(V, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), head=head)
    elif task == "seq2seq":
        config = HeadsConfig(backbone=tiny_enc_dec_config("bart", V, no_dropout=True), head=head)
    else:
        config = HeadsConfig(backbone=tiny_bert_config(V, no_dropout=True), head=head, num_labels=C)
    model = MODELS[task](config)
    if counts and model.head_needs_counts():
        model.set_word_counts(COUNTS[: model.head.num_classes])
    if model.head.uses_embedding_table:
        model.head.set_embedding_table(torch.randn(V, model.head.options.embedding_dim))
    return model


def _batch(task: str) -> dict:
    """A batch of 3 rows: row 1 ignored whole, row 2 partly (padded, with its attention mask)."""
    g = torch.Generator().manual_seed(3)
    if task == "seq2seq":
        x, mask, y = seq2seq_batch(vocab_size=V)
        y[1] = -100
        return dict(input_ids=x, attention_mask=mask, labels=y)
    x = torch.randint(4, V, (3, 7), generator=g)
    mask = torch.ones_like(x)
    mask[2, 5:] = 0
    if task == "classification":
        return dict(input_ids=x, attention_mask=mask, labels=torch.tensor([3, -100, 7]))
    y = x.masked_fill(mask == 0, -100)
    y[1] = -100
    return dict(input_ids=x, attention_mask=mask, labels=y)


def _rows(batch: dict, rows: list[int]) -> dict:
    return {k: v[rows] for k, v in batch.items()}


def _padding_only(batch: dict) -> dict:
    return {**batch, "labels": torch.full_like(batch["labels"], -100)}


def _loss(model, batch: dict, **kw) -> torch.Tensor:
    torch.manual_seed(1)  # the sampled heads' noise samples: the same draw for both batches compared
    return model(**batch, **kw).loss


def _stats(model, batch: dict) -> dict:
    with torch.no_grad(), model.statistics_recorded() as recorded:
        model(**batch)
    stats = recorded[0]
    return {k: v[stats["mask"]] for k, v in stats.items() if k != "mask"} | {"mask": stats["mask"]}


@pytest.mark.parametrize("task, label", CASES)
def test_ignored_rows_change_nothing(task, label):
    """The training loss, the eval loss (model.eval() under no_grad) and the statistics of a batch with an ignored
    row equal those of the batch without it; the statistics' mask is the labelled positions."""
    model = _model(task, _head(task, label))
    batch = _batch(task)
    kept = _rows(batch, [0, 2])
    model.train()
    torch.testing.assert_close(_loss(model, batch), _loss(model, kept), rtol=1e-5, atol=1e-6)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(_loss(model, batch), _loss(model, kept), rtol=1e-5, atol=1e-6)
    full, part = _stats(model, batch), _stats(model, kept)
    assert not full["mask"][1].any() and torch.equal(full["mask"][[0, 2]], part["mask"])
    for name in ("log_prob", "rank", "entropy"):
        torch.testing.assert_close(full[name], part[name], rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("task, label", CASES)
def test_a_batch_of_padding_only_has_loss_zero_and_zero_gradients(task, label):
    """Every label -100: the training loss is 0 and still part of the graph (backward runs), every gradient finite
    and 0 (also with `num_items_in_batch=0`); the eval loss, the loss with logits skipped and with statistics
    recorded are 0, and the statistics mark no position."""
    model = _model(task, _head(task, label))
    batch = _padding_only(_batch(task))
    model.train()
    for items in (None, torch.tensor(0)):
        model.zero_grad(set_to_none=True)
        loss = _loss(model, batch, num_items_in_batch=items)
        assert loss.requires_grad and float(loss.detach()) == 0.0
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert grads and all(bool((g == 0).all()) for g in grads)  # zeros: finite too
    model.eval()
    with torch.no_grad():
        assert float(model(**batch).loss) == 0.0
        with model.logits_skipped(statistics=True) as recorded:
            out = model(**batch)
    assert float(out.loss) == 0.0 and out.logits is None
    assert not recorded[0]["mask"].any()


@pytest.mark.parametrize("label", list(family_heads("causal-lm")))
def test_trl_fused_forward_and_shift_labels_with_ignored_rows_and_padding_only(label):
    """The causal LM's other label inputs: TRL's `fused_lm_head=True` forward and `shift_labels=` give the loss of
    `labels=` on a batch with ignored rows (that of the batch without them), mark no ignored position, and give 0 on
    a batch of padding only."""
    model = _model("causal-lm", _head("causal-lm", label)).train()
    batch = _batch("causal-lm")
    shift = torch.nn.functional.pad(batch["labels"], (0, 1), value=-100)[:, 1:]  # position t predicts token t+1
    by_shift = {**batch, "labels": None, "shift_labels": shift}
    expected = _loss(model, _rows(batch, [0, 2]))
    torch.testing.assert_close(_loss(model, batch, fused_lm_head=True), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_loss(model, by_shift), expected, rtol=1e-5, atol=1e-6)
    torch.manual_seed(1)
    assert torch.equal(model(**batch, fused_lm_head=True).label_mask, shift != -100)
    padding = _padding_only(batch)
    assert float(_loss(model, padding, fused_lm_head=True).detach()) == 0.0
    assert float(_loss(model, {**by_shift, "shift_labels": torch.full_like(shift, -100)}).detach()) == 0.0


def test_max_norm_running_value_ignores_the_ignored_rows():
    """A max-norm margin head updates its running max ‖h‖ from the labelled positions only: with the row of the
    largest ‖h‖ ignored, the running value is that of the batch without the row."""
    head = family_heads("causal-lm", variants=True)["margin-max-norm"]
    model = _model("causal-lm", head).train()
    batch = _batch("causal-lm")
    with torch.no_grad():
        norms = model.backbone(input_ids=batch["input_ids"]).last_hidden_state.norm(dim=-1).amax(-1)  # (B,)
    top = int(norms.argmax())
    batch["labels"][1], batch["labels"][top] = batch["input_ids"][1], -100  # the largest ‖h‖ ignored
    others = [i for i in range(3) if i != top]
    running = []
    for rows in ([0, 1, 2], others):
        model.head.context_norm_running.fill_(-1.0)  # no running value yet: the first batch sets it
        _loss(model, _rows(batch, rows))
        running.append(float(model.head.context_norm_running))
    assert running[0] == pytest.approx(running[1], rel=1e-6)
    assert running[0] < float(norms.max()) - 1e-3  # the ignored row's ‖h‖ would have been the maximum


# --------------------------------------------------------------------------------------------- word counts


@pytest.mark.parametrize("task", list(MODELS))
def test_word_counts_skip_ignored_labels(task):
    """`label_counts` (the counts HeadsTrainer / prepare_head give a head) skip -100, per token or per example;
    prepare_head sets them on every family that needs counts; a dataset of padding only counts nothing."""
    batch = _batch(task)
    labels = batch["labels"]
    num = C if task == "classification" else V
    dataset = datasets.Dataset.from_dict({k: v.tolist() for k, v in batch.items()})
    expected = torch.bincount(labels[labels != -100], minlength=num).double()
    assert torch.equal(label_counts(dataset, num), expected)
    padding = datasets.Dataset.from_dict({"labels": _padding_only(batch)["labels"].tolist()})
    assert torch.equal(label_counts(padding, num), torch.zeros(num, dtype=torch.float64))
    without = family_heads(task, variants=True, counts=False)
    heads = [v for k, v in family_heads(task, variants=True).items() if k not in without]
    assert heads  # every task has a family that needs counts
    for head in heads:
        model = _model(task, head, counts=False)
        assert not model.head.has_word_counts
        prepare_head(model, dataset)
        torch.testing.assert_close(model.head.word_counts.double(), expected)


# ------------------------------------------------------------------------------------- warm-start calibration


@pytest.fixture(scope="module")
def base():
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_llama_config(V, initializer_range=0.3)).eval()


def _uncalibrated(base, head):
    model = HeadsForCausalLM.from_base(base, head=head, calibrate=False)
    if model.head_needs_counts():
        model.set_word_counts(COUNTS)
    return model


def _calibrated(base, head, batch) -> dict:
    model = _uncalibrated(base, head)
    report = model.calibrate_warm_start(**batch)
    return {"report": report, **{k: v.clone() for k, v in model.head.state_dict().items()}}


def _same(a: dict, b: dict) -> bool:
    if a["report"].keys() != b["report"].keys():
        return False
    return all(
        torch.allclose(torch.as_tensor(a[k]), torch.as_tensor(b[k]), rtol=1e-5, atol=1e-6) for k in a if k != "report"
    ) and all(a["report"][k] == pytest.approx(b["report"][k], rel=1e-5) for k in a["report"])


def test_calibration_fits_on_the_labelled_positions_only(base):
    """For every family whose warm start is calibrated (`needs_calibration`): calibrating on a batch with an ignored
    row (whose input tokens differ) fits what the batch without that row fits, and a batch of padding only is
    refused. The same batch with the row labelled fits another start for some family, so the -100 positions would
    show if they were counted."""
    batch = _batch("causal-lm")
    labelled = {**batch, "labels": batch["labels"].where(batch["labels"] != -100, batch["input_ids"])}
    heads = {}
    for label, head in family_heads("causal-lm", variants=True).items():
        if HeadsForCausalLM.from_base(base, head=head, calibrate=False).head.needs_calibration:
            heads[label] = head
    assert heads
    changed = []
    for label, head in heads.items():
        full, kept = _calibrated(base, head, batch), _calibrated(base, head, _rows(batch, [0, 2]))
        assert _same(full, kept), label
        changed.append(not _same(full, _calibrated(base, head, labelled)))
        model = _uncalibrated(base, head)
        with pytest.raises(ValueError, match=r"every label of the batch is -100 \(padding only\)"):
            model.calibrate_warm_start(**_padding_only(batch))
    assert any(changed)


@pytest.mark.parametrize("rows", [2, 6])
def test_calibration_fits_on_up_to_256_of_the_labelled_positions(base, rows, monkeypatch):
    """`calibrate_warm_start` fits on every labelled position of a small batch, and on 256 distinct labelled positions
    of a batch with more (6 rows of 60 tokens, one ignored: 294 labelled positions)."""
    head = next(
        head
        for head in family_heads("causal-lm", variants=True).values()
        if HeadsForCausalLM.from_base(base, head=head, calibrate=False).head.needs_calibration
    )
    model = _uncalibrated(base, head)
    x = torch.randint(4, V, (rows, 60), generator=torch.Generator().manual_seed(5))
    x[:, 0] = torch.arange(4, 4 + rows)  # no two rows share a prefix: every position's state is its own
    labels = x.clone()
    labels[1, :] = -100
    with torch.no_grad():
        states = model.backbone(input_ids=x).last_hidden_state  # (rows, 60, H)
    next_labels = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]  # position t predicts token t + 1
    labelled = states[next_labels != -100]  # (N, H)
    fitted = []
    calibrate_to = model.head.calibrate_to
    monkeypatch.setattr(
        model.head, "calibrate_to", lambda hidden, log_probs: fitted.append(hidden) or calibrate_to(hidden, log_probs)
    )
    model.calibrate_warm_start(input_ids=x, labels=labels)
    (hidden,) = fitted
    assert hidden.shape == (min(len(labelled), 256), labelled.shape[1]) and (rows == 2) == (len(labelled) <= 256)
    nearest = torch.cdist(hidden.double(), labelled.double()).min(dim=1)  # each row is a labelled position's state
    assert float(nearest.values.max()) < 1e-5 and len(set(nearest.indices.tolist())) == len(hidden)


def test_prepare_head_counts_and_calibrates_on_labelled_rows_and_refuses_padding_only(base):
    """`prepare_head` (what HeadsTrainer runs before its first step) on a training set with an ignored row gives the
    head the start it gets from the set without that row; on a set of padding only it refuses, and the head stays
    pending (training it is still refused)."""
    batch = _batch("causal-lm")
    sets = {
        name: datasets.Dataset.from_dict({k: v.tolist() for k, v in rows.items()})
        for name, rows in (("full", batch), ("kept", _rows(batch, [0, 2])), ("padding", _padding_only(batch)))
    }
    pending = []
    for label, head in family_heads("causal-lm", variants=True).items():
        if not head_options(head).needs_counts:  # from_base calibrates the others itself (on probe sequences)
            continue
        models = {name: HeadsForCausalLM.from_base(base, head=head) for name in sets}
        if not models["full"].head.warm_start_pending:
            continue
        pending.append(label)
        for name in ("full", "kept"):
            prepare_head(models[name], sets[name])
            assert not models[name].head.warm_start_pending
        full, kept = models["full"].head.state_dict(), models["kept"].head.state_dict()
        assert all(torch.allclose(full[k], kept[k], rtol=1e-5, atol=1e-6) for k in full), label
        assert models["full"].config.head == models["kept"].config.head
        with pytest.raises(ValueError, match="padding only"):
            prepare_head(models["padding"], sets["padding"])
        assert models["padding"].head.warm_start_pending
        with pytest.raises(ValueError, match="is not calibrated yet"):
            models["padding"].train()(**batch)
    assert pending


# ---------------------------------------------------------------------------- no attention_mask on padded input


def _padded_lm_batch(pad: int) -> dict:
    x = torch.randint(4, V, (2, 7), generator=torch.Generator().manual_seed(4))
    x[0, 4:] = pad
    return dict(input_ids=x, labels=x.masked_fill(x == pad, -100))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_causal_lm_without_attention_mask_is_the_transformers_model(kind):
    """Right-padded input without attention_mask: the loss (train and eval) and logits of `from_base` (softmax) are
    those of the transformers model for the same call (both attend to the padding)."""
    torch.manual_seed(0)
    config = tiny_gpt2_config(V, pad_token_id=1) if kind == "gpt2" else tiny_llama_config(V)
    base = (GPT2LMHeadModel if kind == "gpt2" else LlamaForCausalLM)(config).eval()
    model = HeadsForCausalLM.from_base(base).eval()
    batch = _padded_lm_batch(pad=1)
    with torch.no_grad():
        ours, theirs = model(**batch), base(**batch)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-5, atol=1e-6)


def test_seq2seq_without_attention_mask_is_bart():
    """A seq2seq batch with padded sources and no attention_mask: loss and logits are BART's for the same call."""
    torch.manual_seed(0)
    base = BartForConditionalGeneration(tiny_enc_dec_config("bart", V, no_dropout=True)).eval()
    model = HeadsForSeq2SeqLM.from_base(base).eval()
    x, _, y = seq2seq_batch(vocab_size=V)
    x[0, 5:] = base.config.pad_token_id
    with torch.no_grad():
        ours, theirs = model(input_ids=x, labels=y), base(input_ids=x, labels=y)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-5, atol=1e-6)


def _classifier_pair(kind: str, pad: int | None):
    """A transformers classifier and the hf_heads classifier over its backbone (shared) whose softmax head starts
    from its final projection: hf_heads' own pooling (BERT's pooler, GPT-2's last token) against transformers'."""
    torch.manual_seed(0)
    if kind == "bert":
        config = tiny_bert_config(V, pad_token_id=pad, no_dropout=True)
        config.num_labels = C
        ref = BertForSequenceClassification(config)
        backbone, projection = ref.bert, ref.classifier
    else:
        ref = GPT2ForSequenceClassification(tiny_gpt2_config(V, n_layer=1, pad_token_id=pad, num_labels=C))
        backbone, projection = ref.transformer, ref.score
    ref.eval()
    model = HeadsForSequenceClassification.from_base(backbone, num_labels=C).eval()
    model.head.start_from(projection.weight, projection.bias)
    return ref, model


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_classifier_without_attention_mask_is_the_transformers_classifier(kind):
    """Right-padded input (pad id 1, the config's) without attention_mask: logits and loss (an ignored example
    among the labels) are BertForSequenceClassification's / GPT2ForSequenceClassification's (GPT-2: the last token
    whose id is not config.pad_token_id), and, for GPT-2, those of the same batch with its attention mask."""
    ref, model = _classifier_pair(kind, pad=1)
    x = torch.randint(4, V, (3, 6), generator=torch.Generator().manual_seed(5))
    x[0, 3:] = 1
    labels = torch.tensor([2, -100, 9])
    with torch.no_grad():
        ours, theirs = model(input_ids=x, labels=labels), ref(input_ids=x, labels=labels)
        masked = model(input_ids=x, attention_mask=(x != 1).long(), labels=labels)
    assert model.pooling == ("pooler" if kind == "bert" else "last")
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-5, atol=1e-6)
    if kind == "gpt2":
        torch.testing.assert_close(masked.logits, ours.logits, rtol=1e-5, atol=1e-5)


def test_last_token_pooling_without_mask_or_pad_id_is_refused_as_transformers_does():
    """GPT-2 without a pad id: a batch of 2 without attention_mask cannot be pooled (where does padding start?):
    GPT2ForSequenceClassification refuses it, and so does the hf_heads classifier instead of pooling the last
    position; one row is classified as transformers classifies it."""
    ref, model = _classifier_pair("gpt2", pad=None)
    x = torch.randint(4, V, (2, 6), generator=torch.Generator().manual_seed(6))
    with pytest.raises(ValueError, match="no padding token"):
        ref(input_ids=x)
    with pytest.raises(ValueError, match="without attention_mask needs the padding id"):
        model(input_ids=x)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=x[:1]).logits, ref(input_ids=x[:1]).logits, rtol=1e-5, atol=1e-5)
