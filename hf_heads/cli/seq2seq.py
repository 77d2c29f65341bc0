"""The steps run_translation.py, run_summarization.py and run_question_generation.py share (the
transformers `examples/pytorch` order): arguments -> data -> tokenizer and model -> trainer -> train /
evaluate / predict -> metrics -> card. Each script only says which task it is (`Seq2SeqTask`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoTokenizer, DataCollatorForSeq2Seq

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM
from hf_heads.cli.backbones import PACKAGED_MODELS, TINY_SEQ2SEQ, packaged_model_path, tiny_backbone_config
from hf_heads.cli.errors import UsageError, load_hub_dataset, loading_model
from hf_heads.cli.resume import load_trained, saved_head
from hf_heads.cli.runs import (
    RunArguments,
    check_generation_ids,
    check_vocab,
    ensure_word_counts,
    finish_run,
    load_local_files,
    parse_args,
    start_run,
    train_block,
    truncate_splits,
)
from hf_heads.data import (
    QUESTION_GENERATION_CORPORA,
    SUMMARIZATION_CORPORA,
    TRANSLATION_CORPORA,
    build_word_tokenizer,
    map_uncovered,
)
from hf_heads.data.tokenization import encode_head_tail
from hf_heads.heads import family
from hf_heads.metrics import generation_metrics
from hf_heads.training import HeadsSeq2SeqTrainer, HeadsSeq2SeqTrainingArguments
from hf_heads.training.tables import attach_table, continuous_table, table_source, target_sentences
from hf_heads.validation import OptionError

logger = logging.getLogger(__name__)


@dataclass
class Seq2SeqTask:
    """What differs between the seq2seq scripts."""

    name: str  # card task type, e.g. "translation"
    title: str  # card task name
    corpora: tuple[str, ...]  # bundled corpus names
    load: Callable[[str], datasets.DatasetDict]  # bundled corpus name -> DatasetDict
    source_column: str | None  # default columns of the bundled corpora (None: translation pairs)
    target_column: str | None
    metrics: tuple[str, ...]  # hf_heads.metrics modules reported with --predict_with_generate


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="tiny-bart",
        metadata={
            "help": f"Built-in encoder-decoder built from a config ({', '.join(TINY_SEQ2SEQ)}; word-level "
            "tokenizer trained on the corpus), `minilm` (BERT2BERT warm-started from the packaged MiniLM), "
            "a local directory or a Hub id (BART, T5, Marian, ...)."
        },
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer to use instead of the model's."})
    word_vocab_size: int | None = field(
        default=None, metadata={"help": "Word-level vocabulary size of built-in backbones (default: every word)."}
    )
    tie_word_embeddings: bool = field(
        default=False, metadata={"help": "Built-in backbones: tie the head to the (shared) input embeddings."}
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "Built-in backbones: config values to change, `key=value,key=value` (as transformers' "
            "run_clm.py), e.g. `init_std=0.088,dropout=0.0` or `d_model=256,encoder_layers=3,decoder_layers=3`."
        },
    )


@dataclass
class DataArguments:
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": f"A bundled corpus (translation: {', '.join(TRANSLATION_CORPORA)}; summarization: "
            f"{', '.join(SUMMARIZATION_CORPORA)}; question generation: {', '.join(QUESTION_GENERATION_CORPORA)}; "
            "default: the script's first) or a Hub dataset id."
        },
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    train_file: str | None = field(default=None, metadata={"help": "Local training file (.csv, .json, .jsonl)."})
    validation_file: str | None = field(default=None, metadata={"help": "Local validation file."})
    test_file: str | None = field(default=None, metadata={"help": "Local test file (the predict block)."})
    source_column: str | None = field(default=None, metadata={"help": "Column of the input text."})
    target_column: str | None = field(default=None, metadata={"help": "Column of the output text."})
    source_lang: str | None = field(default=None, metadata={"help": "Translation: source key of `translation`."})
    target_lang: str | None = field(default=None, metadata={"help": "Translation: target key of `translation`."})
    source_prefix: str = field(default="", metadata={"help": "Text put before every source (e.g. for T5)."})
    max_source_length: int = field(default=128, metadata={"help": "Source tokens kept (truncation)."})
    max_target_length: int = field(default=64, metadata={"help": "Target tokens kept; also the generation length."})
    head_tail: bool = field(
        default=False,
        metadata={"help": "Truncate long sources to head+tail (first quarter + end) instead of the head only."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training set."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the validation set."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Truncate the test set."})


def load_pairs(task: Seq2SeqTask, data: DataArguments) -> datasets.DatasetDict:
    """The raw splits with two string columns, `source` and `target`."""
    if data.train_file or data.validation_file or data.test_file:
        raw, name = load_local_files(data.train_file, data.validation_file, data.test_file), "local"
    else:
        name = data.dataset_name or task.corpora[0]
        raw = (
            task.load(name) if name in task.corpora else load_hub_dataset(name, data.dataset_config_name, task.corpora)
        )
    source, target = data.source_column or task.source_column, data.target_column or task.target_column
    if bool(data.source_column) != bool(data.target_column):
        raise UsageError("--source_column and --target_column go together: give both or neither")
    if task.name == "translation" and not data.source_column:
        return _translation_pairs(raw, name, task, data)
    for split_name, split in raw.items():
        for flag, column in (("--source_column", source), ("--target_column", target)):
            if column not in split.column_names:
                raise UsageError(f"{flag}={column!r}: split {split_name!r} has columns {split.column_names}")
    return raw.select_columns([source, target]).rename_columns({source: "source", target: "target"})


def _translation_pairs(raw: datasets.DatasetDict, name: str, task: Seq2SeqTask, data: DataArguments):
    """`translation` = {lang: text} rows -> `source` / `target` columns."""
    langs = name.split("-")[-2:] if name in task.corpora else [None, None]
    src, tgt = data.source_lang or langs[0], data.target_lang or langs[1]
    if not (src and tgt):
        raise UsageError("give --source_lang and --target_lang (keys of the `translation` column)")
    for split_name, split in raw.items():
        if "translation" not in split.column_names:
            raise UsageError(
                f"split {split_name!r} has no `translation` column (columns: {split.column_names}); "
                "give --source_column and --target_column"
            )
        keys = sorted(split[0]["translation"]) if len(split) else [src, tgt]
        for flag, lang in (("--source_lang", src), ("--target_lang", tgt)):
            if lang not in keys:
                raise UsageError(f"{flag}={lang!r}: the `translation` column has languages {keys}")
    columns = {k: v.column_names for k, v in raw.items()}
    return datasets.DatasetDict(
        {
            k: v.map(
                lambda row: {"source": row["translation"][src], "target": row["translation"][tgt]},
                remove_columns=columns[k],
            )
            for k, v in raw.items()
        }
    )


OFFLINE_MODELS = (*TINY_SEQ2SEQ, *PACKAGED_MODELS)


def load_tokenizer(model_args: ModelArguments):
    """`AutoTokenizer` of `--tokenizer_name` or of the model (an unreachable Hub id is one error line)."""
    name = model_args.model_name_or_path
    if model_args.tokenizer_name:
        with loading_model("--tokenizer_name", model_args.tokenizer_name, ()):
            return AutoTokenizer.from_pretrained(model_args.tokenizer_name)
    with loading_model("--model_name_or_path", name, OFFLINE_MODELS):
        return AutoTokenizer.from_pretrained(packaged_model_path(name) if name in PACKAGED_MODELS else name)


def build_tokenizer(model_args: ModelArguments, raw: datasets.DatasetDict):
    """Sources and targets end with </s> (the word-level tokenizer's template, as T5 / BART tokenizers do)."""
    name = model_args.model_name_or_path
    if name in TINY_SEQ2SEQ and not model_args.tokenizer_name:
        if "train" not in raw:
            raise UsageError(
                f"--model_name_or_path={name!r} is a built-in backbone whose word-level tokenizer is built from the "
                "training text: give --train_file too, or --model_name_or_path of a trained model to evaluate"
            )
        texts = [t for column in ("source", "target") for t in raw["train"][column] if t]  # one shared vocabulary
        return build_word_tokenizer(texts, vocab_size=model_args.word_vocab_size, add_eos=True)
    return load_tokenizer(model_args)


def run_table(head: dict, tok, raw: datasets.DatasetDict, output_dir: str, model_dir: str, seed: int):
    """A continuous head's (head with embedding_dim, table (V, d), covered (V,)) for the run
    (hf_heads.training.tables)."""

    def sentences():
        if "train" not in raw:
            return None
        ids = tok(text_target=[t or "" for t in raw["train"]["target"]], add_special_tokens=False)["input_ids"]
        return target_sentences(tok, ids)

    try:
        source = table_source(head, sentences, output_dir, seed, model_dir=model_dir)
        return continuous_table(head, tok, source)
    except ValueError as err:
        raise UsageError(str(err)) from None


def _override_config(config, overrides: str) -> None:
    """`key=value,...` onto `config` (values parsed as the existing attribute's type); unknown keys are an error. Not
    `PretrainedConfig.update_from_string`: its errors do not name the key, and it cannot set a field that is None."""
    for item in overrides.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or not hasattr(config, key):
            raise UsageError(
                f"--config_overrides: {item.strip()!r} is not key=value of a {type(config).__name__} field"
            )
        old = getattr(config, key)
        if isinstance(old, bool):
            if value.lower() not in ("true", "false"):
                raise UsageError(f"--config_overrides: {key}={value!r} must be true or false")
            new = value.lower() == "true"
        elif isinstance(old, (int, float)):
            try:
                number = float(value)
            except ValueError:
                raise UsageError(f"--config_overrides: {key}={value!r} must be a number") from None
            if isinstance(old, int) and not number.is_integer():
                raise UsageError(f"--config_overrides: {key}={value!r} must be an integer")
            new = int(number) if isinstance(old, int) else number
        elif value.lower() == "none":
            new = None
        elif isinstance(old, str):
            new = value
        else:  # a None field: keep a number a number
            try:
                new = int(value) if value.lstrip("-").isdigit() else float(value)
            except ValueError:
                new = value
        try:
            setattr(config, key, new)
        except (ValueError, TypeError, StrictDataclassError) as err:  # the config class's own check of the field
            reason = str(err).strip().splitlines()[-1].strip()
            raise UsageError(
                f"--config_overrides: {key}={value!r} is refused by {type(config).__name__}: {reason}"
            ) from None
    logger.info("backbone config overrides: %s", overrides)


def build_model(model_args: ModelArguments, head: dict, tok, change_head: bool = False):
    name = model_args.model_name_or_path
    if model_args.config_overrides and name not in TINY_SEQ2SEQ:
        raise UsageError(
            f"--config_overrides applies to the built-in backbones ({', '.join(TINY_SEQ2SEQ)}), not {name!r}"
        )
    if saved_head(name) is not None:  # a trained hf_heads model: evaluate it or train it further
        return load_trained(HeadsForSeq2SeqLM, name, head, change_head)
    if name in TINY_SEQ2SEQ:
        backbone = tiny_backbone_config(name, tok, tie_word_embeddings=model_args.tie_word_embeddings)
        if model_args.config_overrides:
            _override_config(backbone, model_args.config_overrides)
        config = HeadsConfig(backbone=backbone, head=head, tie_word_embeddings=model_args.tie_word_embeddings)
        return HeadsForSeq2SeqLM(config)
    if name in PACKAGED_MODELS:
        return HeadsForSeq2SeqLM.from_encoder_decoder_pretrained(packaged_model_path(name), head=head)
    with loading_model("--model_name_or_path", name, OFFLINE_MODELS):
        return HeadsForSeq2SeqLM.from_base(name, head=head)


def scored_texts(tok, texts: list[str], max_length: int) -> list[str]:
    """Texts as the generation metrics score references: encoded as labels (truncated), decoded without special tokens,
    so every head (continuous or softmax) is scored against the same references."""
    ids = tok(text_target=[t or "" for t in texts], max_length=max_length, truncation=True)["input_ids"]
    return [t.strip() for t in tok.batch_decode(ids, skip_special_tokens=True)]


def tokenize_splits(raw: datasets.DatasetDict, tok, data: DataArguments, covered: torch.Tensor | None):
    """input_ids / attention_mask / labels of every split; a continuous head's uncovered target words become `<unk>` in
    the training split only, so evaluation references are the same for every head."""

    def preprocess(batch: dict) -> dict:
        sources = [data.source_prefix + (s or "") for s in batch["source"]]
        if data.head_tail:
            enc = encode_head_tail(tok, sources, data.max_source_length)
        else:
            enc = tok(sources, max_length=data.max_source_length, truncation=True)
        targets = [t or "" for t in batch["target"]]
        enc["labels"] = tok(text_target=targets, max_length=data.max_target_length, truncation=True)["input_ids"]
        return dict(enc)

    tokenized = raw.map(preprocess, batched=True, remove_columns=["source", "target"], desc="tokenize")
    if covered is not None and "train" in tokenized:
        keep = {tok.eos_token_id, tok.unk_token_id} - {None}

        def to_unk(batch: dict) -> dict:
            return {"labels": [map_uncovered(row, covered, tok.unk_token_id, keep) for row in batch["labels"]]}

        tokenized["train"] = tokenized["train"].map(to_unk, batched=True, desc="uncovered targets -> <unk>")
    return tokenized


def main(task: Seq2SeqTask, argv: list[str] | None = None) -> None:
    model_args, data_args, run_args, training_args = parse_args(
        (ModelArguments, DataArguments, RunArguments, HeadsSeq2SeqTrainingArguments), argv
    )
    head, checkpoint = start_run(model_args, run_args, training_args)
    if training_args.generation_max_length is None:
        training_args.generation_max_length = data_args.max_target_length
    if not training_args.eval_accuracy_top_k:  # teacher-forced accuracy@k of --do_eval (Bhat et al. table 2)
        training_args.eval_accuracy_top_k = [1, 2, 5, 10]

    raw = load_pairs(task, data_args)
    if training_args.do_train and "train" not in raw:
        raise UsageError(f"--do_train needs a training split: give --train_file (the data has {list(raw)})")
    raw = truncate_splits(raw, data_args.max_train_samples, data_args.max_eval_samples, data_args.max_predict_samples)
    trained = saved_head(model_args.model_name_or_path) is not None  # evaluate / continue an hf_heads model
    if trained:
        tok = load_tokenizer(model_args)
    else:
        tok = build_tokenizer(model_args, raw)
    covered = None
    if family(head["family"]).head.uses_embedding_table:  # targets are table rows: words outside it -> <unk>
        head, table, covered = run_table(
            head, tok, raw, training_args.output_dir, model_args.model_name_or_path, training_args.seed
        )
    model = build_model(model_args, head, tok, run_args.change_head)
    check_vocab(tok, model)
    check_generation_ids(tok, model)
    logger.info("head %s, %d parameters, vocabulary %d", head, model.num_parameters(), len(tok))
    try:
        model.head.check_generation(training_args.generation_num_beams or 1)
    except OptionError as err:
        raise UsageError(str(err.renamed("--generation_num_beams"))) from None

    with training_args.main_process_first(desc="tokenize"):
        tokenized = tokenize_splits(raw, tok, data_args, covered)
    if covered is not None and not trained:
        try:
            attach_table(model, table, tokenized.get("train"))
        except ValueError as err:
            raise UsageError(
                f"{err}: --do_train with --dataset_name or --train_file, or a trained hf_heads model"
            ) from None
    collator = DataCollatorForSeq2Seq(tok, model=model, label_pad_token_id=-100)
    compute = generation_metrics(tok, task.metrics) if training_args.predict_with_generate else None
    trainer = HeadsSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"] if training_args.do_train else None,
        eval_dataset=tokenized.get("validation") if training_args.do_eval else None,
        processing_class=tok,
        data_collator=collator,
        compute_metrics=compute,
    )
    metrics: dict = {}
    if covered is not None and "train" in tokenized:  # how much of the target side the embedding table covers
        ids = [i for row in tokenized["train"]["labels"] for i in row]
        metrics["target_token_coverage"] = sum(i != tok.unk_token_id for i in ids) / max(len(ids), 1)
        logger.info(
            "continuous head: %.1f%% of target tokens are in %s",
            100 * metrics["target_token_coverage"],
            head["embedding_name"],
        )
    if training_args.do_train:
        metrics.update(train_block(trainer, checkpoint))
    if (training_args.do_eval or training_args.do_predict) and not training_args.do_train:
        ensure_word_counts(model, tokenized.get("train"))  # a head that needs counts: the training split's
    if training_args.do_eval:
        if "validation" not in tokenized:
            raise UsageError("--do_eval needs a validation split (--validation_file)")
        eval_metrics = trainer.evaluate(metric_key_prefix="eval")  # with eval_accuracy@k (Bhat et al. table 2)
        trainer.log_metrics("eval", eval_metrics)
        trainer.save_metrics("eval", eval_metrics)
        metrics.update(eval_metrics)
    if training_args.do_predict:
        if "test" not in tokenized:
            raise UsageError("--do_predict needs a test split (--test_file)")
        result = trainer.predict(tokenized["test"], metric_key_prefix="predict")
        trainer.log_metrics("predict", result.metrics)
        trainer.save_metrics("predict", result.metrics)
        metrics.update(result.metrics)
        if training_args.predict_with_generate and trainer.is_world_process_zero():
            preds = result.predictions[0] if isinstance(result.predictions, tuple) else result.predictions
            preds = [[t if t >= 0 else tok.pad_token_id for t in row] for row in preds.tolist()]
            texts = [t.strip() for t in tok.batch_decode(preds, skip_special_tokens=True)]
            out = Path(training_args.output_dir) / "generated_predictions.jsonl"
            rows = [
                {"source": s, "reference": r, "prediction": p}
                for s, r, p in zip(raw["test"]["source"], raw["test"]["target"], texts, strict=True)
            ]
            out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")

    dataset = data_args.dataset_name or (
        task.corpora[0] if not data_args.train_file else Path(data_args.train_file).name
    )
    finish_run(
        trainer,
        model=model,
        tokenizer=tok,
        run_args=run_args,
        training_args=training_args,
        dataset=dataset,
        base_model=model_args.model_name_or_path,
        metrics=metrics,
        task=(task.name, task.title),
    )
