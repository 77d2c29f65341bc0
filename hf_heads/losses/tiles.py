"""The row algebra of the softmax / sigmoid criteria: statistics of a tile of columns, their merge, loss and gradient.

A tile is a block z (n, C) of n rows' logits: a whole row (hf_heads.losses.kernels) or the classes one process holds
of a vocabulary-sharded W (hf_heads.losses.vocab_parallel). `merge` turns the `TileStats` of several tiles into those
of their union with one code whether the tiles sit in one process (`Stacked`, `ONE`) or on several: the online
log-sum-exp (Milakov & Gimelshein 2018) M = max_j m_j, S = Σ_j e^{m_j − M} S_j, and sums. From a row's merged
statistics come `row_loss` / `sigmoid_loss` and, tile by tile, the gradient (`support_grad_`, `label_grad_`,
`target_grad_`). Every option of the criterion is read here from `opts` (`hf_heads.losses.chunks.ChunkOptions`). The
sparse-softmax support (sparse paper eq. 5) is the logits at or above the row's k-th largest over every tile
(`top_k_floor`). The Triton row program (hf_heads.losses._triton_program) is the GPU kernel's own copy.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch


class TileStats(NamedTuple):
    """Row statistics of one tile (each (n,); None: not asked for), over the tile's part of each row's support S."""

    m: torch.Tensor | None = None  # max_{c ∈ S} z_c (−inf: none of S in the tile); no gradient
    sum_exp: torch.Tensor | None = None  # Σ_{c ∈ S} e^{z_c − m} (m made 0 where it is −inf)
    sum_z: torch.Tensor | None = None  # Σ_{c ∈ S} z_c (label smoothing)
    sum_ez: torch.Tensor | None = None  # Σ_{c ∈ S} e^{z_c − m} (z_c − m) (the entropy)
    target: torch.Tensor | None = None  # z_y from the tile holding y, 0 in the others
    terms: torch.Tensor | None = None  # Σ_c negative(z_c) of a sigmoid criterion (`Criterion.negative`)
    best: torch.Tensor | None = None  # max_c z_c (every column, not only S); no gradient
    best_at: torch.Tensor | None = None  # its global column, the lowest on a tie (int64)
    ahead: torch.Tensor | None = None  # the columns before y in argmax order: larger, or equal at a lower id (int64)


class Combine(Protocol):
    """How the statistics of tiles reduce to those of their union: `reduce(x, op)` over the tiles ("max", "min":
    no gradient; "sum": the gradient of the union's value reaches each tile's as it is), `gather(x)` (T, *x.shape)."""

    def reduce(self, x: torch.Tensor, op: str) -> torch.Tensor: ...

    def gather(self, x: torch.Tensor) -> torch.Tensor: ...


class Stacked:
    """Tiles in one process, their statistics stacked on dim 0 ((T, n); `stack`)."""

    def reduce(self, x: torch.Tensor, op: str) -> torch.Tensor:
        return x.sum(0) if op == "sum" else x.detach().amax(0) if op == "max" else x.detach().amin(0)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _One:
    """A single tile: a whole row."""

    def reduce(self, x: torch.Tensor, op: str) -> torch.Tensor:
        return x if op == "sum" else x.detach()

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return x[None]


ONE = _One()


def stack(tiles: list[TileStats]) -> TileStats:
    """The statistics of several tiles of the same rows stacked on dim 0, for `Stacked`."""
    return TileStats(*(None if f[0] is None else torch.stack(f) for f in zip(*tiles, strict=True)))


def tile_stats(z, opts, column=None, inside=None, kept=None, entropy: bool = False) -> TileStats:
    """The softmax statistics of the tile z (n, C) over its support `kept` (n, C) (bool; None: every column), and the
    logit at the local `column` (n,) of the rows whose target the tile holds (`inside` (n,); None: all). Σ z only
    where the options `opts` (`hf_heads.losses.chunks.ChunkOptions`) smooth the labels, Σ e^{z−m}(z−m) only with
    `entropy`."""
    s = z if kept is None else z.masked_fill(~kept, -torch.inf)
    with torch.no_grad():
        m = s.max(1).values  # (n,)
        shift = torch.where(torch.isfinite(m), m, 0.0)
    d = s - shift[:, None]  # (n, C)
    e = torch.exp(d)  # 0 outside the support
    sum_z = (z if kept is None else torch.where(kept, z, 0.0)).sum(1) if opts.label_smoothing else None
    sum_ez = None
    if entropy:
        sum_ez = (e * (d if kept is None else torch.where(kept, d, 0.0))).sum(1)
    return TileStats(m, e.sum(1), sum_z, sum_ez, None if column is None else tile_target(z, column, inside))


def tile_target(z, column, inside=None) -> torch.Tensor:
    """z[i, column_i] (n,) of the tile z (n, C), 0 in the rows whose target it does not hold (`inside` False)."""
    target = z.gather(1, column[:, None]).squeeze(1)
    return target if inside is None else torch.where(inside, target, 0.0)


def tile_terms(z, criterion, column, inside=None) -> TileStats:
    """A sigmoid criterion's statistics of the tile z (n, C): Σ_c negative(z_c) and the target's logit."""
    return TileStats(terms=criterion.negative(z).sum(1), target=tile_target(z, column, inside))


def tile_ranking(z, y, offset: int = 0, own=None) -> TileStats:
    """The argmax of the tile z (n, C) (its columns the global ids offset + 0..C-1) and, given the target's own logit
    `own` (n,) (the merged `target`), the count of its columns ahead of y (n,) in argmax order."""
    z = z.detach()
    best, at = z.max(1)  # torch's max gives the first maximum
    ahead = None
    if own is not None:
        ids = torch.arange(z.shape[1], device=z.device) + offset  # (C,)
        ahead = ((z > own[:, None]) | ((z == own[:, None]) & (ids[None, :] < y[:, None]))).sum(1)
    return TileStats(best=best, best_at=at + offset, ahead=ahead)


def predict(z: torch.Tensor, y: torch.Tensor, rank: bool = True) -> torch.Tensor:
    """(n, 2) int64 for the whole-row logits z (n, V): each row's argmax (the lowest index on a tie, as `torch.argmax`)
    and its target's rank (the classes before it in that order: the target is among the top k iff its rank < k);
    without `rank`, (n, 1): the argmax alone."""
    stats = tile_ranking(z, y, 0, tile_target(z.detach(), y) if rank else None)
    return torch.stack([stats.best_at] + ([stats.ahead] if rank else []), dim=1)


def top_k_predict(z: torch.Tensor, y: torch.Tensor, vals: torch.Tensor, idx: torch.Tensor, rank: bool = True):
    """`predict(z, y, rank)` from the row's top k that a sparse loss selected (vals (n, k) descending, idx their
    columns), the rank capped at k: min(rank, k). The top k decides every row whose k-th value ties neither the maximum
    nor the target's logit (every class larger than it, or equal to it, is then among the k); the other rows are
    ranked over their whole row, as `predict` does. No pass over the (n, V) block beside reading the targets' logits,
    so it needs the rows to be read on the host (a CPU): `hf_heads.losses.reduction.host_reads_are_free`."""
    k, kth, best = vals.shape[1], vals[:, -1], vals[:, 0]  # (n,) each
    at = torch.where(vals == best[:, None], idx, torch.iinfo(torch.int64).max).amin(1)  # the lowest id of the max
    cols = [at]
    unsure = kth == best  # the whole top k ties with the max: an equal logit may lie outside it
    if rank:
        own = z.gather(1, y[:, None])  # (n, 1)
        ahead = ((vals > own) | ((vals == own) & (idx < y[:, None]))).sum(1)  # exact where own > kth
        cols.append(torch.where(own[:, 0] < kth, k, ahead))  # own < kth: k logits above it
        unsure = unsure | (own[:, 0] == kth)  # a tie at the k-th value: topk kept any of the tied columns
    out = torch.stack(cols, dim=1)  # (n, 1) or (n, 2)
    rows = unsure.nonzero().squeeze(1)
    if rows.numel():
        full = predict(z[rows], y[rows], rank)
        out[rows] = full if not rank else torch.stack([full[:, 0], full[:, 1].clamp_max(k)], dim=1)
    return out


def merge(stats: TileStats, combine: Combine) -> TileStats:
    """The statistics of the union of the tiles `combine` reduces over: e.g. `merge(stack(tiles), Stacked())`, or
    one process's tile merged with the other processes' (vocab_parallel). M = max_j m_j, Σ_j e^{m_j − M} S_j,
    Σ_j e^{m_j − M} (W_j + (m_j − M) S_j) for the entropy's sum, the rest summed; argmax: the largest, lowest id."""
    m, scaled = None, {}
    if stats.m is not None:
        with torch.no_grad():
            m = combine.reduce(stats.m, "max")
            m = torch.where(torch.isfinite(m), m, 0.0)  # (n,)
            scale = torch.exp(stats.m - m)  # (T, n) or (n,): 0 for a tile without support
            shift = torch.where(scale > 0, stats.m - m, 0.0)
        scaled["sum_exp"] = stats.sum_exp * scale
        if stats.sum_ez is not None:
            scaled["sum_ez"] = (stats.sum_ez + shift * stats.sum_exp) * scale
    names = [k for k in ("sum_exp", "sum_z", "sum_ez", "target", "terms") if getattr(stats, k) is not None]
    out = {"m": m}
    if names:
        values = combine.reduce(torch.stack([scaled.get(k, getattr(stats, k)) for k in names], dim=-2), "sum")
        out.update(zip(names, values.unbind(0), strict=True))  # (n,) each
    if stats.best is not None:
        out["best"] = combine.reduce(stats.best, "max")
        lowest = torch.where(stats.best == out["best"], stats.best_at, torch.iinfo(torch.int64).max)
        out["best_at"] = combine.reduce(lowest, "min")
    if stats.ahead is not None:
        out["ahead"] = combine.reduce(stats.ahead, "sum")
    return TileStats(**out)


def tile_top_k(z: torch.Tensor, k: int) -> torch.Tensor:
    """(n, k) the k largest logits of the tile z (n, C), −inf after its C when C < k."""
    top = torch.topk(z.detach(), min(k, z.shape[1]), dim=1).values
    return torch.nn.functional.pad(top, (0, k - top.shape[1]), value=-torch.inf)


def top_k_floor(top: torch.Tensor, k: int, combine: Combine) -> torch.Tensor:
    """(n,) each row's k-th largest logit over every tile, from the tiles' `tile_top_k` (n, k) (stacked: (T, n, k)):
    the support is the logits at or above it (a tie with it kept)."""
    tops = combine.gather(top)  # (T, n, k)
    return torch.topk(tops.permute(1, 0, 2).reshape(tops.shape[1], -1), k, dim=1).values[:, -1]


def row_loss(stats: TileStats, opts, support: int = 1):
    """(loss (n,), lse (n,), entropy (n,) or None) of rows from their merged statistics and the options `opts`:
    lse = m + log S, (1 − ε)(lse − z_y) + ε(lse − Σ_S z / |S|) (`F.cross_entropy`'s smoothing over the support |S|),
    H = log S − W / S."""
    log_s = torch.log(stats.sum_exp)
    lse = torch.where(torch.isfinite(stats.m), stats.m, 0.0) + log_s  # m as `tile_stats` shifted by it
    loss = lse - stats.target
    smooth = opts.label_smoothing
    if smooth:
        loss = (1 - smooth) * loss + smooth * (lse - stats.sum_z / support)
    ent = None if stats.sum_ez is None else log_s - stats.sum_ez / stats.sum_exp
    return loss, lse, ent


def sigmoid_loss(stats: TileStats, criterion) -> torch.Tensor:
    """(n,) Σ_c negative(z_c) + positive(z_y) − negative(z_y) of a sigmoid criterion (sampling paper eqs. 1, 3)."""
    return stats.terms + criterion.positive(stats.target) - criterion.negative(stats.target)


def weighted_sum(opts, loss, lse, row_weight, z_weight) -> torch.Tensor:
    """Σ_i r_i loss_i + λ u_i lse_i² (λ the options' z-loss) over the rows whose weight is not 0 (an ignored row's
    loss may not be finite)."""
    total = torch.where(row_weight != 0, row_weight * loss, 0.0).sum()
    if opts.z_loss:
        total = total + torch.where(z_weight != 0, opts.z_loss * z_weight * lse.square(), 0.0).sum()
    return total


def support_grad_(
    logp, opts, lse, row_weight=None, z_weight=None, support: int = 1, kept=None, ent=None, ent_weight=None,
    probs: bool = False,
) -> torch.Tensor:  # fmt: skip
    """logp (n, C) = z − lse (−inf outside `kept`; with `probs`, p itself: then no entropy weight) overwritten by
    d/d z on the support of the rows' weighted losses
    r_i loss_i + λ u_i lse_i² + e_i H_i under the options `opts` (ε, λ):
    p (r + 2 λ u lse) − r ε / |S| − e p (log p + H) (d H / d z_c = −p_c (log p_c + H)). `row_weight` r (n,); None: 1,
    the row weights applied later on (n, H) blocks (then no z-loss); `z_weight` u (n,) (None: r); `ent_weight` e (n,)
    with the entropies H (n,) `ent`."""
    ent_grad = None
    if ent_weight is not None:
        ent_grad = logp + ent[:, None]
        ent_grad = ent_grad if kept is None else torch.where(kept, ent_grad, 0.0)
    grad = logp if probs else logp.exp_()  # p
    if ent_grad is not None:
        ent_grad.mul_(grad).mul_(-ent_weight.to(grad.dtype)[:, None])
    rate = opts.label_smoothing / support if opts.label_smoothing else None
    if row_weight is not None:
        coef = row_weight.to(lse.dtype)
        if opts.z_loss:
            coef = coef + 2.0 * opts.z_loss * (row_weight if z_weight is None else z_weight).to(lse.dtype) * lse
        grad.mul_(coef.to(grad.dtype)[:, None])
        rate = None if rate is None else (row_weight.to(grad.dtype) * rate)[:, None]
    if rate is not None:
        grad.sub_(rate if kept is None else rate * kept)
    return grad if ent_grad is None else grad.add_(ent_grad)


def label_grad_(grad, opts, column, row_weight=None, inside=None) -> torch.Tensor:
    """grad (n, C) += −r (1 − ε) at the target's local `column` (n,) of the rows whose target the tile holds (`inside`;
    None: all): the label's term in d loss / d z of a softmax criterion (`row_weight` r (n,); None: 1)."""
    r = torch.ones_like(column, dtype=grad.dtype) if row_weight is None else row_weight.to(grad.dtype)
    hit = label_coefficient(opts, r)
    grad.scatter_add_(1, column[:, None], (hit if inside is None else torch.where(inside, hit, 0.0))[:, None])
    return grad


def label_coefficient(opts, row_weight) -> torch.Tensor:
    """(n,) −r (1 − ε): d (r loss) / d z_y beside the support's p r."""
    return -(1.0 - opts.label_smoothing) * row_weight


def target_grad_(grad, column, inside=None, slope=None, replaced: bool = False) -> torch.Tensor | None:
    """grad (n, C) times the soft-cap's `slope` (n, C) (1 − (z / cap)² at the capped z, `capped_slope`); with
    `replaced` the target's entry (a margin's t, replacing h · w_y) returned as d t (n,) and zeroed."""
    if slope is not None:
        grad.mul_(slope)
    if not replaced:
        return None
    col = column[:, None]  # (n, 1)
    at = grad.gather(1, col).squeeze(1)
    grad.scatter_(1, col, (0.0 if inside is None else torch.where(inside, 0.0, at)[:, None]))
    return at if inside is None else torch.where(inside, at, 0.0)


def capped_slope(z: torch.Tensor, softcap: float) -> torch.Tensor:
    """d cap·tanh(x / cap) / dx at the capped values z = cap·tanh(x / cap): 1 − (z / cap)²."""
    return 1.0 - (z / softcap).square()
