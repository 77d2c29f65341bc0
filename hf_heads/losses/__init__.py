"""Pure-torch losses, one family per module: functions first, `nn.Module` wrappers second.

- `fused_linear`: chunked linear cross-entropy (the memory core every discrete head shares)
- `margin`: large-margin softmax for LMs (L-Softmax, ArcFace, CosFace; word/context norm scaling)
- `sampled`: sampling-based criteria (MCS, IS, CPS, NCE × CE/BCE; full MSE/BCE/CE) + posterior corrections
- `noise`: the noise distributions D of the sampled criteria and the shared draw
- `sparse`: sparse-softmax (softmax over the top-k logits) and its loss
"""

from hf_heads.losses.continuous import (
    NEGATIVES,
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
    SampledLoss,
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

__all__ = [
    "NEGATIVES",
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
