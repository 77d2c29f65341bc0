"""Export to the base architecture (hf_heads.modeling.base_export): `to_base()` is the backbone's own transformers
class whose logits give the hf_heads model's inference distribution — the same log-probabilities (float32, 1e-5) and
the same greedy and beam tokens — for every family and option that folds, after a training step (so every tensor has
moved); the refusals name their reason and the nearest exact choice; `export_base` writes a directory that loads with
transformers alone (no hf_heads, no trust_remote_code); and `from_base(X)` followed by `to_base()` gives X back on the
architectures of the parity matrix (tests/arch_matrix.py)."""

import json

import pytest
import torch
from arch_matrix import _TASKS as MATRIX
from arch_matrix import NO_BEAM_SEARCH, TASKS, build, probe_inputs
from conftest import seq2seq_batch, tiny_bert_config, tiny_enc_dec_config, tiny_gpt2_config, tiny_llama_config
from export_check import export_job, load_without_hf_heads
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    BertForSequenceClassification,
    BertModel,
    GPT2LMHeadModel,
    GPT2Model,
    LlamaConfig,
    LlamaForCausalLM,
)

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification
from hf_heads.modeling.bodies import sharing

VOCAB, SEQ_VOCAB = 61, 50


def _counts(n: int) -> torch.Tensor:
    """Training counts (n,) falling with the id (the last one seen once: log-unigram's f = 0)."""
    return torch.arange(n, 0, -1, dtype=torch.float32) ** 2


def _lm(kind: str):
    torch.manual_seed(0)
    if kind == "gpt2":
        return GPT2LMHeadModel(tiny_gpt2_config()).eval()  # tied output layer, no bias
    if kind == "llama":
        return LlamaForCausalLM(tiny_llama_config()).eval()  # untied, no bias
    return build(kind, "causal_lm").eval()  # gemma2: soft-cap; cohere: logit scale


def _seq2seq(kind: str):
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(tiny_enc_dec_config(kind, vocab_size=SEQ_VOCAB, no_dropout=True)).eval()


def _trained(model, inputs: dict, labels: torch.Tensor):
    """The model after one SGD step of its head's training criterion (every tensor moves; max-norm's running value
    is set), in eval mode."""
    torch.manual_seed(1)
    model.train()
    model(**inputs, labels=labels).loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.5 * p.grad
    model.zero_grad()
    return model.eval()


def causal_model(kind: str, head: dict):
    lm = _lm(kind)
    vocab = lm.config.vocab_size
    model = HeadsForCausalLM.from_base(lm, head=head, word_counts=_counts(vocab), calibrate=False)
    g = torch.Generator().manual_seed(2)
    x = torch.randint(4, vocab, (3, 9), generator=g)
    return _trained(model, {"input_ids": x}, x), {"input_ids": x[:, :6]}


def seq2seq_model(kind: str, head: dict):
    model = HeadsForSeq2SeqLM.from_base(_seq2seq(kind), head=head, calibrate=False)
    if model.head.has_output_matrix:
        model.set_word_counts(_counts(SEQ_VOCAB))
    else:
        g = torch.Generator().manual_seed(3)
        model.head.set_embedding_table(torch.randn(SEQ_VOCAB, model.head.options.embedding_dim, generator=g))
    x, mask, y = seq2seq_batch(vocab_size=SEQ_VOCAB)
    decoder = model.prepare_decoder_input_ids_from_labels(y.clamp_min(4))  # (3, 5)
    inputs = {"input_ids": x, "attention_mask": mask, "decoder_input_ids": decoder}
    return _trained(model, {"input_ids": x, "attention_mask": mask}, y), inputs


def classifier(kind: str, head: dict, **kw):
    torch.manual_seed(0)
    if kind == "bert":  # a bare encoder: pooling 'auto' is BERT's pooler
        model = HeadsForSequenceClassification.from_base(BertModel(tiny_bert_config()), num_labels=3, head=head, **kw)
    elif kind == "bert-classifier":  # a fine-tuned classifier: its own pooler and dropout, its projection the head
        base = BertForSequenceClassification(tiny_bert_config()).eval()
        model = HeadsForSequenceClassification.from_base(base, head=head, calibrate=False, **kw)
    else:  # a decoder: the last token (its base class needs a pad token for batches)
        decoder = GPT2Model(tiny_gpt2_config(pad_token_id=1))
        model = HeadsForSequenceClassification.from_base(decoder, num_labels=3, head=head, **kw)
    model.set_word_counts(torch.arange(model.head.num_classes, 0, -1, dtype=torch.float32))
    g = torch.Generator().manual_seed(2)
    x = torch.randint(4, 50, (4, 7), generator=g)
    labels = torch.tensor([0, 1, 2, 1]) % model.head.num_classes
    return _trained(model, {"input_ids": x}, labels), {"input_ids": x}


def assert_same_distribution(model, base, inputs: dict, generate: bool = True) -> None:
    """The same log-probabilities (float32, 1e-5) and, with `generate`, the same greedy and beam-search tokens."""
    with torch.no_grad():
        want = torch.log_softmax(model(**inputs).logits.float(), dim=-1)
        got = torch.log_softmax(base(**inputs).logits.float(), dim=-1)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    if generate:
        prompt = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
        for beams in (1, 3):
            kw = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, num_beams=beams)
            assert torch.equal(base.generate(**prompt, **kw), model.generate(**prompt, **kw)), beams


NO_BIAS = {"bias": False}  # GPT-2, Llama, T5, Gemma, Cohere: their output layer has no bias
SAMPLED = {"family": "sampled", "num_samples": 8}
CAUSAL = {
    "softmax": {"family": "softmax", **NO_BIAS},
    "softmax-smoothing": {"family": "softmax", "label_smoothing": 0.1, **NO_BIAS},
    "softmax-z-loss-penalty": {"family": "softmax", "z_loss": 1e-3, "confidence_penalty": 0.1, **NO_BIAS},
    "softmax-class-weights": {"family": "softmax", "class_weights": "balanced", **NO_BIAS},
    "margin-arc": {"family": "margin", "margin": {"type": "arc", "m": 0.2}, **NO_BIAS},
    "margin-cos-uniform": {"family": "margin", "margin": {"type": "cos", "m": 0.1}, "word_norm": "uniform", **NO_BIAS},
    "margin-arc-log-rank": {
        "family": "margin", "margin": {"type": "arc", "m": 0.2}, "word_norm": "log-rank", **NO_BIAS,
    },
    "margin-lsm-unigram": {"family": "margin", "margin": {"type": "lsm", "m": 2}, "word_norm": "unigram", **NO_BIAS},
    "margin-arc-log-unigram-z-loss": {
        "family": "margin", "margin": {"type": "arc", "m": 0.2}, "word_norm": "log-unigram", "z_loss": 1e-3, **NO_BIAS,
    },
    "margin-gain": {"family": "margin", "margin": {"type": "cos", "m": 0.1}, "warm_start_gain": 0.7, **NO_BIAS},
    "sampled-ce-full": {"family": "sampled", "criterion": "ce", "method": "full", **NO_BIAS},
    "sampled-ce-is": {**SAMPLED, "criterion": "ce", "method": "is", "noise": "log-uniform", **NO_BIAS},
    "sampled-bce-is": {**SAMPLED, "criterion": "bce", "method": "is", "noise": "unigram", **NO_BIAS},
    "sampled-bce-nce-arc": {
        **SAMPLED, "criterion": "bce", "method": "nce", "noise": "log-uniform", "margin": {"type": "arc", "m": 0.1},
        **NO_BIAS,
    },
    "sampled-ce-mcs-uniform": {**SAMPLED, "criterion": "ce", "method": "mcs", "noise": "uniform", **NO_BIAS},
    "sampled-bce-cps-uniform": {**SAMPLED, "criterion": "bce", "method": "cps", "noise": "uniform", **NO_BIAS},
}  # fmt: skip
# the per-class corrections (s + log D(c), s + log K·D(c), s + log C·D(c)) need an output bias: BART's
# final_logits_bias
BIASED = {
    "softmax": {"family": "softmax"},
    "margin-cos-log-rank": {"family": "margin", "margin": {"type": "cos", "m": 0.1}, "word_norm": "log-rank"},
    "sampled-ce-mcs": {**SAMPLED, "criterion": "ce", "method": "mcs", "noise": "log-uniform"},
    "sampled-bce-mcs": {**SAMPLED, "criterion": "bce", "method": "mcs", "noise": "unigram"},
    "sampled-ce-cps": {**SAMPLED, "criterion": "ce", "method": "cps", "noise": "log-uniform"},
    "sampled-bce-cps-arc": {
        **SAMPLED, "criterion": "bce", "method": "cps", "noise": "unigram", "margin": {"type": "arc", "m": 0.1},
    },
    "sampled-ce-is": {**SAMPLED, "criterion": "ce", "method": "is", "noise": "unigram"},
    "continuous-vmf": {"family": "continuous", "loss": "vmf", "embedding_dim": 8},
}  # fmt: skip


@pytest.mark.parametrize("label", list(CAUSAL))
def test_causal_lm_folds_into_llama(label):
    model, inputs = causal_model("llama", CAUSAL[label])
    base = model.to_base()
    assert type(base) is LlamaForCausalLM and not base.training
    assert_same_distribution(model, base, inputs)


@pytest.mark.parametrize("label", ["softmax", "softmax-smoothing", "margin-arc", "margin-arc-log-unigram-z-loss",
                                   "sampled-ce-is", "sampled-ce-mcs-uniform"])  # fmt: skip
def test_causal_lm_folds_into_gpt2_tied_only_where_w_is_the_embedding(label):
    model, inputs = causal_model("gpt2", CAUSAL[label])
    base = model.to_base()
    assert type(base) is GPT2LMHeadModel
    # W' = W (softmax, margin without norm scaling, corrections without a per-class offset) stays tied
    tied = label in ("softmax", "softmax-smoothing", "margin-arc", "sampled-ce-is", "sampled-ce-mcs-uniform")
    assert (base.lm_head.weight is base.get_input_embeddings().weight) == tied == base.config.tie_word_embeddings
    assert_same_distribution(model, base, inputs)


@pytest.mark.parametrize("label", list(BIASED))
def test_seq2seq_folds_into_bart_with_its_final_logits_bias(label):
    model, inputs = seq2seq_model("bart", BIASED[label])
    base = model.to_base()
    assert type(base).__name__ == "BartForConditionalGeneration"
    assert not bool((base.final_logits_bias == base.final_logits_bias[0, 0]).all())  # b' is per class
    assert_same_distribution(model, base, inputs)


def test_continuous_output_vocabulary_folds_as_minus_infinity_in_the_bias():
    model = HeadsForSeq2SeqLM.from_base(_seq2seq("bart"), head={**BIASED["continuous-vmf"],
                                                                "output_vocabulary": "targets"})  # fmt: skip
    model.head.set_embedding_table(torch.randn(SEQ_VOCAB, 8, generator=torch.Generator().manual_seed(3)))
    model.head.set_output_vocabulary(list(range(30)))
    x, mask, y = seq2seq_batch(vocab_size=30)
    _trained(model, {"input_ids": x, "attention_mask": mask}, y)
    base = model.to_base()
    assert bool(torch.isinf(base.final_logits_bias[0, 30:]).all())
    assert_same_distribution(model, base, {"input_ids": x, "attention_mask": mask})


@pytest.mark.parametrize("kind, label", [("t5", "softmax"), ("t5", "margin-arc-log-unigram-z-loss"),
                                         ("t5", "sampled-ce-is"), ("marian", "sampled-ce-mcs")])  # fmt: skip
def test_seq2seq_folds_into_t5_and_marian(kind, label):
    """T5 scales the decoder states by d_model^-0.5 before its tied output layer: a W' that unties keeps the scale
    (folded); Marian has a final_logits_bias."""
    model, inputs = seq2seq_model(kind, (CAUSAL if kind == "t5" else BIASED)[label])
    base = model.to_base()
    assert type(base).__name__ == {"t5": "T5ForConditionalGeneration", "marian": "MarianMTModel"}[kind]
    assert_same_distribution(model, base, inputs)


@pytest.mark.parametrize("kind, label", [("gemma2", "softmax"), ("gemma2", "margin-lsm-unigram"),
                                         ("gemma2", "sampled-ce-is"), ("cohere", "margin-arc-log-unigram-z-loss"),
                                         ("cohere", "sampled-ce-mcs-uniform")])  # fmt: skip
def test_the_base_models_output_transform_is_kept(kind, label):
    """Gemma 2 soft-caps its logits (final_logit_softcapping), Cohere scales them (logit_scale): the exported config
    keeps them, and the folded layer lies inside them."""
    model, inputs = causal_model(kind, CAUSAL[label])
    transform = {"gemma2": "final_logit_softcapping", "cohere": "logit_scale"}[kind]
    base = model.to_base()
    assert getattr(base.config, transform) == getattr(model.config.backbone, transform)
    assert_same_distribution(model, base, inputs)


def test_a_model_built_from_a_config_folds_the_architectures_scale():
    """A Cohere model built from its config (not from_base) has a head without the logit scale the architecture
    applies: the scale is divided out of W' (the exported model's logits are then the hf_heads model's)."""
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=build("cohere", "causal_lm").config.to_dict(),
                                         head={"family": "softmax", "bias": False})).eval()  # fmt: skip
    assert model.head.options.logit_multiplier == 1.0 and model.config.backbone.logit_scale != 1.0
    x = torch.randint(4, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    assert_same_distribution(model, model.to_base(), {"input_ids": x})


@pytest.mark.parametrize("kind, label", [("bert", "softmax"), ("bert", "margin"), ("bert", "sampled"),
                                         ("bert-classifier", "margin"), ("gpt2", "softmax")])  # fmt: skip
def test_classification_folds_into_the_sequence_classifier(kind, label):
    head = {
        "softmax": {"family": "softmax", **({} if kind.startswith("bert") else NO_BIAS)},
        "margin": {"family": "margin", "margin": {"type": "arc", "m": 0.2}, "word_norm": "log-unigram"},
        "sampled": {"family": "sampled", "criterion": "ce", "method": "mcs", "num_samples": 2, "noise": "unigram"},
    }[label]
    model, inputs = classifier(kind, head)
    base = model.to_base()
    assert type(base).__name__ == ("GPT2" if kind == "gpt2" else "Bert") + "ForSequenceClassification"
    assert base.config.id2label == model.config.id2label
    assert_same_distribution(model, base, inputs, generate=False)


# ---------------------------------------------------------------- refusals: the reason and the nearest exact choice

REFUSED = {
    "sparse": ({"family": "sparse", "k": 5, **NO_BIAS}, "top_k=5 .*greedy decoding and sampling .*not give the same "
                                                        "scores"),
    "margin-max-norm": ({"family": "margin", "context_norm": "max-norm", **NO_BIAS}, "divide by ‖h‖"),
    "margin-scale": ({"family": "margin", "margin": {"type": "cos", "m": 0.1}, "scale": 8.0, **NO_BIAS},
                     "scale=8.0 .*divide by ‖h‖"),
    "sampled-bce-full": ({"family": "sampled", "criterion": "bce", "method": "full", **NO_BIAS}, r"log σ\(s\)"),
    "sampled-mse-full": ({"family": "sampled", "criterion": "mse", "method": "full", **NO_BIAS}, r"log σ\(s\)"),
    "sampled-ce-nce": ({**SAMPLED, "criterion": "ce", "method": "nce", "noise": "uniform", **NO_BIAS},
                       r"σ\(z\) \+ log D\(c\), eq. 22"),
    "a-trained-bias": ({"family": "softmax"}, "LlamaForCausalLM's output layer has no bias.*bias=False"),
    "a-per-class-offset": ({**SAMPLED, "criterion": "ce", "method": "mcs", "noise": "log-uniform", **NO_BIAS},
                           "has no bias.*differs between classes"),
}  # fmt: skip


@pytest.mark.parametrize("label", list(REFUSED))
def test_a_distribution_no_linear_layer_gives_is_refused_naming_why(label):
    head, reason = REFUSED[label]
    model, _ = causal_model("llama", head)
    with pytest.raises(ValueError, match=reason) as info:
        model.to_base()
    assert "Nearest exact choice" in str(info.value)


def test_a_per_class_correction_under_a_soft_cap_is_refused():
    model, _ = causal_model("gemma2", {**SAMPLED, "criterion": "ce", "method": "mcs", "noise": "log-uniform",
                                       "bias": False})  # fmt: skip
    with pytest.raises(ValueError, match="after the checkpoint's soft-cap"):
        model.to_base()


@pytest.mark.parametrize("head, reason", [
    ({"family": "continuous", "loss": "cosine-softmax", "embedding_dim": 8}, "divide by ‖û‖"),
    ({"family": "continuous", "loss": "vmf", "embedding_dim": 8, "projection_layer_norm": True}, "LayerNorm"),
    ({"family": "continuous", "loss": "vmf", "embedding_dim": 8, "tie_decoder_inputs": True}, "embeds the decoder's"),
])  # fmt: skip
def test_continuous_heads_that_are_no_linear_layer_are_refused(head, reason):
    model, _ = seq2seq_model("bart", head)
    with pytest.raises(ValueError, match=reason):
        model.to_base()


@pytest.mark.parametrize(
    "kind, head, where",
    [
        ("bert", {"family": "softmax"}, "classifier reads another vector than this model's head (pooling='mean'): "),
        ("gpt2", {"family": "softmax", **NO_BIAS}, "from its backbone (pooling='mean') and output layer"),
    ],
    ids=["pooled-vector-differs", "distribution-differs"],
)
def test_a_classifier_that_pools_otherwise_is_refused_naming_the_pooling(kind, head, where):
    """BERT's classifier reads its pooler's vector, so the head's input is compared first; GPT-2's projects every
    position and pools the logits after, so only the log-probabilities tell: both refusals name the pooling."""
    model, _ = classifier(kind, head, pooling="mean")
    with pytest.raises(ValueError) as info:
        model.to_base()
    assert where in str(info.value) and "Nearest exact choice" in str(info.value)


def test_a_wrapped_classifier_whose_stem_computes_otherwise_is_refused_naming_the_checkpoint_classifier():
    """A fine-tuned classifier wrapped by from_base keeps its own pooling (pooling='stem'); with its pooler's
    activation replaced, the base class (built from the config) pools otherwise: refused, naming that stem."""
    model, _ = classifier("bert-classifier", {"family": "softmax"})
    model.backbone.bert.pooler.activation = torch.nn.ReLU()
    with pytest.raises(ValueError) as info:
        model.to_base()
    assert "reads another vector than this model's head (pooling='stem' (the checkpoint classifier)): " in str(
        info.value
    )


def test_a_base_class_with_tensors_the_model_lacks_is_refused():
    """RoBERTa's classifier is dense + tanh + projection over the first token; a new head over RoBERTa's pooler has no
    such dense layer."""
    config = build("roberta", "encoder_classification").config
    model = HeadsForSequenceClassification.from_config(config).eval()  # pooling 'auto': RoBERTa's pooler
    with pytest.raises(ValueError, match="RobertaForSequenceClassification has no place for the backbone's|does not "
                                         "hold"):  # fmt: skip
        model.to_base()


def test_another_auto_class_of_a_model_with_a_tensor_it_lacks_is_refused_naming_both_classes_and_the_tensor():
    lm = GPT2LMHeadModel(tiny_gpt2_config(SEQ_VOCAB, n_layer=1))
    with pytest.raises(ValueError) as err:
        sharing(AutoModelForSequenceClassification, lm)
    assert str(err.value) == (
        "cannot wrap GPT2LMHeadModel: its GPT2ForSequenceClassification has 'score.weight', which GPT2LMHeadModel "
        "lacks"
    )


def test_a_users_own_architecture_has_no_base_class_to_export_to(tmp_path):
    """A Llama subclass the user registered with the Auto classes wraps like Llama, but its base class is not
    transformers', so no directory that loads without the user's code can be written: refused, and nothing is
    written."""

    class UserLlamaConfig(LlamaConfig):
        model_type = "user-llama-export"

    class UserLlamaForCausalLM(LlamaForCausalLM):
        config_class = UserLlamaConfig

    AutoConfig.register("user-llama-export", UserLlamaConfig, exist_ok=True)
    AutoModelForCausalLM.register(UserLlamaConfig, UserLlamaForCausalLM, exist_ok=True)
    settings = {k: v for k, v in tiny_llama_config().to_dict().items() if k != "model_type"}
    torch.manual_seed(0)
    model = HeadsForCausalLM.from_base(UserLlamaForCausalLM(UserLlamaConfig(**settings)), head={"family": "softmax"})
    message = "the base class UserLlamaForCausalLM is not a transformers class: nothing to export to"
    with pytest.raises(ValueError) as err:
        model.to_base()
    assert str(err.value) == message
    with pytest.raises(ValueError) as err:
        model.export_base(tmp_path / "export")
    assert str(err.value) == message and not (tmp_path / "export").exists()


def test_an_encoder_decoder_pair_exports_from_its_checkpoint_not_from_bare_encoders():
    """A transformers EncoderDecoderModel wrapped by from_base (its decoder's causal LM up to the projection) goes
    back to an EncoderDecoderModel; a BERT2BERT pair built from bare encoders has no prediction head to go back to."""
    from transformers import EncoderDecoderModel

    config = tiny_enc_dec_config("bert2bert", vocab_size=SEQ_VOCAB, no_dropout=True)
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM.from_base(EncoderDecoderModel(config=config).eval(), head={"family": "softmax"})
    x, mask, y = seq2seq_batch(vocab_size=SEQ_VOCAB)
    _trained(model, {"input_ids": x, "attention_mask": mask}, y)
    base = model.to_base()
    assert type(base) is EncoderDecoderModel
    decoder = model.prepare_decoder_input_ids_from_labels(y.clamp_min(4))
    assert_same_distribution(model, base, {"input_ids": x, "attention_mask": mask, "decoder_input_ids": decoder})
    bare = HeadsForSeq2SeqLM(HeadsConfig(backbone=config.to_dict(), head={"family": "softmax"})).eval()
    with pytest.raises(ValueError, match="not EncoderDecoderModel's body .*BERT2BERT"):
        bare.to_base()


def test_the_base_models_soft_cap_must_be_the_heads():
    torch.manual_seed(0)
    backbone = build("gemma2", "causal_lm").config.to_dict()
    model = HeadsForCausalLM(HeadsConfig(backbone=backbone, head={"family": "softmax", "bias": False})).eval()
    with pytest.raises(ValueError, match="caps its logits with logit_softcap="):
        model.to_base()


def test_the_sparse_refusals_nearest_choice_gives_the_same_greedy_and_sampled_tokens():
    model, inputs = causal_model("gpt2", {"family": "sparse", "k": 5, **NO_BIAS})
    sparse = {}
    for sample in (False, True):
        torch.manual_seed(7)
        sparse[sample] = model.generate(**inputs, max_new_tokens=6, do_sample=sample)
    model.set_head_options(family="softmax")  # what the refusal says to do
    model.generation_config.top_k = 5
    base = model.to_base()
    assert base.generation_config.top_k == 5
    for sample in (False, True):
        torch.manual_seed(7)
        assert torch.equal(base.generate(**inputs, max_new_tokens=6, do_sample=sample), sparse[sample]), sample


# ---------------------------------------------------------------- the exported directory


def test_export_base_loads_without_hf_heads_or_remote_code(tmp_path):
    models = {
        "gpt2-margin": causal_model("gpt2", CAUSAL["margin-arc-log-unigram-z-loss"]),
        "bart-sampled": seq2seq_model("bart", BIASED["sampled-ce-mcs"]),
        "t5-softmax": seq2seq_model("t5", CAUSAL["softmax"]),
        "bert-margin": classifier("bert", {"family": "margin", "margin": {"type": "arc", "m": 0.2}}),
    }
    auto = {"gpt2": "AutoModelForCausalLM", "bart": "AutoModelForSeq2SeqLM", "t5": "AutoModelForSeq2SeqLM",
            "bert": "AutoModelForSequenceClassification"}  # fmt: skip
    jobs = []
    for name, (model, inputs) in models.items():
        directory = model.export_base(tmp_path / name)
        assert not list(directory.glob("*.py"))  # no hf_heads code
        config = json.loads((directory / "config.json").read_text())
        assert "auto_map" not in config and config["model_type"] != "hf_heads"
        card = (directory / "README.md").read_text()
        assert f"**{model.head.family}** head" in card and "no trust_remote_code" in card
        jobs.append(export_job(directory, auto[name.split("-")[0]], inputs, remote_code=False))
    for (name, (model, inputs)), got in zip(models.items(), load_without_hf_heads(jobs, tmp_path / "check"),
                                            strict=True):  # fmt: skip
        assert got["module"].startswith("transformers.models."), got["module"]
        with torch.no_grad():
            want = torch.log_softmax(model(**inputs).logits.float(), -1)
        torch.testing.assert_close(torch.log_softmax(got["output"].float(), -1), want, rtol=0, atol=1e-5, msg=name)


def test_export_base_never_overwrites_an_hf_heads_model(tmp_path):
    model, _ = causal_model("llama", CAUSAL["softmax"])
    model.save_pretrained(tmp_path / "run")
    with pytest.raises(ValueError, match="holds an hf_heads model"):
        model.export_base(tmp_path / "run")
    assert HeadsForCausalLM.from_pretrained(tmp_path / "run").config.model_type == "hf_heads"


def test_to_base_of_a_saved_model_keeps_the_path_it_was_loaded_from(tmp_path):
    """The base model's `name_or_path` is the hf_heads model's (the name a GGUF export writes)."""
    model, _ = causal_model("llama", CAUSAL["softmax"])
    model.save_pretrained(tmp_path / "run")
    base = HeadsForCausalLM.from_pretrained(tmp_path / "run").to_base()
    assert base.config.name_or_path == str(tmp_path / "run")


def test_export_base_writes_the_tokenizer_and_the_generation_config(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>", *[f"w{i}" for i in range(VOCAB - 4)]]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", pad_token="<pad>")
    model, _ = causal_model("llama", CAUSAL["softmax"])
    model.generation_config.max_new_tokens = 7
    directory = model.export_base(tmp_path / "out", tokenizer=tokenizer)
    assert AutoTokenizer.from_pretrained(directory)("w1 w2").input_ids == [5, 6]
    assert GenerationConfig.from_pretrained(directory).max_new_tokens == 7


# ---------------------------------------------------------------- from_base, then to_base: the checkpoint again

CASES = [(task, key) for task in TASKS for key in MATRIX[task][0]]
DEFAULT = {
    "causal_lm": {"gpt2", "llama", "gemma2", "recurrent_gemma", "cohere", "granite", "falcon_h1", "llama4_text",
                  "ctrl", "mamba"},
    "seq2seq": {"bart", "t5", "t5-untied", "umt5", "switch_transformers-untied", "marian"},
    "encoder_classification": {"bert", "roberta", "deberta-v2", "distilbert", "modernbert"},
    "decoder_classification": {"gpt2", "llama"},
}  # fmt: skip
REFUSED_BY_FROM_BASE = {("causal_lm", "modernbert-decoder"), ("seq2seq", "fsmt")}


@pytest.mark.parametrize(
    "task, key",
    [
        pytest.param(task, key, id=f"{task}-{key}", marks=() if key in DEFAULT[task] else pytest.mark.slow)
        for task, key in CASES
        if (task, key) not in REFUSED_BY_FROM_BASE
    ],
)
def test_from_base_then_to_base_is_the_checkpoint(task, key):
    original = build(key, task).eval()
    wrap = {"causal_lm": HeadsForCausalLM, "seq2seq": HeadsForSeq2SeqLM}.get(task, HeadsForSequenceClassification)
    base = wrap.from_base(original, head={"family": "softmax"}).eval().to_base()
    assert type(base) is type(original)
    inputs = probe_inputs(task)
    with torch.no_grad():
        want = torch.log_softmax(original(**inputs).logits.double(), -1)
        torch.testing.assert_close(torch.log_softmax(base(**inputs).logits.double(), -1), want, rtol=0, atol=1e-5)
    if "classification" not in task:
        prompt = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
        for beams in (1,) if key in NO_BEAM_SEARCH else (1, 2):
            kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=beams)
            assert torch.equal(base.generate(**prompt, **kw), original.generate(**prompt, **kw)), beams


# ---------------------------------------------------------------- the run scripts' flag and the command


@pytest.fixture
def text_file(tmp_path):
    from hf_heads.data import load_lm_text

    path = tmp_path / "train.txt"
    path.write_text("\n".join(load_lm_text("bible-web")["train"]["text"][:200]) + "\n", encoding="utf-8")
    return path


def _run_clm_flags(text_file, out, *head: str) -> list[str]:
    return [
        "--train_file", str(text_file), "--output_dir", str(out / "run"), "--export_base_dir", str(out / "base"),
        "--do_train", "--max_steps", "2", "--save_strategy", "no", "--block_size", "32",
        "--per_device_train_batch_size", "4", "--report_to", "none", "--seed", "0", *head,
    ]  # fmt: skip


def test_a_run_script_writes_the_export_to_the_base_architecture(text_file, tmp_path, monkeypatch, capsys):
    import logging
    import runpy
    import sys

    from conftest import SCRIPTS
    from transformers import AutoModelForCausalLM, AutoTokenizer

    flags = _run_clm_flags(text_file, tmp_path, "--head", "margin", "--margin", "cos:m=0.1", "--word_norm",
                           "log-unigram", "--head_options", "bias=false")  # fmt: skip
    monkeypatch.setattr(sys, "argv", [str(SCRIPTS / "run_clm.py"), *flags])
    monkeypatch.syspath_prepend(str(SCRIPTS))
    monkeypatch.setattr(logging.root, "handlers", [])  # the script's basicConfig handler dies with the test
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    runpy.run_path(str(SCRIPTS / "run_clm.py"), run_name="__main__")
    assert f"base-architecture export written to {tmp_path / 'base'}" in capsys.readouterr().out
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
    model = HeadsForCausalLM.from_pretrained(tmp_path / "run").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "base")
    x = tokenizer("In the beginning God created", return_tensors="pt").input_ids
    assert_same_distribution(model, base, {"input_ids": x}, generate=False)


def test_a_run_scripts_export_refusal_is_one_line(text_file, tmp_path, script_error):
    code, err = script_error("run_clm.py", *_run_clm_flags(text_file, tmp_path, "--head", "sparse", "--k", "3",
                                                            "--head_options", "bias=false"))  # fmt: skip
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: --export_base_dir: the sparse head keeps")
    assert (tmp_path / "run" / "model.safetensors").is_file()  # the run itself was written first


def test_the_export_command(tmp_path, capsys):
    from gguf import GGUFReader

    from hf_heads.cli.errors import main_wrapper
    from hf_heads.cli.export_base import main

    model, inputs = causal_model("llama", CAUSAL["margin-arc-log-unigram-z-loss"])
    model.save_pretrained(tmp_path / "model")
    main([str(tmp_path / "model"), str(tmp_path / "base"), "--gguf", str(tmp_path / "m.gguf"), "--gguf_dtype", "f32"])
    out = capsys.readouterr().out
    assert "base-architecture export written to" in out and "GGUF (f32) written to" in out
    assert_same_distribution(model, LlamaForCausalLM.from_pretrained(tmp_path / "base"), inputs, generate=False)
    assert "output.weight" in {t.name for t in GGUFReader(tmp_path / "m.gguf").tensors}
    sparse, _ = causal_model("llama", REFUSED["sparse"][0])
    sparse.save_pretrained(tmp_path / "sparse")
    with pytest.raises(SystemExit) as info:
        main_wrapper(lambda: main([str(tmp_path / "sparse"), str(tmp_path / "refused")]))
    assert info.value.code == 2 and "error: the sparse head keeps" in capsys.readouterr().err


def test_the_export_command_refuses_a_model_that_is_not_an_hf_heads_model(tmp_path, capsys):
    """A plain transformers model directory is one error line naming the directory and its model_type, exit 2."""
    from hf_heads.cli.errors import main_wrapper
    from hf_heads.cli.export_base import main

    LlamaConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path / "plain")
    with pytest.raises(SystemExit) as info:
        main_wrapper(lambda: main([str(tmp_path / "plain"), str(tmp_path / "out")]))
    error = f"error: {tmp_path / 'plain'} is not an hf_heads model (model_type='llama'): nothing to do"
    assert info.value.code == 2 and capsys.readouterr().err.strip() == error
    assert not (tmp_path / "out").exists()


def test_the_export_command_refuses_an_hf_heads_config_naming_no_model_class(tmp_path, capsys):
    """An hf_heads config whose `architectures` names none of the hf_heads model classes (saved from the config
    alone): one error line naming the directory and the architectures, exit 2."""
    from hf_heads.cli.errors import main_wrapper
    from hf_heads.cli.export_base import main

    for name, architectures in (("unnamed", None), ("other", ["LlamaForCausalLM"])):
        config = HeadsConfig(backbone=tiny_llama_config(), head={"family": "softmax"})
        config.architectures = architectures
        config.save_pretrained(tmp_path / name)
        with pytest.raises(SystemExit) as info:
            main_wrapper(lambda: main([str(tmp_path / name), str(tmp_path / "out")]))  # noqa: B023 (called at once)
        error = f"error: {tmp_path / name}: config.architectures={architectures!r} names no hf_heads model class"
        assert info.value.code == 2 and capsys.readouterr().err.strip() == error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("multiplier, cap", [(0.5, None), (2.0, 3.0)])
def test_a_sampled_heads_offset_lies_inside_the_logit_multiplier(multiplier, cap):
    """s + o(c) with s = multiplier·(W h + b): the bias takes o / multiplier (CE-MCS, log-uniform noise: o = log D(c));
    under a soft-cap the offset cannot go inside and is refused."""
    from hf_heads.heads import make_head
    from hf_heads.losses.transforms import transform_logits

    section = {**SAMPLED, "criterion": "ce", "method": "mcs", "noise": "log-uniform", "logit_multiplier": multiplier,
               "logit_softcap": cap}  # fmt: skip
    head = make_head(6, 13, section).eval()
    head.set_word_counts(_counts(13))
    with torch.no_grad():
        head.bias.normal_()
    if cap is not None:
        with pytest.raises(ValueError, match="after the checkpoint's soft-cap"):
            head.linear_form()
        return
    weight, bias = head.linear_form()
    h = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    z = transform_logits(h @ weight.T + bias, multiplier)
    torch.testing.assert_close(torch.log_softmax(z, -1), torch.log_softmax(head.logits(h), -1), rtol=0, atol=1e-5)


SERVED = (
    "the hf_heads model itself serves it exactly (save_pretrained / export_for_hub: it loads with "
    "trust_remote_code=True where hf_heads is not installed)"
)


def test_a_classifier_whose_base_class_computes_with_a_dense_layer_the_model_lacks_is_refused_naming_its_tensors():
    """ELECTRA's classifier is dense + projection: a new head over the ELECTRA backbone has no dense layer."""
    config = build("electra", "encoder_classification").config
    model = HeadsForSequenceClassification(HeadsConfig(backbone=config.to_dict())).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as refused:
        model.to_base()
    assert str(refused.value) == (
        "ElectraForSequenceClassification has tensors the hf_heads model does not hold (classifier.dense.bias, "
        "classifier.dense.weight): the base architecture computes its output with more than the backbone and one "
        f"linear layer, so it cannot give this model's distribution. Nearest exact choice: {SERVED}"
    )
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_an_export_whose_logits_rule_out_a_token_the_model_gives_is_refused():
    """The model's own logits (here a hook masks token 5) and the base model's differ in support: infinitely apart."""
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"})).eval()

    def mask_token(module, args, output):
        loss, logits = output
        if logits is not None:
            logits = logits.clone()
            logits[..., 5] = float("-inf")
        return loss, logits

    model.head.register_forward_hook(mask_token)
    with pytest.raises(ValueError) as refused:
        model.to_base()
    assert str(refused.value) == (
        "the exported LlamaForCausalLM's log-probabilities differ from the hf_heads model's by up to inf nats on a "
        "probe input (tolerance 1e-05): the base architecture does not compute this model's distribution from its "
        f"backbone and output layer, so the export is refused. Nearest exact choice: {SERVED}"
    )


def test_a_model_whose_log_probabilities_are_all_nan_exports_to_a_base_model_that_gives_the_same():
    """A diverged model (NaN in its final norm) has no finite log-probability anywhere, nor has its export: the two
    agree everywhere, so the export is not refused."""
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"})).eval()
    with torch.no_grad():
        model.backbone.norm.weight.fill_(float("nan"))
    base = model.to_base()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.isnan(model(input_ids=ids).logits).all() and torch.isnan(base(input_ids=ids).logits).all()


def test_an_export_that_loads_back_otherwise_than_it_was_saved_is_refused(tmp_path):
    """Llama's rotary table is recomputed from the config when loaded, not saved: a model whose table was changed in
    memory exports a directory that transformers loads into another distribution."""
    import re

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"})).eval()
    with torch.no_grad():
        model.backbone.rotary_emb.inv_freq.mul_(3.0)
    with pytest.raises(ValueError) as refused:
        model.export_base(tmp_path / "export")
    pattern = (
        re.escape(
            f"{tmp_path / 'export'} loads into a LlamaForCausalLM whose log-probabilities differ from the "
            "exported model's by up to "
        )
        + r"[0-9.e-]+"
        + re.escape(
            " nats: transformers loads ? otherwise than the exported model holds them (a table the architecture "
            "recomputes when it loads instead of saving it?)"
        )
        + "$"
    )
    assert re.match(pattern, str(refused.value)), str(refused.value)
    assert list(tmp_path.iterdir()) == []  # nothing written that a user could upload


def test_an_export_into_a_directory_of_an_earlier_export_replaces_its_files_and_keeps_the_others(tmp_path):
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"})).eval()
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text('{"model_type": "llama", "stale": true}')
    (out / "notes.txt").write_text("mine")
    assert model.export_base(out) == out
    assert "stale" not in json.loads((out / "config.json").read_text())
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no staging directory left


def test_the_export_card_names_the_hub_model_it_was_trained_from(tmp_path):
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"})).eval()
    model.config.name_or_path = "someone/tiny-llama"
    card = (model.export_base(tmp_path / "export") / "README.md").read_text()
    front = card.split("---")[1].strip().splitlines()
    assert front == [
        "library_name: transformers", "tags:", "- hf_heads", "- hf_heads-base-export", "base_model: someone/tiny-llama"
    ]  # fmt: skip
    model.config.name_or_path = str(tmp_path)  # a local directory: no Hub model to name
    card = (model.export_base(tmp_path / "local") / "README.md").read_text()
    assert "base_model:" not in card


def test_the_exported_config_drops_the_backbones_auto_map_and_the_model_keeps_it(tmp_path):
    """A backbone config carrying `auto_map` (a checkpoint with code of its own) exports as its transformers class,
    with no `auto_map` pointing at code the export does not hold."""
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"})).eval()
    auto_map = {"AutoModelForCausalLM": "modeling_own.OwnForCausalLM"}
    model.config.backbone.auto_map = auto_map
    directory = model.export_base(tmp_path / "export")
    assert "auto_map" not in json.loads((directory / "config.json").read_text())
    assert model.config.backbone.auto_map == auto_map
    assert type(LlamaForCausalLM.from_pretrained(directory)) is LlamaForCausalLM


def test_a_base_class_whose_output_layer_is_no_linear_layer_is_refused_naming_it():
    """FSMT's `get_output_embeddings` is its decoder's embedding table (the projection sits inside its decoder)."""
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=MATRIX["seq2seq"][0]["fsmt"]().to_dict())).eval()
    with pytest.raises(ValueError) as refused:
        model.to_base()
    assert str(refused.value) == "FSMTForConditionalGeneration's output layer is Embedding, not an nn.Linear"


def test_a_sparse_head_that_keeps_every_logit_exports_as_its_softmax_layer(tmp_path):
    """decode_k >= V: the sparse head's inference distribution is the plain softmax of its layer, which the base
    architecture holds exactly; the exported card names the head as its options describe it."""
    model, inputs = causal_model("llama", {"family": "sparse", "k": 5, "decode_k": VOCAB, **NO_BIAS})
    weight, bias = model.head.linear_form()
    assert torch.equal(weight, model.head.weight) and bias is None
    assert_same_distribution(model, model.to_base(), inputs, generate=False)
    card = (model.export_base(tmp_path / "export") / "README.md").read_text()
    assert f"trained with the hf_heads **sparse** head (sparse k=5 decode_k={VOCAB}; {model.head.paper})" in card
