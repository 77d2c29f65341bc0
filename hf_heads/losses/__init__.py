"""Pure-torch losses, one family per module: functions first, `nn.Module` wrappers second.

- `fused_linear`: chunked linear cross-entropy (the memory core every discrete head shares)
- `margin`: large-margin softmax for LMs (L-Softmax, ArcFace, CosFace: eqs. 5-8, 13-14; word/context norm
  scaling f, g: eqs. 9-12); `MarginSpec` holds the scorer's options
- `sampled`: sampling-based criteria (MCS, IS, CPS, NCE × CE/BCE: eqs. 7-21; full MSE/BCE/CE: eqs. 1, 3, 5) and
  their posterior corrections (eqs. 2-22), one object per method in `SAMPLING_METHODS`
- `noise`: the noise distributions D of the sampled criteria and the shared draw
- `sparse`: sparse-softmax (softmax over the top-k logits, eq. 4) and its loss (eq. 5)
- `continuous`: continuous-output losses on a predicted embedding: the von Mises-Fisher NLL (Kumar & Tsvetkov
  eq. 3, with their two regularised forms and the authors' released form), the margin loss with synthetic negatives
  (Bhat et al. eq. 1), and cross-entropies over scaled cosines to the table (every row, or the batch's targets)

Shared by all: `_rows` (compute dtype, ignored rows, reductions, frequency ranks) and `hf_heads.validation`
(argument checks raising `OptionError`, which names the field, the value and what is allowed).
"""

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
from hf_heads.losses.fused_linear import check_labels, fused_linear_cross_entropy
from hf_heads.losses.margin import (
    CONTEXT_NORMS,
    MARGINS,
    WORD_NORMS,
    MarginCrossEntropy,
    MarginSpec,
    arc_phi,
    context_norm_values,
    lsm_psi,
    margin_cross_entropy,
    margin_logits,
    target_phi,
    validate_margin_options,
    word_norm_values,
)
from hf_heads.losses.noise import NOISES, draw_samples, frequency_ranks, noise_distribution
from hf_heads.losses.sampled import (
    CRITERIA,
    METHODS,
    SAMPLING_METHODS,
    SampledLoss,
    SamplingMethod,
    corrected_log_probs,
    corrected_nll,
    sampled_loss,
    self_normalization,
    validate_sampled_options,
)
from hf_heads.losses.sparse import (
    SparseSoftmaxCrossEntropy,
    sparse_linear_cross_entropy,
    sparse_log_softmax,
    sparse_softmax,
    sparse_softmax_cross_entropy,
    truncate_to_top_k,
)
from hf_heads.validation import OptionError

__all__ = [
    "OptionError",
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
    "MARGINS",
    "WORD_NORMS",
    "MarginCrossEntropy",
    "MarginSpec",
    "arc_phi",
    "check_labels",
    "context_norm_values",
    "fused_linear_cross_entropy",
    "lsm_psi",
    "margin_cross_entropy",
    "margin_logits",
    "target_phi",
    "validate_margin_options",
    "word_norm_values",
]
