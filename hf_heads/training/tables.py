"""The continuous head's embedding table for a training run (Kumar & Tsvetkov 2019, sec. 3: the decoder predicts a row
of a fixed pretrained table), used by the run scripts and `HeadsTrainer`: `table_source` (the table the head's
`embedding_name` names, or `word2vec-targets`, trained with gensim on the training targets), `continuous_table` (the
(V, d) table for the tokenizer's vocabulary), `table_data` (what the head's options take from the training targets)
and `attach_table` (the table set on the head).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from hf_heads.data import embedding_table, label_counts, train_word2vec_table

logger = logging.getLogger(__name__)

TARGET_TABLE_FILE = "target_word2vec.npz"  # embedding_name=word2vec-targets: the table trained for the run
TRAINED_ON_TARGETS = "word2vec-targets"


def target_sentences(tokenizer, label_rows) -> list[list[str]]:
    """The training targets as token strings, without special tokens and ignored positions (what word2vec trains
    on)."""
    specials = set(tokenizer.all_special_ids)
    return [tokenizer.convert_ids_to_tokens([i for i in row if i >= 0 and i not in specials]) for row in label_rows]


def table_source(section: dict, sentences, output_dir: str | Path, seed: int, model_dir: str | Path | None = None):
    """The table to read for the head `section`: its `embedding_name`, or for `word2vec-targets` the table trained on
    `sentences` into `output_dir` (a trained model's own file in `model_dir` when it has one)."""
    name = section["embedding_name"]
    if name != TRAINED_ON_TARGETS:
        return name
    if model_dir is not None and (Path(model_dir) / TARGET_TABLE_FILE).is_file():
        return str(Path(model_dir) / TARGET_TABLE_FILE)
    sentences = sentences() if callable(sentences) else sentences
    if sentences is None:
        raise ValueError(
            f"embedding_name={TRAINED_ON_TARGETS!r} trains the table on the training targets: give a training set"
        )
    path = Path(output_dir) / TARGET_TABLE_FILE
    logger.info("training a %d-d word2vec table on %d target sentences -> %s", section["word2vec_dim"],
                len(sentences), path)  # fmt: skip
    return str(train_word2vec_table(sentences, path, dim=section["word2vec_dim"], seed=seed))


def continuous_table(
    section: dict, tokenizer, source: str | None = None, num_classes: int | None = None
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """(the head section with `embedding_dim`, the table (V, d), the tokens it covers (V,) bool) for the tokenizer's
    vocabulary from `source`; ids past the tokenizer's (up to `num_classes`) get seeded random rows. Refused: a wrong
    `embedding_dim`, a tokenizer larger than `num_classes`, a table that covers no token."""
    name = source or section["embedding_name"]
    table, covered = embedding_table(tokenizer, name)
    extra = 0 if num_classes is None else num_classes - table.shape[0]
    if extra < 0:
        raise ValueError(f"the tokenizer has {table.shape[0]} ids, the model's vocabulary {num_classes}")
    if extra:
        rows = torch.randn(extra, table.shape[1], generator=torch.Generator().manual_seed(table.shape[0]))
        table, covered = torch.cat([table, rows]), torch.cat([covered, torch.zeros(extra, dtype=torch.bool)])
    if section.get("embedding_dim") not in (None, table.shape[1]):
        raise ValueError(f"head embedding_dim={section['embedding_dim']} but {name} has d={table.shape[1]}")
    if not bool(covered.any()):
        raise ValueError(f"no token of the target vocabulary is in {name}: nothing to predict")
    return {**section, "embedding_dim": table.shape[1]}, table, covered


def table_data(options, num_classes: int, train_dataset, column: str = "labels"):
    """(the training targets' counts (V,) or None, the target-side output vocabulary's ids or None): what
    `attach_table` takes from `train_dataset` for a continuous head with `options` (its options, or a head section),
    where they ask for it; refused, naming the option, without a training set. Read before the head changes, so that
    a refusal leaves the model as it was."""

    def option(name: str):
        return options.get(name) if isinstance(options, dict) else getattr(options, name)

    counts = ids = None
    if option("center_embeddings") == "frequency":
        if train_dataset is None:
            raise ValueError("head.center_embeddings='frequency' counts the training targets: give a training set")
        counts = label_counts(train_dataset, num_classes, column=column)
    if option("output_vocabulary") == "targets":
        if train_dataset is None:
            raise ValueError("head.output_vocabulary='targets' takes the training targets' words: give a training set")
        ids = torch.tensor(sorted({i for row in train_dataset[column] for i in row if i >= 0}))
    return counts, ids


def attach_table(model, table: torch.Tensor, train_dataset, column: str = "labels", data=None) -> None:
    """Set `table` on the model's continuous head, with the training targets' counts and output vocabulary where the
    head's options need them (`table_data` of `train_dataset`, or `data` when read already)."""
    counts, ids = data or table_data(model.head.options, model.head.num_classes, train_dataset, column)
    model.head.set_embedding_table(table, counts=counts)
    if ids is not None:
        model.head.set_output_vocabulary(ids)
        logger.info("continuous head: output vocabulary of %d target words (of %d)", len(ids), model.head.num_classes)
