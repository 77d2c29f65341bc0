"""Pure-torch losses, one family per module; one entry point for the loss of an output layer.

- `entry`: `output_loss` and its module `OutputLayerLoss`, over the three parts of `parts`: the scorer of eq. 13
  (margin paper), the candidates (`Full` or `Sampled`) and the criterion, and how (`Impl`);
- `presets`: the peer-style functions, `output_loss` with its parts filled in;
- `chunks`: the chunk engine and its kernel seam; `kernels`, `triton_kernel`: the kernels; `fused_linear`: the chunked
  loss they serve, gradients in the forward pass;
- `scorer`: the scorer of eq. 13 (margin φ of eq. 14, norm scaling f, g of eqs. 9-12); `margin`: its dense logits and
  the `Full` candidates;
- `sampled`: the sampling methods (sampling paper eqs. 7-21), their posterior corrections (eqs. 2-22) and the `Sampled`
  candidates; `noise`: the noise distributions D and the shared draw;
- `sparse`: sparse-softmax on given logits (eqs. 4-5);
- `vocab_parallel`: the losses when W is a DTensor sharded on its rows (tensor parallelism);
- `continuous`, `continuous_losses`: continuous-output losses on a predicted embedding (Kumar & Tsvetkov eq. 3; Bhat et
  al. eq. 1) and cross-entropies over scaled cosines to the table.

Shared by all: `_rows` (compute dtype, ignored rows, reductions) and `hf_heads.validation` (checks raising
`OptionError`, which names the field, the value and what is allowed).
"""

from hf_heads.losses._rows import IGNORE_INDEX, LossRows, OutputRows
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
    "LossRows",
    "OutputRows",
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
