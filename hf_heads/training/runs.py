"""Former home of the run scripts' support, which now is the package `hf_heads.cli` (`backbones`, `errors`, `resume`,
`runs`). Importing this module re-exports its names with a FutureWarning; it will be removed in 0.3."""

import warnings

from hf_heads.cli import backbones, errors, resume, runs

warnings.warn(
    "hf_heads.training.runs moved to the package hf_heads.cli (hf_heads.cli.backbones, .errors, .resume, .runs) "
    "and will be removed in 0.3",
    FutureWarning,
    stacklevel=2,
)

# each moved name, by the module of hf_heads.cli that holds it now
_MOVED = {
    backbones: (
        "PACKAGED_MODELS",
        "TINY_BACKBONES",
        "TINY_ENCODERS",
        "TINY_SEQ2SEQ",
        "packaged_model_path",
        "tiny_backbone_config",
    ),
    errors: ("UsageError", "load_hub_dataset", "loading_model", "main_wrapper"),
    resume: ("check_output_dir", "resolve_checkpoint", "resolve_head", "same_head", "saved_head"),
    runs: (
        "RunArguments",
        "check_vocab",
        "ensure_word_counts",
        "finish_run",
        "load_local_files",
        "parse_args",
        "peak_rss_mib",
        "save_json",
        "train_block",
        "truncate_splits",
    ),
}
globals().update({name: getattr(module, name) for module, names in _MOVED.items() for name in names})
__all__ = [name for names in _MOVED.values() for name in names]
