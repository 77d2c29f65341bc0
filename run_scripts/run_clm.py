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
import time
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import datasets
import torch
from transformers import AutoConfig, AutoTokenizer, default_data_collator

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.cli.backbones import TINY_BACKBONES, tiny_backbone_config
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
)
from hf_heads.data import LM_CORPORA, build_word_tokenizer, is_word_tokenizer, label_counts, load_lm_text
from hf_heads.heads import head_options
from hf_heads.training import HeadsTrainer, HeadsTrainingArguments
from hf_heads.training.plots import plot_word_vectors
from hf_heads.training.trainer import perplexity

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
        raw = load_hub_dataset(data.dataset_name, data.dataset_config_name, LM_CORPORA)
    else:
        raise UsageError("give --dataset_name or --train_file")
    for name, split in raw.items():
        if data.text_column not in split.column_names:
            raise UsageError(f"--text_column={data.text_column!r}: split {name!r} has columns {split.column_names}")
    return raw


def load_tokenizer(model_args: ModelArguments, **kwargs):
    """The tokenizer of `--tokenizer_name` or of the model (an unreachable Hub id is one error line)."""
    flag, name = (
        ("--tokenizer_name", model_args.tokenizer_name)
        if model_args.tokenizer_name
        else ("--model_name_or_path", model_args.model_name_or_path)
    )
    with loading_model(flag, name, TINY_BACKBONES if flag == "--model_name_or_path" else ()):
        return AutoTokenizer.from_pretrained(name, **kwargs)


def build_model_and_tokenizer(model_args: ModelArguments, head: dict, train_texts, change_head: bool = False):
    """A built-in tiny backbone gets a word-level tokenizer built from the training text. Its tokenizer adds no
    end token (a generation prompt must not end with </s>): `main` ends every training line with </s> itself."""
    name = model_args.model_name_or_path
    if name in TINY_BACKBONES:
        tok = (
            load_tokenizer(model_args)
            if model_args.tokenizer_name
            else build_word_tokenizer(train_texts, vocab_size=model_args.word_vocab_size, add_eos=False)
        )
        config = HeadsConfig(backbone=tiny_backbone_config(name, tok), head=head, tie_word_embeddings=False)
        return HeadsForCausalLM(config), tok
    if saved_head(name) is not None:  # a trained hf_heads model: evaluate it or train it further
        return load_trained(HeadsForCausalLM, name, head, change_head), load_tokenizer(model_args)
    kwargs = {"gguf_file": model_args.gguf_file} if model_args.gguf_file else {}
    tok = load_tokenizer(model_args, **kwargs)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    counts = None
    with loading_model("--model_name_or_path", name, TINY_BACKBONES):
        if head_options(head).needs_counts and train_texts:  # training-text counts: from_base calibrates the start
            vocab = AutoConfig.from_pretrained(name, **kwargs).vocab_size
            ids = [i for row in tok(list(train_texts), add_special_tokens=False).input_ids for i in row]
            counts = torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=vocab).double()
        return HeadsForCausalLM.from_base(name, head=head, word_counts=counts, **kwargs), tok


def main() -> None:
    model_args, data_args, run_args, training_args = parse_args(
        (ModelArguments, DataArguments, RunArguments, HeadsTrainingArguments)
    )
    head, checkpoint = start_run(model_args, run_args, training_args)

    raw = load_raw(data_args)
    if "train" not in raw:
        if training_args.do_train:
            raise UsageError(f"--do_train needs a training split: give --train_file (the data has {list(raw)})")
        if model_args.model_name_or_path in TINY_BACKBONES and not model_args.tokenizer_name:
            raise UsageError(
                f"--model_name_or_path={model_args.model_name_or_path!r} is a built-in backbone whose word-level "
                "tokenizer is built from the training text: give --train_file too, or --model_name_or_path of a "
                "trained model (e.g. a run's --output_dir) to evaluate it on --validation_file"
            )
    train_texts = [t for t in raw["train"][data_args.text_column] if t] if "train" in raw else []
    model, tok = build_model_and_tokenizer(model_args, head, train_texts, run_args.change_head)
    check_vocab(tok, model)
    logger.info(
        "head %s, %d parameters, vocabulary %d, world size %d",
        head,
        model.num_parameters(),
        len(tok),
        training_args.world_size,
    )

    block = data_args.block_size

    # word-level tokenizers end every line with </s> (the LM learns to end a text); Hub tokenizers add what they add
    eos = [tok.eos_token_id] if is_word_tokenizer(tok) and tok("a")["input_ids"][-1:] != [tok.eos_token_id] else []

    def tokenize(batch):
        return {"input_ids": [ids + eos for ids in tok([t for t in batch[data_args.text_column] if t])["input_ids"]]}

    def group(batch):
        ids = list(chain.from_iterable(batch["input_ids"]))
        n = (len(ids) // block) * block
        blocks = [ids[i : i + block] for i in range(0, n, block)]
        return {"input_ids": blocks, "attention_mask": [[1] * block for _ in blocks], "labels": [b[:] for b in blocks]}

    with training_args.main_process_first(desc="tokenize and group"):
        cols = next(iter(raw.values())).column_names
        lm = raw.map(tokenize, batched=True, remove_columns=cols, desc="tokenize")
        lm = lm.map(group, batched=True, batch_size=2000, remove_columns=["input_ids"], desc="group")
    train_ds, eval_ds = lm.get("train"), lm.get("validation")
    if train_ds is not None and data_args.max_train_samples:
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
        if not training_args.do_train:  # a head that needs word counts gets them from the training split
            ensure_word_counts(model, train_ds)
        eval_metrics = trainer.evaluate()
        if model.head.eval_loss_is_nll:
            eval_metrics["eval_perplexity"] = perplexity(eval_metrics["eval_loss"])
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
        plots.append(
            str(
                plot_word_vectors(model.head.weight, words, counts, out / "word_vectors.png", f"{head['family']} head")
            )
        )
    local = data_args.train_file or data_args.validation_file
    dataset = Path(local).name if local else data_args.dataset_name
    finish_run(
        trainer,
        model=model,
        tokenizer=tok,
        run_args=run_args,
        training_args=training_args,
        dataset=dataset,
        base_model=model_args.model_name_or_path,
        metrics=metrics,
        plots=plots,
    )


if __name__ == "__main__":
    main_wrapper(main)
