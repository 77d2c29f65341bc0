"""Vocabulary parallelism: the cross-entropy of an output layer whose W (V, H) is a DTensor sharded on its rows.

Tensor parallelism (transformers' `tp_plan` "colwise" for an LM head, accelerate's `ParallelismConfig(tp_size=...)`)
gives each of the R processes of a 1-D device mesh the rows [o_r, o_r + V_r) of W and of the bias: placement
`Shard(0)`. The hidden states, the labels and everything computed from them alone (the context norm g of eq. 10 of
the margin paper) are the same on every process.

Each process computes its own rows' logits z_r chunk by chunk: a tile of each row, whose statistics
(hf_heads.losses.tiles) merge with the other processes' through all-reduces (`ShardCombine`) as the tiles of one
process merge, so the loss, log-sum-exp, entropy and gradient are the one-process code on the merged statistics, as
in Megatron-LM's vocabulary-parallel cross-entropy (Shoeybi et al. 2019, sec. 3). `_ReduceSum` (all-reduce forward,
identity backward) and `_CopyIn` (identity forward, all-reduce of d h backward) make the gradient exact; d W_r and d
b_r stay on their process.

What each option needs across processes (top k: eq. 5 of the sparse paper; margins: eq. 13 of the margin paper, with
a word norm computed per row; the sampled family) is tabled in docs/tensor-parallel.md. Every process must give the
same hidden states and labels: the loss checks it (an all-reduced checksum) and refuses otherwise.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

from hf_heads.components import REGISTRIES
from hf_heads.losses.chunks import ChunkOptions, rows_per_chunk
from hf_heads.losses.precision import compute_dtype
from hf_heads.losses.reduction import check_labels, host_reads_are_free, mean_divisor, reduce_rows, valid_rows
from hf_heads.losses.tiles import (
    TileStats,
    capped_slope,
    label_grad_,
    merge,
    row_loss,
    sigmoid_loss,
    support_grad_,
    target_grad_,
    tile_ranking,
    tile_stats,
    tile_target,
    tile_terms,
    tile_top_k,
    top_k_floor,
    weighted_sum,
)
from hf_heads.losses.transforms import soft_cap
from hf_heads.losses.triton_programs import scale_in_place
from hf_heads.validation import OptionError


class VocabShard:
    """Where a process's rows of a vocabulary-sharded W sit: the local rows (V_r, H) (a view with autograd to the
    DTensor), their first class id `offset`, the global V, and the process group."""

    def __init__(self, weight) -> None:
        from torch.distributed.tensor import Shard

        mesh, placements = weight.device_mesh, tuple(weight.placements)
        if mesh.ndim != 1 or placements != (Shard(0),):
            raise OptionError(
                "weight",
                f"a DTensor with placements {placements} on a mesh of shape {tuple(mesh.shape)}",
                "a vocabulary-parallel output layer is sharded on its rows: placements (Shard(0),) on a 1-D mesh "
                "(transformers' 'colwise' plan for an LM head); give any other layout as weight.full_tensor()",
            )
        self.local = weight.to_local()  # (V_r, H)
        self.num_classes = weight.shape[0]
        # Shard(0) splits as torch.chunk does: ceil(V / R) rows per process, the last ones fewer (or none)
        per_process = -(-self.num_classes // mesh.size())
        self.offset = min(mesh.get_local_rank() * per_process, self.num_classes)
        if self.local.shape[0] != min(per_process, self.num_classes - self.offset):
            raise RuntimeError(
                f"this process holds {self.local.shape[0]} rows of W from row {self.offset}, not the torch.chunk "
                f"split of {self.num_classes} rows over {mesh.size()} processes that the vocabulary-parallel loss "
                "assumes"
            )
        self.group = mesh.get_group()

    def holds(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(inside, column) for global class ids (*,): whether this process holds each, and its local row (0 where it
        does not: the caller masks those)."""
        local = ids - self.offset
        inside = (local >= 0) & (local < self.local.shape[0])
        return inside, torch.where(inside, local, 0)

    def owned_classes(self, ids, column_scale, bias, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(inside (M,), s_c W_c (M, H) in `dtype`, b_c (M,) or None) of class ids (M,) (global), from this process's
        rows (row 0 where it does not hold the class: the caller masks those with `inside`)."""
        inside, column = self.holds(ids)
        w = self.local[column].to(dtype)  # (M, H)
        if column_scale is not None:
            w = w * column_scale[column, None].to(dtype)
        return inside, w, None if bias is None else bias[column].to(dtype)

    def local_part(self, tensor: torch.Tensor | None) -> torch.Tensor | None:
        """This process's entries of a (V,) tensor given whole (word counts), or the local part of a sharded one."""
        if tensor is None:
            return None
        if is_dtensor(tensor):
            return tensor.to_local()
        return tensor[self.offset : self.offset + self.local.shape[0]]


def shard_vocabulary(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """Shard the W (V, H) and bias (V,) of a discrete head (`model` an hf_heads model or the head itself) on their rows
    over the 1-D device mesh `mesh`, in place, as torch's `ColwiseParallel` shards an `nn.Linear` LM head: each
    becomes an `nn.Parameter` holding a DTensor with placement `Shard(0)`. A head tied to the input embeddings is
    refused (sharding would untie them). Returns `model`."""
    from torch import nn
    from torch.distributed.tensor import Shard, distribute_tensor

    head = getattr(model, "head", model)
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None and getattr(embeddings, "weight", None) is head.weight:
        allowed = "an untied output layer (tie_word_embeddings=False) to shard on its own"
        raise OptionError("head.weight", "the input embedding matrix (tied)", allowed)
    for name in ("weight", "bias"):
        param = getattr(head, name, None)
        if param is not None and not is_dtensor(param):
            sharded = distribute_tensor(param.detach(), mesh, [Shard(0)])
            head.register_parameter(name, nn.Parameter(sharded, requires_grad=param.requires_grad))
    return model


def is_dtensor(tensor) -> bool:
    """Whether `tensor` is a DTensor (without importing torch.distributed.tensor for plain tensors)."""
    if not dist.is_available() or isinstance(tensor, torch.Tensor) and type(tensor) is torch.Tensor:
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def vocab_shard(weight) -> VocabShard | None:
    """The `VocabShard` of a DTensor weight (refusing a layout other than rows on a 1-D mesh), None for a tensor."""
    return VocabShard(weight) if is_dtensor(weight) else None


@contextlib.contextmanager
def whole_parameters(module: torch.nn.Module):
    """Inside: each DTensor parameter of `module` itself (not of its children) replaced by its whole tensor
    (`full_tensor()`, differentiable), for what is computed over every class at once: inference logits,
    `eval_accuracy@k` statistics, diagnostics. A no-op without DTensor parameters."""
    sharded = {name: p for name, p in module._parameters.items() if p is not None and is_dtensor(p)}
    if not sharded:
        yield module
        return
    try:
        for name, param in sharded.items():
            module._parameters[name] = param.full_tensor()
        yield module
    finally:
        module._parameters.update(sharded)


def local_tensor(tensor):
    """A replicated DTensor's local value (the hidden states of a tensor-parallel model), a tensor as it is."""
    if not is_dtensor(tensor):
        return tensor
    from torch.distributed.tensor import Replicate

    if any(p != Replicate() for p in tensor.placements):
        allowed = "replicated on every process (placements Replicate()) beside a vocabulary-sharded weight"
        raise OptionError("hidden", f"a DTensor with placements {tuple(tensor.placements)}", allowed)
    return tensor.to_local()


class _ReduceSum(torch.autograd.Function):
    """Σ over the processes forward; identity backward (every process holds the same loss and its gradient)."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _CopyIn(torch.autograd.Function):
    """Identity forward; backward the Σ over the processes of d x (each process's logits use x with its rows)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def copy_in(x: torch.Tensor, shard: VocabShard) -> torch.Tensor:
    """x (replicated) as the processes' logits take it: its gradient is summed over the processes."""
    return _CopyIn.apply(x, shard.group)


def reduce_sum(x: torch.Tensor, shard: VocabShard) -> torch.Tensor:
    return _ReduceSum.apply(x, shard.group)


def check_replicated(shard: VocabShard, *tensors: torch.Tensor) -> None:
    """Refuse hidden states or labels that differ between the processes (a checksum of each, its max and min
    all-reduced; on an accelerator an asynchronous device assertion)."""
    sums = torch.stack([t.detach().sum(dtype=torch.float64) for t in tensors])  # (T,), no float64 copy
    both = torch.cat([sums, -sums])
    dist.all_reduce(both, op=dist.ReduceOp.MAX, group=shard.group)
    same = (both[: len(tensors)] == -both[len(tensors) :]).all()
    message = (
        "a vocabulary-sharded weight (a DTensor with Shard(0)) needs the same hidden states and labels on every "
        "process of its mesh (tensor parallelism), but they differ: shard the batch with data parallelism over "
        "another mesh dimension, or give the whole weight (weight.full_tensor())"
    )
    if host_reads_are_free(sums.device):
        if not bool(same):
            raise ValueError(message)
    else:
        torch._assert_async(same, message)


class ShardCombine:
    """`tiles.Combine` over the processes of a shard's group: all-reduces (a sum through `reduce_sum`) and an
    all-gather."""

    def __init__(self, shard: VocabShard) -> None:
        self.shard = shard

    def reduce(self, x: torch.Tensor, op: str) -> torch.Tensor:
        if op == "sum":
            return reduce_sum(x, self.shard)
        x = x.detach().clone()
        dist.all_reduce(x, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN, group=self.shard.group)
        return x

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(self.shard.group))]
        dist.all_gather(parts, x.contiguous(), group=self.shard.group)
        return torch.stack(parts)  # (R, *x.shape)


def _merged(z, y, t, shard: VocabShard, opts: ChunkOptions, want_pred: int, entropy: bool = False):
    """(merged statistics (`tiles.merge`), z with the target's logit replaced by t, kept (n, V_r) or None, |S|, inside
    (n,), column (n,), predictions (n, want_pred)) of this process's soft-capped tile z (n, V_r) of rows with global
    labels y (n,) under the options `opts`; t (n,) a replaced, capped target logit or None. Predictions and ranks
    read the logits before t replaces the target's, as the one-process kernels."""
    combine = ShardCombine(shard)
    inside, column = shard.holds(y)
    pred = z.new_empty(z.shape[0], 0, dtype=torch.long)
    if want_pred:
        own = None  # the target's own logit, for its rank
        if want_pred > 1:
            own = merge(TileStats(target=tile_target(z.detach(), column, inside)), combine).target
        ranks = merge(tile_ranking(z, y, shard.offset, own), combine)
        pred = torch.stack([ranks.best_at] + ([ranks.ahead] if want_pred > 1 else []), dim=1)  # (n, want_pred)
    if t is not None:
        z = z.scatter(1, column[:, None], torch.where(inside, t, tile_target(z, column))[:, None])
    if not opts.criterion.softmax:
        return merge(tile_terms(z, opts.criterion, column, inside), combine), z, None, 0, inside, column, pred
    kept, support, k = None, shard.num_classes, opts.top_k
    if k is not None and k < shard.num_classes:
        kept, support = z >= top_k_floor(tile_top_k(z, k), k, combine)[:, None], k
    stats = merge(tile_stats(z, opts, column, inside, kept, entropy), combine)
    return stats, z, kept, support, inside, column, pred


def _chunk_losses(h, y, t, w, b, s, shard: VocabShard, opts: ChunkOptions, want_pred: int, transform, want_ent=False):
    """(loss (n,), lse (n,), predictions (n, want_pred), entropy (n,) or empty) of rows h (n, H) (through `copy_in`)
    with global labels y (n,) against this process's w (V_r, H), b (V_r,), s (V_r,) under the options `opts`; t (n,)
    a replaced target logit (before the soft-cap) or None. Differentiable through `reduce_sum` and `copy_in`. A
    sigmoid criterion sums its per-class terms over the processes (its lse is 0); `transform` maps this process's
    logits (n, V_r) before the softmax (the sampled family's posterior correction), or None."""
    z = h @ w.T  # (n, V_r) in the compute dtype
    if s is not None:
        z = z * s
    if b is not None:
        z = z + b
    z = soft_cap(z, opts.softcap)
    if transform is not None:
        z = transform(z)
    if t is not None:  # the same on every process: its gradient is the owner's, summed over them by `copy_in`
        t = soft_cap(copy_in(t, shard), opts.softcap)
    stats, _, _, support, _, _, pred = _merged(z, y, t, shard, opts, want_pred, want_ent)
    if not opts.criterion.softmax:
        return sigmoid_loss(stats, opts.criterion), torch.zeros_like(stats.target), pred, z.new_empty(0)
    loss, lse, ent = row_loss(stats, opts, support)
    return loss, lse, pred, z.new_empty(0) if ent is None else ent


class _ShardedCrossEntropy(torch.autograd.Function):
    """Σ_i w_i · loss_i + λ v_i · lse_i² over every process, each chunk's gradient computed in the forward pass (as the
    one-process fused loss): the row weights w (class weight over the mean's divisor, 0 on ignored rows) and v
    (the z-loss's) are known before the pass. Also returns each row's lse and the predictions (no gradient)."""

    @staticmethod
    def forward(ctx, h, w, b, s, t, y, weights, z_weights, shard, opts: ChunkOptions, want_pred, step):
        total, lse_all, pred_all, ctx.grads = _sharded_pass(
            h, w, b, s, t, y, weights, z_weights, shard, opts, want_pred, step
        )
        ctx.save_for_backward(h, w, b, s, t, y, weights, z_weights)  # inputs, for a second backward only
        ctx.rerun = (shard, opts, 0, step)  # a rerun's arguments after the inputs (no predictions)
        ctx.mark_non_differentiable(lse_all, pred_all)
        return total, lse_all, pred_all

    @staticmethod
    def backward(ctx, grad, *unused):  # unused: the lse and predictions, outputs without a gradient
        grads, ctx.grads = ctx.grads, None  # handed over, not kept: autograd takes them as .grad without a copy
        if grads is None:  # a second backward through this graph (retain_graph=True): the first one took them
            *_, grads = _sharded_pass(*ctx.saved_tensors, *ctx.rerun)
        if not (host_reads_are_free(grad.device) and bool(grad == 1)):  # d loss = 1 read on a CPU: not multiplied
            # in place: no second (V_r, H) tensor; on a GPU no pass at all where d loss is 1 (no host read)
            grads = tuple(None if g is None else scale_in_place(g, grad) for g in grads)
        return (*grads, None, None, None, None, None, None, None)


def _sharded_pass(h, w, b, s, t, y, weights, z_weights, shard, opts: ChunkOptions, want_pred, step):
    """`_ShardedCrossEntropy`'s forward pass: (total, lse (N,), predictions (N, want_pred), the gradients of h, W_r,
    b_r, s_r and the target logits), chunk by chunk over the rows."""
    n_rows = h.shape[0]
    grad_h, grad_w = torch.empty_like(h), torch.zeros_like(w)
    grad_b = None if b is None else torch.zeros_like(b)
    grad_s = None if s is None else torch.zeros_like(s)
    grad_t = None if t is None else torch.zeros_like(t)
    lse_all = h.new_empty(n_rows)
    pred_all = y.new_empty(n_rows, want_pred)
    total = h.new_zeros(())
    for start in range(0, n_rows, step):
        rows = slice(start, start + step)
        h_c, y_c, a, v = h[rows], y[rows], weights[rows], z_weights[rows]
        raw = h_c @ w.T  # (n, V_r); kept apart only for d s
        z = raw if s is None else raw * s  # (n, V_r)
        if b is not None:
            z.add_(b)
        z = soft_cap(z, opts.softcap)
        t_c = None if t is None else soft_cap(t[rows], opts.softcap)
        stats, z, kept, support, inside, column, pred_all[rows] = _merged(z, y_c, t_c, shard, opts, want_pred)
        loss, lse, _ = row_loss(stats, opts, support)
        total = total + weighted_sum(opts, loss, lse, a, v)
        lse_all[rows] = lse
        logp = z - lse[:, None]  # (n, V_r), overwritten by d L / d z
        logp = logp if kept is None else logp.masked_fill_(~kept, -torch.inf)
        grad_z = label_grad_(support_grad_(logp, opts, lse, a, v, support, kept), opts, column, a, inside)
        grad_z.masked_fill_(((a == 0) & (v == 0))[:, None], 0.0)  # ignored rows (their p may not be finite)
        slope = None if opts.softcap is None else capped_slope(z, opts.softcap)
        d_t = target_grad_(grad_z, column, inside, slope, replaced=t is not None)
        if t is not None:
            grad_t[rows] = d_t
        del z, kept, slope
        if b is not None:
            grad_b += grad_z.sum(0)
        if s is not None:
            grad_s += raw.mul_(grad_z).sum(0)
            grad_z.mul_(s)
        del raw
        grad_h[rows] = grad_z @ w
        grad_w.addmm_(grad_z.T, h_c)
    if grad_t is not None:  # t is the same on every process: its gradient, the owner's entries, on all of them
        dist.all_reduce(grad_t, group=shard.group)
    return total, lse_all, pred_all, (grad_h, grad_w, grad_b, grad_s, grad_t)


def sharded_cross_entropy(
    h: torch.Tensor,
    y: torch.Tensor,
    shard: VocabShard,
    bias: torch.Tensor | None,
    weights: torch.Tensor,
    z_weights: torch.Tensor,
    opts: ChunkOptions,
    *,
    target_logit: torch.Tensor | None = None,
    want_pred: int = 0,
    chunk_size: int | None = None,
    budget: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Σ_i weights_i · loss_i + λ z_weights_i · lse_i² (), lse (N,), predictions (N, want_pred)) of the rows h (N, H)
    (through `copy_in`), y (N,) under the options `opts` (its column scale this process's s_r (V_r,) or None), the
    gradient computed in the forward pass (`_ShardedCrossEntropy`): for the "mean" and "sum" reductions, whose row
    weights are known before the pass."""
    compute, h, w, b, s, step = _local_operands(h, shard, bias, opts, chunk_size, budget)
    t = None if target_logit is None else target_logit.to(compute)
    return _ShardedCrossEntropy.apply(
        h, w, b, s, t, y, weights.to(compute), z_weights.to(compute), shard, opts.with_scale(None), want_pred, step
    )


def _local_operands(h, shard: VocabShard, bias, opts: ChunkOptions, chunk_size: int | None, budget: int | None):
    """(compute dtype, h, this process's W_r, b_r and s_r in it, rows per chunk: `chunk_size`, else those whose
    (rows, V_r) float32 logits fit `budget` bytes, else the defaults) of a sharded loss's rows."""
    compute = compute_dtype(h, shard.local)
    b = None if bias is None else bias.to(compute)
    s = None if opts.column_scale is None else opts.column_scale.to(compute)
    step = chunk_size or rows_per_chunk(h.shape[0], shard.local.shape[0], budget, device=h.device)
    return compute, h.to(compute), shard.local.to(compute), b, s, step


def vocab_parallel_per_row(
    h: torch.Tensor,
    y: torch.Tensor,
    shard: VocabShard,
    bias: torch.Tensor | None,
    opts: ChunkOptions,
    *,
    target_logit: torch.Tensor | None = None,
    want_pred: int = 0,
    chunk_size: int | None = None,
    transform=None,
    want_ent: bool = False,
    budget: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(losses (N,), lse (N,), predictions (N, want_pred), entropies (N,) or empty) of the rows h (N, H) (through
    `copy_in`), y (N,) under the options `opts` (its column scale this process's s_r (V_r,) or None), one chunk at a
    time; in training each chunk is recomputed in the backward (`torch.utils.checkpoint`), so no (N, V_r) block
    outlives its chunk."""
    compute, h, w, b, s, step = _local_operands(h, shard, bias, opts, chunk_size, budget)
    opts = opts.with_scale(None)  # s passed on as a tensor, for its gradient
    outs = []
    for start in range(0, h.shape[0], step):
        rows = slice(start, start + step)
        t = None if target_logit is None else target_logit[rows].to(compute)
        args = (h[rows], y[rows], t, w, b, s, shard, opts, want_pred, transform, want_ent)
        if torch.is_grad_enabled():
            outs.append(checkpoint(_chunk_losses, *args, use_reentrant=False))
        else:
            outs.append(_chunk_losses(*args))
    if not outs:
        empty = h.new_zeros(0)
        return empty + (w.sum() + h.sum()) * 0.0, empty, y.new_zeros(0, want_pred), empty
    losses, lse, pred, ent = (torch.cat(parts) for parts in zip(*outs, strict=True))
    return losses, lse, pred, ent


def sharded_rows(
    hidden: torch.Tensor, target: torch.Tensor, shard: VocabShard, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(h (N, H) through `copy_in`, float32 for a half model, y (N,) with class 0 on ignored rows, valid (N,)), the
    hidden states and labels checked to be the same on every process, the labels against V."""
    h, y, valid = valid_rows(local_tensor(hidden), target, ignore_index)
    check_labels(y, shard.num_classes, ignore_index)
    check_replicated(shard, h, y)
    h = h.to(compute_dtype(h))  # a half model's rows in float32, as the one-process losses compute them
    return copy_in(h, shard), torch.where(valid, y, 0), valid


def reduce_sharded(
    losses: torch.Tensor,
    lse: torch.Tensor,
    y: torch.Tensor,
    valid: torch.Tensor,
    target_shape,
    *,
    reduction: str,
    num_items_in_batch,
    z_loss: float = 0.0,
    class_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, z-loss term) of the rows' cross-entropies as the one-process loss reduces them: a[y_i] · loss_i +
    λ lse_i²; "mean" divides by Σ a[y_i] (torch's normalisation) or `num_items_in_batch`, the z-loss by the row
    count or `num_items_in_batch`."""
    if reduction == "none":
        rows = losses if class_weight is None else losses * class_weight.to(losses)[y]
        z_rows = z_loss * lse.square() if z_loss else torch.zeros_like(losses)
        total = reduce_rows(rows + z_rows, valid, target_shape, "none", keep=valid)
        return total, reduce_rows(z_rows.detach(), valid, target_shape, "none", keep=valid)
    weights, z_weights = sharded_row_weights(y, valid, class_weight, reduction, num_items_in_batch, losses.dtype)
    z_term = torch.where(valid, z_loss * z_weights * lse.square(), 0.0).sum()
    return torch.where(valid, weights * losses, 0.0).sum() + z_term, z_term.detach()


def sharded_row_weights(
    y: torch.Tensor,
    valid: torch.Tensor,
    class_weight: torch.Tensor | None,
    reduction: str,
    num_items_in_batch,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w (N,), v (N,)): the weights of each row's cross-entropy and of its z-loss λ lse² (λ not included) in the
    "mean" or "sum" of a sharded loss (0 on ignored rows), as `reduce_sharded` divides them."""
    counted = valid.to(dtype)
    a = counted if class_weight is None else class_weight.to(device=y.device, dtype=dtype)[y] * counted
    z = counted
    if reduction == "sum":
        return a, z
    divisor = mean_divisor(num_items_in_batch, valid.sum(), y.device)
    ce_divisor = divisor
    if class_weight is not None and num_items_in_batch is None:  # torch's Σ_i a[y_i]
        total = a.sum()
        ce_divisor = torch.where(total > 0, total, torch.ones_like(total))
    return a / ce_divisor, z / divisor


def sharded_margin_inputs(
    scorer,
    hidden,
    shard: VocabShard,
    bias,
    target,
    word_counts,
    context_norm_value,
    ignore_index: int,
    target_logit: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(a·h (N, H), s (V_r,) or None, t (N,) or None, b (V_r,) or None, y (N,), valid (N,)) of eq. 13 for a
    vocabulary-sharded W: the scorer's factors of this process's rows (`Scorer.fused_factors`) and the target logit
    t (with its margin, before the soft-cap) from the process holding each label, all-reduced; None without a margin
    unless `target_logit`. Refuses a word norm that is not a function of each row alone."""
    if not getattr(scorer.word_norm, "per_row", False):
        raise OptionError(
            "word_norm",
            scorer.word_norm.name,
            "with a vocabulary-sharded weight, a word norm computed from each row alone (per_row): "
            + ", ".join(
                sorted(name for name, cls in REGISTRIES["word_norm"].items() if getattr(cls, "per_row", False))
            ),
        )
    h, y, valid = sharded_rows(hidden, target, shard, ignore_index)
    inside, column = shard.holds(y)  # (N,): the labels this process holds, their local rows
    inside = inside & valid
    a, s, t, b, _ = scorer.fused_factors(
        h, shard.local, shard.local_part(bias), column, shard.local_part(word_counts), context_norm_value, valid
    )
    h2 = h if a is None else h * a[:, None].to(h.dtype)
    if t is None and target_logit:  # a · s_y (h · W_y) + b_y, the row's own logit
        _, w_y, b_y = shard.owned_classes(y, s, b, h2.dtype)  # (N, H), (N,)
        t = (h2 * w_y).sum(1) + (0.0 if b_y is None else b_y)
    if t is not None:
        t = reduce_sum(torch.where(inside, t, 0.0), shard)  # (N,) the owner's
    return h2, s, t, b, y, valid


def same_samples(samples: torch.Tensor, shard: VocabShard) -> torch.Tensor:
    """The first process's draw of the K noise samples, on every process (a broadcast: the sampled criteria's noise
    is drawn once, whatever the processes' generators)."""
    samples = samples.contiguous().clone()
    dist.broadcast(samples, src=dist.get_global_rank(shard.group, 0), group=shard.group)
    return samples


def sharded_candidate_scores(h, shard: VocabShard, bias, column_scale, samples, softcap) -> torch.Tensor:
    """cap(h · (s_k W_k) + b_k) (N, K) of the candidates `samples` (K,) (global ids), each column from the process
    holding it (all-reduced: the gradient reaches that process's rows only)."""
    inside, w, b = shard.owned_classes(samples, column_scale, bias, h.dtype)  # (K,), (K, H), (K,)
    out = soft_cap(h @ w.T if b is None else torch.addmm(b, h, w.T), softcap)  # (N, K)
    return reduce_sum(torch.where(inside[None, :], out, 0.0), shard)
