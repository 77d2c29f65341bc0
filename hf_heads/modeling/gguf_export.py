"""A GGUF file for llama.cpp: `export_gguf(model, path, tokenizer=None, dtype="f16")` writes the export to the base
architecture of a Llama-family model as one GGUF file (the `gguf` package's writer), in float16 (2-D weights; norms in
float32, as llama.cpp's converter writes them) or float32, as llama.cpp's `convert_hf_to_gguf.py` does (RoPE layout
permuted, no `output.weight` when tied, the tokenizer's vocabulary). Not done: quantised types (made from the f16 file
by `llama-quantize`), RoPE scaling and projection biases (refused), pre-tokenizer detection (`default`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from hf_heads.modeling.parity import HALF_TOLERANCE, probe_ids

DTYPES = {"f16": np.float16, "f32": np.float32}
TOLERANCE = {"f32": 1e-5, "f16": HALF_TOLERANCE}  # max |Δ log p| of the file read back, against the model


def export_gguf(model, path: str | Path, tokenizer=None, dtype: str = "f16", verify: bool = True) -> Path:
    """Write `model` (an hf_heads model, exported with `to_base()` first, or a `LlamaForCausalLM`) to the GGUF file
    `path` with `tokenizer`'s vocabulary; `dtype`: "f16" or "f32". `verify`: read it back with transformers and compare
    on a probe. Refuses (`ValueError`) what llama.cpp's Llama graph does not run. Returns the path."""
    import gguf

    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}; allowed: {', '.join(DTYPES)}")
    base = model.to_base() if hasattr(model, "head") else model
    config = base.config
    check_llama(config)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_name(Path(getattr(config, "name_or_path", "") or path.stem).name or path.stem)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(rope_theta(config)))
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(config.vocab_size)
    if head_dim != config.hidden_size // config.num_attention_heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    if tokenizer is not None:
        add_vocabulary(writer, tokenizer, config.vocab_size)
    else:
        writer.add_tokenizer_model("none")  # llama.cpp's "no vocabulary": token ids in, token ids out
        for name in ("bos", "eos", "pad"):
            token = getattr(config, f"{name}_token_id", None)
            if isinstance(token, int):
                getattr(writer, f"add_{name}_token_id")(token)
    for name, array in gguf_tensors(base, dtype):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if verify:
        check_read_back(base, path, dtype)
    return path


@torch.no_grad()
def check_read_back(base, path: Path, dtype: str) -> None:
    """transformers reads the file back into a model whose log-probabilities on a probe input are the base model's,
    within the rounding of `dtype`; else `ValueError`."""
    from transformers import AutoModelForCausalLM

    read = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    device = base.get_input_embeddings().weight.device
    ids = probe_ids(base.config.vocab_size).to(device)  # (2, 8)
    was_training = base.training
    want = torch.log_softmax(base.eval()(input_ids=ids).logits.double(), dim=-1)
    base.train(was_training)
    got = torch.log_softmax(read.to(device)(input_ids=ids).logits.double(), dim=-1)
    diff, tol = float((got - want).abs().max()), TOLERANCE[dtype]
    if not diff <= tol:
        raise ValueError(
            f"transformers reads {path} back into a model whose log-probabilities differ from the exported model's by "
            f"up to {diff:.3g} nats (tolerance {tol:g} for {dtype}): the file does not hold this model"
        )


def check_llama(config) -> None:
    """Refuse what the GGUF written here would not hold: another architecture, RoPE scaling, projection biases."""
    if config.model_type != "llama":
        raise ValueError(
            f"export_gguf writes the Llama architecture (llama.cpp's 'llama'), not model_type={config.model_type!r}: "
            "export the model with export_base and convert that directory with llama.cpp's convert_hf_to_gguf.py"
        )
    scaling = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else "default"
    if kind not in (None, "default"):
        raise ValueError(
            f"RoPE scaling {kind!r} is not written by export_gguf: convert the export_base directory with llama.cpp's "
            "convert_hf_to_gguf.py, which writes it"
        )
    for option in ("attention_bias", "mlp_bias"):
        if getattr(config, option, False):
            raise ValueError(f"{option}=True is not written by export_gguf (llama.cpp's Llama graph has no such bias)")


def rope_theta(config) -> float:
    """RoPE's base frequency (transformers 5 keeps it in `rope_parameters`)."""
    parameters = getattr(config, "rope_parameters", None)
    if isinstance(parameters, dict) and "rope_theta" in parameters:
        return parameters["rope_theta"]
    return getattr(config, "rope_theta", 10000.0)


def permute_for_ggml(weight: np.ndarray, heads: int) -> np.ndarray:
    """A query or key projection (heads·d, H) from transformers' rotate-half RoPE layout to GGML's interleaved one (the
    inverse of transformers' `LlamaTensorProcessor._reverse_permute_weights`, llama.cpp's `LlamaModel.permute`)."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, half, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_tensors(base, dtype: str):
    """(GGUF name, array) of every tensor of a `LlamaForCausalLM` (no `output.weight` when the output layer is tied to
    the input embeddings): 2-D weights in `dtype`, 1-D ones in float32."""
    import gguf

    config = base.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    tied = base.get_output_embeddings().weight is base.get_input_embeddings().weight
    for name, tensor in base.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        stem, _, suffix = name.rpartition(".")
        mapped = names.get_name(stem)
        if mapped is None:
            raise ValueError(f"the tensor {name!r} has no GGUF name for the llama architecture")
        array = tensor.detach().to(device="cpu", dtype=torch.float32).numpy()
        if stem.endswith("self_attn.q_proj"):
            array = permute_for_ggml(array, config.num_attention_heads)
        elif stem.endswith("self_attn.k_proj"):
            array = permute_for_ggml(array, config.num_key_value_heads)
        yield f"{mapped}.{suffix}", np.ascontiguousarray(array.astype(DTYPES[dtype] if array.ndim > 1 else np.float32))


def add_vocabulary(writer, tokenizer, vocab_size: int) -> None:
    """The tokenizer's vocabulary as `tokenizer.ggml.*`, padded to the model's vocabulary size; a byte-level BPE
    tokenizer is `gpt2`, a SentencePiece one `llama`; other kinds are refused."""
    import gguf

    with tempfile.TemporaryDirectory() as directory:
        tokenizer.save_pretrained(directory)
        vocab = None
        for kind in (gguf.vocab.BpeVocab, gguf.vocab.LlamaHfVocab):
            try:
                vocab = kind(Path(directory))
                break
            except (FileNotFoundError, TypeError, ValueError):
                continue
        if vocab is None:
            raise ValueError(
                f"{type(tokenizer).__name__} is neither a byte-level BPE nor a SentencePiece tokenizer: export_gguf "
                "writes those two (pass tokenizer=None for a file without a vocabulary)"
            )
        tokens, scores, types = [], [], []
        for text, score, kind in vocab.all_tokens():
            tokens.append(text)
            scores.append(score)
            types.append(kind)
        if len(tokens) > vocab_size:
            raise ValueError(f"the tokenizer has {len(tokens)} tokens, the model {vocab_size}")
        for i in range(len(tokens), vocab_size):  # rows of the embedding no token names
            tokens.append(f"[PAD{i}]".encode())
            scores.append(-1000.0)
            types.append(gguf.TokenType.UNUSED)
        writer.add_tokenizer_model(vocab.tokenizer_model)
        if vocab.tokenizer_model == "gpt2":
            writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        special = gguf.SpecialVocab(Path(directory), load_merges=vocab.tokenizer_model == "gpt2", n_vocab=vocab_size)
        special.add_to_gguf(writer, quiet=True)  # merges, bos / eos / unk / pad ids, add_bos_token, chat template
