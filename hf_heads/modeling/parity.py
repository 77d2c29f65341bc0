"""`from_base` returns exactly the model it loaded: the checkpoint's output transform (hf_heads.losses.transforms) is
read from its config, and a probe compares the wrapped model's log-probabilities with the checkpoint's:

| architectures | config field | head option |
|---|---|---|
| Gemma 2 / 3 / 3n / 4, VaultGemma, nanochat | `final_logit_softcapping` | `logit_softcap` |
| RecurrentGemma, xLSTM | `logits_soft_cap`, `output_logit_soft_cap` | `logit_softcap` |
| Cohere, Cohere 2 (MoE) | `logit_scale` (multiplies) | `logit_multiplier` |
| Granite (MoE, shared, hybrid), MiniCPM3 | `logits_scaling` (divides logits / states) | `1 / logits_scaling` |
| HyperCLOVA X, Falcon-H1 | `logits_scaling`, `lm_head_multiplier` (multiply) | `logit_multiplier` |
| T5 / LongT5 (`scale_decoder_outputs`), UMT5, Switch (tied) | h · d_model^-0.5 before the LM head | d_model^-0.5 |

The BART family's `final_logits_bias` becomes the head's bias. Anything else an architecture does between its backbone
and its logits is found by the probe, and `from_base` refuses the checkpoint, naming its architecture.
"""

from __future__ import annotations

import torch
from transformers import PretrainedConfig, PreTrainedModel

TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8}  # max |Δ log p| in nats; half precision: HALF_TOLERANCE
HALF_TOLERANCE = 3e-2


def output_transform(config: PretrainedConfig) -> dict[str, float | None]:
    """{"logit_multiplier": s, "logit_softcap": cap or None}: the output transform the checkpoint applies to its logits
    (see the module docstring); the identity when it applies none. Read per model type: the same field name means
    different things in different architectures (`logits_scaling` divides in Granite and multiplies in HyperCLOVA X;
    MPT's `logit_scale` is never applied)."""
    text = config.get_text_config(decoder=True)
    model_type = getattr(text, "model_type", "") or ""
    top_type = getattr(config, "model_type", "") or model_type
    scale, cap = 1.0, None
    softcap = next(
        (
            getattr(text, field)
            for field in ("final_logit_softcapping", "logits_soft_cap", "output_logit_soft_cap")
            if getattr(text, field, None)
        ),
        None,
    )
    if softcap:
        cap = float(softcap)
    if model_type.startswith("cohere") and getattr(text, "logit_scale", None) is not None:
        scale *= float(text.logit_scale)
    if model_type.startswith("granite") or model_type == "minicpm3":  # logits (or the hidden state) / logits_scaling
        scale /= float(getattr(text, "logits_scaling", 1.0) or 1.0)
    if model_type == "hyperclovax":
        scale *= float(getattr(text, "logits_scaling", 1.0) or 1.0)
    if model_type == "falcon_h1":
        scale *= float(getattr(text, "lm_head_multiplier", 1.0) or 1.0)
    rescale = {  # T5-style d_model^-0.5 on the decoder states before a tied LM head
        "t5": getattr(config, "scale_decoder_outputs", False),
        "longt5": getattr(config, "scale_decoder_outputs", False),
        "umt5": True,
        "switch_transformers": bool(getattr(config, "tie_word_embeddings", False)),
    }.get(top_type, False)
    if rescale:
        scale *= float(config.d_model) ** -0.5
    return {"logit_multiplier": scale, "logit_softcap": cap}


def with_transform(head: dict | None, transform: dict[str, float | None], name: str) -> dict:
    """The head section with the checkpoint's output transform filled in; a transform the user set to another
    value is refused (it would silently change the checkpoint's distribution)."""
    section = dict(head or {"family": "softmax"})
    for key, value in transform.items():
        given = section.get(key)
        default = 1.0 if key == "logit_multiplier" else None
        if given is not None and given != default and given != value:
            raise ValueError(
                f"head.{key}={given!r}, but the checkpoint {name!r} applies {key}={value!r} to its logits: leave "
                f"head.{key} unset (from_base copies the checkpoint's own) to keep its distribution"
            )
        if value != default:
            section[key] = value
    return section


def probe_ids(vocab_size: int, batch: int = 2, length: int = 8, seed: int = 0) -> torch.LongTensor:
    """(batch, length) token ids drawn without touching the global RNG (ids 4.. avoid most special tokens)."""
    g = torch.Generator().manual_seed(seed)
    low = min(4, vocab_size - 1)
    return torch.randint(low, vocab_size, (batch, length), generator=g)


def check_same_distribution(
    original: torch.Tensor, wrapped: torch.Tensor, *, checkpoint: PreTrainedModel, name: str, what: str
) -> None:
    """Raise when the wrapped model's log-probabilities (*, V) differ from the checkpoint's beyond the
    tolerance of its dtype."""
    a = torch.log_softmax(original.double(), dim=-1)
    b = torch.log_softmax(wrapped.double(), dim=-1)
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not bool((torch.isfinite(a) == torch.isfinite(b)).all()):
        diff = float("inf")
    else:
        diff = float((a - b)[finite].abs().max()) if bool(finite.any()) else 0.0
    tol = TOLERANCE.get(original.dtype, HALF_TOLERANCE)
    if not diff <= tol:
        model_type = getattr(checkpoint.config, "model_type", "?")
        name = name or f"<{type(checkpoint).__name__} in memory>"
        raise ValueError(
            f"from_base({name!r}): the wrapped model's {what} differ from the checkpoint's by up to {diff:.3g} nats "
            f"on a probe input (tolerance {tol:g}): hf_heads does not reproduce how {type(checkpoint).__name__} "
            f"(model_type={model_type!r}) computes its logits, so it refuses to return a different model. Known "
            "output transforms: see the table of hf_heads.modeling.parity"
        )


# Decoders whose own *ForCausalLM generates through a recurrent-state cache that GenerationMixin's generic loop does
# not reproduce: the state-space models below, and every class that cannot use the generic dynamic cache.
STATEFUL_GENERATION = ("mamba", "mamba2", "falcon_mamba")


def stateful_generation(backbone: PretrainedConfig) -> bool:
    """Whether `generate()` must run through this backbone's own `*ForCausalLM` (its cache and generation hooks)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    lm_class = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(backbone), None)
    return lm_class is not None and (
        getattr(backbone, "model_type", None) in STATEFUL_GENERATION or not lm_class._supports_default_dynamic_cache()
    )
