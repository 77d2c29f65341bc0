"""HeadsForSeq2SeqLM and HeadsForSequenceClassification: every discrete family on BART / T5 / Marian /
BERT2BERT and BERT / GPT-2 backbones, generate, pooling, config errors (save / load through the Auto classes and the
export without hf_heads of every family: tests/heads/test_contract.py)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import family_heads, seq2seq_batch, tiny_bert_config, tiny_enc_dec_config, tiny_gpt2_config
from transformers import BartForConditionalGeneration, GPT2Config

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM, HeadsForSequenceClassification
from hf_heads.modeling.seq2seq import shift_tokens_right

V = 50
SEQ2SEQ_HEADS = family_heads("seq2seq", discrete=True)
CLASSIFIER_HEADS = family_heads("classification", discrete=True)
LABELS = {0: "animal", 1: "plant", 2: "act", 3: "time", 4: "place"}


def _no_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


@pytest.mark.parametrize("kind", ["bart", "t5", "marian", "bert2bert"])
@pytest.mark.parametrize("family", list(SEQ2SEQ_HEADS))
def test_seq2seq_every_backbone_and_family(kind, family):
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config(kind), head=SEQ2SEQ_HEADS[family]))
    x, mask, y = seq2seq_batch()
    out = model(input_ids=x, attention_mask=mask, labels=y)
    assert out.logits is None and torch.isfinite(out.loss)
    out.loss.backward()
    assert model.head.weight.grad is not None and torch.isfinite(model.head.weight.grad).all()
    model.eval()
    for beams in (1, 3):
        generated = model.generate(
            input_ids=x, attention_mask=mask, max_new_tokens=4, num_beams=beams, do_sample=False
        )
        assert generated.shape[0] == 3 and generated.shape[1] <= 5
        assert bool((generated[:, 0] == model.generation_config.decoder_start_token_id).all())


def test_seq2seq_softmax_head_equals_bart(tmp_path):
    """from_base of a BART checkpoint: same logits, same loss (the head owns it), same beam search."""
    torch.manual_seed(0)
    base = BartForConditionalGeneration(tiny_enc_dec_config("bart")).eval()
    base.save_pretrained(tmp_path)
    model = HeadsForSeq2SeqLM.from_base(str(tmp_path)).eval()
    x, mask, y = seq2seq_batch()
    ours, theirs = model(input_ids=x, attention_mask=mask, labels=y), base(input_ids=x, attention_mask=mask, labels=y)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=0, atol=1e-6)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-6, atol=1e-6)
    kw = dict(input_ids=x, attention_mask=mask, max_new_tokens=6, num_beams=3, min_new_tokens=6, do_sample=False)
    assert torch.equal(model.generate(**kw), base.generate(**kw))


def test_seq2seq_loss_is_reference_cross_entropy_and_cache_is_consistent():
    torch.manual_seed(0)
    model = _no_dropout(
        HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bert2bert"), head={"family": "softmax"}))
    )
    x, mask, y = seq2seq_batch()
    dec_in = shift_tokens_right(y, 1, 2)
    assert dec_in[1, 4] == 1 and dec_in[0, 0] == 2 and torch.equal(dec_in[0, 1:], y[0, :-1])
    model.eval()
    logits = model(input_ids=x, attention_mask=mask, decoder_input_ids=dec_in).logits  # (B, T, V)
    reference = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(model(input_ids=x, attention_mask=mask, labels=y).loss, reference)
    kw = dict(input_ids=x, attention_mask=mask, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert torch.equal(model.generate(**kw, use_cache=True), model.generate(**kw, use_cache=False))


def test_seq2seq_source_given_as_inputs_embeds_gives_the_logits_and_loss_of_its_input_ids():
    """`inputs_embeds` in place of `input_ids` reaches the encoder: the source's embeddings give the same forward."""
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart"), head={"family": "softmax"})).eval()
    x, mask, y = seq2seq_batch()
    embeds = model.get_encoder().get_input_embeddings()(x)  # (B, S, H)
    with torch.no_grad():
        ours = model(inputs_embeds=embeds, attention_mask=mask, labels=y)
        theirs = model(input_ids=x, attention_mask=mask, labels=y)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=0, atol=0)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=0, atol=0)


def test_seq2seq_sparse_beam_search_uses_truncated_distribution():
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM(
        HeadsConfig(backbone=tiny_enc_dec_config("bart"), head={"family": "sparse", "k": 3})
    ).eval()
    x, mask, _ = seq2seq_batch()
    out = model.generate(
        input_ids=x,
        attention_mask=mask,
        max_new_tokens=3,
        num_beams=3,
        output_scores=True,
        return_dict_in_generate=True,
        do_sample=False,
    )
    for step in out.scores:  # (B * beams, V): at most k finite scores per row
        assert int(torch.isfinite(step).sum(-1).max()) <= 3


def test_seq2seq_from_base_of_an_encoder_decoder_model_builds_the_head_asked_for():
    """from_base of a transformers EncoderDecoderModel (BERT2BERT) with `head=`: the model's config and head are that
    head's (a sparse head: its k kept, saved, and its refusal of wider beams in generate)."""
    from transformers import EncoderDecoderModel

    from hf_heads.heads.sparse import SparseHead
    from hf_heads.validation import OptionError

    torch.manual_seed(0)
    pair = EncoderDecoderModel(config=tiny_enc_dec_config("bert2bert", no_dropout=True)).eval()
    model = HeadsForSeq2SeqLM.from_base(pair, head={"family": "sparse", "k": 5})
    assert model.config.head["family"] == "sparse" and model.config.head["k"] == 5
    assert isinstance(model.head, SparseHead) and model.head.options.k == 5
    x, mask, _ = seq2seq_batch()
    with pytest.raises(OptionError, match="num_beams=6 must be <= decode_k=5"):
        model.generate(input_ids=x, attention_mask=mask, max_new_tokens=2, num_beams=6)


def test_bert2bert_warm_start_starts_and_ends_with_the_ids_given_else_the_decoder_configs(tmp_path):
    """`from_encoder_decoder_pretrained` of a saved BERT: the decoder start and EOS are the ones passed, else the
    decoder config's BOS / EOS (not its tokenizer's CLS / SEP), and generate() starts from that decoder start and
    ends at that EOS (the one training uses, not the decoder config's)."""
    from transformers import BertModel

    config = tiny_bert_config(V, pad_token_id=1)
    config.bos_token_id, config.eos_token_id = 7, 8
    torch.manual_seed(0)
    BertModel(config).save_pretrained(tmp_path)
    default = HeadsForSeq2SeqLM.from_encoder_decoder_pretrained(str(tmp_path))
    given = HeadsForSeq2SeqLM.from_encoder_decoder_pretrained(str(tmp_path), decoder_start_token_id=5, eos_token_id=6)
    for model, (start, end) in ((default, (7, 8)), (given, (5, 6))):
        backbone = model.config.backbone
        assert (backbone.decoder_start_token_id, backbone.eos_token_id, backbone.pad_token_id) == (start, end, 1)
        generation = model.generation_config
        assert (generation.decoder_start_token_id, generation.eos_token_id, generation.pad_token_id) == (start, end, 1)
        x, mask, _ = seq2seq_batch()
        assert model.eval().generate(input_ids=x, attention_mask=mask, max_new_tokens=1)[:, 0].tolist() == [start] * 3


@pytest.mark.parametrize("task", ["causal-lm", "seq2seq", "classification"])
def test_from_pretrained_of_a_base_checkpoint_is_in_evaluation_mode_as_transformers_gives_it(task, tmp_path):
    """transformers' from_pretrained returns a model in evaluation mode (dropout off); so does hf_heads' of the same
    checkpoint, its logits those of the checkpoint with no .eval() called. from_base of a loaded model keeps its
    mode."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

    from hf_heads import HeadsForCausalLM

    torch.manual_seed(0)
    auto, ours, config = {
        "causal-lm": (AutoModelForCausalLM, HeadsForCausalLM, tiny_gpt2_config(V)),
        "seq2seq": (AutoModelForSeq2SeqLM, HeadsForSeq2SeqLM, tiny_enc_dec_config("bart")),
        "classification": (AutoModelForSequenceClassification, HeadsForSequenceClassification, tiny_bert_config()),
    }[task]
    auto.from_config(config).save_pretrained(tmp_path)
    x, mask, y = seq2seq_batch()
    inputs = {"input_ids": x, "attention_mask": mask}
    if task == "seq2seq":
        inputs["decoder_input_ids"] = y.clamp_min(0)
    expected = auto.from_pretrained(tmp_path)(**inputs).logits
    model = ours.from_pretrained(tmp_path)
    assert not any(module.training for module in model.modules())
    torch.testing.assert_close(model(**inputs).logits, expected, rtol=0, atol=1e-5)
    loaded = auto.from_pretrained(tmp_path).train()
    assert all(module.training for module in ours.from_base(loaded).modules())


@pytest.mark.parametrize("task", ["causal-lm", "seq2seq"])
def test_from_pretrained_of_a_base_checkpoint_generates_with_its_generation_config(task, tmp_path):
    """The checkpoint's generation_config.json (end-of-sequence ids, penalties, beams, lengths) is the model's:
    generate() with no arguments gives the checkpoint's own output, and the saved model keeps it."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, GenerationConfig

    from hf_heads import HeadsForCausalLM

    torch.manual_seed(0)
    auto, ours, config = {
        "causal-lm": (AutoModelForCausalLM, HeadsForCausalLM, tiny_gpt2_config(V)),
        "seq2seq": (AutoModelForSeq2SeqLM, HeadsForSeq2SeqLM, tiny_enc_dec_config("bart")),
    }[task]
    base = auto.from_config(config)
    generation = {"eos_token_id": [7, 9], "no_repeat_ngram_size": 2, "repetition_penalty": 1.5, "num_beams": 2}
    base.generation_config = GenerationConfig(**base.generation_config.to_dict() | generation | {"max_length": 9})
    base.save_pretrained(tmp_path / "base")
    x, mask, _ = seq2seq_batch()
    expected = auto.from_pretrained(tmp_path / "base").generate(input_ids=x, attention_mask=mask)
    model = ours.from_pretrained(tmp_path / "base")
    assert {k: getattr(model.generation_config, k) for k in generation} == generation
    assert torch.equal(model.generate(input_ids=x, attention_mask=mask), expected)
    model.save_pretrained(tmp_path / "ours")
    again = ours.from_pretrained(tmp_path / "ours")
    assert torch.equal(again.generate(input_ids=x, attention_mask=mask), expected)


def test_seq2seq_refuses_decoder_only_backbone():
    with pytest.raises(ValueError, match="not an encoder-decoder"):
        HeadsForSeq2SeqLM(HeadsConfig(backbone=GPT2Config(n_embd=32, n_layer=1, n_head=2)))


@pytest.mark.parametrize("field", ["is_decoder", "add_cross_attention"])
def test_seq2seq_refuses_an_encoder_decoder_pair_whose_decoder_is_not_a_cross_attending_decoder(field):
    """A BERT2BERT config whose decoder lacks cross-attention (it would ignore the source) or is not a decoder
    (it would see the future) is refused, naming both settings."""
    config = tiny_enc_dec_config("bert2bert")
    setattr(config.decoder, field, False)
    with pytest.raises(ValueError) as err:
        HeadsForSeq2SeqLM(HeadsConfig(backbone=config))
    assert str(err.value) == "backbone.decoder must have is_decoder=true and add_cross_attention=true"


def _clf_config(kind: str, family: str, pooling: str = "auto") -> HeadsConfig:
    if kind == "bert":
        backbone = tiny_bert_config(V)
    else:
        backbone = tiny_gpt2_config(V, n_layer=1, pad_token_id=1)
    head = CLASSIFIER_HEADS[family]
    if "num_samples" in head:  # fewer noise samples than the 5 classes
        head = {**head, "num_samples": 3}
    return HeadsConfig(
        backbone=backbone, head=head, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}, pooling=pooling
    )


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
@pytest.mark.parametrize("family", list(CLASSIFIER_HEADS))
def test_classification_every_backbone_and_family(kind, family):
    torch.manual_seed(0)
    model = HeadsForSequenceClassification(_clf_config(kind, family))
    assert model.pooling == ("pooler" if kind == "bert" else "last")
    x, mask, _ = seq2seq_batch()
    labels = torch.tensor([0, 4, 2])
    out = model(input_ids=x, attention_mask=mask, labels=labels)
    assert out.logits is None and torch.isfinite(out.loss)
    out.loss.backward()
    model.eval()
    logits = model(input_ids=x, attention_mask=mask).logits
    assert logits.shape == (3, 5)


def test_classification_softmax_loss_is_reference_and_margin_only_in_training():
    torch.manual_seed(0)
    plain = _no_dropout(HeadsForSequenceClassification(_clf_config("bert", "softmax"))).eval()
    x, mask, _ = seq2seq_batch()
    labels = torch.tensor([0, 4, 2])
    logits = plain(input_ids=x, attention_mask=mask).logits
    torch.testing.assert_close(
        plain(input_ids=x, attention_mask=mask, labels=labels).loss, F.cross_entropy(logits, labels)
    )
    cos = _no_dropout(HeadsForSequenceClassification(_clf_config("bert", "margin")))
    cos.load_state_dict(plain.state_dict(), strict=False)
    cos.eval()
    eval_loss = cos(input_ids=x, attention_mask=mask, labels=labels).loss
    cos.train()
    assert cos(input_ids=x, attention_mask=mask, labels=labels).loss > eval_loss  # the margin family's ArcFace m > 0


def test_classification_last_token_pooling_ignores_padding_side():
    """Last-token pooling reads the attention mask: right or left padding, and padding by an id other than the
    config's pad id (a tokenizer that pads with its end-of-text token), classify a sequence as it is alone."""
    torch.manual_seed(0)
    model = _no_dropout(HeadsForSequenceClassification(_clf_config("gpt2", "softmax"))).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    right = torch.tensor([[5, 6, 7, 1, 1]]), torch.tensor([[1, 1, 1, 0, 0]])
    left = torch.tensor([[1, 1, 5, 6, 7]]), torch.tensor([[0, 0, 1, 1, 1]])
    alone = model(input_ids=ids[:, :3]).logits
    torch.testing.assert_close(model(input_ids=right[0], attention_mask=right[1]).logits, alone)
    eos_padded = torch.tensor([[5, 6, 7, 3, 3]])  # the config's eos id, 3, not its pad id, 1
    torch.testing.assert_close(model(input_ids=eos_padded, attention_mask=right[1]).logits, alone)
    position_ids = torch.tensor([[0, 0, 0, 1, 2]])
    torch.testing.assert_close(
        model(input_ids=left[0], attention_mask=left[1], position_ids=position_ids).logits, alone, rtol=1e-5, atol=1e-5
    )
    mean = _no_dropout(HeadsForSequenceClassification(_clf_config("gpt2", "softmax", pooling="mean"))).eval()
    assert mean.pooling == "mean"


def test_classification_bad_config():
    with pytest.raises(ValueError, match=r"head.num_samples=8 must be < the number of classes \(5\)"):
        HeadsForSequenceClassification(
            HeadsConfig(backbone=GPT2Config(n_embd=32, n_head=2), head=CLASSIFIER_HEADS["sampled"], num_labels=5)
        )
    with pytest.raises(ValueError, match="pooling='cls' is not allowed"):
        _clf_config("bert", "softmax", pooling="cls")
    with pytest.raises(ValueError, match="pooling='pooler' but the 'gpt2' backbone has no pooler"):
        HeadsForSequenceClassification(_clf_config("gpt2", "softmax", pooling="pooler"))
    with pytest.raises(ValueError, match="num_labels=1 must be >= 2"):
        HeadsForSequenceClassification(HeadsConfig(backbone=GPT2Config(n_embd=32, n_layer=1, n_head=2), num_labels=1))
    with pytest.raises(ValueError, match="classifier_dropout=1.5 must be < 1"):
        HeadsConfig(backbone=GPT2Config(), classifier_dropout=1.5)


def test_classification_from_base_keeps_its_pooling_and_mean_pools_the_unpadded_tokens(tmp_path):
    """from_base of a bare encoder with `pooling="mean"` and `classifier_dropout`: both kept (and saved); the mean is
    over the tokens the attention mask keeps, so a right-padded sequence is classified as it is alone, by the head on
    the mean of its hidden states."""
    from transformers import BertModel

    torch.manual_seed(0)
    BertModel(tiny_bert_config(V, pad_token_id=1, no_dropout=True)).save_pretrained(tmp_path / "bert")
    model = HeadsForSequenceClassification.from_base(
        str(tmp_path / "bert"), id2label=LABELS, pooling="mean", classifier_dropout=0.25
    ).eval()
    assert model.pooling == "mean" and model.dropout.p == 0.25
    model.save_pretrained(tmp_path / "clf")
    config = HeadsForSequenceClassification.from_pretrained(tmp_path / "clf").config
    assert (config.pooling, config.classifier_dropout) == ("mean", 0.25)
    ids = torch.tensor([[5, 6, 7, 8, 1, 1], [9, 10, 11, 12, 13, 14]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask).logits  # (2, C)
        alone = model(input_ids=ids[:1, :4]).logits  # (1, C)
        hidden = model.backbone(input_ids=ids[:1, :4]).last_hidden_state  # (1, 4, H)
        naive = model.head(hidden.mean(1), return_logits=True)[1]  # (1, C)
    torch.testing.assert_close(batched[:1], alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone, naive, rtol=1e-5, atol=1e-5)


def test_classification_dropout_defaults_to_the_backbones_classifier_then_hidden_dropout():
    """Without `classifier_dropout` the head's dropout is the backbone config's `classifier_dropout`, else its
    `hidden_dropout_prob` (as BertForSequenceClassification), else none."""
    bert = tiny_bert_config(V)
    bert.hidden_dropout_prob = 0.2
    assert HeadsForSequenceClassification(HeadsConfig(backbone=bert, num_labels=3)).dropout.p == 0.2
    bert.classifier_dropout = 0.3
    assert HeadsForSequenceClassification(HeadsConfig(backbone=bert, num_labels=3)).dropout.p == 0.3
    gpt2 = tiny_gpt2_config(V, n_layer=1, pad_token_id=1)
    assert HeadsForSequenceClassification(HeadsConfig(backbone=gpt2, num_labels=3)).dropout.p == 0.0


def test_classification_returns_the_backbones_hidden_states_and_attentions_when_asked():
    torch.manual_seed(0)
    model = HeadsForSequenceClassification(_clf_config("bert", "softmax")).eval()
    model.backbone.set_attn_implementation("eager")
    x, mask, _ = seq2seq_batch()
    out = model(input_ids=x, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    ref = model.backbone(input_ids=x, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == len(ref.hidden_states) and len(out.attentions) == len(ref.attentions) > 0
    for got, want in zip(out.hidden_states + out.attentions, ref.hidden_states + ref.attentions, strict=True):
        torch.testing.assert_close(got, want)
    assert model(input_ids=x, attention_mask=mask).attentions is None


# ---------------------------------------------------------------- more seq2seq and classifier refusals


def test_bert2bert_set_input_embeddings_replaces_the_decoders_table_only():
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bert2bert", V), head={"family": "softmax"}))
    source_table = model.backbone.encoder.get_input_embeddings()
    table = torch.nn.Embedding(V, 32)
    model.set_input_embeddings(table)
    assert model.get_input_embeddings() is table and model.backbone.decoder.get_input_embeddings() is table
    assert model.backbone.encoder.get_input_embeddings() is source_table


@pytest.mark.parametrize("kind", ["bert2bert", "bart", "t5"])
def test_seq2seq_training_without_a_decoder_start_token_is_refused_naming_the_backbone_field(kind: str):
    """Also for a flat encoder-decoder config, whose decoder view (`get_text_config(decoder=True)`) would read the
    unset field as the class default (BART's 2) and shift the labels behind it without a word."""
    backbone = tiny_enc_dec_config(kind, V)
    backbone.decoder_start_token_id = None
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=backbone, head={"family": "softmax"})).train()
    x, mask, y = seq2seq_batch()
    with pytest.raises(ValueError) as refused:
        model(input_ids=x, attention_mask=mask, labels=y)
    assert str(refused.value) == "backbone.decoder_start_token_id is not set; set it in the backbone config"


def test_seq2seq_from_base_refuses_an_encoder_decoder_model_that_projects_the_encoders_states():
    """A pair of different widths (32 -> 48) that transformers joins with `enc_to_dec_proj`."""
    from conftest import _tiny_bert_kwargs
    from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel

    encoder = BertConfig(**_tiny_bert_kwargs(V, pad_token_id=1, no_dropout=True))
    decoder = BertConfig(**{**_tiny_bert_kwargs(V, pad_token_id=1, no_dropout=True), "hidden_size": 48},
                         is_decoder=True, add_cross_attention=True)  # fmt: skip
    config = EncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 2, 1, 3
    torch.manual_seed(0)
    pair = EncoderDecoderModel(config=config).eval()
    pair.config.name_or_path = "pair"
    with pytest.raises(ValueError) as refused:
        HeadsForSeq2SeqLM.from_base(pair)
    assert str(refused.value) == (
        "'pair': this EncoderDecoderModel projects its encoder's states (32 -> 48, enc_to_dec_proj) before the "
        "decoder reads them, which hf_heads does not do: it wraps pairs whose decoder reads the encoder's states as "
        "they are (equal hidden sizes, or a decoder with cross_attention_hidden_size)"
    )


def test_bert2bert_warm_start_of_a_decoder_without_a_pad_token_asks_for_it(tmp_path):
    from transformers import BertModel

    config = tiny_bert_config(V, pad_token_id=1)
    config.pad_token_id = None
    BertModel(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError) as refused:
        HeadsForSeq2SeqLM.from_encoder_decoder_pretrained(str(tmp_path), decoder_start_token_id=5, eos_token_id=6)
    assert str(refused.value) == f"pad_token_id is unknown for {str(tmp_path)!r}; pass pad_token_id=..."
    model = HeadsForSeq2SeqLM.from_encoder_decoder_pretrained(
        str(tmp_path), decoder_start_token_id=5, eos_token_id=6, pad_token_id=1
    )
    assert model.config.backbone.pad_token_id == 1


def test_a_tied_head_without_an_output_matrix_is_refused_pointing_to_tie_decoder_inputs():
    head = {"family": "continuous", "embedding_dim": 8}
    with pytest.raises(ValueError) as refused:
        HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart", V), head=head, tie_word_embeddings=True))
    assert str(refused.value) == (
        "tie_word_embeddings=true does not apply to a continuous head (it has no (V, H) output matrix); use "
        "head.tie_decoder_inputs"
    )


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"classifier_stem": ""}, "classifier_stem='' must be a module name or null"),
        ({"classifier_stem": 3}, "classifier_stem=3 must be a module name or null"),
        (
            {"classifier_stem": "classifier", "pooling": "mean"},
            "pooling='mean' does not apply with classifier_stem='classifier' (the checkpoint's classifier pools); "
            "allowed: 'auto'",
        ),
        ({"decoder_stem": ""}, "decoder_stem='' must be a module name or null"),
    ],
    ids=["empty-stem", "number-stem", "stem-with-pooling", "empty-decoder-stem"],
)
def test_config_refuses_a_stem_that_is_no_module_name(fields, error):
    with pytest.raises(ValueError) as refused:
        HeadsConfig(backbone=tiny_bert_config(V), **fields)
    assert str(refused.value) == error


def test_classifier_stem_naming_a_module_that_is_no_linear_layer_is_refused():
    config = HeadsConfig(backbone=tiny_bert_config(V), classifier_stem="dropout", id2label=LABELS)
    with pytest.raises(ValueError) as refused:
        HeadsForSequenceClassification(config)
    assert str(refused.value) == "classifier_stem='dropout' is a Dropout, not the final nn.Linear"


def test_classifier_from_base_of_a_bare_encoder_needs_its_labels(tmp_path):
    from transformers import BertModel

    BertModel(tiny_bert_config(V)).save_pretrained(tmp_path)
    with pytest.raises(ValueError) as refused:
        HeadsForSequenceClassification.from_base(str(tmp_path))
    assert str(refused.value) == (
        "give id2label (preferred) or num_labels: the checkpoint is not a sequence classifier, so its head is new"
    )
    with pytest.raises(ValueError) as refused:
        HeadsForSequenceClassification.from_base(str(tmp_path), num_labels=4, id2label=LABELS)
    assert str(refused.value) == "num_labels=4 but id2label has 5 labels"
    model = HeadsForSequenceClassification.from_base(str(tmp_path), num_labels=5, id2label=LABELS)
    assert model.config.id2label == LABELS and model.config.num_labels == 5


def test_classifier_from_base_rebuilds_a_label2id_of_config_that_disagrees_with_its_id2label(tmp_path):
    from transformers import BertModel

    BertModel(tiny_bert_config(V)).save_pretrained(tmp_path)
    config = tiny_bert_config(V)
    config.id2label = {0: "animal", 1: "plant"}
    config.label2id = {"animal": 1, "plant": 0}
    model = HeadsForSequenceClassification.from_base(str(tmp_path), config=config)
    assert model.config.id2label == {0: "animal", 1: "plant"}
    assert model.config.label2id == {"animal": 0, "plant": 1}


class _ScaledProjection(torch.nn.Module):
    """A user's classifier output layer that is no nn.Linear."""

    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(classes, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * x @ self.weight.T


def test_classifier_from_base_refuses_a_classifier_whose_final_projection_is_no_linear_layer():
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    clf = BertForSequenceClassification(tiny_bert_config(V)).eval()
    custom = _ScaledProjection(32, 2)
    clf.classifier = custom
    with pytest.raises(ValueError) as refused:
        HeadsForSequenceClassification.from_base(clf)
    assert str(refused.value) == (
        "BertForSequenceClassification has no final (num_labels=2, H) projection outside its base model: hf_heads "
        "cannot take its classifier over"
    )
    assert clf.classifier is custom
