"""A GGUF file for llama.cpp (hf_heads.modeling.gguf_export): the export to the base architecture of a Llama-family
hf_heads model, written with the `gguf` package and read back by transformers (`from_pretrained(dir, gguf_file=...)`),
gives the same log-probabilities (f32: 1e-5; f16: those of the model with its weights rounded to float16) and the same
greedy and beam tokens; the tokenizer reads back from the file and encodes as it did."""

import pytest
import torch
from conftest import tiny_gpt2_config
from gguf import GGUFReader
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from hf_heads import HeadsForCausalLM

TEXT = "In the beginning God created the heaven and the earth."
VOCAB = 320  # the tokenizer's 294 tokens and unused rows


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE tokenizer (GPT-2's kind) trained on one verse, ids 0-3 the Llama config's special tokens."""
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<pad>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    raw.train_from_iterator([TEXT] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")  # fmt: skip


def llama_model(head: dict, tie: bool = False):
    """A tiny Llama with grouped-query attention (4 query heads, 2 key / value heads: the query and key projections
    are permuted with their own head counts)."""
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=2,
                         eos_token_id=3, pad_token_id=1, tie_word_embeddings=tie, rope_theta=500.0)  # fmt: skip
    lm = LlamaForCausalLM(config).eval()
    counts = torch.arange(VOCAB, 0, -1, dtype=torch.float32)
    return HeadsForCausalLM.from_base(lm, head=head, word_counts=counts, calibrate=False).eval()


MARGIN = {"family": "margin", "margin": {"type": "arc", "m": 0.2}, "word_norm": "log-unigram", "bias": False}


@pytest.mark.parametrize("head, tie", [(MARGIN, False), ({"family": "softmax", "bias": False}, True)],
                         ids=["margin-untied", "softmax-tied"])  # fmt: skip
def test_gguf_f32_reads_back_with_the_same_distribution(head, tie, tokenizer, tmp_path):
    model = llama_model(head, tie)
    path = model.export_gguf(tmp_path / "model-f32.gguf", tokenizer=tokenizer, dtype="f32")
    reader = GGUFReader(path)
    names = {t.name for t in reader.tensors}
    assert ("output.weight" in names) != tie and "token_embd.weight" in names and "blk.1.attn_q.weight" in names
    assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == "llama"
    assert bytes(reader.fields["tokenizer.ggml.model"].parts[-1]).decode() == "gpt2"
    read = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name).eval()
    assert type(read) is LlamaForCausalLM and read.config.tie_word_embeddings == tie
    x = tokenizer(TEXT, return_tensors="pt").input_ids[:, :8]
    with torch.no_grad():
        want = torch.log_softmax(model(input_ids=x).logits.float(), -1)
        torch.testing.assert_close(torch.log_softmax(read(input_ids=x).logits, -1), want, rtol=0, atol=1e-5)
    for beams in (1, 3):
        kw = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, num_beams=beams, pad_token_id=1)
        assert torch.equal(read.generate(x, **kw), model.generate(x, **kw)), beams
    read_tokenizer = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    assert read_tokenizer(TEXT).input_ids == tokenizer(TEXT).input_ids


def test_gguf_f16_is_the_model_rounded_to_float16(tokenizer, tmp_path):
    model = llama_model(MARGIN)
    base = model.to_base()
    path = model.export_gguf(tmp_path / "model-f16.gguf", tokenizer=tokenizer, dtype="f16")
    kinds = {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}
    assert kinds["blk.0.attn_q.weight"] == "F16" and kinds["output.weight"] == "F16"
    assert kinds["blk.0.attn_norm.weight"] == "F32"  # 1-D tensors stay float32, as llama.cpp writes them
    read = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name).eval()
    with torch.no_grad():  # the exported model with its 2-D weights rounded to float16
        for p in base.parameters():
            if p.dim() > 1:
                p.copy_(p.half().float())
    x = tokenizer(TEXT, return_tensors="pt").input_ids[:, :8]
    with torch.no_grad():
        want = torch.log_softmax(base(input_ids=x).logits, -1)
        torch.testing.assert_close(torch.log_softmax(read(input_ids=x).logits, -1), want, rtol=0, atol=1e-5)


def test_gguf_without_a_tokenizer_and_refusals(tmp_path):
    model = llama_model({"family": "softmax", "bias": False})
    path = model.export_gguf(tmp_path / "ids.gguf", dtype="f32")  # token ids in, token ids out
    fields = GGUFReader(path).fields
    assert bytes(fields["tokenizer.ggml.model"].parts[-1]).decode() == "none"
    backbone = model.config.backbone  # its special token ids go into the file, for llama.cpp to stop and pad with
    written = {name: int(fields[f"tokenizer.ggml.{key}_token_id"].parts[-1][0])
               for name, key in (("bos", "bos"), ("eos", "eos"), ("pad", "padding"))}  # fmt: skip
    assert written == {"bos": backbone.bos_token_id, "eos": backbone.eos_token_id, "pad": backbone.pad_token_id}
    read = AutoConfig.from_pretrained(tmp_path, gguf_file=path.name)
    assert (read.bos_token_id, read.eos_token_id, read.pad_token_id) == tuple(written.values())
    with pytest.raises(ValueError, match="allowed: f16, f32"):
        model.export_gguf(tmp_path / "q.gguf", dtype="q8_0")
    torch.manual_seed(0)
    gpt2 = HeadsForCausalLM.from_base(GPT2LMHeadModel(tiny_gpt2_config()).eval(), head={"family": "softmax"})
    with pytest.raises(ValueError, match="writes the Llama architecture.*convert_hf_to_gguf"):
        gpt2.export_gguf(tmp_path / "gpt2.gguf")
    scaled = llama_model({"family": "softmax", "bias": False})
    scaled.config.backbone.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="RoPE scaling 'linear'"):
        scaled.export_gguf(tmp_path / "rope.gguf")


def test_llama_cpp_runs_the_file(tokenizer, tmp_path):
    """llama.cpp itself (llama-cpp-python, where it is installed; not a dependency: it compiles llama.cpp) loads the
    file, tokenizes as the tokenizer does, and gives the exported model's log-probabilities (f32 file, f32 KV cache:
    1e-4) and greedy tokens."""
    llama_cpp = pytest.importorskip("llama_cpp")
    model = llama_model(MARGIN)
    path = model.export_gguf(tmp_path / "model-f32.gguf", tokenizer=tokenizer, dtype="f32")
    ids = tokenizer(TEXT).input_ids[:10]
    with torch.no_grad():
        want = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)  # (10, V)
    greedy = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False, pad_token_id=1)[0, 10:].tolist()
    f32 = 0  # GGML_TYPE_F32: a float32 KV cache (llama.cpp's default float16 cache rounds the attention)
    llm = llama_cpp.Llama(model_path=str(path), logits_all=True, n_ctx=64, n_threads=1, verbose=False, type_k=f32,
                          type_v=f32, flash_attn=False)  # fmt: skip
    assert llm.tokenize(TEXT.encode(), add_bos=False, special=False) == tokenizer(TEXT).input_ids
    llm.eval(ids)
    got = torch.log_softmax(torch.tensor(llm.scores[: len(ids)], dtype=torch.float64), -1)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    tokens = []
    for token in llm.generate(ids, top_k=1, temp=0.0, reset=True):
        tokens.append(token)
        if len(tokens) == len(greedy):
            break
    assert tokens == greedy


def test_gguf_of_a_head_dim_other_than_hidden_over_heads_writes_the_key_and_value_lengths(tmp_path):
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, head_dim=24, vocab_size=VOCAB, max_position_embeddings=64,
                         bos_token_id=2, eos_token_id=3, pad_token_id=1)  # fmt: skip
    model = HeadsForCausalLM.from_base(LlamaForCausalLM(config).eval(), head={"family": "softmax"}, calibrate=False)
    path = model.export_gguf(tmp_path / "wide.gguf", dtype="f32")  # read back and compared
    fields = GGUFReader(path).fields
    assert int(fields["llama.attention.key_length"].parts[-1][0]) == 24
    assert int(fields["llama.attention.value_length"].parts[-1][0]) == 24
    assert int(fields["llama.rope.dimension_count"].parts[-1][0]) == 24


def test_gguf_of_a_llama_whose_config_leaves_head_dim_unset_takes_hidden_over_heads(tmp_path):
    """A `LlamaForCausalLM` whose config has head_dim=None (transformers' attention then takes hidden_size // heads)
    is written with that head size: no key or value length of its own."""
    from hf_heads.modeling.gguf_export import export_gguf

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64)  # fmt: skip
    lm = LlamaForCausalLM(config).eval()
    lm.config.head_dim = None
    path = export_gguf(lm, tmp_path / "unset.gguf", dtype="f32")  # read back and compared
    fields = GGUFReader(path).fields
    assert int(fields["llama.rope.dimension_count"].parts[-1][0]) == 8
    assert "llama.attention.key_length" not in fields and "llama.attention.value_length" not in fields


def test_gguf_refuses_a_projection_bias_llama_cpp_has_no_place_for(tmp_path):
    for option in ("attention_bias", "mlp_bias"):
        torch.manual_seed(0)
        config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                             vocab_size=VOCAB, max_position_embeddings=64, **{option: True})  # fmt: skip
        model = HeadsForCausalLM.from_base(LlamaForCausalLM(config).eval(), head={"family": "softmax"})
        with pytest.raises(ValueError) as refused:
            model.export_gguf(tmp_path / f"{option}.gguf")
        assert str(refused.value) == (
            f"{option}=True is not written by export_gguf (llama.cpp's Llama graph has no such bias)"
        )
        assert not (tmp_path / f"{option}.gguf").exists()


def test_gguf_refuses_a_tokenizer_that_is_neither_byte_level_bpe_nor_sentencepiece(tmp_path):
    from hf_heads.data import build_word_tokenizer

    model = llama_model({"family": "softmax", "bias": False})
    words = build_word_tokenizer([TEXT])
    with pytest.raises(ValueError) as refused:
        model.export_gguf(tmp_path / "words.gguf", tokenizer=words)
    assert str(refused.value) == (
        f"{type(words).__name__} is neither a byte-level BPE nor a SentencePiece tokenizer: export_gguf writes those "
        "two (pass tokenizer=None for a file without a vocabulary)"
    )


def test_gguf_refuses_a_tokenizer_larger_than_the_models_vocabulary(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         vocab_size=200, max_position_embeddings=64)  # fmt: skip
    model = HeadsForCausalLM.from_base(LlamaForCausalLM(config).eval(), head={"family": "softmax"})
    with pytest.raises(ValueError) as refused:
        model.export_gguf(tmp_path / "small.gguf", tokenizer=tokenizer)
    assert str(refused.value) == f"the tokenizer has {len(tokenizer)} tokens, the model 200"


def test_gguf_that_reads_back_otherwise_than_the_model_is_refused(tmp_path):
    """Llama's rotary table is recomputed from the config when read, not written: a model whose table was changed in
    memory writes a file that does not hold it."""
    import re

    model = llama_model({"family": "softmax", "bias": False})
    with torch.no_grad():
        model.backbone.rotary_emb.inv_freq.mul_(3.0)
    path = tmp_path / "rope.gguf"
    with pytest.raises(ValueError) as refused:
        model.export_gguf(path, dtype="f32")
    pattern = (
        re.escape(
            f"transformers reads {path} back into a model whose log-probabilities differ from the exported "
            "model's by up to "
        )
        + r"[0-9.e-]+"
        + re.escape(" nats (tolerance 1e-05 for f32): the file does not hold this model")
        + "$"
    )
    assert re.match(pattern, str(refused.value)), str(refused.value)
