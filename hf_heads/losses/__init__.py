"""Pure-torch losses, one family per module; one entry point for the loss of an output layer.

`entry` (`output_loss` over the parts of `parts`) and `presets` (the peer-style functions); the chunk engine (`chunks`,
`kernels`, `triton_kernel`, `fused_linear`); the margin paper's scorer of eq. 13 with φ of eq. 14 and f, g of eqs. 9-12
(`scorer`, `margin`); the sampling paper's criteria (eqs. 7-21), posterior corrections (eqs. 2-22) and noise
(`sampled`, `noise`); sparse-softmax (`sparse`, eqs. 4-5); the vocabulary-parallel losses (`vocab_parallel`); the
continuous-output losses (`continuous`, `continuous_losses`: Kumar & Tsvetkov eq. 3, Bhat et al. eq. 1). Shared by all:
`precision`, `reduction` and `hf_heads.validation`.
"""

from hf_heads.losses.chunks import CHUNK_KERNELS, ChunkKernel, chunk_kernel, map_chunks, register_kernel
from hf_heads.losses.continuous import (
    NEGATIVES,
    CosineSoftmaxLoss,
    InBatchSoftmaxLoss,
    cosine_softmax_loss,
    in_batch_softmax_loss,
    log_cmk,
    nearest_neighbour_diagnostics,
    syn_margin_loss,
    vmf_nll,
)
from hf_heads.losses.entry import OutputLayerLoss, output_loss
from hf_heads.losses.fused_linear import check_labels
from hf_heads.losses.kernels import CompiledKernel, EagerKernel  # registers the "eager" and "compiled" kernels
from hf_heads.losses.margin import Full, margin_logits, target_phi
from hf_heads.losses.noise import NOISES, Noise, draw_samples, frequency_ranks, noise_distribution
from hf_heads.losses.parts import (
    CRITERIA,
    RETURNS,
    BinaryCrossEntropy,
    Candidates,
    Criterion,
    CrossEntropy,
    Impl,
    LossResult,
    MeanSquaredError,
)
from hf_heads.losses.presets import (
    corrected_nll,
    fused_linear_cross_entropy,
    margin_cross_entropy,
    sampled_loss,
    sparse_linear_cross_entropy,
)
from hf_heads.losses.reduction import IGNORE_INDEX, LossInputs, RowCounting
from hf_heads.losses.sampled import (
    METHODS,
    SAMPLING_METHODS,
    Correction,
    Sampled,
    SamplingMethod,
    corrected_log_probs,
    self_normalization,
    validate_sampled_options,
)
from hf_heads.losses.scorer import (
    CONTEXT_NORMS,
    MARGIN_TYPES,
    MARGINS,
    WORD_NORMS,
    ArcFace,
    ContextNorm,
    CosFace,
    LSoftmax,
    Margin,
    NoMargin,
    OneParameterMargin,
    Scorer,
    WordNorm,
    arc_phi,
    context_norm_values,
    lsm_psi,
    margin_type,
    register_margin,
    resolve_scorer,
    validate_margin_options,
    word_norm_values,
)
from hf_heads.losses.sparse import (
    SparseSoftmaxCrossEntropy,
    sparse_log_softmax,
    sparse_softmax,
    sparse_softmax_cross_entropy,
    truncate_to_top_k,
)
from hf_heads.losses.triton_kernel import TritonKernel  # registers the "triton" and "triton-half" chunk kernels
from hf_heads.losses.vocab_parallel import shard_vocabulary
from hf_heads.validation import OptionError

__all__ = [
    "IGNORE_INDEX",
    "RowCounting",
    "LossInputs",
    "output_loss",
    "OutputLayerLoss",
    "Candidates",
    "Full",
    "Sampled",
    "Criterion",
    "CrossEntropy",
    "BinaryCrossEntropy",
    "MeanSquaredError",
    "CRITERIA",
    "RETURNS",
    "Impl",
    "LossResult",
    "Correction",
    "OptionError",
    "CHUNK_KERNELS",
    "ChunkKernel",
    "chunk_kernel",
    "map_chunks",
    "TritonKernel",
    "EagerKernel",
    "CompiledKernel",
    "register_kernel",
    "NEGATIVES",
    "CosineSoftmaxLoss",
    "InBatchSoftmaxLoss",
    "cosine_softmax_loss",
    "in_batch_softmax_loss",
    "log_cmk",
    "nearest_neighbour_diagnostics",
    "syn_margin_loss",
    "vmf_nll",
    "SparseSoftmaxCrossEntropy",
    "sparse_linear_cross_entropy",
    "sparse_log_softmax",
    "sparse_softmax",
    "sparse_softmax_cross_entropy",
    "truncate_to_top_k",
    "METHODS",
    "NOISES",
    "Noise",
    "SAMPLING_METHODS",
    "SamplingMethod",
    "corrected_log_probs",
    "corrected_nll",
    "draw_samples",
    "frequency_ranks",
    "noise_distribution",
    "sampled_loss",
    "self_normalization",
    "validate_sampled_options",
    "CONTEXT_NORMS",
    "MARGIN_TYPES",
    "MARGINS",
    "WORD_NORMS",
    "ContextNorm",
    "OneParameterMargin",
    "WordNorm",
    "ArcFace",
    "CosFace",
    "LSoftmax",
    "Margin",
    "NoMargin",
    "Scorer",
    "arc_phi",
    "check_labels",
    "context_norm_values",
    "fused_linear_cross_entropy",
    "shard_vocabulary",
    "lsm_psi",
    "margin_cross_entropy",
    "margin_logits",
    "margin_type",
    "register_margin",
    "resolve_scorer",
    "target_phi",
    "validate_margin_options",
    "word_norm_values",
]
