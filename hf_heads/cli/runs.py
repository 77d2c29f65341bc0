"""The steps every run script shares around its own task code: arguments, the start of a run (`start_run`), local files
and split limits, word counts, the vocabulary check, the train block and the end-of-run artefacts (`finish_run`).
"""

from __future__ import annotations

import json
import logging
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import transformers
from transformers import HfArgumentParser, set_seed

from hf_heads.cli.backbones import card_base_model
from hf_heads.cli.errors import UsageError
from hf_heads.cli.resume import check_output_dir, resolve_checkpoint, resolve_head
from hf_heads.data import label_counts
from hf_heads.training import plot_loss_curves, write_model_card
from hf_heads.training.arguments import unknown_flags_hint


@dataclass
class RunArguments:
    """What a run does with its output directory and where its results go."""

    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Allow writing into an output_dir that already holds a run."}
    )
    change_head: bool = field(
        default=False,
        metadata={
            "help": "Continue a trained hf_heads model (--model_name_or_path) with the head the head flags give "
            "instead of its own, e.g. a softmax model fine-tuned with --head sparse --k 5 (its head tensors must "
            "all load into the new head)."
        },
    )
    hub_export_dir: str | None = field(
        default=None,
        metadata={
            "help": "Offline stand-in for --push_to_hub: write exactly what would be pushed into this directory."
        },
    )
    export_base_dir: str | None = field(
        default=None,
        metadata={
            "help": "Also write the trained model as its base architecture (e.g. LlamaForCausalLM) into this "
            "directory: the backbone and an output layer with the head's inference distribution, the tokenizer and "
            "a model card, no hf_heads code (model.export_base). A head that does not fold (sparse, max-norm, the "
            "σ-based sampled corrections, ...) or an output bias the architecture has no place for ends the run with "
            "the reason, after everything else is written."
        },
    )


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
        if not err.code:  # --help / --version: argparse printed what was asked for
            raise
        raise UsageError(f"invalid arguments (exit {err.code}); see --help") from None
    except (ValueError, TypeError) as err:
        raise UsageError(str(err).splitlines()[0]) from None
    if unknown:
        raise UsageError(f"unknown arguments: {' '.join(unknown)} ({unknown_flags_hint(unknown)})")
    return tuple(outs)


def start_run(model_args, run_args: RunArguments, training_args) -> tuple[dict, str | None]:
    """(head section, checkpoint or None) of a run, after the checks every script makes first; then logging and the
    seed."""
    head = resolve_head(
        model_args.model_name_or_path,
        training_args.head_config(),
        training_args.head_flags_given(),
        run_args.change_head,
    )
    check_output_dir(training_args.output_dir, run_args.overwrite_output_dir, training_args.resume_from_checkpoint)
    checkpoint = resolve_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint, head)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    return head, checkpoint


def load_local_files(train: str | None, validation: str | None, test: str | None = None, *, text: bool = False):
    """`datasets.load_dataset` of local .csv / .json / .jsonl files (and .txt when `text`), one per split."""
    files = {k: v for k, v in (("train", train), ("validation", validation), ("test", test)) if v}
    ext = Path(next(iter(files.values()))).suffix.lstrip(".")
    builders = {"csv": "csv", "json": "json", "jsonl": "json", **({"txt": "text"} if text else {})}
    if ext not in builders:
        raise UsageError(
            f"--train_file/--validation_file/--test_file: extension {ext!r}; allowed: {', '.join(builders)}"
        )
    return datasets.load_dataset(builders[ext], data_files=files)


def ensure_word_counts(model, train_dataset) -> None:
    """Before evaluating without training: a head that needs word counts and has none gets the training split's label
    counts, as `HeadsTrainer` would; with no training split, a `UsageError` names the flags."""
    head_module = getattr(model, "head", None)
    if head_module is None or not model.head_needs_counts() or head_module.has_word_counts:
        return
    if train_dataset is None or len(train_dataset) == 0:
        reason = head_module.options.counts_reason()
        what = f"--{reason}" if reason else f"--head {head_module.family}"
        raise UsageError(
            f"{what} needs word counts of the training data, and this run has no training split to count them "
            "from: give --train_file (or a --dataset_name with a train split; its tokens are counted), or "
            "--model_name_or_path of a trained hf_heads model (it saves its counts)"
        )
    model.set_word_counts(label_counts(train_dataset, head_module.num_classes))


def truncate_splits(raw, train: int | None, validation: int | None, test: int | None):
    """The first `--max_*_samples` rows of each split (splits without a limit are kept whole)."""
    limits = {"train": train, "validation": validation, "test": test}
    return datasets.DatasetDict(
        {k: v.select(range(min(len(v), limits[k]))) if limits.get(k) else v for k, v in raw.items()}
    )


def check_vocab(tokenizer, model) -> None:
    """Refuse a tokenizer with ids the model has no embedding for (e.g. `--tokenizer_name` of another model)."""
    size = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > size:
        raise UsageError(
            f"the tokenizer has {len(tokenizer)} tokens but the model embeds only {size}: "
            "use the model's own tokenizer (or one that matches its vocabulary)"
        )


def check_generation_ids(tokenizer, model) -> None:
    """Refuse a tokenizer whose EOS / pad id is not the one the model generates with (its generation config): targets
    would end with another EOS than the one `generate()` stops at."""
    config = model.generation_config
    for name in ("eos_token_id", "pad_token_id"):
        mine, theirs = getattr(tokenizer, name, None), getattr(config, name, None)
        allowed = theirs if isinstance(theirs, list | tuple) else [theirs]
        if mine is not None and theirs is not None and mine not in allowed:
            raise UsageError(
                f"the tokenizer's {name} is {mine} but the model generates with {name}={theirs}: the model would "
                "learn one and generate with the other; use the model's own tokenizer (or set the backbone's "
                f"{name} to the tokenizer's)"
            )


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def save_json(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")


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
    trainer,
    *,
    model,
    tokenizer,
    run_args: RunArguments,
    training_args,
    dataset: str,
    base_model: str,
    metrics: dict,
    plots: list[str] | tuple[str, ...] = (),
    task: tuple[str, str] | None = None,
) -> None:
    """End-of-run artefacts on the main process: loss plot, model card, `run_summary.json`, the Hub export,
    `--push_to_hub` (keeping this card) and, last, `--export_base_dir` (a refusal is a `UsageError`)."""
    if not trainer.is_world_process_zero():
        return
    out = Path(training_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    family = model.config.head["family"]
    curves = plot_loss_curves(trainer.state.log_history, out / "loss_curves.png", f"{family} head", model=model)
    plots = [str(curves), *plots]
    card = dict(
        model=model,
        dataset=dataset,
        metrics=metrics,
        training_args=training_args,
        **card_base_model(base_model),
        plots=plots,
        task=task,
    )
    write_model_card(out, repo_id=training_args.hub_model_id, **card)
    save_json(out / "run_summary.json", {"head": model.config.head, "dataset": dataset, **metrics})
    if run_args.hub_export_dir:
        hub = Path(run_args.hub_export_dir)
        model.export_for_hub(hub, tokenizer=tokenizer)
        for name in (Path(p).name for p in plots):
            (hub / name).write_bytes((out / name).read_bytes())
        write_model_card(hub, repo_id=training_args.hub_model_id or out.name, **card)
        print(f"Hub export written to {hub}")
    if training_args.push_to_hub:
        trainer.create_model_card = lambda *args, **kwargs: None  # keep README.md: the hf_heads card
        trainer.push_to_hub()
    print(f"model, card and plots written to {out}")
    if run_args.export_base_dir:
        try:
            base = model.export_base(run_args.export_base_dir, tokenizer=tokenizer)
        except ValueError as err:
            raise UsageError(f"--export_base_dir: {str(err).splitlines()[0]}") from err
        print(f"base-architecture export written to {base}")
