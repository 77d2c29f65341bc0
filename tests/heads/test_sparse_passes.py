"""The passes a sparse head makes over each chunk's (n, V) logits in a training step and an evaluation, counted with a
dispatch mode (no timing): one top-k selection per chunk, no argmax nor ranking of the whole row (both come from the
selection); with the values the naive definitions give, ties included."""

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_heads.heads import make_head
from hf_heads.losses.tiles import predict, top_k_predict

V, H, N, K, CHUNK = 300, 8, 12, 5, 4  # 3 chunks of 4 rows (chunk_size: evaluations too)

WHOLE_ROW_OPS = {"gt", "lt", "ge", "le", "eq", "max", "argmax", "sort"}  # ranking / argmax passes


class Passes(TorchDispatchMode):
    """Counts each aten op by name, and those that read a tensor with V columns (a chunk's logits)."""

    def __init__(self):
        super().__init__()
        self.calls, self.on_rows = Counter(), Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.calls[name] += 1
        if any(isinstance(a, torch.Tensor) and a.dim() == 2 and a.shape[-1] == V for a in args):
            self.on_rows[name] += 1
        return func(*args, **(kwargs or {}))


def sparse_head(**options):
    torch.manual_seed(0)
    head = make_head(H, V, {"family": "sparse", "k": K, "chunk_size": CHUNK, "chunk_kernel": "eager", **options})
    with torch.no_grad():
        head.weight.normal_(0, 1.0)
    return head


def batch():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(N, H, generator=g)
    labels = torch.randint(0, V, (N,), generator=g)
    labels[3] = -100
    return hidden, labels


def test_a_sparse_evaluation_selects_the_top_k_once_per_chunk_and_ranks_no_whole_row():
    head = sparse_head().eval()
    head.record_eval_sums()
    hidden, labels = batch()
    with torch.no_grad():
        z = head.copied_logits(hidden)  # (N, V)
    labels[:4] = z[:4].topk(K, dim=1).indices[:, 1]  # some labels inside the top k
    with torch.no_grad(), Passes() as passes:
        loss = head.loss(hidden, labels, reduction="none")
    assert passes.on_rows["topk"] == 3, passes.on_rows
    assert not WHOLE_ROW_OPS & set(passes.on_rows), passes.on_rows
    # the values: eq. 4's NLL over the top k (inf outside it), eq. 5's loss and the share of labels inside
    valid = labels != -100
    top = z.topk(K, dim=1)
    inside = (top.indices == labels.clamp_min(0)[:, None]).any(1)
    nll = top.values.logsumexp(1) - z.gather(1, labels.clamp_min(0)[:, None]).squeeze(1)
    want = torch.where(inside, nll, torch.inf)
    assert torch.allclose(loss[valid], want[valid], rtol=1e-5)
    sums = head.take_eval_sums()
    assert sums[1].item() == (inside & valid).sum().item() and sums[-1].item() == valid.sum().item()
    assert torch.allclose(sums[0], nll[valid].sum().to(sums.dtype), rtol=1e-5)


def test_the_evaluation_sums_are_kept_on_the_heads_device():
    """The evaluation sums are kept where the head's weights are, so an accelerator's passes add to them without a copy
    to the host and the processes' all-reduce takes them as they are (the meta device stands for an accelerator)."""
    head = sparse_head().to("meta")
    head.record_eval_sums()
    sums = head.take_eval_sums()
    assert sums.device == torch.device("meta") and sums.dtype == torch.float64 and sums.shape == (3,)


def test_a_sparse_training_step_takes_its_argmax_from_the_top_k():
    head = sparse_head().train()
    head.record_accuracy()
    hidden, labels = batch()
    with Passes() as passes:
        head.loss(hidden.requires_grad_(), labels).backward()
    assert passes.on_rows["topk"] == 3, passes.on_rows
    assert not WHOLE_ROW_OPS & set(passes.on_rows), passes.on_rows
    with torch.no_grad():
        argmax = head.copied_logits(hidden).argmax(1)
    correct, counted = head.take_accuracy().tolist()
    valid = labels != -100
    assert counted == valid.sum().item() and correct == ((argmax == labels) & valid).sum().item()


@pytest.mark.parametrize("rank", [False, True])
def test_top_k_predict_is_predict_with_the_rank_capped_at_k_ties_included(rank):
    g = torch.Generator().manual_seed(2)
    z = torch.randint(0, 4, (64, 40), generator=g).float()  # many ties: at the maximum, at the k-th value
    z[:16] = torch.randn(16, 40, generator=g)  # and rows without any
    y = torch.randint(0, 40, (64,), generator=g)
    for k in (1, 3, 7):
        vals, idx = z.topk(k, dim=1)
        want = predict(z, y, rank)
        if rank:
            want[:, 1] = want[:, 1].clamp_max(k)
        assert torch.equal(top_k_predict(z, y, vals, idx, rank), want), k
