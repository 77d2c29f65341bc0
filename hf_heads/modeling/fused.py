"""Per-token losses without logits, for trainers that ask a causal LM for them (TRL's `SFTTrainer`).

TRL computes its SFT loss from `model(..., labels=labels, fused_lm_head=True)` and installs that call by replacing
`model.forward` with a plain cross-entropy. An hf_heads model keeps its own forward (`HeadsForCausalLM.__setattr__`)
and answers with `token_loss_output`: `log_probs` = −(the head's per-token loss), so TRL's loss is exactly
`model(input_ids, labels=labels).loss`; `entropy` and `is_top1` describe the inference distribution (a second pass over
the output layer unless the loss pass scores it, which costs sampled heads part of their speed-up).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.utils import ModelOutput


@dataclass
class TokenLossOutput(ModelOutput):
    """The fields of TRL's `FusedCausalLMOutput`, every per-token field (B, T) and 0 where the label is -100: `loss` (Σ
    per-token loss / `num_items_in_batch`), `log_probs` (−(the head's per-token loss)), `entropy` and `is_top1` of the
    inference distribution (no gradient; ties to the lowest index), `label_mask`."""

    loss: torch.Tensor | None = None
    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    log_sum_sq_probs: torch.Tensor | None = None
    mean_logits: torch.Tensor | None = None
    is_top1: torch.Tensor | None = None
    label_mask: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None


def token_loss_output(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    shift_labels: torch.Tensor | None,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> TokenLossOutput:
    """The head's per-token loss of hidden (B, T, H) against shift_labels (B, T) (position t predicts
    shift_labels[t]) as a `TokenLossOutput`. Calls the head through its forward, so module hooks (FSDP, PEFT) run."""
    if shift_labels is None:
        raise ValueError("fused_lm_head=True needs labels (or shift_labels): it returns per-token losses")
    labels = shift_labels.to(hidden.device)  # (B, T)
    mask = labels != -100  # (B, T)
    per_token, stats = head(hidden, labels, reduction="none", token_statistics=True)  # (B, T), 0 where masked
    divisor = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return TokenLossOutput(
        loss=per_token.sum() / divisor,
        log_probs=-per_token,
        entropy=stats["entropy"],
        is_top1=stats["is_top1"],
        label_mask=mask,
    )


def is_trl_fused_forward(value) -> bool:
    """Whether `value` is the forward TRL's `add_fused_lm_head` installs (trl.trainer.utils). It is wrapped with
    `functools.wraps(type(model).forward)`, so its name and module are the model's: read its code object."""
    function = getattr(value, "__func__", value)
    module = getattr(function, "__globals__", {}).get("__name__", "")
    code = getattr(function, "__code__", None)
    return module.startswith("trl.") and code is not None and "add_fused_lm_head" in code.co_qualname


def trl_full_logits_refusal(family: str) -> str:
    return (
        f"TRL asked this hf_heads model ({family} head) for its full logits to compute a training loss "
        "(SFTTrainer does so for label_smoothing_factor > 0 and for a compute_loss_func): that loss would be "
        f"computed on the inference logits, not with the {family} head's criterion. Leave label_smoothing_factor at 0 "
        "and compute_loss_func unset (softmax and sparse heads have their own label_smoothing option), or use "
        "hf_heads.training.trl.HeadsSFTTrainer, which checks these options up front"
    )
