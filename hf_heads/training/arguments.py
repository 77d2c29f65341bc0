"""`HeadsTrainingArguments`: `TrainingArguments` plus the head section as flags, and nothing else
(e.g. `--head margin --margin arc --m 0.001 --word_norm log-unigram --context_norm max-norm`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import Seq2SeqTrainingArguments, TrainingArguments

from hf_heads.heads.options import HEAD_FAMILIES, MarginHeadOptions, head_dict


@dataclass
class HeadFlags:
    """Head options as command-line flags; `head_config()` turns them into a validated head section."""

    head: str = field(default="softmax", metadata={"help": f"Head family: {', '.join(HEAD_FAMILIES)}."})
    margin: str | None = field(
        default=None, metadata={"help": MarginHeadOptions.__dataclass_fields__["margin"].metadata["help"]}
    )
    m: float | None = field(
        default=None, metadata={"help": MarginHeadOptions.__dataclass_fields__["m"].metadata["help"]}
    )
    scale: float | None = field(
        default=None, metadata={"help": MarginHeadOptions.__dataclass_fields__["scale"].metadata["help"]}
    )
    word_norm: str | None = field(
        default=None, metadata={"help": MarginHeadOptions.__dataclass_fields__["word_norm"].metadata["help"]}
    )
    context_norm: str | None = field(
        default=None, metadata={"help": MarginHeadOptions.__dataclass_fields__["context_norm"].metadata["help"]}
    )
    head_bias: bool | None = field(default=None, metadata={"help": "Keep the output bias (default: true)."})
    loss_chunk_size: int | None = field(
        default=None, metadata={"help": "Tokens per chunk of the chunked loss (default: 2^23 logits per chunk)."}
    )

    def head_config(self) -> dict:
        """The validated head section; a flag that the family does not have is an error, never ignored."""
        section: dict = {"family": self.head}
        for flag, key in (
            ("margin", "margin"), ("m", "m"), ("scale", "scale"), ("word_norm", "word_norm"),
            ("context_norm", "context_norm"), ("head_bias", "bias"), ("loss_chunk_size", "chunk_size"),
        ):  # fmt: skip
            value = getattr(self, flag)
            if value is not None:
                section[key] = value
        try:
            return head_dict(section)
        except ValueError as err:
            raise ValueError(str(err).replace("head.", "--").replace("--family", "--head")) from None


@dataclass
class HeadsTrainingArguments(HeadFlags, TrainingArguments):
    """`TrainingArguments` + head flags."""


@dataclass
class HeadsSeq2SeqTrainingArguments(HeadFlags, Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` + head flags."""
