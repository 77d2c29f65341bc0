"""The continuous output layer (Bhat et al. 2019 §2; Kumar & Tsvetkov 2019): û = W_o h + b_o (H -> d), trained
against the frozen, L2-normalised pretrained embedding u = E[y] of the target word.

The table E (V, d) is a buffer saved with the weights, so a saved model decodes after `from_pretrained`.
Inference "logits" (*, V) are û·Eᵀ for vMF heads (the vMF log-density log C_m(‖û‖) + ûᵀE_c up to the per-row
constant) and `logit_scale` · cos(û, E_c) for margin heads, so greedy search is nearest-neighbour decoding
and beam search ranks hypotheses by these scores (log-softmax of them, as for any logits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hf_heads.heads.options import ContinuousHeadOptions, head_options
from hf_heads.losses._rows import autocast_off
from hf_heads.losses.continuous import nearest_neighbour_diagnostics, syn_margin_loss, vmf_nll

_DIAGNOSTIC_ROWS = 256  # positions of the last training batch kept for the table-2 diagnostics


def check_embedding_table(table: torch.Tensor, num_classes: int, dim: int | None) -> None:
    """Refuse a table with the wrong shape, non-finite values or all-zero rows (they cannot be normalised)."""
    if table.dim() != 2 or table.shape[0] != num_classes:
        raise ValueError(f"embedding table has shape {tuple(table.shape)}, expected ({num_classes}, d)")
    if dim is not None and table.shape[1] != dim:
        raise ValueError(f"embedding table has dimension {table.shape[1]}, but head.embedding_dim={dim}")
    bad = ~torch.isfinite(table).all(dim=1)
    if bool(bad.any()):
        raise ValueError(f"embedding table has NaN/inf in {int(bad.sum())} rows (first: row {int(bad.nonzero()[0])})")
    zero = table.norm(dim=1) == 0
    if bool(zero.any()):
        raise ValueError(f"embedding table has {int(zero.sum())} all-zero rows (first: row {int(zero.nonzero()[0])})")


class ContinuousHead(nn.Module):
    """Output layer predicting a d-dim embedding for each of the V words of the vocabulary (see module doc)."""

    def __init__(self, hidden_size: int, num_classes: int, head: dict | None = None) -> None:
        super().__init__()
        self.options: ContinuousHeadOptions = head_options(head)
        dim = self.options.embedding_dim
        if dim is None:
            raise ValueError("head.embedding_dim is not set: build the head with the table's dimension d")
        self.proj = nn.Linear(hidden_size, dim)
        self.register_buffer("embeddings", torch.zeros(num_classes, dim))  # (V, d), unit rows once set
        self.input_proj = nn.Linear(dim, hidden_size, bias=False) if self.options.tie_decoder_inputs else None
        nn.init.normal_(self.proj.weight, std=0.02)
        nn.init.zeros_(self.proj.bias)

    @property
    def num_classes(self) -> int:
        return self.embeddings.shape[0]

    eval_loss_is_nll = False  # the eval loss is the training loss (vMF NLL of the embedding, or a margin)

    def set_word_counts(self, counts: torch.Tensor) -> None:
        raise ValueError("the continuous head uses no word counts (its targets are the embedding table's rows)")

    def set_embedding_table(self, table: torch.Tensor) -> None:
        """Attach the pretrained table (V, d); rows are L2-normalised here and frozen."""
        table = torch.as_tensor(table, dtype=torch.float32)
        check_embedding_table(table, self.num_classes, self.options.embedding_dim)
        with torch.no_grad():
            self.embeddings.copy_(F.normalize(table, dim=1).to(self.embeddings.device))

    def _table(self) -> torch.Tensor:
        key = self.embeddings._version
        if getattr(self, "_checked", None) != key:
            if bool((self.embeddings.norm(dim=1) == 0).any()):
                raise ValueError(
                    "the continuous head has no embedding table (all-zero rows): call "
                    "model.head.set_embedding_table(E) with the (V, d) pretrained vectors before training"
                )
            self._checked = key
        return self.embeddings

    def embed_inputs(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """Decoder input embeddings (B, T, H) = E[ids] W_in (tie_decoder_inputs)."""
        return self.input_proj(self._table()[input_ids])

    @autocast_off
    def predict(self, hidden: torch.Tensor) -> torch.Tensor:
        """û (*, d) in float32: the projection runs in the head's dtype with autocast off (through the module, so
        its hooks run), and is upcast for the losses."""
        return self.proj(hidden.to(self.proj.weight.dtype)).float()

    def loss(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        *,
        num_items_in_batch: int | torch.Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """Loss of hidden (*, H) against word ids (*); ignored positions contribute nothing. `mean` divides the
        sum by `num_items_in_batch` when given (exact gradient accumulation), else by the valid positions."""
        table = self._table()
        flat_h, flat_y = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
        valid = flat_y != ignore_index
        bad = valid & ((flat_y < 0) | (flat_y >= self.num_classes))
        if bool(bad.any()):
            raise ValueError(f"labels: found {int(flat_y[bad][0])}, allowed 0 <= label < {self.num_classes}")
        pred = self.predict(flat_h[valid])  # (n, d)
        ids = flat_y[valid]
        target = table[ids]  # (n, d)
        o = self.options
        if self.training:
            self._last = (pred.detach()[:_DIAGNOSTIC_ROWS], ids[:_DIAGNOSTIC_ROWS])
        if o.loss == "vmf":
            rows = vmf_nll(pred, target, lambda1=o.vmf_lambda1, lambda2=o.vmf_lambda2, reduction="none")
        else:
            rows = syn_margin_loss(pred, target, negative=o.negative, margin=o.loss_margin, embeddings=table,
                                   target_ids=ids, num_negatives=o.num_negatives, reduction="none")  # fmt: skip
        if reduction == "none":
            return rows.new_zeros(flat_y.shape).masked_scatter(valid, rows).reshape(labels.shape)
        total = rows.sum() + 0.0 * pred.sum()  # keeps the graph when every position is ignored
        if reduction == "sum":
            return total
        denom = num_items_in_batch if num_items_in_batch is not None else valid.sum()
        return total / torch.as_tensor(denom, device=total.device).clamp_min(1)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(*, V) decoding scores: û·Eᵀ (vMF) or logit_scale · cos(û, E) (margin losses)."""
        return self._scores(hidden).to(self.proj.weight.dtype)

    @autocast_off
    def _scores(self, hidden: torch.Tensor) -> torch.Tensor:
        pred = self.predict(hidden)  # (*, d) float32
        if self.options.loss != "vmf":
            pred = F.normalize(pred, dim=-1) * self.options.logit_scale
        return pred @ self._table().float().T  # (*, V)

    @torch.no_grad()
    def diagnostics(self) -> dict[str, float]:
        """Table 2 of Bhat et al. on the last training batch: accuracy@1/2/5/10 of the nearest neighbour,
        similarity to the nearest neighbour (correct / wrong) and to the target (wrong), and mean ‖û‖."""
        last = getattr(self, "_last", None)
        if last is None or last[0].shape[0] == 0:
            return {}
        pred, ids = last
        out = {f"head/{k}": v for k, v in nearest_neighbour_diagnostics(pred, ids, self._table()).items()}
        out["head/pred_norm_mean"] = pred.norm(dim=-1).mean().item()
        return {k: round(v, 4) for k, v in out.items() if v == v}

    def forward(self, hidden: torch.Tensor, labels: torch.Tensor | None = None, **loss_kwargs):
        loss = None if labels is None else self.loss(hidden, labels, **loss_kwargs)
        logits = None if (labels is not None and self.training) else self.logits(hidden)
        return loss, logits
