"""Head sections of `HeadsConfig`: one options dataclass per family, validated on construction
and on load. Every field carries help text (the run scripts turn them into CLI flags)."""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields

from hf_heads.losses._checks import check_choice, check_number
from hf_heads.losses.margin import CONTEXT_NORMS, MARGINS, WORD_NORMS, validate_margin_options


@dataclass
class SoftmaxHeadOptions:
    """The plain softmax output layer (the baseline every other family is compared with)."""

    bias: bool = field(default=True, metadata={"help": "Keep an output bias b_c (the margin paper always does)."})
    chunk_size: int | None = field(
        default=None, metadata={"help": "Tokens per chunk of the chunked loss (default: 2^23 logits per chunk)."}
    )

    def validate(self) -> None:
        if not isinstance(self.bias, bool):
            raise ValueError(f"head.bias={self.bias!r} must be true or false")
        if self.chunk_size is not None:
            check_number("head.chunk_size", self.chunk_size, minimum=1, integer=True)


@dataclass
class MarginHeadOptions(SoftmaxHeadOptions):
    """Large-margin softmax (margin paper, eqs. 5-14)."""

    margin: str = field(default="none", metadata={"help": f"Target-class margin φ: {', '.join(MARGINS)}."})
    m: float = field(default=0.0, metadata={"help": "Margin m (an integer >= 1 for lsm, >= 0 otherwise)."})
    scale: float | None = field(
        default=None, metadata={"help": "Face-recognition setting: normalise both vectors, ‖W‖=1, ‖h‖=scale."}
    )
    word_norm: str = field(default="no-mod", metadata={"help": f"Word-vector norm f(y): {', '.join(WORD_NORMS)}."})
    context_norm: str = field(
        default="no-mod", metadata={"help": f"Context-vector norm g(i): {', '.join(CONTEXT_NORMS)}."}
    )
    context_norm_momentum: float = field(
        default=0.01,
        metadata={"help": "Momentum of the running max-norm used at inference (0 < momentum <= 1)."},
    )

    def validate(self) -> None:
        super().validate()
        if isinstance(self.m, bool) or not isinstance(self.m, int | float):
            raise ValueError(f"head.m={self.m!r} must be a number")
        try:
            validate_margin_options(
                self.margin, self.m, self.scale, self.word_norm, self.context_norm, counts_required=False
            )
        except ValueError as err:
            raise ValueError(f"head.{err}") from None
        check_number("head.context_norm_momentum", self.context_norm_momentum, exclusive_minimum=0)
        if self.context_norm_momentum > 1:
            raise ValueError(f"head.context_norm_momentum={self.context_norm_momentum!r} must be <= 1")

    @property
    def needs_counts(self) -> bool:
        return self.scale is None and self.word_norm != "no-mod"


HEAD_FAMILIES: dict[str, type[SoftmaxHeadOptions]] = {
    "softmax": SoftmaxHeadOptions,
    "margin": MarginHeadOptions,
}


def head_options(head: dict | None) -> SoftmaxHeadOptions:
    """Parse and validate a head section (`{"family": ..., **options}`) into its options dataclass."""
    head = dict(head or {"family": "softmax"})
    family = head.pop("family", None)
    if family is None:
        raise ValueError(f"head.family is missing; allowed: {', '.join(HEAD_FAMILIES)}")
    check_choice("head.family", family, HEAD_FAMILIES)
    cls = HEAD_FAMILIES[family]
    allowed = [f.name for f in fields(cls)]
    for key in head:
        if key not in allowed:
            raise ValueError(f"head.{key} is not an option of head family {family!r}; allowed: {', '.join(allowed)}")
    if (
        family == "margin"
        and isinstance(head.get("m"), float)
        and head.get("margin") == "lsm"
        and head["m"].is_integer()
    ):
        head["m"] = int(head["m"])  # JSON / CLI round trip of an integer margin
    options = cls(**head)
    options.validate()
    return options


def head_dict(head: dict | None) -> dict:
    """The validated head section with every default filled in (what `config.json` stores)."""
    options = head_options(head)
    family = next(name for name, cls in HEAD_FAMILIES.items() if type(options) is cls)
    return {"family": family, **asdict(options)}


def option_help(family: str) -> dict[str, str]:
    """{option: help text} for a family, defaults included."""
    out = {}
    for f in fields(HEAD_FAMILIES[family]):
        default = f.default if f.default is not MISSING else None
        out[f.name] = f"{f.metadata.get('help', '')} (default: {default!r})"
    return out
