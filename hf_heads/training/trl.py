"""TRL's `SFTTrainer` on hf_heads causal LMs (needs the `trl` extra: `pip install hf_heads[trl]`).

A plain `trl.SFTTrainer(model=hf_heads_model, ...)` trains with the head's own criterion (hf_heads.modeling.fused); SFT
options that need the full logits (`label_smoothing_factor`, `compute_loss_func`) are refused when the model is called.
`HeadsSFTTrainer` adds what `HeadsTrainer` adds (word counts of the trained tokens, diagnostics, perplexity) and
refuses `loss_type="dft"` (which weights a token's loss ℓ by exp(−ℓ)) where exp(−ℓ) is not a probability.
"""

from __future__ import annotations

from trl import SFTConfig, SFTTrainer

from hf_heads.integrations.peft import with_backbone_targets
from hf_heads.modeling.fused import trl_full_logits_refusal
from hf_heads.modeling.inputs import model_head
from hf_heads.training.trainer import _HeadsTrainerMixin
from hf_heads.validation import OptionError

__all__ = ["HeadsSFTTrainer", "check_sft_options"]


def check_sft_options(model, args: SFTConfig | None, compute_loss_func=None) -> None:
    """Refuse SFT options that cannot apply to `model`'s head, naming the option."""
    head = model_head(model)  # also under a PEFT adapter on the head
    if head is None:
        raise TypeError(f"HeadsSFTTrainer trains hf_heads models (HeadsForCausalLM), not {type(model).__name__}")
    if compute_loss_func is not None:
        raise ValueError(f"compute_loss_func: {trl_full_logits_refusal(head.family)}")
    if args is not None and args.loss_type == "dft" and not head.training_loss_is_nll:
        raise OptionError(
            "loss_type",
            "dft",
            f"is not allowed with this head ({head.options.describe()}); allowed: 'nll'. DFT weights each token's "
            "loss ℓ by exp(−ℓ), a probability only when ℓ is −log of a softmax (softmax, margin, sparse, sampled CE "
            "full / MCS / NCE)",
        )


class HeadsSFTTrainer(_HeadsTrainerMixin, SFTTrainer):
    """`trl.SFTTrainer` for hf_heads models (see the module docstring)."""

    @property
    def counts_column(self) -> str:
        """The column word counts are read from: the prepared dataset's `labels` (-100 on the tokens the loss skips),
        so only the tokens the model is trained to predict count; `input_ids` for a dataset prepared without labels."""
        return "labels" if "labels" in (getattr(self.train_dataset, "column_names", None) or ()) else "input_ids"

    def __init__(self, model, args: SFTConfig | None = None, *positional, compute_loss_func=None, **kwargs):
        check_sft_options(model, args, compute_loss_func)
        if kwargs.get("peft_config") is not None:
            kwargs["peft_config"] = with_backbone_targets(kwargs["peft_config"], model)
        super().__init__(model, args, *positional, compute_loss_func=compute_loss_func, **kwargs)
