"""Pure-torch losses, one family per module: functions first, `nn.Module` wrappers second.

- `chunks`: the chunk engine (the one walk over rows, chunk sizes from a memory budget) and its kernel seam
  (`ChunkKernel`, a component of kind "kernel" registered with `register("kernel")`; `chunk_kernel`;
  `HF_HEADS_CHUNK_KERNEL` picks one: eager, compiled, triton, triton-half)
- `fused_linear`: the chunked linear loss every discrete head shares (softmax cross-entropy with a replaced target
  logit, top-k, label smoothing, soft-cap; the sampled family's full BCE / MSE), gradients in the forward pass
- `kernels`: its `eager` and `compiled` chunk kernels; `triton_kernel`: the hand-written Triton one (GPU, or CPU
  under `TRITON_INTERPRET=1`)
- `scorer`: the scorer of eq. 13 (margin paper) every margin and sampled loss runs: one frozen `Scorer` (the margin,
  word/context norm scaling f, g: eqs. 9-12, the warm-start gain, the checkpoint's output transform) and one
  registered `Margin` class per margin type (φ of eq. 14: `NoMargin`, `CosFace`, `ArcFace`, `LSoftmax`)
- `margin`: large-margin softmax for LMs (L-Softmax, ArcFace, CosFace: eqs. 5-8, 13-14) over a `Scorer`
- `sampled`: sampling-based criteria (MCS, IS, CPS, NCE × CE/BCE: eqs. 7-21; full MSE/BCE/CE: eqs. 1, 3, 5) and
  their posterior corrections (eqs. 2-22), one object per method in `SAMPLING_METHODS`
- `noise`: the noise distributions D of the sampled criteria and the shared draw
- `sparse`: sparse-softmax (softmax over the top-k logits, eq. 4) and its loss (eq. 5)
- `vocab_parallel`: those losses when W is a DTensor sharded on its rows (tensor parallelism): each process's
  rows, combined by collectives (`shard_vocabulary` shards a head)
- `continuous`: continuous-output losses on a predicted embedding: the von Mises-Fisher NLL (Kumar & Tsvetkov
  eq. 3, with their two regularised forms and the authors' released form), the margin loss with synthetic negatives
  (Bhat et al. eq. 1), and cross-entropies over scaled cosines to the table (every row, or the batch's targets)
- `entry`: the one entry point, `output_loss(rows, loss, kernel=...)`: an `OutputRows` (hidden, weight, bias,
  labels and how the rows count), one frozen options dataclass per loss (`SoftmaxLoss`, `SparseSoftmaxLoss`,
  `LargeMarginLoss`, `SampledCriterion`, `CorrectedNLL`) and the chunk kernel, explicit; what the heads call

Shared by all: `_rows` (compute dtype, ignored rows, reductions, frequency ranks; `LossRows`, how a head's loss
counts and reduces its rows) and `hf_heads.validation`
(argument checks raising `OptionError`, which names the field, the value and what is allowed).
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
from hf_heads.losses.entry import OutputLoss, output_loss
from hf_heads.losses.fused_linear import (
    LinearCrossEntropyOutput,
    SoftmaxLoss,
    check_labels,
    fused_linear_cross_entropy,
)
from hf_heads.losses.kernels import CompiledKernel, EagerKernel  # registers the "eager" and "compiled" kernels
from hf_heads.losses.margin import LargeMarginLoss, MarginCrossEntropy, margin_cross_entropy, margin_logits, target_phi
from hf_heads.losses.noise import NOISES, Noise, draw_samples, frequency_ranks, noise_distribution
from hf_heads.losses.sampled import (
    CRITERIA,
    METHODS,
    SAMPLING_METHODS,
    CorrectedNLL,
    SampledCriterion,
    SampledLoss,
    SamplingMethod,
    corrected_log_probs,
    corrected_nll,
    sampled_loss,
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
    SparseSoftmaxLoss,
    sparse_linear_cross_entropy,
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
    "OutputLoss",
    "output_loss",
    "SoftmaxLoss",
    "SparseSoftmaxLoss",
    "LargeMarginLoss",
    "SampledCriterion",
    "CorrectedNLL",
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
    "CRITERIA",
    "METHODS",
    "NOISES",
    "Noise",
    "SAMPLING_METHODS",
    "SamplingMethod",
    "SampledLoss",
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
    "MarginCrossEntropy",
    "NoMargin",
    "Scorer",
    "arc_phi",
    "check_labels",
    "context_norm_values",
    "fused_linear_cross_entropy",
    "shard_vocabulary",
    "LinearCrossEntropyOutput",
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
