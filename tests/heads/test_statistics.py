"""`OutputHead.statistics`: log p(label), entropy and rank of every labelled position against the same quantities
computed from the full inference logits, and rank with `torch.argmax`'s tie rule (what token accuracy, accuracy@k
and TRL's `mean_token_accuracy` count)."""

import pytest
import torch
import torch.nn.functional as F

from hf_heads.heads import make_head


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_tie_with_a_lower_index_is_not_a_top1_hit(dtype):
    """Classes 0 and 1 have exactly the same logit: argmax picks class 0, so label 1 has rank 1 (not a top-1 hit,
    a top-2 hit) and label 0 rank 0, in float32 and in bf16 (where such ties are common)."""
    head = make_head(2, 3, {"family": "softmax"}).to(dtype).eval()
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
        head.bias.zero_()
    hidden = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=dtype)
    labels = torch.tensor([1, 0, 2])
    ranks = head.statistics(hidden, labels)["rank"]
    assert ranks.tolist() == [1, 0, 0]
    assert head.logits(hidden).argmax(-1).tolist() == [0, 0, 2]


def test_a_bf16_head_with_many_ties_ranks_as_argmax_and_topk_of_the_logits():
    """A bf16 head whose logits tie often (a coarse weight): for every position, rank == 0 exactly where argmax of the
    logits is the label, and rank < k exactly where the label is among the k classes that come first in
    (value descending, index ascending) order."""
    g = torch.Generator().manual_seed(0)
    head = make_head(4, 30, {"family": "softmax"}).to(torch.bfloat16).eval()
    with torch.no_grad():
        head.weight.copy_(torch.randint(-1, 2, (30, 4), generator=g).to(torch.bfloat16))
        head.bias.zero_()
    hidden = torch.randint(-1, 2, (64, 4), generator=g).to(torch.bfloat16)
    labels = torch.randint(0, 30, (64,), generator=g)
    stats = head.statistics(hidden, labels, chunk_size=7)
    logits = head.logits(hidden).float()  # (64, 30)
    assert (logits == logits.max(-1, keepdim=True).values).sum(-1).gt(1).float().mean() > 0.5  # ties are common
    order = torch.argsort(-logits, dim=-1, stable=True)  # value descending, index ascending on ties
    want_rank = (order == labels[:, None]).float().argmax(-1)
    assert torch.equal(stats["rank"], want_rank)
    assert torch.equal(stats["rank"] == 0, logits.argmax(-1) == labels)


@pytest.mark.parametrize(
    "options",
    [
        {"family": "softmax"},
        {"family": "sparse", "k": 3},
        {"family": "margin", "margin": "arc", "m": 0.2},
        {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 4, "noise": "uniform"},
    ],
    ids=lambda o: o["family"],
)
def test_statistics_equal_those_of_the_full_logits(options):
    """In chunks, with ignored positions: log p(label), entropy and rank equal those computed from the head's full
    inference logits (sparse: rank V and log p = -inf for a label outside the top k); 0 at ignored positions."""
    torch.manual_seed(0)
    head = make_head(6, 11, options).eval()
    hidden = torch.randn(2, 5, 6)
    labels = torch.randint(0, 11, (2, 5))
    labels[1, 3:] = -100
    stats = head.statistics(hidden, labels, chunk_size=3)
    valid = labels != -100
    log_p = torch.log_softmax(head.logits(hidden).float(), dim=-1)[valid]  # (M, V)
    y = labels[valid]
    target = log_p.gather(1, y[:, None]).squeeze(1)
    order = torch.argsort(-log_p, dim=-1, stable=True)
    rank = torch.where(target > -torch.inf, (order == y[:, None]).float().argmax(-1), 11)
    torch.testing.assert_close(stats["log_prob"][valid], target)
    torch.testing.assert_close(stats["entropy"][valid], torch.special.entr(log_p.exp()).sum(-1))
    assert torch.equal(stats["rank"][valid], rank)
    for name in ("log_prob", "entropy", "rank"):
        assert stats[name].shape == labels.shape and not stats[name][~valid].any()


@pytest.mark.parametrize(
    "options, argument, rows",
    [
        ({"memory_budget": 1}, None, [4, 4, 2]),  # 1 MiB of float32 scores at V = 2^16: 4 rows
        ({"chunk_size": 3}, None, [3, 3, 3, 1]),
        ({"chunk_size": 3}, 5, [5, 5]),  # the call's chunk_size over the head's
        ({}, None, [10]),
    ],
    ids=["memory-budget", "chunk-size", "argument", "default"],
)
def test_statistics_chunk_as_the_heads_options_say(monkeypatch, options, argument, rows):
    """A head whose options bound its chunks (`memory_budget`, `chunk_size`) computes its statistics in chunks of the
    same rows, unless the call names its own `chunk_size`; the values are those of one pass over every row."""
    seen = []
    head = make_head(3, 1 << 16, {"family": "softmax", **options}).eval()
    logits = head.logits
    monkeypatch.setattr(head, "logits", lambda h: (seen.append(h.shape[0]), logits(h))[1])
    hidden, labels = torch.randn(10, 3), torch.randint(0, 1 << 16, (10,))
    stats = head.statistics(hidden, labels, chunk_size=argument)
    assert seen == rows
    seen.clear()
    whole = head.statistics(hidden, labels, chunk_size=10)
    for name, value in stats.items():
        torch.testing.assert_close(value, whole[name])


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize(
    "counting",
    [
        {},
        {"reduction": "sum"},
        {"reduction": "none"},
        {"num_items_in_batch": 4},
        {"ignore_index": -1, "reduction": "none"},
    ],
    ids=["mean", "sum", "none", "num-items", "ignore-index"],
)
def test_loss_with_token_statistics_reduces_as_loss_does(training, counting):
    """`loss_and_token_statistics` (what the models call for token accuracy) takes `loss`'s reduction,
    `num_items_in_batch` and `ignore_index`: a softmax head's loss is torch's cross-entropy of W h + b reduced the
    same way ("none": the labels' shape, 0 at ignored positions), beside per-position entropies and top-1 hits."""
    torch.manual_seed(0)
    head = make_head(6, 11, {"family": "softmax"}).train(training)
    hidden = torch.randn(2, 5, 6)
    ignore = counting.get("ignore_index", -100)
    labels = torch.randint(0, 11, (2, 5))
    labels[1, 3:] = ignore
    loss, stats = head.loss_and_token_statistics(hidden, labels, **counting)
    logits = hidden @ head.weight.detach().T + head.bias.detach()  # (2, 5, V)
    nll = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=ignore, reduction="none")  # (2, 5)
    reduction = counting.get("reduction", "mean")
    expected = {"none": nll, "sum": nll.sum(), "mean": nll.sum() / counting.get("num_items_in_batch", 8)}
    torch.testing.assert_close(loss.detach(), expected[reduction])
    valid = labels != ignore
    log_p = logits.log_softmax(-1)
    torch.testing.assert_close(stats["entropy"], torch.where(valid, torch.special.entr(log_p.exp()).sum(-1), 0.0))
    assert torch.equal(stats["is_top1"], valid & (logits.argmax(-1) == labels))
