"""Loss-only evaluation builds no (B, T, V) logits: `Trainer.evaluate` without `compute_metrics` goes through
`HeadsTrainer.prediction_step`, which asks the model for its loss only; the eval loss is the same."""

import pytest
import torch
import torch.nn.functional as F
from conftest import chunked, tiny_llama_config
from test_run_clm import _lm_dataset

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsTrainer, HeadsTrainingArguments


def _eval_args(tmp_path, top_k: list[int] | None = None) -> HeadsTrainingArguments:
    """Quiet CPU evaluation in batches of 4, with accuracy@k for each k of `top_k`."""
    return HeadsTrainingArguments(
        output_dir=str(tmp_path),
        per_device_eval_batch_size=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        eval_accuracy_top_k=top_k,
    )


@pytest.mark.parametrize(
    "head",
    [
        {"family": "softmax"},
        {"family": "sampled", "criterion": "ce", "method": "is", "num_samples": 8, "noise": "uniform"},
    ],
)
def test_evaluate_without_compute_metrics_builds_no_logits(tmp_path, head):
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
    calls = []
    original = model.head.logits
    model.head.logits = lambda hidden: calls.append(tuple(hidden.shape)) or original(hidden)
    args = _eval_args(tmp_path)
    data = _lm_dataset(n=8)
    trainer = HeadsTrainer(model=model, args=args, eval_dataset=data)
    loss_only = trainer.evaluate()["eval_loss"]
    assert calls == []  # no logits built
    trainer.compute_metrics = lambda prediction: {}  # a metric that needs predictions: logits are built
    with_logits = trainer.evaluate()["eval_loss"]
    assert calls and calls[0][-1] == 32
    assert loss_only == pytest.approx(with_logits, rel=1e-6)
    model.eval()
    batch = {k: torch.tensor(v[:2]) for k, v in data[:2].items()}
    with model.logits_skipped():
        out = model(**batch)
    assert out.logits is None and torch.isfinite(out.loss)
    assert model(**batch).logits.shape == (2, 16, 61)


def test_fused_loss_without_gradients_is_the_same_loss():
    """Under no_grad the chunked loss computes the loss alone (no gradient matmuls): same value, every option."""

    g = torch.Generator().manual_seed(0)
    h, w, b = torch.randn(40, 16, generator=g), torch.randn(50, 16, generator=g), torch.randn(50, generator=g)
    y = torch.randint(0, 50, (40,), generator=g)
    y[3] = -100
    for kwargs in ({}, {"top_k": 5}, {"label_smoothing": 0.1}, {"reduction": "sum"}, {"num_items_in_batch": 17}):
        reference = chunked(h.requires_grad_(), w, b, y, chunk_size=7, **kwargs)
        with torch.no_grad():
            fast = chunked(h, w, b, y, chunk_size=7, **kwargs)
        torch.testing.assert_close(fast, reference.detach())


@pytest.mark.parametrize(
    "head",
    [
        {"family": "margin", "margin": "arc", "m": 0.3},
        {"family": "sparse", "k": 3},
        {"family": "sampled", "criterion": "bce", "method": "mcs", "num_samples": 8, "noise": "uniform"},
    ],
)
def test_eval_accuracy_at_k_without_logits(tmp_path, head):
    """`eval_accuracy_top_k`: accuracy@k of the inference distribution from chunks of the hidden states, the same as
    top-k of the full logits, with no (B, T, V) logits in the loss-only path and with logits for compute_metrics."""
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
    data = _lm_dataset(n=10)
    args = _eval_args(tmp_path, top_k=[1, 5])
    trainer = HeadsTrainer(model=model, args=args, eval_dataset=data)
    shapes = []
    original = model.head.logits
    model.head.logits = lambda hidden: shapes.append(tuple(hidden.shape)) or original(hidden)
    metrics = trainer.evaluate()
    assert all(len(shape) == 2 and shape[0] <= 4 * 16 for shape in shapes)  # chunks of rows, never (B, T, V)
    model.head.logits = original
    model.eval()
    ids = torch.tensor(data["input_ids"])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]  # (B, T-1, V) position t predicts token t+1
    target = ids[:, 1:]
    possible = torch.isfinite(logits.gather(-1, target[..., None])).squeeze(-1)  # sparse: p = 0 is never a hit
    for k in (1, 5):
        hit = (logits.topk(k, dim=-1).indices == target[..., None]).any(-1) & possible
        assert metrics[f"eval_accuracy@{k}"] == pytest.approx(hit.float().mean().item())
    trainer.compute_metrics = lambda prediction: {}  # logits built for compute_metrics: the same accuracy
    with_logits = trainer.evaluate()
    assert with_logits["eval_accuracy@5"] == pytest.approx(metrics["eval_accuracy@5"])
    with pytest.raises(ValueError, match="eval_accuracy_top_k=0 must be >= 1"):
        HeadsTrainingArguments(output_dir=str(tmp_path), eval_accuracy_top_k=[0], report_to="none", use_cpu=True)


EVAL_HEADS = {
    "softmax": {"family": "softmax"},
    "sparse": {"family": "sparse", "k": 4},
    "margin": {"family": "margin", "margin": "arc", "m": 0.2, "word_norm": "unigram", "context_norm": "max-norm"},
    "sampled": {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 6, "noise": "unigram"},
}


def _on_a_stood_in_accelerator(monkeypatch) -> None:
    """Declare host reads costly, as on an accelerator: the losses take their host-sync-free branches (ignored rows
    computed with weight 0 and masked, counts kept on the device)."""
    from hf_heads.losses import fused_linear, kernels, noise, scorer
    from hf_heads.losses import reduction as reduction_module

    for module in (reduction_module, fused_linear, kernels, noise, scorer):
        monkeypatch.setattr(module, "host_reads_are_free", lambda device: False)


@pytest.mark.parametrize("branch", ["cpu", "accelerator"])
@pytest.mark.parametrize(
    "kwargs", [{}, {"reduction": "sum"}, {"num_items_in_batch": 23}, {"num_items_in_batch": torch.tensor(23)}],
    ids=["mean", "sum", "num_items_in_batch", "tensor num_items_in_batch"],
)  # fmt: skip
def test_loss_only_evaluation_leaves_ignored_rows_out(branch, kwargs, monkeypatch):
    """The fused loss without gradients (loss-only evaluation: one matmul per chunk) on either branch, with a third of
    the rows ignored (-100, their hidden states large): the naive loss over the labelled rows alone."""

    g = torch.Generator().manual_seed(3)
    h, w, b = torch.randn(30, 8, generator=g), torch.randn(19, 8, generator=g), torch.randn(19, generator=g)
    y = torch.randint(0, 19, (30,), generator=g)
    y[::3] = -100
    h[::3] *= 50  # an ignored row's loss, if counted, is large
    per_row = F.cross_entropy(h @ w.T + b, y, reduction="none", ignore_index=-100)  # (30,) 0 where ignored
    divisor = {"sum": 1}.get(kwargs.get("reduction"), int(kwargs.get("num_items_in_batch", (y != -100).sum())))
    want = per_row.sum() / divisor
    if branch == "accelerator":
        _on_a_stood_in_accelerator(monkeypatch)
    with torch.no_grad():
        got = chunked(h, w, b, y, chunk_size=7, **kwargs)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("branch", ["cpu", "accelerator"])
@pytest.mark.parametrize("name", list(EVAL_HEADS))
def test_a_heads_eval_loss_with_ignored_rows_is_the_naive_mean(name, branch, monkeypatch):
    """Every discrete head in eval mode under no_grad (what `Trainer.evaluate`'s loss-only path runs), labels padded
    with -100, on the CPU branch and the host-sync-free branch: the mean over the labelled positions of −log p(label)
    of the head's own inference logits (sparse: eq. 4's truncated distribution, labels drawn inside the top k)."""
    from hf_heads.heads import make_head

    torch.manual_seed(0)
    head = make_head(8, 19, dict(EVAL_HEADS[name], chunk_size=5))
    if head.needs_counts:
        head.set_word_counts(torch.arange(19, 0, -1).float())
    hidden = torch.randn(3, 6, 8)
    labels = torch.randint(0, 19, (3, 6))
    labels[0, 4:] = -100
    labels[2, :3] = -100
    hidden[labels == -100] *= 50
    head.train()
    head.loss(hidden, labels).backward()  # a training step first: max-norm's running value exists
    head.eval()
    valid = labels != -100
    if name == "sparse":  # labels inside the top k, where the truncated distribution (eq. 4) gives them mass
        top = F.linear(hidden, head.weight, head.bias).topk(4, dim=-1).indices  # (3, 6, 4)
        pick = torch.randint(0, 4, labels.shape)
        labels = torch.where(valid, top.gather(-1, pick[..., None]).squeeze(-1), labels)
    with torch.no_grad():
        logits = head.logits(hidden).double()[valid]  # (M, V)
    y = labels[valid]
    per_row = -torch.log_softmax(logits, dim=1).gather(1, y[:, None]).squeeze(1)
    if branch == "accelerator":
        _on_a_stood_in_accelerator(monkeypatch)
    with torch.no_grad():
        got = head.loss(hidden, labels)
        got_items = head.loss(hidden, labels, num_items_in_batch=torch.tensor(40))
    torch.testing.assert_close(got.double(), per_row.mean(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_items.double(), per_row.sum() / 40, rtol=1e-4, atol=1e-4)


def test_prediction_step_passes_ignore_keys_on(tmp_path):
    """`Trainer.predict / evaluate(ignore_keys=...)` leaves those outputs out of the predictions on HeadsTrainer's
    own path (labels given, predictions asked for), as the Trainer's."""
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"}))
    args = HeadsTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, disable_tqdm=True)
    trainer = HeadsTrainer(model=model, args=args)
    data = _lm_dataset(n=2)
    batch = {k: torch.tensor(v) for k, v in data[:2].items()}
    model.eval()  # as the evaluation loop calls it (in training mode a forward with labels returns no logits)
    cache = ["past_key_values", "cache"]  # the cache's output key up to transformers 5.23, and from 5.24
    _, kept, _ = trainer.prediction_step(model, batch, prediction_loss_only=False, ignore_keys=cache)
    _, left_out, _ = trainer.prediction_step(model, batch, False, ignore_keys=[*cache, "logits"])

    def logits_in(out) -> bool:
        parts = out if isinstance(out, tuple | list) else (out,)
        return any(getattr(t, "shape", None) == (2, 16, 61) for t in parts)  # a tensor, or predict's array

    assert logits_in(kept) and not logits_in(left_out)
    assert logits_in(trainer.predict(data, ignore_keys=cache).predictions)
    assert not logits_in(trainer.predict(data, ignore_keys=[*cache, "logits"]).predictions)


def test_evaluation_loop_called_directly_names_its_metrics_eval_like_transformers(tmp_path):
    """`trainer.evaluation_loop(dataloader, description)` without a `metric_key_prefix` uses transformers' default
    prefix `eval` for hf_heads' metrics too (accuracy@k, the sparse head's eval sums), beside its `eval_loss`, with
    the values `evaluate()` reports."""
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "sparse", "k": 3}))
    args = _eval_args(tmp_path, top_k=[1])
    trainer = HeadsTrainer(model=model, args=args, eval_dataset=_lm_dataset(n=6))
    evaluated = trainer.evaluate()
    looped = trainer.evaluation_loop(trainer.get_eval_dataloader(), "Evaluation", prediction_loss_only=True).metrics
    names = ["eval_loss", "eval_accuracy@1", "eval_sparse_loss", "eval_in_top_k"]
    assert set(names) <= set(looped) and all(key.startswith("eval_") for key in looped), looped
    assert {key: looped[key] for key in names} == pytest.approx({key: evaluated[key] for key in names})
