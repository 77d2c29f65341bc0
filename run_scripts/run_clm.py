#!/usr/bin/env python
"""Fine-tune or train a causal LM with any hf_heads head (the transformers `run_clm.py` shape).

    accelerate launch run_scripts/run_clm.py --output_dir out/margin \\
        --model_name_or_path tiny-gpt2 --dataset_name bible-web \\
        --head margin --margin arc --m 0.001 --word_norm log-unigram --context_norm max-norm \\
        --do_train --do_eval --max_steps 300

`--model_name_or_path` is a built-in tiny backbone (tiny-gpt2, tiny-llama: built from a config, with a
word-level tokenizer trained on the corpus, as in the papers' word-level LMs), a local directory or
a Hub id. `--dataset_name` is a bundled corpus (bible-web, bbc-news, wordnet-glosses) or a Hub
dataset; `--train_file`/`--validation_file` read local .txt/.csv/.json files.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import datasets
import transformers
from transformers import AutoTokenizer, default_data_collator, set_seed

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.data import LM_CORPORA, build_word_tokenizer, load_lm_text
from hf_heads.training import HeadsTrainer, HeadsTrainingArguments, label_counts
from hf_heads.training.plots import plot_word_vectors
from hf_heads.training.runs import (
    TINY_BACKBONES,
    RunArguments,
    UsageError,
    check_output_dir,
    check_vocab,
    finish_run,
    load_local_files,
    main_wrapper,
    parse_args,
    resolve_checkpoint,
    tiny_backbone_config,
    train_block,
)

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="tiny-gpt2",
        metadata={"help": f"Built-in tiny backbone ({', '.join(TINY_BACKBONES)}), a local directory or a Hub id."},
    )
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file inside model_name_or_path."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer to use instead of the model's."})
    word_vocab_size: int | None = field(
        default=None, metadata={"help": "Word-level vocabulary size for built-in backbones (default: every word)."}
    )


@dataclass
class DataArguments:
    dataset_name: str | None = field(
        default="bible-web", metadata={"help": f"Bundled corpus ({', '.join(LM_CORPORA)}) or a Hub dataset."}
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    train_file: str | None = field(default=None, metadata={"help": "Local training file (.txt, .csv, .json)."})
    validation_file: str | None = field(default=None, metadata={"help": "Local validation file."})
    text_column: str = field(default="text", metadata={"help": "Column holding the text."})
    block_size: int = field(default=128, metadata={"help": "Tokens per training sequence."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training blocks."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the evaluation blocks."})


def load_raw(data: DataArguments) -> datasets.DatasetDict:
    if data.train_file or data.validation_file:
        raw = load_local_files(data.train_file, data.validation_file, text=True)
    elif data.dataset_name in LM_CORPORA:
        raw = load_lm_text(data.dataset_name)
    elif data.dataset_name:
        raw = datasets.load_dataset(data.dataset_name, data.dataset_config_name)
    else:
        raise UsageError("give --dataset_name or --train_file")
    for name, split in raw.items():
        if data.text_column not in split.column_names:
            raise UsageError(f"--text_column={data.text_column!r}: split {name!r} has columns {split.column_names}")
    return raw


def build_model_and_tokenizer(model_args: ModelArguments, head: dict, train_texts):
    name = model_args.model_name_or_path
    if name in TINY_BACKBONES:
        tok = (
            AutoTokenizer.from_pretrained(model_args.tokenizer_name)
            if model_args.tokenizer_name
            else build_word_tokenizer(train_texts, vocab_size=model_args.word_vocab_size)
        )
        config = HeadsConfig(backbone=tiny_backbone_config(name, tok), head=head, tie_word_embeddings=False)
        return HeadsForCausalLM(config), tok
    kwargs = {"gguf_file": model_args.gguf_file} if model_args.gguf_file else {}
    tok = AutoTokenizer.from_pretrained(model_args.tokenizer_name or name, **kwargs)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return HeadsForCausalLM.from_base(name, head=head, **kwargs), tok


def main() -> None:
    model_args, data_args, run_args, training_args = parse_args(
        (ModelArguments, DataArguments, RunArguments, HeadsTrainingArguments)
    )
    head = training_args.head_config()
    check_output_dir(training_args.output_dir, run_args.overwrite_output_dir, training_args.resume_from_checkpoint)
    checkpoint = resolve_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint, head)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)

    raw = load_raw(data_args)
    train_texts = [t for t in raw["train"][data_args.text_column] if t]
    model, tok = build_model_and_tokenizer(model_args, head, train_texts)
    check_vocab(tok, model)
    logger.info(
        "head %s, %d parameters, vocabulary %d, world size %d",
        head, model.num_parameters(), len(tok), training_args.world_size,
    )  # fmt: skip

    block = data_args.block_size

    def tokenize(batch):
        return tok([t for t in batch[data_args.text_column] if t])

    def group(batch):
        ids = list(chain.from_iterable(batch["input_ids"]))
        n = (len(ids) // block) * block
        blocks = [ids[i : i + block] for i in range(0, n, block)]
        return {"input_ids": blocks, "attention_mask": [[1] * block for _ in blocks], "labels": [b[:] for b in blocks]}

    with training_args.main_process_first(desc="tokenize and group"):
        cols = raw["train"].column_names
        lm = raw.map(tokenize, batched=True, remove_columns=cols, desc="tokenize")
        lm = lm.map(group, batched=True, batch_size=2000, remove_columns=lm["train"].column_names, desc="group")
    train_ds, eval_ds = lm["train"], lm.get("validation")
    if data_args.max_train_samples:
        train_ds = train_ds.select(range(min(len(train_ds), data_args.max_train_samples)))
    if eval_ds is not None and data_args.max_eval_samples:
        eval_ds = eval_ds.select(range(min(len(eval_ds), data_args.max_eval_samples)))

    trainer = HeadsTrainer(
        model=model,
        args=training_args,
        train_dataset=train_ds if training_args.do_train else None,
        eval_dataset=eval_ds if training_args.do_eval else None,
        processing_class=tok,
        data_collator=default_data_collator,
    )
    metrics: dict = {}
    if training_args.do_train:
        start = time.perf_counter()

        def tokens_per_second(result) -> dict:
            tokens = result.global_step * training_args.per_device_train_batch_size * block
            tokens *= training_args.gradient_accumulation_steps * training_args.world_size
            return {"train_tokens_per_second": tokens / (time.perf_counter() - start)}

        metrics.update(train_block(trainer, checkpoint, tokens_per_second))
    if training_args.do_eval and eval_ds is not None:
        eval_metrics = trainer.evaluate()
        if model.head.eval_loss_is_nll:
            eval_metrics["eval_perplexity"] = math.exp(min(eval_metrics["eval_loss"], 700.0))
        trainer.log_metrics("eval", eval_metrics)
        trainer.save_metrics("eval", eval_metrics)
        metrics.update(eval_metrics)

    plots = []
    if training_args.do_train and trainer.is_world_process_zero():  # margin paper's figure 1: output vectors
        counts = model.head.word_counts
        if bool((counts < 0).any()):
            counts = label_counts(train_ds, model.head.num_classes)
        words = tok.convert_ids_to_tokens(list(range(model.head.num_classes)))
        out = Path(training_args.output_dir)
        plots.append(str(plot_word_vectors(model.head.weight, words, counts, out / "word_vectors.png",
                                           f"{head['family']} head")))  # fmt: skip
    dataset = data_args.dataset_name or Path(data_args.train_file or "local").name
    finish_run(trainer, model=model, tokenizer=tok, run_args=run_args, training_args=training_args, dataset=dataset,
               base_model=model_args.model_name_or_path, metrics=metrics, plots=plots)  # fmt: skip


if __name__ == "__main__":
    main_wrapper(main)
