"""Head sections of `HeadsConfig`: one options dataclass per family, validated on construction
and on load. Every field carries help text (the run scripts turn them into CLI flags)."""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields

from hf_heads.losses._checks import check_choice, check_number
from hf_heads.losses.margin import CONTEXT_NORMS, MARGINS, WORD_NORMS, validate_margin_options
from hf_heads.losses.noise import NOISES
from hf_heads.losses.sampled import CRITERIA, METHODS, validate_sampled_options


@dataclass
class SoftmaxHeadOptions:
    """The plain softmax output layer (the baseline every other family is compared with)."""

    bias: bool = field(default=True, metadata={"help": "Keep an output bias b_c (the margin paper always does)."})
    chunk_size: int | None = field(
        default=None, metadata={"help": "Tokens per chunk of the chunked loss (default: 2^23 logits per chunk)."}
    )
    label_smoothing: float = field(
        default=0.0,
        metadata={
            "help": "Label smoothing of the training loss, softmax and sparse families only (sparse: over the top-k "
            "support; the sparse-softmax paper's seq2seq runs use 0.1). Eval losses are never smoothed."
        },
    )

    def initial_bias(self, num_classes: int) -> float:
        """Value every output bias starts from when a head is built from scratch."""
        return 0.0

    def validate(self) -> None:
        if not isinstance(self.bias, bool):
            raise ValueError(f"head.bias={self.bias!r} must be true or false")
        if self.chunk_size is not None:
            check_number("head.chunk_size", self.chunk_size, minimum=1, integer=True)
        check_number("head.label_smoothing", self.label_smoothing, minimum=0)
        if self.label_smoothing >= 1:
            raise ValueError(f"head.label_smoothing={self.label_smoothing!r} must be < 1")


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
    warm_start_gain: float = field(
        default=1.0,
        metadata={
            "help": "Global factor on g(i)·f(c)·φ (not the bias); 1 = eq. 13 as written. Set by from_base, which fits "
            "it so a norm-scaled head starts at the checkpoint's distribution (hf_heads.losses.margin)."
        },
    )

    def validate(self) -> None:
        super().validate()
        if self.label_smoothing:
            raise ValueError(
                f"head.label_smoothing={self.label_smoothing!r} is only available for the softmax and sparse families"
            )
        if isinstance(self.m, bool) or not isinstance(self.m, int | float):
            raise ValueError(f"head.m={self.m!r} must be a number")
        try:
            validate_margin_options(
                self.margin, self.m, self.scale, self.word_norm, self.context_norm, counts_required=False
            )
        except ValueError as err:
            raise ValueError(f"head.{err}") from None
        check_number("head.context_norm_momentum", self.context_norm_momentum, exclusive_minimum=0)
        check_number("head.warm_start_gain", self.warm_start_gain, exclusive_minimum=0)
        if self.context_norm_momentum > 1:
            raise ValueError(f"head.context_norm_momentum={self.context_norm_momentum!r} must be <= 1")

    @property
    def needs_counts(self) -> bool:
        return self.scale is None and self.word_norm != "no-mod"


@dataclass
class SampledHeadOptions(MarginHeadOptions):
    """Sampling-based training criteria with the posterior correction (sampling paper, eqs. 1-22);
    the margin options of the margin family compose with them (margin on the target logit)."""

    criterion: str = field(default="ce", metadata={"help": f"Training criterion: {', '.join(CRITERIA)}."})
    method: str = field(
        default="full", metadata={"help": f"Sampling method: {', '.join(METHODS)} (full = no sampling)."}
    )
    num_samples: int | None = field(
        default=None, metadata={"help": "K noise samples per batch, shared by all positions (1 <= K < V)."}
    )
    noise: str = field(
        default="log-uniform",
        metadata={"help": f"Noise distribution D: {', '.join(NOISES)} (ranks / counts from the training set)."},
    )
    noise_smoothing: float = field(default=0.75, metadata={"help": "Unigram noise: D(c) ∝ (count + add)^smoothing."})
    noise_add: float = field(default=0.0, metadata={"help": "Unigram noise: count added to every class."})
    remove_accidental_hits: bool = field(
        default=False, metadata={"help": "Drop samples equal to the target (default: keep, as in the paper)."}
    )
    normalize: bool = field(
        default=True,
        metadata={"help": "Inference: renormalise the corrected posterior over V (false: raw corrected scores)."},
    )

    def validate(self) -> None:
        super().validate()
        if self.method == "full" and self.num_samples is not None:
            raise ValueError(f"head.num_samples={self.num_samples!r} is only used by a sampling method, not "
                             "method='full'; drop it or choose method mcs / is / cps / nce")  # fmt: skip
        try:
            validate_sampled_options(self.criterion, self.method, self.num_samples, None)
            check_choice("noise", self.noise, NOISES)
            check_number("noise_smoothing", self.noise_smoothing, exclusive_minimum=0)
            check_number("noise_add", self.noise_add, minimum=0)
        except ValueError as err:
            raise ValueError(f"head.{err}") from None
        for name in ("remove_accidental_hits", "normalize"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"head.{name}={getattr(self, name)!r} must be true or false")

    def initial_bias(self, num_classes: int) -> float:
        """−log V for the BCE and MSE criteria, 0 otherwise. Their outputs q = σ(s) (or q = exp(s) for
        NCE) are not renormalised in training, and their optimum is q ≈ p(c|x) (or a monotone map of
        it) ~ 1/V; starting from b = 0 gives q = 1/2 (or 1) for every class, and the first thousands
        of steps only pull the normaliser down (the usual NCE initialisation; the paper is silent)."""
        return -math.log(num_classes) if self.criterion in ("bce", "mse") else 0.0

    @property
    def samples(self) -> bool:
        return self.method != "full"

    @property
    def needs_counts(self) -> bool:
        return super().needs_counts or (self.samples and self.noise != "uniform")


@dataclass
class SparseHeadOptions(SoftmaxHeadOptions):
    """Sparse-softmax (sparse-softmax paper, eqs. 4-5): the loss and the inference distribution use
    only the k largest logits of each row (k >= num_beams for beam search)."""

    k: int = field(default=20, metadata={"help": "Logits kept per row (the paper's best: 20); k >= V is softmax."})
    decode_k: int | None = field(
        default=None,
        metadata={
            "help": "Logits kept per row by the inference distribution and generate() (the paper trains with k=20 "
            "and decodes with beam 5 over the top 5); default: k. Keep decode_k >= num_beams."
        },
    )

    def validate(self) -> None:
        super().validate()
        check_number("head.k", self.k, minimum=1, integer=True)
        if self.decode_k is not None:
            check_number("head.decode_k", self.decode_k, minimum=1, integer=True)

    @property
    def inference_k(self) -> int:
        """The k of the inference logits: `decode_k`, or the training `k`."""
        return self.k if self.decode_k is None else self.decode_k


CONTINUOUS_LOSSES = ("vmf", *(f"syn-margin-{n}" for n in ("projection", "difference")),
                     *(f"margin-{n}" for n in ("random", "most-informative")))  # fmt: skip


@dataclass
class ContinuousHeadOptions:
    """Continuous output (Bhat et al. 2019; Kumar & Tsvetkov 2019): a linear map from the decoder state to a
    d-dim embedding, trained against a frozen, L2-normalised pretrained table E (V, d) stored with the
    weights; decoding ranks the vocabulary by û·Eᵀ (nearest neighbour)."""

    loss: str = field(default="vmf", metadata={"help": f"Continuous-output loss: {', '.join(CONTINUOUS_LOSSES)}."})
    loss_margin: float = field(default=0.5, metadata={"help": "λ of the margin losses (>= 0)."})
    num_negatives: int = field(default=5, metadata={"help": "margin-random: negatives drawn per position."})
    vmf_lambda1: float = field(default=0.0, metadata={"help": "vMF: + λ1‖û‖ (Kumar & Tsvetkov's NLLvMF_reg1)."})
    vmf_lambda2: float = field(default=1.0, metadata={"help": "vMF: − λ2 ûᵀu (their NLLvMF_reg2; 1 = plain NLL)."})
    embedding_dim: int | None = field(
        default=None, metadata={"help": "d of the embedding table (set when a table is attached)."}
    )
    embedding_name: str = field(default="glove-6B-50d", metadata={"help": "Name of the pretrained table (a label)."})
    tie_decoder_inputs: bool = field(
        default=False,
        metadata={"help": "Decoder inputs are E[token] through a linear map d -> H (the paper's tied setup)."},
    )
    logit_scale: float = field(
        default=10.0, metadata={"help": "Margin losses: decoding logits are logit_scale · cos(û, E_c) (beam search)."}
    )

    def validate(self) -> None:
        check_choice("head.loss", self.loss, CONTINUOUS_LOSSES)
        check_choice("head.embedding_name", self.embedding_name, ("glove-6B-50d",))
        check_number("head.loss_margin", self.loss_margin, minimum=0)
        check_number("head.num_negatives", self.num_negatives, minimum=1, integer=True)
        check_number("head.vmf_lambda1", self.vmf_lambda1, minimum=0)
        check_number("head.vmf_lambda2", self.vmf_lambda2, exclusive_minimum=0)
        check_number("head.logit_scale", self.logit_scale, exclusive_minimum=0)
        if self.embedding_dim is not None:
            check_number("head.embedding_dim", self.embedding_dim, minimum=2, integer=True)
        if not isinstance(self.tie_decoder_inputs, bool):
            raise ValueError(f"head.tie_decoder_inputs={self.tie_decoder_inputs!r} must be true or false")

    @property
    def negative(self) -> str | None:
        """The margin loss's negative kind (one of hf_heads.losses.continuous.NEGATIVES), None for vMF."""
        return None if self.loss == "vmf" else self.loss.removeprefix("syn-margin-").removeprefix("margin-")

    needs_counts = False


HEAD_FAMILIES: dict[str, type] = {
    "softmax": SoftmaxHeadOptions,
    "margin": MarginHeadOptions,
    "sampled": SampledHeadOptions,
    "sparse": SparseHeadOptions,
    "continuous": ContinuousHeadOptions,
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
