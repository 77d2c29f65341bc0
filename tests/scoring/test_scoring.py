"""hf_heads.scoring: sentence / token log-probabilities of every head family on causal LMs and seq2seq
models equal the log_softmax of the model's own logits at the target ids (alone or batched, chunked), the sampled
family's unnormalised corrected scores (sampling paper, table 4), bad input, n-best rescoring and weight tuning, and
the CLI (`python -m hf_heads.scoring`, `run_scripts/score.py`)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import family_heads, tiny_enc_dec_config, tiny_gpt2_config, tiny_llama_config
from tokenizers import normalizers
from transformers import GPT2LMHeadModel

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM
from hf_heads.data.tokenization import build_word_tokenizer
from hf_heads.heads import FAMILIES as HEAD_FAMILIES
from hf_heads.scoring import (
    corpus_bleu,
    nbest_texts,
    negative_wer,
    rescore_nbest,
    sentence_log_probs,
    token_log_probs,
    tune_weights,
)
from hf_heads.scoring.__main__ import main

V_LM, V_S2S = 61, 50
BOS, EOS = 2, 3
FAMILIES = family_heads("causal-lm", discrete=True)
SEQ2SEQ_HEADS = family_heads("seq2seq")  # with the continuous family's
ROOT = Path(__file__).resolve().parents[2]


def _tokenizer(vocab_size: int):
    """A word-level tokenizer of exactly `vocab_size` ids: <unk> <pad> <s> </s> w04 ... w{V-1}, word w{i:02d} has id i
    (equal counts: the builder sorts the words alphabetically)."""
    return build_word_tokenizer([" ".join(f"w{i:02d}" for i in range(4, vocab_size))])


@pytest.fixture(scope="module")
def tok_lm():
    return _tokenizer(V_LM)


@pytest.fixture(scope="module")
def tok_s2s():
    return _tokenizer(V_S2S)


def _words(ids) -> str:
    return " ".join(f"w{i:02d}" for i in ids)


TEXTS = [_words([5, 9, 17]), _words([40]), _words([7, 7, 30, 12, 51, 6, 8]), _words([22, 23])]
SOURCES = [_words([4, 8]), _words([11, 12, 13, 14, 15]), _words([20]), _words([33, 34, 35])]


def _causal(head: dict, backbone: str = "llama") -> HeadsForCausalLM:
    torch.manual_seed(0)
    config = tiny_llama_config(V_LM) if backbone == "llama" else tiny_gpt2_config(V_LM)
    return HeadsForCausalLM(HeadsConfig(backbone=config, head=head)).eval()


def _seq2seq(head: dict, kind: str = "bart") -> HeadsForSeq2SeqLM:
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config(kind, V_S2S), head=head))
    if model.head.uses_embedding_table:
        dim = model.head.options.embedding_dim
        model.head.set_embedding_table(torch.randn(V_S2S, dim, generator=torch.Generator().manual_seed(1)))
    return model.eval()


# ------------------------------------------------------------------------------------------- naive references


@torch.no_grad()
def _reference_causal(model, tok, text: str, *, bos: bool = True, eos: bool = True) -> torch.Tensor:
    """Per-token log p from the full (1, T, V) logits of one unpadded text (log_softmax unless the head's own
    logits are unnormalised: sampled heads with normalize=False)."""
    ids = [BOS] * bos + tok(text, add_special_tokens=False)["input_ids"] + [EOS] * eos
    logits = model(input_ids=torch.tensor([ids])).logits[0].double()  # (T, V)
    normalized = getattr(model.head.options, "normalize", True)
    log_p = logits.log_softmax(-1) if normalized else logits
    return torch.stack([log_p[t, ids[t + 1]] for t in range(len(ids) - 1)])


@torch.no_grad()
def _reference_seq2seq(model, tok, text: str, source: str) -> torch.Tensor:
    target = tok(text, add_special_tokens=False)["input_ids"] + [EOS]
    start = model.config.backbone_token_id("decoder_start_token_id")
    logits = model(
        input_ids=torch.tensor([tok(source)["input_ids"]]), decoder_input_ids=torch.tensor([[start] + target[:-1]])
    ).logits[0]  # (T, V)
    log_p = logits.double().log_softmax(-1)
    return torch.stack([log_p[t, y] for t, y in enumerate(target)])


def _close(actual, expected) -> None:
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------------- equal to the model


@pytest.mark.parametrize(
    "family, backbone",
    [("softmax", "llama"), ("softmax", "gpt2"), ("margin", "llama"), ("sampled", "gpt2"), ("sparse", "llama")],
)
def test_causal_scores_equal_log_softmax_of_model_logits(tok_lm, family, backbone):
    model = _causal(FAMILIES[family], backbone)
    per_token = token_log_probs(model, tok_lm, TEXTS, batch_size=3, chunk_size=5)  # batches padded, chunks cross rows
    sums = sentence_log_probs(model, tok_lm, TEXTS, batch_size=3, chunk_size=5)
    assert sums.dtype == torch.float64 and sums.shape == (len(TEXTS),)
    for text, row, total in zip(TEXTS, per_token, sums, strict=True):
        expected = _reference_causal(model, tok_lm, text)
        assert row.dtype == torch.float64 and row.shape == expected.shape  # BOS context, every word and EOS scored
        _close(row, expected)
        _close(total, expected.sum())


@pytest.mark.parametrize("family", list(SEQ2SEQ_HEADS))
def test_seq2seq_scores_target_given_source(tok_s2s, family):
    model = _seq2seq(SEQ2SEQ_HEADS[family])
    rows = token_log_probs(model, tok_s2s, TEXTS[:3], sources=SOURCES[:3], batch_size=2, chunk_size=4)
    for text, source, row in zip(TEXTS, SOURCES, rows, strict=False):
        _close(row, _reference_seq2seq(model, tok_s2s, text, source))


def test_seq2seq_t5_backbone_without_position_limit(tok_s2s):
    model = _seq2seq(FAMILIES["softmax"], "t5")
    long_text = _words([4 + i % 40 for i in range(80)])  # T5's positions are relative: no context limit to refuse
    scores = sentence_log_probs(model, tok_s2s, [TEXTS[0], long_text], sources=SOURCES[:2])
    _close(scores[1], _reference_seq2seq(model, tok_s2s, long_text, SOURCES[1]).sum())


def test_seq2seq_backbone_without_a_pad_token_id_is_scored(tok_s2s):
    """A backbone config without `pad_token_id` (padded positions are masked, never scored): its batched targets of
    unequal lengths score as each one alone."""
    config = tiny_enc_dec_config("bart", V_S2S)
    config.pad_token_id = None
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=config, head=FAMILIES["softmax"])).eval()
    rows = token_log_probs(model, tok_s2s, TEXTS, sources=SOURCES, batch_size=len(TEXTS))
    for text, source, row in zip(TEXTS, SOURCES, rows, strict=True):
        _close(row, _reference_seq2seq(model, tok_s2s, text, source))


def test_chunk_size_one_is_accepted_and_scores_as_the_default(tok_lm):
    """chunk_size=1 (one token per chunk, the least memory) is a valid chunk size: it gives the scores of the
    default chunking; 0 is refused."""
    model = _causal(FAMILIES["softmax"])
    one = token_log_probs(model, tok_lm, TEXTS, chunk_size=1)
    for row, default in zip(one, token_log_probs(model, tok_lm, TEXTS), strict=True):
        _close(row, default)
    with pytest.raises(ValueError, match="chunk_size=0 must be an integer >= 1"):
        token_log_probs(model, tok_lm, TEXTS, chunk_size=0)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "bart", "bert2bert"])
def test_alone_equals_batched_whatever_the_padding_side(kind):
    seq2seq = kind in ("bart", "bert2bert")
    tok = _tokenizer(V_S2S if seq2seq else V_LM)
    tok.padding_side = "left"  # scoring pads on the right itself, with a mask: the tokenizer's side is irrelevant
    model = _seq2seq(FAMILIES["softmax"], kind) if seq2seq else _causal(FAMILIES["softmax"], kind)
    sources = SOURCES if seq2seq else None
    batched = sentence_log_probs(model, tok, TEXTS, sources=sources, batch_size=len(TEXTS))
    for i, text in enumerate(TEXTS):
        alone = sentence_log_probs(model, tok, [text], sources=None if sources is None else [sources[i]])
        _close(alone[0], batched[i])


def test_sparse_out_of_top_k_is_minus_inf_and_in_top_k_is_finite(tok_lm):
    model = _causal(FAMILIES["sparse"])
    ids = [BOS]
    with torch.no_grad():  # greedy over the non-special words: each is within the top 5 (only 4 special ids)
        for _ in range(5):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]  # (V,)
            logits[:4] = float("-inf")
            ids.append(int(logits.argmax()))
    greedy = _words(ids[1:])
    scores = sentence_log_probs(model, tok_lm, [greedy, TEXTS[2]], add_eos=False)
    assert math.isfinite(scores[0]) and scores[0] < 0
    _close(scores[0], _reference_causal(model, tok_lm, greedy, eos=False).sum())
    row = token_log_probs(model, tok_lm, [TEXTS[2]], add_eos=False)[0]
    top = torch.topk(model(input_ids=torch.tensor([[BOS, *tok_lm(TEXTS[2])["input_ids"][:-1]]])).logits[0], 5).indices
    outside = [y not in top[t] for t, y in enumerate(tok_lm(TEXTS[2], add_special_tokens=False)["input_ids"])]
    assert torch.equal(torch.isneginf(row), torch.tensor(outside))  # exactly the tokens outside the top k
    assert scores[1] == float("-inf") if any(outside) else math.isfinite(scores[1])


def test_scoring_never_builds_batch_logits_and_restores_train_mode(tok_lm, monkeypatch):
    model = _causal(FAMILIES["margin"]).train()
    seen, logits = [], model.head.logits

    def spy(hidden):
        seen.append(tuple(hidden.shape))
        return logits(hidden)

    monkeypatch.setattr(model.head, "logits", spy)  # an hf_heads instance attribute, no transformers class
    outputs = []  # scoring runs the model's own forward, which must build no (B, T, V) logits and no loss
    hooks = model.register_forward_hook(lambda module, args, out: outputs.append(out))
    sentence_log_probs(model, tok_lm, TEXTS, chunk_size=4)
    hooks.remove()
    assert outputs and all(out.logits is None and out.loss is None for out in outputs)
    rows = sum(len(tok_lm(t, add_special_tokens=False)["input_ids"]) + 1 for t in TEXTS)  # words + EOS per text
    assert all(len(s) == 2 and s[0] <= 4 for s in seen) and sum(s[0] for s in seen) == rows
    assert model.training  # eval mode only while scoring (no dropout), then the caller's mode back


def test_add_bos_and_add_eos_choose_the_scored_tokens(tok_lm):
    model = _causal(FAMILIES["softmax"])
    n = len(tok_lm(TEXTS[0], add_special_tokens=False)["input_ids"])
    for bos, eos, count in ((True, True, n + 1), (False, True, n), (True, False, n), (False, False, n - 1)):
        row = token_log_probs(model, tok_lm, [TEXTS[0]], add_bos=bos, add_eos=eos)[0]
        assert len(row) == count
        _close(row, _reference_causal(model, tok_lm, TEXTS[0], bos=bos, eos=eos))


def test_scoring_shows_a_progress_bar_only_when_asked(tok_lm, capsys):
    """A library call writes nothing to stderr by default; `progress=True` (the CLI's) shows a "scoring" bar."""
    model = _causal(FAMILIES["softmax"])
    sentence_log_probs(model, tok_lm, TEXTS)
    assert "scoring" not in capsys.readouterr().err
    sentence_log_probs(model, tok_lm, TEXTS, progress=True)
    assert "scoring" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- normalize=False


def test_sampled_normalize_false_is_the_corrected_score_without_renormalisation(tok_lm):
    model = _causal(FAMILIES["sampled"])
    normalized = sentence_log_probs(model, tok_lm, TEXTS)
    raw = sentence_log_probs(model, tok_lm, TEXTS, normalize=False)
    model.set_head_options(normalize=False)  # the head's own logits are now the raw corrected scores (eq. 20: s)
    for text, value in zip(TEXTS, raw, strict=True):
        _close(value, _reference_causal(model, tok_lm, text).sum())
    _close(sentence_log_probs(model, tok_lm, TEXTS), normalized)  # normalize=True renormalises whatever the option
    assert not torch.allclose(raw, normalized)


@pytest.mark.parametrize(
    "family", [name for name, entry in HEAD_FAMILIES.items() if not entry.head.has_unnormalized_scores]
)
def test_normalize_false_refused_where_scores_are_not_self_normalised(tok_lm, tok_s2s, family):
    if family in FAMILIES:
        model, tok, sources = _causal(FAMILIES[family]), tok_lm, None
    else:
        model, tok, sources = _seq2seq(SEQ2SEQ_HEADS[family]), tok_s2s, SOURCES[:1]
    with pytest.raises(ValueError) as refused:
        sentence_log_probs(model, tok, TEXTS[:1], sources=sources, normalize=False)
    assert str(refused.value) == (
        f"normalize=False: the {family} head has no unnormalised scores; it is the sampling paper's rescoring with "
        "the corrected scores without renormalisation (table 4), allowed for sampled heads only (softmax, margin and "
        "continuous logits are not self-normalised, a sparse head's raw logit is no probability): use normalize=True"
    )


# ------------------------------------------------------------------------------------------- bad input


def test_bad_texts_are_refused_naming_the_index(tok_lm):
    model = _causal(FAMILIES["softmax"])
    with pytest.raises(ValueError, match=r"texts\[2\] is empty"):
        sentence_log_probs(model, tok_lm, [TEXTS[0], TEXTS[1], "  "])
    long_text = _words([4 + i % 50 for i in range(70)])
    with pytest.raises(ValueError, match=r"texts\[1\] is too long .*72 tokens with BOS/EOS, fed as 71.* 64 positions"):
        sentence_log_probs(model, tok_lm, [TEXTS[0], long_text])
    _close(  # 62 words + BOS + EOS = 64 tokens fit (63 fed)
        sentence_log_probs(model, tok_lm, [long_text.rsplit(" ", 8)[0]]),
        _reference_causal(model, tok_lm, long_text.rsplit(" ", 8)[0]).sum()[None],
    )
    with pytest.raises(ValueError, match="texts must be a list of strings, not str"):
        sentence_log_probs(model, tok_lm, TEXTS[0])
    with pytest.raises(ValueError, match=r"texts\[1\] is a int"):
        sentence_log_probs(model, tok_lm, [TEXTS[0], 3])
    with pytest.raises(ValueError, match="batch_size=0"):
        sentence_log_probs(model, tok_lm, TEXTS, batch_size=0)
    with pytest.raises(ValueError, match=r"texts\[0\] is a single token without BOS or EOS"):
        sentence_log_probs(model, tok_lm, [TEXTS[1]], add_bos=False, add_eos=False)
    with pytest.raises(ValueError, match="^sources= is for seq2seq models; a causal LM scores texts on their own$"):
        sentence_log_probs(model, tok_lm, TEXTS, sources=SOURCES)
    assert sentence_log_probs(model, tok_lm, []).shape == (0,)


def test_a_text_that_tokenizes_to_nothing_is_refused_quoting_its_first_40_characters():
    """A BERT normaliser deletes format characters: a text made only of them is not blank but has no token."""
    tok = _tokenizer(V_LM)
    tok.backend_tokenizer.normalizer = normalizers.BertNormalizer()
    invisible = "\u200b\u00ad\u200c\u200d\u2060" * 10
    with pytest.raises(ValueError) as error:
        sentence_log_probs(_causal(FAMILIES["softmax"]), tok, [TEXTS[0], invisible])
    assert str(error.value) == f"texts[1] ({invisible[:40]!r}) tokenizes to no tokens"


def test_a_text_that_fills_the_context_exactly_is_scored(tok_lm):
    """BOS + 63 words + EOS: 65 tokens, of which 64 are fed (the last one is predicted, never fed), exactly GPT-2's
    n_positions: the text is scored; one word more is refused."""
    model = _causal(FAMILIES["softmax"], "gpt2")
    words = [4 + i % 50 for i in range(63)]
    ids = [BOS, *words, EOS]
    with torch.no_grad():
        log_p = model(input_ids=torch.tensor([ids[:-1]])).logits[0].double().log_softmax(-1)  # (64, V)
    _close(token_log_probs(model, tok_lm, [_words(words)])[0], log_p[torch.arange(64), torch.tensor(ids[1:])])
    with pytest.raises(ValueError, match=r"texts\[0\] is too long .*66 tokens with BOS/EOS, fed as 65"):
        sentence_log_probs(model, tok_lm, [_words([*words, 4])])


def test_a_composite_backbones_context_is_the_one_of_its_text_model(tok_lm):
    """A multimodal backbone (Gemma 3: a text model and a vision tower) states its context in its text config, not in
    its own: a text longer than that context is refused, one that fits is scored."""
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig

    text = Gemma3TextConfig(vocab_size=V_LM, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=16,
                            bos_token_id=BOS, eos_token_id=EOS, pad_token_id=1)  # fmt: skip
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)  # fmt: skip
    backbone = Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
                            image_token_index=60, boi_token_index=58, eoi_token_index=59)  # fmt: skip
    assert getattr(backbone, "max_position_embeddings", None) is None  # only the text config has one
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=backbone, head=FAMILIES["softmax"])).eval()
    words = [4 + i for i in range(14)]  # BOS + 14 words + EOS: 16 tokens, 15 fed
    _close(
        sentence_log_probs(model, tok_lm, [_words(words)]), _reference_causal(model, tok_lm, _words(words)).sum()[None]
    )
    with pytest.raises(ValueError, match=r"texts\[0\] is too long .*18 tokens with BOS/EOS, fed as 17.* 16 positions"):
        sentence_log_probs(model, tok_lm, [_words([*words, 20, 21])])


def test_vocabulary_and_model_mismatches_are_refused(tok_lm, tok_s2s):
    with pytest.raises(ValueError, match="the tokenizer has 61 tokens but the model scores only 50 classes"):
        sentence_log_probs(_seq2seq(FAMILIES["softmax"]), tok_lm, TEXTS[:1], sources=SOURCES[:1])
    with pytest.raises(ValueError, match="model is a GPT2LMHeadModel: scoring needs an hf_heads"):
        sentence_log_probs(GPT2LMHeadModel(tiny_gpt2_config(V_LM)), tok_lm, TEXTS[:1])
    max_norm = _causal({"family": "margin", "margin": "cos", "m": 0.1, "context_norm": "max-norm"})
    with pytest.raises(ValueError, match="max-norm' has no running max"):
        sentence_log_probs(max_norm, tok_lm, TEXTS[:1])


def test_seq2seq_sources_are_required_and_aligned(tok_s2s):
    model = _seq2seq(FAMILIES["softmax"])
    with pytest.raises(ValueError, match="sources=None: a seq2seq model scores a target given its source"):
        sentence_log_probs(model, tok_s2s, TEXTS)
    with pytest.raises(ValueError, match="sources has 3 items but texts has 4"):
        sentence_log_probs(model, tok_s2s, TEXTS, sources=SOURCES[:3])
    with pytest.raises(ValueError, match=r"sources\[1\] is empty"):
        sentence_log_probs(model, tok_s2s, TEXTS[:2], sources=[SOURCES[0], ""])
    with pytest.raises(ValueError, match="^sources must be a list of strings, not str$"):
        sentence_log_probs(model, tok_s2s, TEXTS[:1], sources=SOURCES[0])
    with pytest.raises(ValueError, match=r"^sources\[1\] is a int, not a string$"):
        sentence_log_probs(model, tok_s2s, TEXTS[:2], sources=[SOURCES[0], 3])
    with pytest.raises(ValueError, match="add_bos=False: a seq2seq decoder always starts"):
        sentence_log_probs(model, tok_s2s, TEXTS, sources=SOURCES, add_bos=False)
    long_source = _words([4 + i % 40 for i in range(64)])  # + </s>: 65 source tokens for 64 positions
    for kind in ("bart", "bert2bert"):  # BERT2BERT: the encoder's own config holds its context
        with pytest.raises(ValueError, match=r"sources\[0\] is too long .*65 tokens, more than its context of 64"):
            sentence_log_probs(_seq2seq(FAMILIES["softmax"], kind), tok_s2s, TEXTS[:1], sources=[long_source])


# ------------------------------------------------------------------------------------------- rescoring

NBEST = [
    {
        "id": "a",
        "reference": "the cat sat",
        "hypotheses": [{"text": "the cat sad", "score": -1.0}, {"text": "the cat sat", "score": -1.2, "x": 1}],
    },
    {
        "id": "b",
        "reference": "a dog ran home",
        "hypotheses": [{"text": "a dog ran", "score": -2.0}, {"text": "a dog ran home", "score": -2.5}],
    },
]
LM = [[-9.0, -5.0], [-6.0, -7.0]]  # prefers the right words for "a", the shorter text for "b"


def test_rescore_nbest_combines_and_reranks():
    out = rescore_nbest(NBEST, LM, lm_weight=0.5, length_penalty=0.25)
    first = out[0]["hypotheses"]
    assert [h["text"] for h in first] == ["the cat sat", "the cat sad"]
    assert first[0] == {"text": "the cat sat", "score": -1.2, "x": 1, "lm_score": -5.0, "combined": -1.2 - 2.5 + 0.75}
    assert out[0]["reference"] == "the cat sat" and out[0]["id"] == "a"
    assert [h["text"] for h in out[1]["hypotheses"]] == ["a dog ran", "a dog ran home"]  # -4.25 vs -5.0
    flat = rescore_nbest(NBEST, torch.tensor([s for row in LM for s in row]), lm_weight=0.5, length_penalty=0.25)
    assert flat == out
    assert NBEST[0]["hypotheses"][0] == {"text": "the cat sad", "score": -1.0}  # input untouched
    zero = rescore_nbest(NBEST, [[float("-inf"), -5.0], [-6.0, -7.0]], lm_weight=0.0)  # 0 · -inf ignored, no nan
    assert [h["combined"] for h in zero[0]["hypotheses"]] == [-1.0, -1.2]
    sparse = rescore_nbest(NBEST, [[float("-inf"), -5.0], [-6.0, -7.0]], lm_weight=1.0)  # probability 0 goes last
    assert sparse[0]["hypotheses"][-1]["combined"] == float("-inf")


def test_rescore_nbest_bad_records_name_the_index_and_field():
    bad = [NBEST[0], {"id": "b", "hypotheses": [{"text": "x", "score": 1.0}, {"text": "y"}]}]
    with pytest.raises(ValueError, match=r"nbest\[1\]: missing field 'score' in hypotheses\[1\]"):
        rescore_nbest(bad, [[0.0, 0.0], [0.0, 0.0]], lm_weight=1.0)
    with pytest.raises(ValueError, match=r"nbest\[0\]: missing field 'hypotheses'"):
        rescore_nbest([{"id": 1}], [[0.0]], lm_weight=1.0)
    with pytest.raises(ValueError, match=r"lm_scores\[1\] is \[0.0\]: 2 numbers"):
        rescore_nbest(NBEST, [[0.0, 0.0], [0.0]], lm_weight=1.0)
    with pytest.raises(ValueError, match=r"^lm_scores has 1 rows but nbest has 2 records$"):
        rescore_nbest(NBEST, [[0.0, 0.0]], lm_weight=1.0)
    with pytest.raises(ValueError, match="lm_scores has 3 scores but nbest has 4 hypotheses"):
        rescore_nbest(NBEST, [0.0, 0.0, 0.0], lm_weight=1.0)
    with pytest.raises(ValueError, match="lm_weight=nan must be a finite number"):
        rescore_nbest(NBEST, LM, lm_weight=float("nan"))
    with pytest.raises(ValueError, match=r"nbest\[1\]: missing field 'reference'"):
        tune_weights([NBEST[0], {"id": "c", "hypotheses": [{"text": "x", "score": 0}]}], [[0, 0], [0]], metric=len,
                     lm_weights=[0.0])  # fmt: skip


HYP = {"text": "a b", "score": -1.0}


@pytest.mark.parametrize(
    "record, message",
    [
        ("a b", "nbest[0]: a record is an object with id and hypotheses, not str"),
        ({"hypotheses": [HYP]}, "nbest[0]: missing field 'id' (a record needs id, hypotheses)"),
        ({"id": 1, "hypotheses": []}, "nbest[0]: field 'hypotheses' is []: a non-empty list of {text, score} objects"),
        (
            {"id": 1, "hypotheses": "a b"},
            "nbest[0]: field 'hypotheses' is 'a b': a non-empty list of {text, score} objects",
        ),
        ({"id": 1, "hypotheses": [HYP, "a c"]}, "nbest[0]: hypotheses[1] is 'a c', not an object with text and score"),
        (
            {"id": 1, "hypotheses": [{"score": 0.0}]},
            "nbest[0]: missing field 'text' in hypotheses[0] (needs text, score)",
        ),
        ({"id": 1, "hypotheses": [HYP, {"text": 3, "score": 0.0}]}, "nbest[0]: hypotheses[1].text is 3, not a string"),
        (
            {"id": 1, "hypotheses": [{"text": "a", "score": True}]},
            "nbest[0]: hypotheses[0].score is True, not a number",
        ),
        ({"id": 1, "hypotheses": [{"text": "a", "score": "1"}]}, "nbest[0]: hypotheses[0].score is '1', not a number"),
        (
            {"id": 1, "hypotheses": [{"text": "a", "score": math.nan}]},
            "nbest[0]: hypotheses[0].score is nan, not a number",
        ),
    ],
)
def test_rescore_nbest_refuses_a_malformed_record_with_its_reason(record, message):
    """Each malformed part of an n-best record is refused with one message naming the record, the field and why."""
    with pytest.raises(ValueError) as refused:
        rescore_nbest([record], [0.0], lm_weight=1.0)
    assert str(refused.value) == message


def test_tune_weights_refuses_a_dev_record_without_a_string_reference():
    with pytest.raises(ValueError) as refused:
        tune_weights([{"id": 1, "reference": 5, "hypotheses": [HYP]}], [0.0], metric=negative_wer, lm_weights=[0.0])
    assert str(refused.value) == "nbest[0]: field 'reference' is 5, not a string"
    with pytest.raises(ValueError) as refused:
        rescore_nbest({"id": 1, "hypotheses": [HYP]}, [0.0], lm_weight=1.0)
    assert str(refused.value) == "nbest must be a list of records, not dict"


@pytest.mark.parametrize(
    "nbest, kind",
    [("a b", "str"), (None, "NoneType"), (iter(NBEST), "list_iterator")],
    ids=["str", "None", "iterator"],
)
def test_rescore_nbest_refuses_an_nbest_that_is_not_a_list_of_records(nbest, kind):
    """A text, None or a one-pass iterator in place of the list of records is refused as such, not read record by
    record."""
    with pytest.raises(ValueError) as refused:
        rescore_nbest(nbest, [0.0], lm_weight=1.0)
    assert str(refused.value) == f"nbest must be a list of records, not {kind}"


def test_tune_weights_grid_search_with_bleu_and_wer():
    weights, penalties = [0.0, 0.5, 2.0], [0.0, 1.5]
    result = tune_weights(NBEST, LM, metric=negative_wer, lm_weights=weights, length_penalties=penalties)
    assert [(r["lm_weight"], r["length_penalty"]) for r in result.table] == [
        (w, p) for w in weights for p in penalties
    ]
    assert (result.lm_weight, result.length_penalty, result.metric) == (0.5, 1.5, 0.0)  # both references recovered
    assert result.metric == max(r["metric"] for r in result.table)
    assert result.table[0]["metric"] == pytest.approx(-2 / 7)  # first-pass 1-best: 1 substitution + 1 deletion
    bleu = tune_weights(NBEST, LM, metric=corpus_bleu, lm_weights=weights, length_penalties=penalties)
    assert bleu.metric == pytest.approx(100.0) and bleu.table[0]["metric"] < 100


def test_lm_scores_of_sentence_log_probs_rescore_an_nbest(tok_lm):
    model = _causal(FAMILIES["softmax"])
    nbest = [{"id": 0, "hypotheses": [{"text": t, "score": 0.0} for t in TEXTS]}]
    out = rescore_nbest(nbest, sentence_log_probs(model, tok_lm, nbest_texts(nbest)), lm_weight=1.0)
    expected = sorted(TEXTS, key=lambda t: -float(_reference_causal(model, tok_lm, t).sum()))
    assert [h["text"] for h in out[0]["hypotheses"]] == expected


# ------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved causal LM (sparse head: some scores are -inf) and a saved seq2seq model, with their tokenizers."""
    root = tmp_path_factory.mktemp("scoring")
    lm, s2s = _causal(FAMILIES["sparse"]), _seq2seq(FAMILIES["softmax"])
    lm.save_pretrained(root / "lm"), _tokenizer(V_LM).save_pretrained(root / "lm")
    s2s.save_pretrained(root / "s2s"), _tokenizer(V_S2S).save_pretrained(root / "s2s")
    return root, lm, s2s


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_cli_score_writes_the_sentence_log_probs(saved, tmp_path, capsys):
    root, lm, s2s = saved
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    (tmp_path / "src.txt").write_text("\n".join(SOURCES) + "\n")
    out = tmp_path / "out" / "scores.jsonl"
    args = ["score", "--model", str(root / "lm"), "--input", str(tmp_path / "texts.txt"), "--output", str(out)]
    assert main([*args, "--batch_size", "2", "--per_token", "--no_eos"]) == 0
    rows, expected = _lines(out), token_log_probs(lm, _tokenizer(V_LM), TEXTS, add_eos=False)
    assert [r["line"] for r in rows] == [1, 2, 3, 4] and [r["text"] for r in rows] == TEXTS
    for row, exp in zip(rows, expected, strict=True):
        assert row["num_tokens"] == len(exp)
        assert row["token_log_probs"] == [v if math.isfinite(v) else None for v in exp.tolist()]  # -inf -> null
        assert row["log_prob"] == (float(exp.sum()) if math.isfinite(exp.sum()) else None)
    args = ["score", "--model", str(root / "s2s"), "--input", str(tmp_path / "texts.txt"), "--output", str(out)]
    assert main([*args, "--sources", str(tmp_path / "src.txt")]) == 0
    expected = sentence_log_probs(s2s, _tokenizer(V_S2S), TEXTS, sources=SOURCES)
    _close(torch.tensor([r["log_prob"] for r in _lines(out)], dtype=torch.float64), expected)
    assert main(args) == 2
    assert "is a seq2seq model: give --sources" in capsys.readouterr().err


def test_cli_help_lists_each_command_with_what_it_does(capsys):
    """`python -m hf_heads.scoring --help` lists the score and rescore commands, each with its one-line help."""
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    listing = " ".join(capsys.readouterr().out.split())
    assert "score Log-probability of each line of a text file." in listing, listing
    assert "rescore Rerank n-best lists with the model's log-probabilities." in listing, listing


def _listing(capsys) -> str:
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    "command, options",
    [
        (
            "score",
            [
                "--input INPUT Text file, one text per line.",
                "--sources SOURCES Seq2seq: source file, one source per line of --input.",
                "--per_token, --per-token Also write token log-probs.",
            ],
        ),
        (
            "rescore",
            [
                "--nbest NBEST n-best JSON Lines file.",
                "--lm_weight LM_WEIGHT, --lm-weight LM_WEIGHT Weight of the LM score.",
                "--length_penalty LENGTH_PENALTY, --length-penalty LENGTH_PENALTY Bonus per word of a hypothesis.",
            ],
        ),
    ],
)
def test_cli_help_of_each_command_explains_every_option(capsys, command, options):
    """`python -m hf_heads.scoring score|rescore --help` lists each option of the command with its help, the
    options both commands share included."""
    shared = [
        "--model MODEL Directory of a saved hf_heads model and its tokenizer.",
        "--output OUTPUT JSON Lines file to write.",
        "--no-normalize, --no_normalize Sampled heads: corrected scores without renormalisation (sampling paper, "
        "table 4).",
        "--batch_size BATCH_SIZE, --batch-size BATCH_SIZE Texts per forward pass.",
        "--no_bos, --no-bos Causal LM: no BOS.",
        "--no_eos, --no-eos Do not score an EOS.",
        "--device DEVICE torch device (default: cuda when available, else cpu).",
    ]
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    listing = _listing(capsys)
    assert exited.value.code == 0
    missing = [option for option in shared + options if option not in listing]
    assert not missing, listing


@pytest.mark.parametrize(
    "command, required",
    [("score", "--model, --output, --input"), ("rescore", "--model, --output, --nbest, --lm_weight/--lm-weight")],
)
def test_cli_command_without_its_required_options_exits_2_naming_them(capsys, command, required):
    with pytest.raises(SystemExit) as exited:
        main([command])
    assert exited.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith(f"error: the following arguments are required: {required}"), line


def test_cli_score_no_bos_scores_the_first_word_without_context(saved, tmp_path):
    """`--no_bos`: no BOS before a text, so its first word is context only and not scored (one token fewer)."""
    root, lm, _ = saved
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "scores.jsonl"
    args = ["score", "--model", str(root / "lm"), "--input", str(tmp_path / "texts.txt"), "--output", str(out)]
    for flags, add_bos in (([], True), (["--no_bos"], False)):
        assert main([*args, *flags, "--per_token"]) == 0
        expected = token_log_probs(lm, _tokenizer(V_LM), TEXTS, add_bos=add_bos)
        rows = _lines(out)
        assert [r["num_tokens"] for r in rows] == [len(t.split()) + add_bos for t in TEXTS]
        for row, exp in zip(rows, expected, strict=True):
            assert row["token_log_probs"] == [v if math.isfinite(v) else None for v in exp.tolist()]


def test_cli_score_bad_input_one_line_and_exit_2(saved, tmp_path, capsys):
    root = saved[0]
    (tmp_path / "texts.txt").write_text(f"{TEXTS[0]}\n\n{TEXTS[1]}\n")
    (tmp_path / "long.txt").write_text(f"{TEXTS[0]}\n{_words([4] * 70)}\n")
    out = str(tmp_path / "s.jsonl")
    for name, message in (("texts.txt", "texts.txt line 2 is empty"), ("long.txt", "long.txt line 2 is too long")):
        code = main(["score", "--model", str(root / "lm"), "--input", str(tmp_path / name), "--output", out])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and err[-1].startswith("error: ") and message in err[-1]
    assert main(["score", "--model", str(root / "lm"), "--input", str(tmp_path / "long.txt"), "--output", out,
                 "--no-normalize"]) == 2  # fmt: skip
    assert "normalize=False: the sparse head" in capsys.readouterr().err
    (tmp_path / "two.txt").write_text(f"{TEXTS[0]}\n{TEXTS[1]}\n")
    sources = tmp_path / "sources.txt"
    sources.write_text(f"{SOURCES[0]}\n{_words([4] * 70)}\n")
    code = main(["score", "--model", str(root / "s2s"), "--input", str(tmp_path / "two.txt"), "--output", out,
                 "--sources", str(sources)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"error: --sources {sources} line 2 is too long")


def test_cli_rescore_end_to_end_and_missing_field(saved, tmp_path, capsys):
    root, _, s2s = saved
    nbest = [
        {"id": i, "source": SOURCES[i], "hypotheses": [{"text": t, "score": -float(j)} for j, t in enumerate(TEXTS)]}
        for i in range(2)
    ]
    path = tmp_path / "nbest.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in nbest) + "\n\n")  # a trailing blank line is skipped
    out = tmp_path / "reranked.jsonl"
    args = ["rescore", "--model", str(root / "s2s"), "--nbest", str(path), "--output", str(out), "--lm_weight", "0.5"]
    assert main([*args, "--length_penalty", "0.1"]) == 0
    flat = sentence_log_probs(s2s, _tokenizer(V_S2S), TEXTS * 2, sources=[SOURCES[0]] * 4 + [SOURCES[1]] * 4)
    assert _lines(out) == rescore_nbest(nbest, flat, lm_weight=0.5, length_penalty=0.1)
    capsys.readouterr()  # the progress bars of that run
    lines = [json.dumps(nbest[0]), json.dumps({"id": 1, "source": "w05", "hypotheses": [{"score": 0.0}]})]
    path.write_text("\n".join(lines) + "\n")
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {path} line 2: missing field 'text' in hypotheses[0] (needs text, score)"]
    path.write_text(json.dumps({"id": 1, "hypotheses": [{"text": "w05", "score": 0.0}]}) + "\n")
    assert main(args) == 2
    assert f"{path} line 1: missing field 'source'" in capsys.readouterr().err


def test_run_scripts_score_in_a_subprocess(saved, tmp_path):
    """The one real subprocess: run_scripts/score.py is `python -m hf_heads.scoring`, causal LM rescoring."""
    root, lm, _ = saved
    nbest = [{"id": "x", "hypotheses": [{"text": t, "score": 0.0} for t in TEXTS[:2]]}]
    (tmp_path / "nbest.jsonl").write_text(json.dumps(nbest[0]) + "\n")
    out = tmp_path / "reranked.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, str(ROOT / "run_scripts" / "score.py"), "rescore", "--model", str(root / "lm")]
    cmd += ["--nbest", str(tmp_path / "nbest.jsonl"), "--output", str(out), "--lm_weight", "1", "--no_eos"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lm_scores = sentence_log_probs(lm, _tokenizer(V_LM), TEXTS[:2], add_eos=False)
    expected = rescore_nbest(nbest, lm_scores, lm_weight=1.0)
    for hyp in expected[0]["hypotheses"]:  # JSON writes -inf as null
        hyp.update({k: (v if math.isfinite(v) else None) for k, v in hyp.items() if k in ("lm_score", "combined")})
    assert _lines(out) == expected


def test_cli_rescore_names_the_line_and_hypothesis_of_a_text_it_cannot_score(saved, tmp_path, capsys):
    """A hypothesis that cannot be scored (empty) is named by its file line (blank lines counted) and its index."""
    root = saved[0]
    good = {"id": 0, "hypotheses": [{"text": t, "score": 0.0} for t in TEXTS[:2]]}
    bad = {"id": 1, "hypotheses": [{"text": TEXTS[0], "score": 0.0}, {"text": " ", "score": -1.0}]}
    path = tmp_path / "nbest.jsonl"
    path.write_text(f"{json.dumps(good)}\n\n{json.dumps(bad)}\n")  # the bad record is on line 3
    out = tmp_path / "reranked.jsonl"
    args = ["rescore", "--model", str(root / "lm"), "--nbest", str(path), "--output", str(out), "--lm_weight", "1"]
    assert main(args) == 2
    assert f"{path} line 3 hypotheses[1].text is empty" in capsys.readouterr().err


def test_rescoring_refuses_lm_scores_that_are_no_log_probabilities():
    with pytest.raises(ValueError) as refused:
        rescore_nbest(NBEST, "-9 -5 -6 -7", lm_weight=1.0)
    assert str(refused.value) == (
        "lm_scores must be a list (per record, per hypothesis) or a 1-D tensor, not '-9 -5 -6 -7'"
    )
    for bad, shown in ((math.nan, "nan"), (math.inf, "inf")):
        with pytest.raises(ValueError) as refused:
            rescore_nbest(NBEST, [[-9.0, -5.0], [-6.0, bad]], lm_weight=1.0)
        assert str(refused.value) == f"lm_scores[1][1] is {shown}: a log-probability (-inf allowed), not nan or +inf"


def test_tune_weights_refuses_a_metric_or_grid_it_cannot_search():
    with pytest.raises(ValueError) as refused:
        tune_weights(NBEST, LM, metric="bleu", lm_weights=[0.0])
    assert str(refused.value) == "metric='bleu' must be a callable (hypotheses, references) -> float"
    for weights, penalties in (([], [0.0]), ([0.5], [])):
        with pytest.raises(ValueError) as refused:
            tune_weights(NBEST, LM, metric=negative_wer, lm_weights=weights, length_penalties=penalties)
        assert str(refused.value) == "lm_weights and length_penalties must each hold at least one value"
    for value in (None, math.nan):
        with pytest.raises(ValueError) as refused:
            tune_weights(NBEST, LM, metric=lambda hyps, refs, v=value: v, lm_weights=[0.5], length_penalties=[1.5])
        assert str(refused.value) == (
            f"metric returned {value!r} for lm_weight=0.5, length_penalty=1.5: expected a number"
        )


def test_normalize_must_be_a_bool(tok_lm):
    with pytest.raises(ValueError) as refused:
        sentence_log_probs(_causal(FAMILIES["softmax"]), tok_lm, TEXTS[:1], normalize="yes")
    assert str(refused.value) == "normalize='yes' must be True or False"


def test_a_seq2seq_backbone_without_a_decoder_start_token_is_refused(tok_s2s):
    """BERT2BERT: neither the encoder-decoder config nor its decoder's config sets one."""
    model = _seq2seq(FAMILIES["softmax"], "bert2bert")
    model.config.backbone.decoder_start_token_id = None
    with pytest.raises(ValueError) as refused:
        sentence_log_probs(model, tok_s2s, TEXTS[:1], sources=SOURCES[:1])
    assert str(refused.value) == "backbone.decoder_start_token_id is not set: set it in the model's backbone config"


def test_an_eos_neither_the_tokenizer_nor_the_config_has_is_refused_naming_the_flag(tok_lm):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=tok_lm.backend_tokenizer, unk_token="<unk>", bos_token="<s>")
    model = _causal(FAMILIES["softmax"])
    model.config.backbone.eos_token_id = None
    with pytest.raises(ValueError) as refused:
        sentence_log_probs(model, tok, TEXTS[:1])
    assert str(refused.value) == (
        "add_eos=True, but neither the tokenizer nor the model config has eos_token_id: pass add_eos=False"
    )
    assert sentence_log_probs(model, tok, TEXTS[:1], add_eos=False).shape == (1,)


def test_cli_refuses_a_directory_of_another_model_type(tmp_path, capsys):
    tiny_gpt2_config(V_LM).save_pretrained(tmp_path / "gpt2")
    (tmp_path / "texts.txt").write_text(TEXTS[0] + "\n")
    code = main(["score", "--model", str(tmp_path / "gpt2"), "--input", str(tmp_path / "texts.txt"), "--output",
                 str(tmp_path / "out.jsonl")])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --model={str(tmp_path / 'gpt2')!r} is a 'gpt2' model, not a model saved by hf_heads"
    ]


def test_cli_names_the_line_of_an_nbest_file_that_is_not_json(saved, tmp_path, capsys):
    path = tmp_path / "nbest.jsonl"
    path.write_text(json.dumps({"id": 0, "hypotheses": [{"text": TEXTS[0], "score": 0.0}]}) + "\n{'id': 1}\n")
    out = tmp_path / "reranked.jsonl"
    code = main(["rescore", "--model", str(saved[0] / "lm"), "--nbest", str(path), "--output", str(out),
                 "--lm_weight", "1"])  # fmt: skip
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {path} line 2: not valid JSON (Expecting property name enclosed in double quotes)"
    ]


def test_cli_refuses_sources_and_texts_of_different_lengths(saved, tmp_path, capsys):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS[:2]) + "\n")
    (tmp_path / "src.txt").write_text(SOURCES[0] + "\n")
    code = main(["score", "--model", str(saved[0] / "s2s"), "--input", str(tmp_path / "texts.txt"), "--sources",
                 str(tmp_path / "src.txt"), "--output", str(tmp_path / "out.jsonl")])  # fmt: skip
    assert code == 2 and not (tmp_path / "out.jsonl").exists()
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --sources has 1 lines but --input has 2: one source per text"
    ]


def test_cli_with_hf_heads_traceback_raises_the_error_itself(saved, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HEADS_TRACEBACK", "1")
    path = tmp_path / "texts.txt"
    path.write_text(f"{TEXTS[0]}\n\n")
    with pytest.raises(ValueError) as raised:
        main(["score", "--model", str(saved[0] / "lm"), "--input", str(path), "--output", str(tmp_path / "o.jsonl")])
    assert str(raised.value) == f"--input {path} line 2 is empty: one non-empty text per line"
