"""Former home of the TRL integration, which now lives beside the trainer: `hf_heads.training.trl`. Importing this
module re-exports its names with a FutureWarning; it will be removed in 0.3."""

import warnings

from hf_heads.training.trl import HeadsSFTTrainer, check_sft_options

warnings.warn(
    "hf_heads.integrations.trl moved to hf_heads.training.trl and will be removed in 0.3; "
    "import HeadsSFTTrainer from hf_heads.training.trl",
    FutureWarning,
    stacklevel=2,
)

__all__ = ["HeadsSFTTrainer", "check_sft_options"]
