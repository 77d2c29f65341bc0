"""Pure-torch losses, one family per module: functions first, `nn.Module` wrappers second.

- `fused_linear`: chunked linear cross-entropy (the memory core every discrete head shares)
- `margin`: large-margin softmax for LMs (L-Softmax, ArcFace, CosFace; word/context norm scaling)
"""

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

__all__ = [
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
