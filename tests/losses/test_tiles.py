"""The row algebra of hf_heads.losses.tiles: a row cut into 2 or 3 tiles of columns, their statistics merged, gives
the statistics of the whole row (max, log-sum-exp, the smoothing sum, the entropy, the argmax with ties going to the
lowest index, the target's rank); the tiles' gradients side by side are autograd's gradient of a naive loss written
here with `torch.log_softmax` (top-k support, label smoothing, z-loss, entropy, soft-cap, a replaced target logit),
in float64; a sigmoid criterion's tiles give its rows' BCE / MSE; and the merged loss passes gradcheck."""

import itertools

import pytest
import torch

from hf_heads.losses.chunks import ChunkOptions
from hf_heads.losses.parts import make_criterion
from hf_heads.losses.tiles import (
    ONE,
    Stacked,
    capped_slope,
    label_grad_,
    merge,
    row_loss,
    sigmoid_loss,
    stack,
    support_grad_,
    target_grad_,
    tile_ranking,
    tile_stats,
    tile_terms,
    tile_top_k,
    top_k_floor,
)

N, V = 6, 13
SMOOTH = ChunkOptions(None, 0.1, None)  # label smoothing 0.1
PLAIN = ChunkOptions(None, 0.0, None)
SPLITS = ([6, 7], [4, 4, 5], [1, 11, 1])


def _tiles(z, y, splits):
    """[(tile (n, C), offset, inside (n,), local column (n,))] of the columns of z (n, V) cut as `splits`."""
    out, offset = [], 0
    for part in z.split(splits, dim=1):
        inside = (y >= offset) & (y < offset + part.shape[1])
        out.append((part, offset, inside, torch.where(inside, y - offset, 0)))
        offset += part.shape[1]
    return out


def _support(tiles, top_k):
    """The kept columns (n, C) of each tile (None: every column) and |S|."""
    if top_k is None:
        return [None] * len(tiles), V
    floor = top_k_floor(torch.stack([tile_top_k(part, top_k) for part, *_ in tiles]), top_k, Stacked())
    return [part >= floor[:, None] for part, *_ in tiles], top_k


def _merged(z, y, splits, top_k=None):
    tiles = _tiles(z, y, splits)
    kept, support = _support(tiles, top_k)
    pairs = zip(tiles, kept, strict=True)
    stats = stack([tile_stats(p, SMOOTH, col, inside, k, entropy=True) for (p, _, inside, col), k in pairs])
    return merge(stats, Stacked()), tiles, kept, support


@pytest.mark.parametrize("splits", SPLITS, ids=str)
@pytest.mark.parametrize("top_k", [None, 1, 4])
def test_merged_tiles_give_the_whole_rows_statistics(splits, top_k):
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(N, V, generator=gen, dtype=torch.float64) * 3
    y = torch.randint(0, V, (N,), generator=gen)
    merged, *_ = _merged(z, y, splits, top_k)
    support = z if top_k is None else z.topk(top_k, dim=1).values  # no ties among random float64 logits
    loss, lse, ent = row_loss(merged, SMOOTH, support.shape[1])
    log_p = torch.log_softmax(support, dim=1)
    torch.testing.assert_close(merged.m, support.max(1).values)
    torch.testing.assert_close(lse, (support - log_p)[:, 0])
    torch.testing.assert_close(merged.sum_z, support.sum(1))
    torch.testing.assert_close(merged.target, z.gather(1, y[:, None]).squeeze(1))
    torch.testing.assert_close(ent, -(log_p.exp() * log_p).sum(1))
    want = 0.9 * (lse - z.gather(1, y[:, None]).squeeze(1)) - 0.1 * log_p.mean(1)
    torch.testing.assert_close(loss, want)
    whole = tile_stats(support, SMOOTH, torch.zeros_like(y), entropy=True)  # one tile: the row's support
    torch.testing.assert_close(row_loss(merge(whole, ONE), SMOOTH, support.shape[1])[1], lse)
    torch.testing.assert_close(row_loss(whole, PLAIN)[2], ent)


@pytest.mark.parametrize("splits", SPLITS, ids=str)
@pytest.mark.parametrize("name", ["bce", "mse"])
def test_merged_tiles_give_a_sigmoid_criterion_s_row_loss(splits, name):
    """A sigmoid criterion's tiles merged (their per-class terms summed, the target's logit from the tile that holds
    it) give each row's loss of eq. 3 (BCE: −log σ(z_y) − Σ_{c≠y} log(1 − σ(z_c))) or eq. 1 (MSE: Σ_c (σ(z_c) −
    δ_cy)²), with the gradient autograd gives it."""
    criterion = make_criterion(name)
    gen = torch.Generator().manual_seed(4)
    z = (torch.randn(N, V, generator=gen, dtype=torch.float64) * 3).requires_grad_()
    y = torch.randint(0, V, (N,), generator=gen)
    onehot = torch.nn.functional.one_hot(y, V).to(z.dtype)
    sig = torch.sigmoid(z)
    if name == "bce":
        want = -(onehot * torch.log(sig) + (1 - onehot) * torch.log(1 - sig)).sum(1)
    else:
        want = (sig - onehot).square().sum(1)
    parts = [tile_terms(p, criterion, col, inside) for p, _, inside, col in _tiles(z, y, splits)]
    got = sigmoid_loss(merge(stack(parts), Stacked()), criterion)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), z)[0], torch.autograd.grad(want.sum(), z)[0])


@pytest.mark.parametrize("splits", SPLITS, ids=str)
def test_merged_argmax_takes_the_lowest_index_of_a_tie_and_ranks_count_it(splits):
    gen = torch.Generator().manual_seed(1)
    z = torch.randint(-2, 3, (40, V), generator=gen).double()  # many ties, within and across tiles
    y = torch.randint(0, V, (40,), generator=gen)
    own = z.gather(1, y[:, None]).squeeze(1)
    ranks = merge(stack([tile_ranking(p, y, off, own) for p, off, *_ in _tiles(z, y, splits)]), Stacked())
    assert torch.equal(ranks.best_at, torch.argmax(z, dim=1))
    ids = torch.arange(V)
    ahead = ((z > own[:, None]) | ((z == own[:, None]) & (ids < y[:, None]))).sum(1)
    assert torch.equal(ranks.ahead, ahead)
    assert torch.equal(ranks.best, z.max(1).values)


def _objective(x, t, y, rw, ent_w, top_k, smooth, z_loss, softcap):
    """The naive Σ_i r_i loss_i + λ r_i lse_i² + e_i H_i of the raw logits x (n, V), a replaced target logit t (n,)
    (or None), written from torch.log_softmax (no code of hf_heads)."""
    z = x if softcap is None else softcap * torch.tanh(x / softcap)
    if t is not None:
        capped = t if softcap is None else softcap * torch.tanh(t / softcap)
        z = z.scatter(1, y[:, None], capped[:, None])
    support = z if top_k is None else z.topk(top_k, dim=1).values
    log_p = torch.log_softmax(support, dim=1)
    lse = (support - log_p)[:, 0]
    loss = (1 - smooth) * (lse - z.gather(1, y[:, None]).squeeze(1)) - smooth * log_p.mean(1)
    ent = -(log_p.exp() * log_p).sum(1)
    return (rw * loss + z_loss * rw * lse.square() + ent_w * ent).sum()


def _tiled_grads(x, t, y, rw, ent_w, splits, top_k, smooth, z_loss, softcap):
    """(d / d x (n, V), d / d t (n,) or None) of `_objective` from the tiles' statistics and gradients."""
    z = x if softcap is None else softcap * torch.tanh(x / softcap)
    if t is not None:
        z = z.scatter(1, y[:, None], (t if softcap is None else softcap * torch.tanh(t / softcap))[:, None])
    merged, tiles, kept, support = _merged(z, y, splits, top_k)
    opts = ChunkOptions(top_k, smooth, softcap, z_loss=z_loss)
    _, lse, ent = row_loss(merged, opts, support)
    grads, d_t = [], torch.zeros_like(y, dtype=x.dtype)
    for (part, _, inside, col), k in zip(tiles, kept, strict=True):
        logp = part - lse[:, None]
        logp = logp if k is None else logp.masked_fill(~k, -torch.inf)
        grad = label_grad_(support_grad_(logp, opts, lse, rw, None, support, k, ent, ent_w), opts, col, rw, inside)
        slope = None if softcap is None else capped_slope(part, softcap)
        at = target_grad_(grad, col, inside, slope, replaced=t is not None)
        grads.append(grad)
        d_t = d_t if at is None else d_t + at
    return torch.cat(grads, dim=1), None if t is None else d_t


OPTIONS = {
    "plain": {},
    "top-k": {"top_k": 4},
    "smoothing": {"smooth": 0.2},
    "z-loss": {"z_loss": 0.05},
    "entropy": {"entropy": True},
    "soft-cap": {"softcap": 2.5},
    "replaced target": {"replaced": True},
    "everything": {"top_k": 5, "smooth": 0.1, "z_loss": 0.05, "entropy": True, "softcap": 2.5, "replaced": True},
}


@pytest.mark.parametrize("splits", SPLITS, ids=str)
@pytest.mark.parametrize("name", OPTIONS)
def test_tiles_gradients_are_autograds_of_the_naive_loss(name, splits):
    o = {"top_k": None, "smooth": 0.0, "z_loss": 0.0, "softcap": None, **OPTIONS[name]}
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(N, V, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    t = (torch.randn(N, generator=gen, dtype=torch.float64) * 2).requires_grad_() if o.pop("replaced", 0) else None
    y = torch.randint(0, V, (N,), generator=gen)
    y[0] = V - 1  # the last tile holds a label
    rw = torch.rand(N, generator=gen, dtype=torch.float64) + 0.5
    ent_w = torch.randn(N, generator=gen, dtype=torch.float64) if o.pop("entropy", 0) else None
    args = (rw, torch.zeros_like(rw) if ent_w is None else ent_w, o["top_k"], o["smooth"], o["z_loss"], o["softcap"])
    want = torch.autograd.grad(_objective(x, t, y, *args), [x] if t is None else [x, t])
    with torch.no_grad():
        got_x, got_t = _tiled_grads(x, t, y, rw, ent_w, splits, **o)
    torch.testing.assert_close(got_x, want[0])
    if t is not None:
        torch.testing.assert_close(got_t, want[1])


@pytest.mark.parametrize("top_k", [None, 4])
def test_merged_tiles_loss_passes_gradcheck(top_k):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(N, V, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, V, (N,), generator=gen)

    def loss(x_):
        merged, *_ = _merged(x_, y, [4, 4, 5], top_k)
        ce, lse, ent = row_loss(merged, SMOOTH, top_k or V)
        return ce + 0.05 * lse.square() - 0.3 * ent

    assert torch.autograd.gradcheck(loss, (x,))


def test_the_stacked_and_single_tile_combines_agree():
    z = torch.randn(3, 5, dtype=torch.float64)
    for op, x in itertools.product(("sum", "max", "min"), (z,)):
        assert torch.equal(Stacked().reduce(x[None], op), ONE.reduce(x, op))
    assert torch.equal(Stacked().gather(z[None]), ONE.gather(z))
