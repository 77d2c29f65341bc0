#!/usr/bin/env python
"""Fine-tune a sequence classifier with any hf_heads head (the transformers `run_classification.py` shape).

    accelerate launch run_scripts/run_classification.py --output_dir out/wordnet \\
        --dataset_name wordnet-lexnames --model_name_or_path minilm \\
        --head sparse --k 20 --do_train --do_eval --max_steps 300

`--model_name_or_path`: `minilm` (the packaged all-MiniLM-L6-v2 encoder), a built-in tiny backbone built
from a config with a word-level tokenizer (`tiny-bert`, `tiny-gpt2`, `tiny-llama`), a local directory or a
Hub id. `--dataset_name`: a bundled corpus (wordnet-lexnames: 45 classes, wordnet-hypernyms: 288,
bbc-news: 5, bible-books: 66) or a Hub dataset; `--train_file`/`--validation_file`/`--test_file` read local
.csv/.json files with a text and a label column (string or integer labels; the label set is the training set's).
Accuracy, macro-F1 and micro-F1 come from the evaluate module shipped in hf_heads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
from transformers import AutoTokenizer, DataCollatorWithPadding

from hf_heads import HeadsConfig, HeadsForSequenceClassification
from hf_heads.cli.backbones import (
    PACKAGED_MODELS,
    TINY_BACKBONES,
    TINY_ENCODERS,
    packaged_model_path,
    tiny_backbone_config,
)
from hf_heads.cli.errors import UsageError, load_hub_dataset, loading_model, main_wrapper
from hf_heads.cli.resume import load_trained, saved_head
from hf_heads.cli.runs import (
    RunArguments,
    check_vocab,
    ensure_word_counts,
    finish_run,
    load_local_files,
    parse_args,
    start_run,
    train_block,
    truncate_splits,
)
from hf_heads.data import CLASSIFICATION_CORPORA, build_word_tokenizer, load_classification
from hf_heads.data.tokenization import encode_head_tail
from hf_heads.metrics import classification_metrics
from hf_heads.training import HeadsTrainer, HeadsTrainingArguments

logger = logging.getLogger(__name__)
TINY = {**TINY_ENCODERS, **TINY_BACKBONES}


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="minilm",
        metadata={"help": f"`minilm`, a built-in tiny backbone ({', '.join(TINY)}), a local directory or a Hub id."},
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer to use instead of the model's."})
    word_vocab_size: int | None = field(
        default=None, metadata={"help": "Word-level vocabulary size of built-in backbones (default: every word)."}
    )
    pooling: str = field(
        default="auto", metadata={"help": "auto, pooler, first, last or mean (see HeadsConfig.pooling)."}
    )
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout before the head (default: the backbone's)."}
    )


@dataclass
class DataArguments:
    dataset_name: str | None = field(
        default="wordnet-lexnames",
        metadata={"help": f"Bundled corpus ({', '.join(CLASSIFICATION_CORPORA)}) or a Hub dataset."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    train_file: str | None = field(default=None, metadata={"help": "Local training file (.csv, .json, .jsonl)."})
    validation_file: str | None = field(default=None, metadata={"help": "Local validation file."})
    test_file: str | None = field(default=None, metadata={"help": "Local test file (the predict block)."})
    text_column: str = field(default="text", metadata={"help": "Column of the text."})
    label_column: str = field(default="label", metadata={"help": "Column of the label."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens kept per text."})
    head_tail: bool = field(
        default=False, metadata={"help": "Truncate long texts to head+tail (first quarter + end) instead of the head."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training set."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the validation set."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Truncate the test set."})


def load_raw(data: DataArguments) -> tuple[datasets.DatasetDict, list[str]]:
    """Splits with `text` and integer `label` columns, and the label names (the training set's labels): a
    `ClassLabel` column keeps its names; string labels are sorted, integer labels sorted by value, and every
    split's labels are mapped to their index in that list (saved as the model's `id2label`)."""
    if data.train_file or data.validation_file or data.test_file:
        raw = load_local_files(data.train_file, data.validation_file, data.test_file)
    elif data.dataset_name in CLASSIFICATION_CORPORA:
        raw = load_classification(data.dataset_name)
    elif data.dataset_name:
        raw = load_hub_dataset(data.dataset_name, data.dataset_config_name, CLASSIFICATION_CORPORA)
    else:
        raise UsageError("give --dataset_name or --train_file")
    if "train" not in raw:
        raise UsageError(f"the dataset needs a train split (its label set); it has {list(raw)}")
    for name, split in raw.items():
        for flag, column in (("--text_column", data.text_column), ("--label_column", data.label_column)):
            if column not in split.column_names:
                raise UsageError(f"{flag}={column!r}: split {name!r} has columns {split.column_names}")
    raw = raw.select_columns([data.text_column, data.label_column])
    feature = raw["train"].features[data.label_column]
    if isinstance(feature, datasets.ClassLabel):
        names = list(feature.names)
    else:
        values = set(raw["train"][data.label_column])
        numeric = all(isinstance(v, int) for v in values)
        names = [str(v) for v in sorted(values)] if numeric else sorted({str(v) for v in values})
        index = {name: i for i, name in enumerate(names)}
        for split_name, split in raw.items():
            unknown = sorted({str(v) for v in split[data.label_column]} - index.keys())
            if unknown:
                raise UsageError(
                    f"--label_column={data.label_column!r}: split {split_name!r} has labels {unknown[:5]} that the "
                    f"training set does not have (labels: {names[:10]}{' ...' if len(names) > 10 else ''})"
                )
        # a new int64 column: mapping in place would keep the column's string type ("0", "1", ...)
        column = data.label_column
        raw = raw.map(
            lambda batch: {"label_id": [index[str(v)] for v in batch[column]]},
            batched=True,
            remove_columns=[column],
            desc="label ids",
        ).rename_column("label_id", column)
    return raw.rename_columns({data.text_column: "text", data.label_column: "label"}), names


def build_model_and_tokenizer(
    model_args: ModelArguments, head: dict, id2label: dict, train_texts: list[str], change_head: bool = False
):
    name = model_args.model_name_or_path
    if name in TINY:
        if model_args.tokenizer_name:
            with loading_model("--tokenizer_name", model_args.tokenizer_name, ()):
                tok = AutoTokenizer.from_pretrained(model_args.tokenizer_name)
        else:
            tok = build_word_tokenizer(train_texts, vocab_size=model_args.word_vocab_size)
        config = HeadsConfig(
            backbone=tiny_backbone_config(name, tok),
            head=head,
            pooling=model_args.pooling,
            classifier_dropout=model_args.classifier_dropout,
            id2label=id2label,
            label2id={v: k for k, v in id2label.items()},
        )
        return HeadsForSequenceClassification(config), tok
    if saved_head(name) is not None:  # a trained hf_heads model: evaluate it or train it further
        model = load_trained(HeadsForSequenceClassification, name, head, change_head)
        if model.config.id2label != id2label:
            trained = list(model.config.id2label.values())[:10]
            raise UsageError(
                f"--model_name_or_path={name!r} was trained on labels {trained}, this dataset has "
                f"{list(id2label.values())[:10]}"
            )
        return model, AutoTokenizer.from_pretrained(name)
    path = packaged_model_path(name) if name in PACKAGED_MODELS else name
    flag, tok_name = ("--tokenizer_name", model_args.tokenizer_name) if model_args.tokenizer_name else (None, path)
    with loading_model(flag or "--model_name_or_path", tok_name, () if flag else [*TINY, *PACKAGED_MODELS]):
        tok = AutoTokenizer.from_pretrained(tok_name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    with loading_model("--model_name_or_path", name, [*TINY, *PACKAGED_MODELS]):
        model = HeadsForSequenceClassification.from_base(
            path,
            id2label=id2label,
            head=head,
            pooling=model_args.pooling,
            classifier_dropout=model_args.classifier_dropout,
        )
    model.config.name_or_path = name
    return model, tok


def main() -> None:
    model_args, data_args, run_args, training_args = parse_args(
        (ModelArguments, DataArguments, RunArguments, HeadsTrainingArguments)
    )
    head, checkpoint = start_run(model_args, run_args, training_args)

    raw, names = load_raw(data_args)
    raw = truncate_splits(raw, data_args.max_train_samples, data_args.max_eval_samples, data_args.max_predict_samples)
    id2label = dict(enumerate(names))
    model, tok = build_model_and_tokenizer(
        model_args, head, id2label, [t for t in raw["train"]["text"] if t], run_args.change_head
    )
    check_vocab(tok, model)
    logger.info(
        "head %s, %d parameters, %d labels, pooling %s", head, model.num_parameters(), len(names), model.pooling
    )

    def preprocess(batch: dict) -> dict:
        texts = [t or "" for t in batch["text"]]
        if data_args.head_tail:
            enc = encode_head_tail(tok, texts, data_args.max_seq_length)
        else:
            enc = dict(tok(texts, max_length=data_args.max_seq_length, truncation=True))
        enc["labels"] = batch["label"]
        return enc

    with training_args.main_process_first(desc="tokenize"):
        tokenized = raw.map(preprocess, batched=True, remove_columns=["text", "label"], desc="tokenize")
    trainer = HeadsTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"] if training_args.do_train else None,
        eval_dataset=tokenized.get("validation") if training_args.do_eval else None,
        processing_class=tok,
        data_collator=DataCollatorWithPadding(tok),
        compute_metrics=classification_metrics(),
    )
    metrics: dict = {}
    train_labels = np.asarray(raw["train"]["label"])
    majority = int(np.bincount(train_labels, minlength=len(names)).argmax())
    if training_args.do_train:
        metrics.update(train_block(trainer, checkpoint))
    for split, prefix, flag in (
        ("validation", "eval", training_args.do_eval),
        ("test", "predict", training_args.do_predict),
    ):
        if not flag:
            continue
        if split not in tokenized:
            raise UsageError(f"--do_{'eval' if prefix == 'eval' else 'predict'} needs a {split} split")
        if not training_args.do_train:  # a head that needs word (label) counts gets them from the training split
            ensure_word_counts(model, tokenized["train"])
        result = trainer.predict(tokenized[split], metric_key_prefix=prefix)
        gold = np.asarray(raw[split]["label"])
        result.metrics[f"{prefix}_majority_class_accuracy"] = float((gold == majority).mean())
        trainer.log_metrics(prefix, result.metrics)
        trainer.save_metrics(prefix, result.metrics)
        metrics.update(result.metrics)
        if prefix == "predict" and trainer.is_world_process_zero():
            preds = np.argmax(result.predictions, axis=-1)
            lines = [f"{i}\t{names[p]}\t{names[g]}" for i, (p, g) in enumerate(zip(preds, gold, strict=True))]
            out = Path(training_args.output_dir) / "predictions.tsv"
            out.write_text("index\tprediction\tlabel\n" + "\n".join(lines) + "\n", encoding="utf-8")

    dataset = data_args.dataset_name if not data_args.train_file else Path(data_args.train_file).name
    finish_run(
        trainer,
        model=model,
        tokenizer=tok,
        run_args=run_args,
        training_args=training_args,
        dataset=dataset,
        base_model=model_args.model_name_or_path,
        metrics=metrics,
    )


if __name__ == "__main__":
    main_wrapper(main)
