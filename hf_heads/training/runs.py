"""Former home of the run scripts' support, which now is the package `hf_heads.cli` (`backbones`, `errors`, `resume`,
`runs`). Importing this module re-exports its names with a FutureWarning; it will be removed in 0.3."""

import warnings

from hf_heads.cli.backbones import (
    PACKAGED_MODELS,
    TINY_BACKBONES,
    TINY_ENCODERS,
    TINY_SEQ2SEQ,
    packaged_model_path,
    tiny_backbone_config,
)
from hf_heads.cli.errors import UsageError, load_hub_dataset, loading_model, main_wrapper
from hf_heads.cli.resume import check_output_dir, resolve_checkpoint, resolve_head, same_head, saved_head
from hf_heads.cli.runs import (
    RunArguments,
    check_vocab,
    ensure_word_counts,
    finish_run,
    load_local_files,
    parse_args,
    peak_rss_mib,
    save_json,
    train_block,
    truncate_splits,
)

warnings.warn(
    "hf_heads.training.runs moved to the package hf_heads.cli (hf_heads.cli.backbones, .errors, .resume, .runs) "
    "and will be removed in 0.3",
    FutureWarning,
    stacklevel=2,
)

__all__ = [
    "PACKAGED_MODELS",
    "TINY_BACKBONES",
    "TINY_ENCODERS",
    "TINY_SEQ2SEQ",
    "RunArguments",
    "UsageError",
    "check_output_dir",
    "check_vocab",
    "ensure_word_counts",
    "finish_run",
    "load_hub_dataset",
    "load_local_files",
    "loading_model",
    "main_wrapper",
    "packaged_model_path",
    "parse_args",
    "peak_rss_mib",
    "resolve_checkpoint",
    "resolve_head",
    "same_head",
    "saved_head",
    "save_json",
    "tiny_backbone_config",
    "train_block",
    "truncate_splits",
]
