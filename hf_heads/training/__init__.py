"""Trainer subclasses, training arguments with head flags, model cards and plots."""

from hf_heads.training.arguments import HeadFlags, HeadsSeq2SeqTrainingArguments, HeadsTrainingArguments
from hf_heads.training.cards import plot_loss_curves, write_model_card
from hf_heads.training.trainer import HeadsSeq2SeqTrainer, HeadsTrainer, prepare_head

__all__ = [
    "HeadFlags",
    "HeadsSeq2SeqTrainer",
    "HeadsSeq2SeqTrainingArguments",
    "HeadsTrainer",
    "HeadsTrainingArguments",
    "plot_loss_curves",
    "prepare_head",
    "write_model_card",
]
