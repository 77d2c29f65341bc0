"""Special-token ids when the tokenizer's differ from the backbone config's: which source each path reads.

The word tokenizer below has <unk> 0, <pad> 1, <s> 2, </s> 3; the backbone configs here use other ids (pad 4, BOS 5,
EOS 6, decoder start 7). transformers' own models take every id of the model's computation from the config: BART / T5
/ Marian / `EncoderDecoderModel` shift labels into decoder inputs with `config.pad_token_id` and
`config.decoder_start_token_id`, and `generate()` starts, stops and pads with the generation config built from the
model config. hf_heads must read the same source in the same places (its models are compared with the transformers
model they were built from, `from_base`). Scoring reads BOS / EOS from the tokenizer (what training encoded) and the
decoder start from the config (what the shift used in training); where the tokenizer's BOS / EOS disagree with the
config's it refuses, since a score with either id would not be the score of the model that generates."""

from __future__ import annotations

import pytest
import torch
from conftest import seq2seq_batch, tiny_enc_dec_config, tiny_gpt2_config, tiny_llama_config
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    EncoderDecoderModel,
    GPT2LMHeadModel,
    LlamaForCausalLM,
)

from hf_heads import HeadsForCausalLM, HeadsForSeq2SeqLM
from hf_heads.cli.backbones import TINY_BACKBONES, TINY_ENCODERS, TINY_SEQ2SEQ, tiny_backbone_config
from hf_heads.data.tokenization import build_word_tokenizer
from hf_heads.scoring import sentence_log_probs, token_log_probs
from hf_heads.scoring.__main__ import main

V = 50
IDS = dict(pad_token_id=4, bos_token_id=5, eos_token_id=6, decoder_start_token_id=7)
TOKENIZER_PAD, TOKENIZER_BOS, TOKENIZER_EOS = 1, 2, 3


def _tokenizer():
    """Word-level tokenizer of exactly V ids, word w{i:02d} has id i (ids 0-3: <unk> <pad> <s> </s>)."""
    return build_word_tokenizer([" ".join(f"w{i:02d}" for i in range(4, V))])


def _words(ids) -> str:
    return " ".join(f"w{i:02d}" for i in ids)


def _seq2seq_base(kind: str, **ids):
    """A transformers seq2seq model (seeded weights) whose config has the ids `IDS`, updated by `ids`."""
    config = tiny_enc_dec_config(kind, V, no_dropout=True)
    for name, value in {**IDS, **ids}.items():
        setattr(config, name, value)
    torch.manual_seed(0)
    model = EncoderDecoderModel(config=config) if kind == "bert2bert" else AutoModelForSeq2SeqLM.from_config(config)
    return model.eval()


def _causal_base(kind: str, **ids):
    fields = {k: v for k, v in {**IDS, **ids}.items() if k != "decoder_start_token_id"}
    config = tiny_gpt2_config(V) if kind == "gpt2" else tiny_llama_config(V)
    for name, value in fields.items():
        setattr(config, name, value)
    torch.manual_seed(0)
    return (GPT2LMHeadModel if kind == "gpt2" else LlamaForCausalLM)(config).eval()


def _stop_token(generated: torch.Tensor) -> int:
    """A token greedy decoding emitted (after the first step) in some rows but not in all: made the EOS, it stops
    those rows and leaves the others running, so the stopped rows are padded."""
    rows = [set(row[1:].tolist()) for row in generated]
    for token in generated[0, 1:].tolist() + generated[1:, 1:].flatten().tolist():
        if not all(token in row for row in rows):
            return int(token)
    raise AssertionError(f"every row emitted the same tokens: {generated.tolist()}")


# ------------------------------------------------------------------------------------ labels -> decoder inputs


@pytest.mark.parametrize("kind", ["bart", "t5", "marian", "bert2bert"])
def test_labels_are_shifted_with_the_config_ids_as_transformers_does(kind):
    """`prepare_decoder_input_ids_from_labels` (what `DataCollatorForSeq2Seq` calls) and the forward's own shift use
    the config's decoder start and pad, exactly as the transformers model of the same config: the collated batch,
    the decoder inputs and the loss are the transformers model's, although the tokenizer pads with another id."""
    base = _seq2seq_base(kind)
    model = HeadsForSeq2SeqLM.from_base(base).eval()
    _, _, labels = seq2seq_batch(vocab_size=V)  # row 1 ignored after 3 positions
    ours = model.prepare_decoder_input_ids_from_labels(labels)
    assert torch.equal(ours, base.prepare_decoder_input_ids_from_labels(labels=labels))
    assert bool((ours[:, 0] == IDS["decoder_start_token_id"]).all())
    assert int(ours[1, 4]) == IDS["pad_token_id"]  # an ignored label becomes the config's pad, not the tokenizer's

    tok = _tokenizer()
    features = [
        {"input_ids": tok(_words(src))["input_ids"], "labels": tok(_words(tgt))["input_ids"]}
        for src, tgt in (([4, 9, 17], [5, 6]), ([8, 8, 12, 30, 41, 7], [20, 21, 22, 23]))
    ]
    ours = DataCollatorForSeq2Seq(tok, model=model, label_pad_token_id=-100)(features)
    theirs = DataCollatorForSeq2Seq(tok, model=base, label_pad_token_id=-100)(features)
    assert sorted(ours) == sorted(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert int(ours["input_ids"][0, -1]) == TOKENIZER_PAD  # inputs are padded by the tokenizer (and masked)
    with torch.no_grad():
        torch.testing.assert_close(model(**ours).loss, base(**ours).loss, rtol=1e-5, atol=1e-5)
        without = {k: v for k, v in ours.items() if k != "decoder_input_ids"}  # the forward shifts the labels itself
        torch.testing.assert_close(model(**without).loss, base(**without).loss, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------- generation


@pytest.mark.parametrize("kind", ["bart", "marian"])
def test_seq2seq_generate_starts_stops_and_pads_with_the_config_ids(kind):
    """`generate()` starts with the config's decoder start, stops at the config's EOS and pads finished rows with the
    config's pad: the generation config and the sequences are those of the transformers model it wraps."""
    x, mask, _ = seq2seq_batch(vocab_size=V)
    kw = dict(input_ids=x, attention_mask=mask, max_new_tokens=6, do_sample=False, num_beams=1)
    stop = _stop_token(_seq2seq_base(kind).generate(**kw))
    base = _seq2seq_base(kind, eos_token_id=stop)
    model = HeadsForSeq2SeqLM.from_base(base).eval()
    for name in ("decoder_start_token_id", "pad_token_id", "eos_token_id", "bos_token_id"):
        assert getattr(model.generation_config, name) == getattr(base.generation_config, name), name
    ours = model.generate(**kw)
    assert torch.equal(ours, base.generate(**kw))
    assert bool((ours[:, 0] == IDS["decoder_start_token_id"]).all())
    stopped = [row.tolist() for row in ours if stop in row[1:].tolist()]
    assert stopped and len(stopped) < len(ours)
    padded = [row[row.index(stop, 1) + 1 :] for row in stopped]
    assert any(padded) and all(t == IDS["pad_token_id"] for rest in padded for t in rest)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_causal_generate_stops_and_pads_with_the_config_ids(kind):
    """A causal LM's `generate()` stops at the config's EOS and pads with the config's pad, as the transformers model
    it wraps (equal sequences)."""
    prompts = torch.tensor([[8, 9, 10], [30, 31, 32], [15, 40, 22]])
    kw = dict(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=8, do_sample=False)
    stop = _stop_token(_causal_base(kind).generate(**kw)[:, 2:])
    base = _causal_base(kind, eos_token_id=stop)
    model = HeadsForCausalLM.from_base(base).eval()
    for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
        assert getattr(model.generation_config, name) == getattr(base.generation_config, name), name
    ours = model.generate(**kw)
    assert torch.equal(ours, base.generate(**kw))
    new = [row[3:].tolist() for row in ours]
    stopped = [row for row in new if stop in row]
    assert stopped and len(stopped) < len(new)
    padded = [row[row.index(stop) + 1 :] for row in stopped]
    assert any(padded) and all(t == IDS["pad_token_id"] for rest in padded for t in rest)


# ---------------------------------------------------------------------------------------------------- scoring

TEXTS = [_words([5, 9, 17]), _words([40]), _words([7, 7, 30, 12, 41, 6, 8])]
SOURCES = [_words([4, 8]), _words([11, 12, 13, 14, 15]), _words([20])]


def test_seq2seq_scores_start_from_the_config_decoder_start_as_the_loss_does():
    """A target's score is minus the transformers model's own loss on it times its length: the decoder starts from
    the config's decoder start (not the tokenizer's BOS), the target ends with the tokenizer's EOS (equal to the
    config's here), and the batch's padding (the tokenizer's pad id, not the config's) changes nothing."""
    base = _seq2seq_base("bart", eos_token_id=TOKENIZER_EOS)
    model = HeadsForSeq2SeqLM.from_base(base).eval()
    tok = _tokenizer()
    scores = sentence_log_probs(model, tok, TEXTS, sources=SOURCES, batch_size=3)
    expected = []
    with torch.no_grad():
        for text, source in zip(TEXTS, SOURCES, strict=True):
            target = tok(text, add_special_tokens=False)["input_ids"] + [TOKENIZER_EOS]
            loss = base(input_ids=torch.tensor([tok(source)["input_ids"]]), labels=torch.tensor([target])).loss
            expected.append(-float(loss) * len(target))
    torch.testing.assert_close(scores, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-4)


@pytest.mark.parametrize("config_pad, tokenizer_pad", [(IDS["pad_token_id"], TOKENIZER_PAD), (-1, None)])
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_causal_scores_with_another_pad_id_are_the_transformers_model_log_probs(kind, config_pad, tokenizer_pad):
    """With the tokenizer's BOS / EOS equal to the config's and only the pad ids different, batched scores are the
    transformers model's log-probabilities of BOS + text + EOS, one unpadded text at a time; also where the config's
    pad is no token id (-1, as some checkpoints' configs have it) and the tokenizer has none."""
    base = _causal_base(kind, pad_token_id=config_pad, bos_token_id=TOKENIZER_BOS, eos_token_id=TOKENIZER_EOS)
    model = HeadsForCausalLM.from_base(base).eval()
    tok = _tokenizer()
    if tokenizer_pad is None:
        tok.pad_token = None
    assert tok.pad_token_id == tokenizer_pad
    rows = token_log_probs(model, tok, TEXTS, batch_size=3)
    with torch.no_grad():
        for text, row in zip(TEXTS, rows, strict=True):
            ids = [TOKENIZER_BOS] + tok(text, add_special_tokens=False)["input_ids"] + [TOKENIZER_EOS]
            log_p = base(input_ids=torch.tensor([ids])).logits[0].double().log_softmax(-1)  # (T, V)
            expected = torch.stack([log_p[t, ids[t + 1]] for t in range(len(ids) - 1)])
            torch.testing.assert_close(row, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name, flag", [("eos_token_id", "add_eos"), ("bos_token_id", "add_bos")])
def test_scoring_refuses_a_tokenizer_whose_bos_or_eos_is_not_the_configs(name, flag):
    """A causal LM whose config's BOS (or EOS) is not the tokenizer's is refused, naming both ids; without that token
    (`add_bos` / `add_eos` False) the other one agrees and scoring proceeds."""
    other = {"bos_token_id": TOKENIZER_BOS, "eos_token_id": TOKENIZER_EOS, name: IDS[name]}
    model = HeadsForCausalLM.from_base(_causal_base("gpt2", **other)).eval()
    tok = _tokenizer()
    mine = getattr(tok, name)
    with pytest.raises(ValueError, match=rf"tokenizer's {name} is {mine} but the model config's is {IDS[name]}"):
        token_log_probs(model, tok, TEXTS)
    assert all(torch.isfinite(row).all() for row in token_log_probs(model, tok, TEXTS, **{flag: False}))


def test_scoring_a_seq2seq_model_refuses_another_eos_also_from_the_command_line(tmp_path, capsys):
    """A seq2seq model whose config's EOS is not its tokenizer's: `sentence_log_probs` refuses, and the command line
    (`python -m hf_heads.scoring` / run_scripts/score.py) prints one line and exits with status 2."""
    model = HeadsForSeq2SeqLM.from_base(_seq2seq_base("bart")).eval()
    tok = _tokenizer()
    with pytest.raises(ValueError, match=rf"tokenizer's eos_token_id is {TOKENIZER_EOS} but the model config's is 6"):
        sentence_log_probs(model, tok, TEXTS, sources=SOURCES)
    model.save_pretrained(tmp_path / "model"), tok.save_pretrained(tmp_path / "model")
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    (tmp_path / "src.txt").write_text("\n".join(SOURCES) + "\n")
    args = ["score", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "texts.txt")]
    code = main([*args, "--sources", str(tmp_path / "src.txt"), "--output", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: ") and "eos_token_id is 3 but the model config's is 6" in err[-1]
    assert not (tmp_path / "out.jsonl").exists()


# ----------------------------------------------------------------------------------------- the seq2seq scripts


@pytest.mark.parametrize("override", ["eos_token_id=7", "pad_token_id=7"])
def test_seq2seq_script_refuses_a_config_eos_or_pad_unlike_the_tokenizers(tmp_path, script_error, override):
    """A seq2seq run whose model generates with another EOS / pad than its tokenizer's (here a built-in backbone with
    `--config_overrides`) is refused before training, in one line: its targets end with the tokenizer's EOS while
    `generate()` stops at the config's, and its predictions are decoded without the tokenizer's special tokens while
    `generate()` pads them with the config's pad (which would be read as a word)."""
    name = override.partition("=")[0]
    common = ["--output_dir", tmp_path / "o", "--do_train", "--max_steps", "1", "--max_train_samples", "20"]
    code, stderr = script_error(
        "run_translation.py", *common, "--model_name_or_path", "tiny-bart", "--config_overrides", override
    )
    lines = [line for line in stderr.strip().splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1, stderr[-3000:]
    assert f"the tokenizer's {name} is" in lines[0] and f"generates with {name}=7" in lines[0], lines[0]


@pytest.mark.parametrize("name", sorted({**TINY_BACKBONES, **TINY_SEQ2SEQ, **TINY_ENCODERS}))
def test_a_tiny_backbone_takes_the_tokenizers_special_ids(name):
    """The run scripts' tiny backbones are sized to the tokenizer and carry its pad / BOS / EOS ids (a seq2seq one
    starts its decoder with BOS), whatever ids the tokenizer gives them."""
    from hf_heads.data import build_word_tokenizer

    tok = build_word_tokenizer(["a b c d e f", "c d"], vocab_size=30)
    tok.add_special_tokens({"pad_token": "<extra-pad>"})  # ids unlike the word tokenizer's defaults
    config = tiny_backbone_config(name, tok)
    assert config.vocab_size == len(tok)
    got = (config.pad_token_id, config.bos_token_id, config.eos_token_id)
    assert got == (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id)
    if name in TINY_SEQ2SEQ:
        assert config.decoder_start_token_id == tok.bos_token_id
