"""Former home of the TRL integration, which now lives beside the trainer: `hf_heads.training.trl`. Importing this
module re-exports its names with a FutureWarning; it will be removed in 0.3."""

from hf_heads.compat import moved_module

globals().update(moved_module("hf_heads.integrations.trl"))
