"""Architecture matrix: tiny random-weight configs of many real transformers architectures (no downloads).

Every builder returns a tiny config (hidden ~32, 2 layers, 2 heads, vocab 64) for one model type, with each
architecture's output transform pushed away from identity (soft-caps of 2.0, logit scales of 0.25 / 4.0, ...) so that
a wrapper dropping the transform cannot pass a parity check by luck. `build` turns a key into a model whose floating
parameters are all re-drawn from normal(0, std), norm weights and biases included.

Run `python tests/arch_matrix.py` to build and exercise every entry (forward + generate / classify) with timings.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    PretrainedConfig,
    PreTrainedModel,
)

VOCAB = 64
PAD, BOS, EOS = 1, 2, 3
NUM_LABELS = 3
LABELS = ["neg", "neu", "pos"]

ConfigBuilder = Callable[[], PretrainedConfig]


def _cfg(model_type: str, **kw: Any) -> PretrainedConfig:
    """Config of `model_type` with the shared tiny defaults (vocab, special ids) overridden by `kw`."""
    base: dict[str, Any] = {"vocab_size": VOCAB, "pad_token_id": PAD, "bos_token_id": BOS, "eos_token_id": EOS}
    base.update(kw)
    return AutoConfig.for_model(model_type, **base)


def _llama_like(model_type: str, **kw: Any) -> ConfigBuilder:
    """Builder for the many Llama-shaped configs (hidden_size / intermediate_size / num_*_heads field names)."""
    base: dict[str, Any] = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
    }
    base.update(kw)
    return partial(_cfg, model_type, **base)


def _labels(**kw: Any) -> dict[str, Any]:
    """Classification kwargs: 3 labels with names."""
    return {
        "num_labels": NUM_LABELS,
        "id2label": dict(enumerate(LABELS)),
        "label2id": {name: i for i, name in enumerate(LABELS)},
        **kw,
    }


_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
_GPT2 = {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 128, "resid_pdrop": 0.0, "embd_pdrop": 0.0}
_BART = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 128,
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "pad_token_id": PAD,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
    "decoder_start_token_id": EOS,
    "forced_eos_token_id": None,
}
_T5 = {
    "d_model": 32,
    "d_kv": 16,
    "d_ff": 64,
    "num_layers": 2,
    "num_heads": 2,
    "dropout_rate": 0.0,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
    "bos_token_id": None,
}
_BERT = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "pad_token_id": PAD,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
}

# Causal LMs. Comments flag an entry's output-side quirk (transform, bias, tying); the per-class analysis, with
# file:line references, is in outputs/w/arch_report.md.
CAUSAL_LM: dict[str, ConfigBuilder] = {
    "gpt2": partial(_cfg, "gpt2", **_GPT2, attn_pdrop=0.0),  # tied
    "openai-gpt": partial(_cfg, "openai-gpt", **_GPT2, attn_pdrop=0.0),  # tied
    "gpt_bigcode": partial(_cfg, "gpt_bigcode", **_GPT2, attn_pdrop=0.0),  # tied, multi-query
    "ctrl": partial(
        _cfg, "ctrl", n_embd=32, n_layer=2, n_head=2, dff=64, n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0
    ),  # tied, lm_head has a bias
    "gptj": partial(
        _cfg, "gptj", n_embd=32, n_layer=2, n_head=2, n_positions=128, rotary_dim=8, n_inner=64
    ),  # untied, lm_head bias
    # CodeGen splits qkv into 4 model-parallel groups: n_head must be a multiple of 4
    "codegen": partial(
        _cfg, "codegen", n_embd=32, n_layer=2, n_head=4, n_positions=128, n_ctx=128, rotary_dim=4, n_inner=64
    ),  # untied, lm_head bias
    "gpt_neo": partial(
        _cfg,
        "gpt_neo",
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        attention_types=[[["global", "local"], 1]],
        window_size=4,
    ),
    "gpt_neox": partial(
        _cfg,
        "gpt_neox",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    ),  # untied `embed_out`
    "bloom": partial(_cfg, "bloom", hidden_size=32, n_layer=2, n_head=2),  # tied, alibi
    "falcon": partial(
        _cfg, "falcon", hidden_size=32, num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=128
    ),
    "mpt": partial(
        _cfg, "mpt", d_model=32, n_heads=2, n_layers=2, expansion_ratio=2, max_seq_len=128, logit_scale=0.25
    ),  # `logit_scale` is a config field that MptForCausalLM ignores
    "opt": partial(
        _cfg,
        "opt",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        bos_token_id=BOS,
        eos_token_id=BOS,
    ),
    # OPT-350m layout: post-LN, word_embed_proj_dim < hidden_size, so the decoder's `project_out` ends the base model
    "opt-project-out": partial(
        _cfg,
        "opt",
        hidden_size=32,
        word_embed_proj_dim=16,
        do_layer_norm_before=False,
        num_hidden_layers=2,
        num_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        bos_token_id=BOS,
        eos_token_id=BOS,
    ),
    "xglm": partial(
        _cfg,
        "xglm",
        d_model=32,
        num_layers=2,
        attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        attention_dropout=0.0,
        decoder_start_token_id=EOS,
    ),
    "biogpt": partial(
        _cfg,
        "biogpt",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    ),  # `output_projection`
    "llama": _llama_like("llama"),
    "llama-tied": _llama_like("llama", tie_word_embeddings=True),
    "mistral": _llama_like("mistral", sliding_window=32),
    "ministral": _llama_like("ministral", head_dim=16, sliding_window=32),
    "mixtral": _llama_like("mixtral", num_local_experts=4, num_experts_per_tok=2),
    "qwen2": _llama_like("qwen2"),
    "qwen3": _llama_like("qwen3", head_dim=16),
    "qwen2_moe": _llama_like("qwen2_moe", shared_expert_intermediate_size=32, **_MOE),
    "qwen3_moe": _llama_like("qwen3_moe", **_MOE),
    "gemma": _llama_like("gemma", head_dim=16),  # tied, embeddings * sqrt(hidden) inside the base model
    "gemma2": _llama_like(
        "gemma2", head_dim=16, query_pre_attn_scalar=16, sliding_window=32, final_logit_softcapping=2.0
    ),  # tanh soft-cap
    "gemma3_text": _llama_like(
        "gemma3_text", head_dim=16, query_pre_attn_scalar=16, sliding_window=32, final_logit_softcapping=2.0
    ),  # soft-cap (default None)
    "vaultgemma": _llama_like(
        "vaultgemma", head_dim=16, query_pre_attn_scalar=16, sliding_window=32, final_logit_softcapping=2.0
    ),  # soft-cap
    "recurrent_gemma": _llama_like(
        "recurrent_gemma",
        num_key_value_heads=1,
        lru_width=32,
        attention_window_size=16,
        block_types=["recurrent", "attention"],
        logits_soft_cap=2.0,  # applied unconditionally
    ),
    "cohere": _llama_like("cohere", logit_scale=0.25),  # tied, logits * logit_scale
    "cohere2": _llama_like("cohere2", logit_scale=0.25, sliding_window=32),  # tied
    "granite": _llama_like(
        "granite", logits_scaling=4.0, embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.25
    ),  # logits / logits_scaling
    "granitemoe": _llama_like(
        "granitemoe",
        logits_scaling=4.0,
        embedding_multiplier=2.0,
        residual_multiplier=0.5,
        attention_multiplier=0.25,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
    "granitemoeshared": _llama_like(
        "granitemoeshared",
        logits_scaling=4.0,
        embedding_multiplier=2.0,
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=32,
    ),
    "hyperclovax": _llama_like("hyperclovax", logits_scaling=4.0, embedding_multiplier=2.0),  # multiplies logits
    "minicpm3": _llama_like(
        "minicpm3",
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=16,
        dim_model_base=8,  # logits_scaling = hidden_size / dim_model_base = 4: hidden states divided before lm_head
        scale_emb=2.0,
        scale_depth=1.4,
    ),
    "nanochat": _llama_like("nanochat", final_logit_softcapping=2.0),  # soft-cap
    "falcon_h1": _llama_like(
        "falcon_h1",
        lm_head_multiplier=2.5,  # logits * lm_head_multiplier (read from the base model attribute)
        embedding_multiplier=2.0,
        mamba_d_ssm=32,
        mamba_n_heads=2,
        mamba_d_head=16,
        mamba_d_state=8,
        mamba_chunk_size=16,
    ),
    "olmo": _llama_like("olmo", clip_qkv=8.0),
    "olmo2": _llama_like("olmo2"),
    "olmo3": _llama_like("olmo3", sliding_window=32),
    "olmoe": _llama_like("olmoe", num_experts=4, num_experts_per_tok=2),
    "phi": _llama_like("phi"),  # lm_head has a bias
    "phi3": _llama_like("phi3", original_max_position_embeddings=128),
    "phimoe": _llama_like("phimoe", num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0),
    "starcoder2": _llama_like("starcoder2", residual_dropout=0.0, embedding_dropout=0.0),  # tied
    "stablelm": _llama_like("stablelm"),
    "persimmon": _llama_like("persimmon"),
    "helium": _llama_like("helium", head_dim=16),
    "glm": _llama_like("glm", head_dim=16),
    "glm4": _llama_like("glm4", head_dim=16),
    "nemotron": _llama_like("nemotron"),
    "exaone4": _llama_like("exaone4", sliding_window=32, sliding_window_pattern=2),
    "smollm3": _llama_like("smollm3"),  # tied
    "seed_oss": _llama_like("seed_oss", head_dim=16, attention_dropout=0.0, residual_dropout=0.0),
    "ernie4_5": _llama_like("ernie4_5", head_dim=16),  # tied
    "apertus": _llama_like("apertus"),
    "arcee": _llama_like("arcee"),
    "diffllama": _llama_like("diffllama"),
    "internlm3": _llama_like("internlm3", head_dim=16),
    "hunyuan_v1_dense": _llama_like("hunyuan_v1_dense", head_dim=16),
    "jais2": _llama_like("jais2"),
    "doge": _llama_like("doge", keep_window_size=32),
    "lfm2": _llama_like("lfm2", layer_types=["conv", "full_attention"], block_auto_adjust_ff_dim=False),  # tied
    "modernbert-decoder": _llama_like(
        "modernbert-decoder", local_attention=16, cls_token_id=BOS, sep_token_id=EOS
    ),  # tied; logits = decoder(lm_head(h)): `lm_head` is dense+act+norm, get_output_embeddings() is `decoder`
    "jetmoe": _llama_like(
        "jetmoe", num_key_value_heads=2, kv_channels=16, num_local_experts=4, num_experts_per_tok=2
    ),  # tied
    "dbrx": partial(
        _cfg,
        "dbrx",
        d_model=32,
        n_heads=2,
        n_layers=2,
        max_seq_len=128,
        attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},  # read unguarded by modeling_dbrx
        ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2},
    ),
    "gpt_oss": _llama_like("gpt_oss", head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=32),
    "deepseek_v3": _llama_like(
        "deepseek_v3",
        moe_intermediate_size=32,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
    ),
    "gemma3n_text": _llama_like(
        "gemma3n_text",
        head_dim=16,
        intermediate_size=[64, 64],
        sliding_window=32,
        layer_types=["sliding_attention", "full_attention"],
        final_logit_softcapping=2.0,
        vocab_size_per_layer_input=VOCAB,
        hidden_size_per_layer_input=8,
        laurel_rank=4,
        altup_num_inputs=2,
        num_kv_shared_layers=0,
        activation_sparsity_pattern=[0.0, 0.0],
    ),  # soft-cap
    "gemma4_text": _llama_like(
        "gemma4_text",
        head_dim=16,
        sliding_window=32,
        layer_types=["sliding_attention", "full_attention"],
        final_logit_softcapping=2.0,
        vocab_size_per_layer_input=VOCAB,
        hidden_size_per_layer_input=8,
    ),  # soft-cap
    "cohere2_moe": _llama_like(
        "cohere2_moe",
        logit_scale=0.25,
        head_dim=16,
        sliding_window=32,
        num_experts=4,
        num_experts_per_tok=2,
        layer_types=["sliding_attention", "full_attention"],
    ),  # tied, logits * logit_scale
    "granitemoehybrid": _llama_like(
        "granitemoehybrid",
        logits_scaling=4.0,
        embedding_multiplier=2.0,
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=32,
        layer_types=["mamba", "attention"],
        mamba_n_heads=2,
        mamba_d_head=32,
        mamba_d_state=8,
        mamba_chunk_size=16,
    ),  # logits / logits_scaling
    "afmoe": _llama_like(
        "afmoe",
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        num_shared_experts=1,
        moe_intermediate_size=32,
        num_dense_layers=1,
        global_attn_every_n_layers=2,
        sliding_window=32,
        mup_enabled=True,  # embeddings * sqrt(hidden) inside the base model
    ),
    "llama4_text": _llama_like(
        "llama4_text",
        head_dim=16,
        intermediate_size_mlp=64,
        num_local_experts=4,
        num_experts_per_tok=1,
        attention_chunk_size=32,
    ),  # model.base_model is the model itself (base_model_prefix "language_model" names no attribute)
    "glm4_moe": _llama_like(
        "glm4_moe", moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1
    ),
    "deepseek_v2": _llama_like(
        "deepseek_v2",
        moe_intermediate_size=32,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
    ),
    "ernie4_5_moe": _llama_like(
        "ernie4_5_moe", moe_intermediate_size=32, moe_k=2, moe_num_experts=4, moe_num_shared_experts=1
    ),  # tied
    "minimax": _llama_like(
        "minimax",
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        layer_types=["linear_attention", "full_attention"],
        block_size=4,
    ),
    "lfm2_moe": _llama_like(
        "lfm2_moe",
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_dense_layers=1,
        layer_types=["conv", "full_attention"],
    ),  # tied
    "flex_olmo": _llama_like("flex_olmo", num_experts=4, num_experts_per_tok=2),
    "bitnet": _llama_like("bitnet"),
    "cwm": _llama_like("cwm", head_dim=16, sliding_window=32),
    "qwen3_next": _llama_like(
        "qwen3_next",
        head_dim=16,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        layer_types=["linear_attention", "full_attention"],
    ),
    "nemotron_h": _llama_like(
        "nemotron_h",
        layers_block_type=["mamba", "attention"],
        head_dim=16,
        mamba_num_heads=2,
        mamba_head_dim=16,
        ssm_state_size=8,
        n_groups=1,
        chunk_size=16,
    ),
    # Zamba fixes its first 3 block types and needs >= 2 hybrid blocks (their shared weights are tied): 4 layers
    "zamba": _llama_like(
        "zamba", num_hidden_layers=4, attn_layer_period=1, attn_layer_offset=0, n_mamba_heads=2, mamba_d_state=8
    ),  # tied
    # xLSTM rounds qk_dim / v_dim up to multiples of 64 in its cache but not in its layers: hidden 64, factors 1
    "xlstm": _llama_like(
        "xlstm",
        hidden_size=64,
        embedding_dim=64,
        num_heads=2,
        num_blocks=2,
        qk_dim_factor=1.0,
        v_dim_factor=1.0,
        chunk_size=4,
        output_logit_soft_cap=2.0,  # soft-cap
    ),
    "mamba": partial(_cfg, "mamba", hidden_size=32, state_size=8, num_hidden_layers=2),  # tied
    "mamba2": partial(
        _cfg,
        "mamba2",
        hidden_size=32,
        num_heads=4,
        head_dim=16,
        state_size=8,
        n_groups=1,
        num_hidden_layers=2,
        chunk_size=16,
    ),
    "falcon_mamba": partial(_cfg, "falcon_mamba", hidden_size=32, state_size=8, num_hidden_layers=2),  # tied
    "rwkv": partial(
        _cfg,
        "rwkv",
        hidden_size=32,
        num_hidden_layers=2,
        attention_hidden_size=32,
        intermediate_size=64,
        context_length=128,
    ),
    "zamba2": _llama_like(
        "zamba2",
        layers_block_type=["mamba", "hybrid"],
        mamba_d_state=8,
        n_mamba_heads=2,
        mamba_ngroups=1,
        chunk_size=16,
        use_mamba_kernels=False,
        adapter_rank=4,
    ),
    "bamba": _llama_like(
        "bamba",
        attn_layer_indices=[1],
        mamba_n_heads=2,
        mamba_d_head=32,
        mamba_d_state=8,
        mamba_chunk_size=16,
    ),
    "jamba": _llama_like(
        "jamba",
        num_experts=4,
        num_experts_per_tok=2,
        attn_layer_period=2,
        attn_layer_offset=1,
        expert_layer_period=2,
        expert_layer_offset=1,
        mamba_d_state=8,
        use_mamba_kernels=False,
    ),
}

SEQ2SEQ: dict[str, ConfigBuilder] = {
    "bart": partial(_cfg, "bart", **_BART),  # tied, final_logits_bias
    "mbart": partial(_cfg, "mbart", **_BART),
    "plbart": partial(_cfg, "plbart", **_BART),
    "mvp": partial(_cfg, "mvp", **_BART),
    "pegasus": partial(_cfg, "pegasus", **_BART),
    "marian": partial(_cfg, "marian", **_BART),
    "marian-untied": partial(
        _cfg, "marian", **_BART, share_encoder_decoder_embeddings=False, tie_word_embeddings=False
    ),
    "blenderbot": partial(_cfg, "blenderbot", **_BART),
    "blenderbot-small": partial(_cfg, "blenderbot-small", **_BART),
    "m2m_100": partial(_cfg, "m2m_100", **_BART, encoder_layerdrop=0.0, decoder_layerdrop=0.0),
    "led": partial(
        _cfg,
        "led",
        **{k: v for k, v in _BART.items() if k != "max_position_embeddings"},
        max_encoder_position_embeddings=128,
        max_decoder_position_embeddings=128,
        attention_window=8,
    ),
    "fsmt": partial(
        _cfg,
        "fsmt",
        **{k: v for k, v in _BART.items() if k != "forced_eos_token_id"},
        langs=["en", "de"],
        src_vocab_size=VOCAB,
        tgt_vocab_size=VOCAB,
    ),  # FSMTModel.last_hidden_state already is the logits (output_projection sits inside FSMTDecoder)
    "t5": partial(_cfg, "t5", **_T5),  # tied: decoder output * d_model**-0.5 before lm_head
    # 5.23 forces T5 tie_word_embeddings=True: "untied" only turns the rescale off (scale_decoder_outputs=False)
    "t5-untied": partial(_cfg, "t5", **_T5, tie_word_embeddings=False),
    "t5-gated": partial(_cfg, "t5", **_T5, feed_forward_proj="gated-gelu"),
    "mt5": partial(_cfg, "mt5", **_T5),  # tied (forced), never rescaled
    "umt5": partial(_cfg, "umt5", **_T5),  # tied (forced), always rescaled by d_model**-0.5
    "longt5": partial(_cfg, "longt5", **_T5, local_radius=4, global_block_size=4),
    "switch_transformers": partial(
        _cfg,
        "switch_transformers",
        **_T5,
        num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1,
        num_decoder_layers=2,
        num_experts=4,
        expert_capacity=16,
        router_jitter_noise=0.0,
    ),  # tied, rescaled by d_model**-0.5 iff tie_word_embeddings
    "switch_transformers-untied": partial(
        _cfg,
        "switch_transformers",
        **_T5,
        num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1,
        num_decoder_layers=2,
        num_experts=4,
        expert_capacity=16,
        router_jitter_noise=0.0,
        tie_word_embeddings=False,
    ),  # really untied, no rescale
    "nllb-moe": partial(
        _cfg,
        "nllb-moe",
        **_BART,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        num_experts=4,
        expert_capacity=16,
        encoder_sparse_step=2,
        decoder_sparse_step=2,
        moe_token_dropout=0.0,
    ),
    "pegasus_x": partial(_cfg, "pegasus_x", **_BART, num_global_tokens=4, block_size=4),
    "bigbird_pegasus": partial(_cfg, "bigbird_pegasus", **_BART, attention_type="original_full"),
}

ENCODER_CLASSIFIERS: dict[str, ConfigBuilder] = {
    "bert": partial(_cfg, "bert", **_BERT, **_labels()),
    "roberta": partial(_cfg, "roberta", **_BERT, **_labels()),
    "xlm-roberta": partial(_cfg, "xlm-roberta", **_BERT, **_labels()),
    "camembert": partial(_cfg, "camembert", **_BERT, **_labels()),
    "data2vec-text": partial(_cfg, "data2vec-text", **_BERT, **_labels()),
    "roberta-prelayernorm": partial(_cfg, "roberta-prelayernorm", **_BERT, **_labels()),
    "xlm-roberta-xl": partial(_cfg, "xlm-roberta-xl", **_BERT, **_labels()),
    "ernie": partial(_cfg, "ernie", **_BERT, **_labels()),
    "megatron-bert": partial(_cfg, "megatron-bert", **_BERT, **_labels()),
    "roformer": partial(_cfg, "roformer", **_BERT, **_labels()),
    "convbert": partial(_cfg, "convbert", **_BERT, embedding_size=32, **_labels()),
    "electra": partial(_cfg, "electra", **_BERT, embedding_size=16, **_labels()),
    "albert": partial(_cfg, "albert", **_BERT, embedding_size=16, classifier_dropout_prob=0.0, **_labels()),
    "deberta": partial(_cfg, "deberta", **_BERT, relative_attention=True, pos_att_type=["c2p", "p2c"], **_labels()),
    "deberta-v2": partial(
        _cfg,
        "deberta-v2",
        **_BERT,
        relative_attention=True,
        position_buckets=16,
        pos_att_type=["c2p", "p2c"],
        **_labels(),
    ),
    "distilbert": partial(
        _cfg,
        "distilbert",
        dim=32,
        n_layers=2,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        attention_dropout=0.0,
        seq_classif_dropout=0.0,
        pad_token_id=PAD,
        **_labels(),
    ),
    "mpnet": partial(_cfg, "mpnet", **_BERT, **_labels()),
    "modernbert": partial(
        _cfg,
        "modernbert",
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=128,
        local_attention=16,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        cls_token_id=BOS,
        sep_token_id=EOS,
        **_labels(),
    ),  # classifier_pooling="cls"
    "modernbert-mean": partial(
        _cfg,
        "modernbert",
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=128,
        local_attention=16,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        cls_token_id=BOS,
        sep_token_id=EOS,
        classifier_pooling="mean",
        **_labels(),
    ),
    "eurobert": _llama_like("eurobert", mask_token_id=4, **_labels()),
    "squeezebert": partial(_cfg, "squeezebert", **_BERT, embedding_size=32, **_labels()),
    "funnel": partial(
        _cfg,
        "funnel",
        block_sizes=[1, 1],
        num_decoder_layers=1,
        d_model=32,
        n_head=2,
        d_head=16,
        d_inner=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        pad_token_id=PAD,
        **_labels(),
    ),
    "fnet": partial(
        _cfg,
        "fnet",
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        **_labels(),
    ),
    "big_bird": partial(_cfg, "big_bird", **_BERT, attention_type="original_full", **_labels()),
    "longformer": partial(_cfg, "longformer", **_BERT, attention_window=4, sep_token_id=EOS, **_labels()),
    "ibert": partial(_cfg, "ibert", **_BERT, **_labels()),
    "rembert": partial(
        _cfg,
        "rembert",
        **_BERT,
        input_embedding_size=16,
        output_embedding_size=16,
        classifier_dropout_prob=0.0,
        **_labels(),
    ),
    "mobilebert": partial(
        _cfg,
        "mobilebert",
        **_BERT,
        embedding_size=16,
        intra_bottleneck_size=16,
        num_feedforward_networks=2,
        **_labels(),
    ),
    "yoso": partial(_cfg, "yoso", **_BERT, **_labels()),
    "mra": partial(_cfg, "mra", **_BERT, **_labels()),
    "gte": partial(_cfg, "gte", **_BERT, **_labels()),
    "nomic_bert": partial(_cfg, "nomic_bert", **_BERT, **_labels()),
    "xlnet": partial(
        _cfg,
        "xlnet",
        d_model=32,
        n_layer=2,
        n_head=2,
        d_inner=64,
        dropout=0.0,
        summary_last_dropout=0.0,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        **_labels(),
    ),
    "xlm": partial(
        _cfg,
        "xlm",
        emb_dim=32,
        n_layers=2,
        n_heads=2,
        dropout=0.0,
        attention_dropout=0.0,
        max_position_embeddings=128,
        summary_first_dropout=0.0,
        **_labels(),
    ),
    "flaubert": partial(
        _cfg,
        "flaubert",
        emb_dim=32,
        n_layers=2,
        n_heads=2,
        dropout=0.0,
        attention_dropout=0.0,
        max_position_embeddings=128,
        summary_first_dropout=0.0,
        **_labels(),
    ),
}

DECODER_CLASSIFIERS: dict[str, ConfigBuilder] = {
    "gpt2": partial(_cfg, "gpt2", **_GPT2, attn_pdrop=0.0, **_labels()),
    "llama": _llama_like("llama", **_labels()),
    "qwen2": _llama_like("qwen2", **_labels()),
    "qwen3": _llama_like("qwen3", head_dim=16, **_labels()),
    "mistral": _llama_like("mistral", sliding_window=32, **_labels()),
    "gemma": _llama_like("gemma", head_dim=16, **_labels()),
    "gemma2": _llama_like(
        "gemma2", head_dim=16, query_pre_attn_scalar=16, sliding_window=32, final_logit_softcapping=2.0, **_labels()
    ),
    "phi3": _llama_like("phi3", original_max_position_embeddings=128, **_labels()),
    "gpt_neox": partial(
        _cfg,
        "gpt_neox",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        **_labels(),
    ),
    "opt": partial(
        _cfg,
        "opt",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        **_labels(),
    ),
    "bloom": partial(_cfg, "bloom", hidden_size=32, n_layer=2, n_head=2, **_labels()),
}

SKIPPED: dict[str, str] = {
    "prophetnet": (
        "seq2seq: ProphetNetForConditionalGeneration.generate (default KV cache) raises ValueError: `position_ids` are"
        " incorrect. They should be of the format 1 2 3 4 5 ... (key_sequence_length - 1); forward is fine"
    ),
    "nystromformer": (
        "encoder_classification: runs only when the input length equals segment_means_seq_len; with num_landmarks <"
        " seq_len a padded attention_mask raises RuntimeError: The size of tensor a (4) must match the size of tensor"
        " b (8) at non-singleton dimension 2"
    ),
}

# Whether the built model's output projection shares its tensor with the input embeddings (architecture defaults,
# checked by `verify`). Note that T5 / mT5 / UMT5 / LongT5 are tied whatever `tie_word_embeddings` says (5.23 forces
# it to True), so `t5-untied` is tied and only switches off the d_model**-0.5 rescaling; the untied seq2seq entries are
# `marian-untied`, `fsmt` and `switch_transformers-untied`.
TIED: dict[str, frozenset[str]] = {
    "causal_lm": frozenset(
        (
            "gpt2 openai-gpt gpt_bigcode ctrl gpt_neo bloom falcon mpt opt opt-project-out xglm biogpt llama-tied "
            "gemma gemma2 gemma3_text vaultgemma recurrent_gemma cohere cohere2 minicpm3 starcoder2 smollm3 "
            "ernie4_5 lfm2 modernbert-decoder jetmoe gemma3n_text gemma4_text cohere2_moe ernie4_5_moe lfm2_moe "
            "zamba mamba falcon_mamba zamba2"
        ).split()
    ),
    "seq2seq": frozenset(
        (
            "bart mbart plbart mvp pegasus marian blenderbot blenderbot-small m2m_100 led t5 t5-untied t5-gated "
            "mt5 umt5 longt5 switch_transformers nllb-moe pegasus_x bigbird_pegasus"
        ).split()
    ),
}

_TASKS: dict[str, tuple[dict[str, ConfigBuilder], type]] = {
    "causal_lm": (CAUSAL_LM, AutoModelForCausalLM),
    "seq2seq": (SEQ2SEQ, AutoModelForSeq2SeqLM),
    "encoder_classification": (ENCODER_CLASSIFIERS, AutoModelForSequenceClassification),
    "decoder_classification": (DECODER_CLASSIFIERS, AutoModelForSequenceClassification),
}
TASKS = tuple(_TASKS)
# The dict names work as task names too, e.g. "ENCODER_CLASSIFIERS" for "encoder_classification"
_TASK_ALIASES = {
    "causal_lm": "causal_lm",
    "seq2seq": "seq2seq",
    "encoder_classifiers": "encoder_classification",
    "decoder_classifiers": "decoder_classification",
}


def _task(task: str) -> str:
    """Canonical task name (one of `TASKS`) for `task` or a dict-name alias such as "ENCODER_CLASSIFIERS"."""
    name = _TASK_ALIASES.get(task.lower(), task.lower())
    if name not in _TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
    return name


def config(model_type_key: str, task: str) -> PretrainedConfig:
    """The tiny config of `model_type_key` in the matrix of `task`."""
    table = _TASKS[_task(task)][0]
    if model_type_key not in table:
        why = f" (skipped: {SKIPPED[model_type_key]})" if model_type_key in SKIPPED else ""
        raise KeyError(f"{model_type_key!r} is not in the {_task(task)} matrix{why}")
    return table[model_type_key]()


# Buffers (not parameters) that still shape the logits: BART-family `final_logits_bias` is a zero buffer, so a wrapper
# that drops it would pass a parity check unless it is redrawn too.
OUTPUT_BUFFERS = ("final_logits_bias",)


@torch.no_grad()
def _reinit(model: PreTrainedModel, std: float) -> None:
    """Redraw every floating parameter (and output-bias buffer) from normal(0, std), tied tensors once."""
    for param in model.parameters():  # `parameters()` yields a tied tensor once
        if param.is_floating_point():
            param.normal_(0.0, std)
    for name, buf in model.named_buffers():
        if name.rsplit(".", 1)[-1] in OUTPUT_BUFFERS and buf.is_floating_point():
            buf.normal_(0.0, std)


def build(model_type_key: str, task: str, seed: int = 0, std: float = 0.5) -> PreTrainedModel:
    """Tiny float32 eval-mode model of `model_type_key` for `task`; float params (+ OUTPUT_BUFFERS) ~ N(0, std)."""
    cfg = config(model_type_key, task)
    auto_cls = _TASKS[_task(task)][1]
    torch.manual_seed(seed)
    model = auto_cls.from_config(cfg, dtype=torch.float32)
    _reinit(model, std)
    return model.float().eval()


def probe_inputs(task: str) -> dict[str, torch.Tensor]:
    """A (2, 7) batch of ids 4.. for `task` (seq2seq: with (2, 5) decoder ids), the same on every call."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (2, 7), generator=g)
    out = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if task == "seq2seq":
        out["decoder_input_ids"] = torch.randint(4, VOCAB, (2, 5), generator=g)
    return out


# Decoders whose own *ForCausalLM refuses beam search with its cache ("the cache cannot be reordered").
NO_BEAM_SEARCH = {"rwkv", "xlstm"}


def cache_mismatches(
    model: PreTrainedModel, prompt: dict[str, torch.Tensor], new_tokens: int = 4, beams: tuple[int, ...] = (1, 2)
) -> list[str]:
    """`generate(use_cache=True)` against `generate(use_cache=False)`, greedy and 2-beam, `new_tokens` tokens forced
    (no early EOS): the tokens must be equal and the greedy step scores equal to 1e-4. Returns what differs."""
    found = []
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    with torch.no_grad():
        for n in beams:
            runs = [
                model.generate(
                    **prompt, **kw, num_beams=n, use_cache=cache, return_dict_in_generate=True, output_scores=True
                )
                for cache in (True, False)
            ]
            if not torch.equal(runs[0].sequences, runs[1].sequences):
                found.append(f"{n}-beam tokens {runs[0].sequences.tolist()} != {runs[1].sequences.tolist()}")
            elif n == 1:
                cached, uncached = torch.stack(runs[0].scores), torch.stack(runs[1].scores)  # (steps, B, V)
                finite = torch.isfinite(uncached)
                if not torch.equal(finite, torch.isfinite(cached)) or not torch.allclose(
                    cached[finite], uncached[finite], rtol=1e-4, atol=1e-4
                ):
                    found.append("greedy scores differ")
    return found


def is_tied(model: PreTrainedModel) -> bool:
    """Whether the output projection shares its weight tensor with the input embeddings."""
    try:
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    except NotImplementedError:
        return False
    if out is None or inp is None:
        return False
    return out.weight is inp.weight or out.weight.data_ptr() == inp.weight.data_ptr()


def _check(model: PreTrainedModel, task: str) -> str:
    """Forward on a right-padded (2, 8) batch (+ greedy generate for LMs); raise on bad shapes or non-finite values."""
    task = _task(task)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, VOCAB, (2, 8), generator=gen)
    mask = torch.ones_like(ids)
    padded_ids, padded_mask = ids.clone(), mask.clone()
    padded_ids[1, 6:], padded_mask[1, 6:] = PAD, 0
    with torch.no_grad():
        if task == "seq2seq":
            dec = torch.randint(4, VOCAB, (2, 5), generator=gen)
            logits = model(input_ids=padded_ids, attention_mask=padded_mask, decoder_input_ids=dec).logits
            want: tuple[int, ...] = (2, 5, model.config.vocab_size)
        else:
            logits = model(input_ids=padded_ids, attention_mask=padded_mask).logits
            want = (2, 8, model.config.vocab_size) if task == "causal_lm" else (2, NUM_LABELS)
        if tuple(logits.shape) != want:
            raise AssertionError(f"logits shape {tuple(logits.shape)} != {want}")
        if not torch.isfinite(logits).all() or not torch.isfinite(logits.log_softmax(-1)).all():
            raise AssertionError("non-finite logits / log-probs")
        if task in ("causal_lm", "seq2seq"):
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
            return f"gen={tuple(out.shape)}"
    return ""


def verify(tasks: tuple[str, ...] = TASKS, keys: tuple[str, ...] = ()) -> dict[str, str]:
    """Build and exercise every entry (or `keys`); print one line each; return {task/key: error} of failures."""
    failures: dict[str, str] = {}
    for task in map(_task, tasks):
        for key in _TASKS[task][0]:
            if keys and key not in keys:
                continue
            start = time.perf_counter()
            try:
                model = build(key, task)
                built = time.perf_counter() - start
                extra = _check(model, task)
                n = sum(p.numel() for p in model.parameters())
                tied = is_tied(model)
                if task in TIED and tied != (key in TIED[task]):
                    raise AssertionError(f"is_tied={tied} disagrees with TIED[{task!r}]")
                status = f"ok  build={built:.2f}s params={n} tied={tied} {extra}"
            except Exception as exc:  # report every failure and keep going
                msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                failures[f"{task}/{key}"] = msg
                status = f"FAIL {msg}"
            print(f"{task:24s} {key:22s} {time.perf_counter() - start:6.2f}s  {status}", flush=True)
    return failures


if __name__ == "__main__":
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    failed = verify(keys=tuple(sys.argv[1:]))
    counts = {task: len(table) for task, (table, _) in _TASKS.items()}
    print(f"counts={counts} skipped={len(SKIPPED)} failures={len(failed)} total={time.perf_counter() - t0:.1f}s")
    sys.exit(1 if failed else 0)
