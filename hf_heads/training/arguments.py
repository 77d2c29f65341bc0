"""`HeadsTrainingArguments`: `TrainingArguments` plus the head section as flags, and nothing else
(e.g. `--head margin --margin arc --m 0.001 --word_norm log-unigram --context_norm max-norm`,
`--head sampled --criterion bce --method nce --num_samples 8192 --noise log-uniform`, `--head sparse --k 20`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from transformers import Seq2SeqTrainingArguments, TrainingArguments

from hf_heads.heads.options import (
    HEAD_FAMILIES,
    ContinuousHeadOptions,
    MarginHeadOptions,
    SampledHeadOptions,
    SparseHeadOptions,
    head_dict,
)

logger = logging.getLogger(__name__)
DEFAULT_LOGGING_STEPS = 500  # TrainingArguments' default, kept when the run length is not given in steps


def _help(name: str) -> str:
    for cls in (SampledHeadOptions, SparseHeadOptions, MarginHeadOptions, ContinuousHeadOptions):
        if name in cls.__dataclass_fields__:
            return cls.__dataclass_fields__[name].metadata["help"]
    raise KeyError(name)


def _flag(name: str):
    return field(default=None, metadata={"help": _help(name)})


# flag name -> head option name (flags keep the option names except where TrainingArguments is ambiguous)
FLAG_TO_OPTION = {
    "margin": "margin", "m": "m", "scale": "scale", "word_norm": "word_norm", "context_norm": "context_norm",
    "criterion": "criterion", "method": "method", "num_samples": "num_samples", "noise": "noise",
    "noise_smoothing": "noise_smoothing", "noise_add": "noise_add", "remove_accidental_hits": "remove_accidental_hits",
    "normalize": "normalize", "k": "k", "decode_k": "decode_k", "head_label_smoothing": "label_smoothing",
    "head_bias": "bias",
    "loss_chunk_size": "chunk_size", "loss": "loss", "loss_margin": "loss_margin", "num_negatives": "num_negatives",
    "vmf_lambda1": "vmf_lambda1", "vmf_lambda2": "vmf_lambda2", "tie_decoder_inputs": "tie_decoder_inputs",
    "logit_scale": "logit_scale", "embedding_name": "embedding_name",
}  # fmt: skip


@dataclass
class HeadFlags:
    """Head options as command-line flags; `head_config()` turns them into a validated head section.
    A flag left unset takes the family's default; a flag the family does not have is an error."""

    head: str = field(default="softmax", metadata={"help": f"Head family: {', '.join(HEAD_FAMILIES)}."})
    margin: str | None = _flag("margin")
    m: float | None = _flag("m")
    scale: float | None = _flag("scale")
    word_norm: str | None = _flag("word_norm")
    context_norm: str | None = _flag("context_norm")
    criterion: str | None = _flag("criterion")
    method: str | None = _flag("method")
    num_samples: int | None = _flag("num_samples")
    noise: str | None = _flag("noise")
    noise_smoothing: float | None = _flag("noise_smoothing")
    noise_add: float | None = _flag("noise_add")
    remove_accidental_hits: bool | None = _flag("remove_accidental_hits")
    normalize: bool | None = _flag("normalize")
    k: int | None = _flag("k")
    decode_k: int | None = _flag("decode_k")
    head_label_smoothing: float | None = field(
        default=None, metadata={"help": "Softmax / sparse heads: label smoothing of the training loss (default: 0)."}
    )
    head_bias: bool | None = field(default=None, metadata={"help": "Keep the output bias (default: true)."})
    loss_chunk_size: int | None = field(
        default=None, metadata={"help": "Tokens per chunk of the chunked loss (default: 2^23 logits per chunk)."}
    )
    loss: str | None = _flag("loss")
    loss_margin: float | None = _flag("loss_margin")
    num_negatives: int | None = _flag("num_negatives")
    vmf_lambda1: float | None = _flag("vmf_lambda1")
    vmf_lambda2: float | None = _flag("vmf_lambda2")
    tie_decoder_inputs: bool | None = _flag("tie_decoder_inputs")
    logit_scale: float | None = _flag("logit_scale")
    embedding_name: str | None = _flag("embedding_name")

    def head_flags_given(self) -> bool:
        """Whether any head flag was set (a non-default `--head` included)."""
        return self.head != "softmax" or any(getattr(self, flag) is not None for flag in FLAG_TO_OPTION)

    def head_config(self) -> dict:
        """The validated head section; a flag that the family does not have is an error, never ignored."""
        section: dict = {"family": self.head}
        for flag, key in FLAG_TO_OPTION.items():
            value = getattr(self, flag)
            if value is not None:
                section[key] = value
        try:
            return head_dict(section)
        except ValueError as err:
            message = str(err).replace("head.bias", "--head_bias").replace("head.chunk_size", "--loss_chunk_size")
            message = message.replace("head.label_smoothing", "--head_label_smoothing")
            message = message.replace("head.", "--").replace("--family", "--head")
            raise ValueError(message.replace("needs num_samples=", "needs --num_samples=")) from None


@dataclass
class _RunDefaults:
    """Defaults that fit the run: a logging interval from `max_steps`, and a warning for `--fp16` on a CPU."""

    logging_steps: float | None = field(
        default=None,
        metadata={
            "help": "Log every X update steps (an integer, or a float in [0, 1): a ratio of the total steps). "
            f"Default: max_steps // 20 (at least 1) when --max_steps is given, else {DEFAULT_LOGGING_STEPS}; "
            "--eval_steps, when not given, follows it (as in transformers)."
        },
    )

    def __post_init__(self):
        if self.logging_steps is None:  # not given: a loss curve with ~20 points, even for a short run
            self.logging_steps = max(1, self.max_steps // 20) if self.max_steps > 0 else DEFAULT_LOGGING_STEPS
        super().__post_init__()
        # accelerate (which the Trainer relies on for autocast) turns fp16 autocast on for GPUs / NPUs / ... only:
        # on a CPU `--fp16` trains in float32 with no message; bf16 autocast works on a CPU.
        if self.fp16 and self.device.type == "cpu":
            logger.warning("--fp16 on a CPU: the Trainer does not use fp16 autocast on CPU, so this run trains "
                           "in float32; use --bf16 for mixed precision on a CPU")  # fmt: skip


@dataclass
class HeadsTrainingArguments(HeadFlags, _RunDefaults, TrainingArguments):
    """`TrainingArguments` + head flags (and `logging_steps` defaulting to max_steps // 20)."""


@dataclass
class HeadsSeq2SeqTrainingArguments(HeadFlags, _RunDefaults, Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` + head flags (and `logging_steps` defaulting to max_steps // 20)."""
