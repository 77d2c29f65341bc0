"""What transformers' example scripts, Trainer and generation read from `model.config` is the backbone's (read
through, never a copy), setting it sets the backbone's and round-trips through save/load and the exported code;
`from_base` of an `EncoderDecoderModel` (BERT2BERT) checkpoint; a classifier's labels from `config=`; token ids and
labels outside the vocabulary refused with the fix."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import tiny_gpt2_config, tiny_llama_config
from transformers import (
    AutoConfig,
    BartConfig,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    EncoderDecoderConfig,
    EncoderDecoderModel,
    T5Config,
)

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification


def _bart(**kw) -> BartConfig:
    fields = dict(
        vocab_size=50,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
    )
    return BartConfig(**{**fields, **kw})


def _bert(**kw) -> BertConfig:
    fields = dict(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return BertConfig(**{**fields, **kw})


def test_backbone_values_read_through_and_track_the_backbone():
    """Token ids (generation's and run_translation's `decoder_start_token_id`, BART's `forced_eos_token_id`) and
    `max_position_embeddings` are the backbone's; a change of the backbone's value is seen; none is stored on the
    HeadsConfig itself."""
    config = HeadsConfig(backbone=_bart().to_dict())
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "forced_eos_token_id"):
        assert getattr(config, name) == getattr(config.backbone, name), name
    assert config.forced_bos_token_id is None  # not a BART config field: None, as transformers' configs answered
    assert config.max_position_embeddings == 64 and config.vocab_size == 50 and config.is_encoder_decoder
    config.backbone.decoder_start_token_id = 7
    config.backbone.max_position_embeddings = 32
    assert config.decoder_start_token_id == 7 and config.max_position_embeddings == 32
    assert "decoder_start_token_id" not in config.to_dict() and "max_position_embeddings" not in config.to_dict()
    gpt2 = HeadsConfig(backbone=tiny_gpt2_config(n_positions=77).to_dict())
    assert gpt2.max_position_embeddings == 77  # GPT-2's n_positions through its own alias
    t5 = HeadsConfig(backbone=T5Config(vocab_size=50, d_model=32, decoder_start_token_id=0).to_dict())
    assert not hasattr(t5, "max_position_embeddings")  # relative positions: no limit, as T5's own config says
    with pytest.raises(AttributeError):
        config.no_such_field  # noqa: B018


@pytest.mark.parametrize(("encoder", "decoder"), [(32, 48), (48, 32)], ids=["encoder-shorter", "decoder-shorter"])
def test_an_encoder_decoder_pairs_length_limit_is_the_smaller_of_its_sides(encoder: int, decoder: int):
    pair = EncoderDecoderConfig.from_encoder_decoder_configs(
        _bert(max_position_embeddings=encoder),
        _bert(max_position_embeddings=decoder, is_decoder=True, add_cross_attention=True),
    )
    assert HeadsConfig(backbone=pair.to_dict()).max_position_embeddings == 32


def test_setting_a_read_through_value_sets_the_backbone_and_round_trips(tmp_path):
    """`model.config.pad_token_id = ...` (what scripts do) sets the backbone's value, which save/load keeps."""
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=_bart().to_dict()))
    model.config.pad_token_id = 5
    model.config.decoder_start_token_id = 6
    assert model.config.backbone.pad_token_id == 5 and model.config.backbone.decoder_start_token_id == 6
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "pad_token_id" not in saved and saved["backbone"]["pad_token_id"] == 5
    loaded = HeadsForSeq2SeqLM.from_pretrained(tmp_path)
    assert (loaded.config.pad_token_id, loaded.config.decoder_start_token_id) == (5, 6)
    assert loaded.config.backbone.pad_token_id == 5


def test_tie_word_embeddings_defaults_to_false_and_config_json_says_so(tmp_path):
    """A head is untied from the input embeddings unless the config asks: the default is False, written as false."""
    config = HeadsConfig(backbone=tiny_gpt2_config().to_dict(), head={"family": "softmax"})
    assert config.tie_word_embeddings is False
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["tie_word_embeddings"] is False
    assert HeadsConfig.from_pretrained(tmp_path).tie_word_embeddings is False


def test_generation_parameters_go_to_the_generation_config(tmp_path):
    """BART's `forced_eos_token_id` reads through without being taken for a generation parameter set on the model
    config (transformers refuses to save or generate with those); setting one the backbone does not keep is refused
    with the place it belongs, and setting it to None (run_translation's non-multilingual case) is a no-op."""
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=_bart().to_dict()))
    assert model.config.forced_eos_token_id == 2 and model.config._get_generation_parameters() == {}
    model.save_pretrained(tmp_path)  # transformers would raise on a generation parameter of the model config
    model.generate(torch.tensor([[4, 5, 6]]), max_new_tokens=2)
    with pytest.raises(ValueError, match=r"forced_bos_token_id=3.*model\.generation_config\.forced_bos_token_id"):
        model.config.forced_bos_token_id = 3
    model.config.forced_bos_token_id = None
    assert model.config.forced_bos_token_id is None


def test_run_translation_reads_the_decoder_start_and_checks_the_source_length():
    """The lines of transformers' run_translation.py that read the model config: `decoder_start_token_id` (an
    AttributeError before) and the source-length check, which needs `max_position_embeddings`."""
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=_bart(max_position_embeddings=64).to_dict()))
    assert model.config.decoder_start_token_id is not None
    max_source_length = 128
    skipped = not (
        hasattr(model.config, "max_position_embeddings") and model.config.max_position_embeddings < max_source_length
    )
    assert not skipped


def test_vocab_size_is_read_only():
    config = HeadsConfig(backbone=tiny_llama_config().to_dict())
    with pytest.raises(ValueError, match=r"vocab_size=70.*resize_token_embeddings\(len\(tokenizer\)\)"):
        config.vocab_size = 70


BLOCK_HF_HEADS = r"""
import importlib.util, json, os, sys
sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or os.getcwd(), "hf_heads"))]
sys.meta_path[:] = [f for f in sys.meta_path if "hf_heads" not in repr(f) + getattr(f, "__module__", "")]
assert importlib.util.find_spec("hf_heads") is None
sys.modules["hf_heads"] = None
import transformers
config = transformers.AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=True)
before = {n: getattr(config, n) for n in ("pad_token_id", "decoder_start_token_id", "max_position_embeddings")}
config.pad_token_id = 9
print(json.dumps({"module": type(config).__module__, "before": before, "backbone_pad": config.backbone.pad_token_id}))
"""


def test_read_through_works_in_the_exported_code(tmp_path):
    """A saved model's config loaded with `trust_remote_code=True` where hf_heads is not installed reads and sets
    through as well (the exported configuration module carries the behaviour)."""
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=_bart().to_dict()))
    model.config.pad_token_id = 4
    model.save_pretrained(tmp_path / "model")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_HF_HEADS, str(tmp_path / "model")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["module"].startswith("transformers_modules.")
    assert result["before"] == {"pad_token_id": 4, "decoder_start_token_id": 2, "max_position_embeddings": 64}
    assert result["backbone_pad"] == 9


@pytest.fixture
def bert2bert(tmp_path):
    """A tiny BERT2BERT `EncoderDecoderModel` saved by transformers."""
    torch.manual_seed(0)
    encoder = _bert(max_position_embeddings=64)
    decoder = _bert(max_position_embeddings=48, is_decoder=True, add_cross_attention=True)
    config = EncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id = 2, 0
    model = EncoderDecoderModel(config=config).eval()
    model.generation_config.eos_token_id = 3
    model.save_pretrained(tmp_path / "bert2bert")
    return str(tmp_path / "bert2bert"), model


def test_from_base_wraps_an_encoder_decoder_model_checkpoint(bert2bert, tmp_path):
    """BERT2BERT saved by `EncoderDecoderModel`: the wrapped model computes the checkpoint's loss and greedy
    translation (its decoder's LM-head transform kept), reads its token ids and the pair's length limit, and saves
    and loads as itself."""
    path, base = bert2bert
    model = HeadsForSeq2SeqLM.from_base(path).eval()
    assert model.config.decoder_stem == "cls.predictions.decoder" and model.config.tie_word_embeddings
    assert model.config.decoder_start_token_id == 2 and model.config.pad_token_id == 0
    assert model.config.max_position_embeddings == 48  # the smaller of the encoder's 64 and the decoder's 48
    g = torch.Generator().manual_seed(0)
    ids, labels = torch.randint(4, 60, (2, 7), generator=g), torch.randint(4, 60, (2, 5), generator=g)
    with torch.no_grad():
        ours, theirs = model(input_ids=ids, labels=labels), base(input_ids=ids, labels=labels)
        torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-5, atol=1e-5)
        generated = model.generate(ids, max_new_tokens=5, do_sample=False, eos_token_id=3)
        torch.testing.assert_close(generated, base.generate(ids, max_new_tokens=5, do_sample=False, eos_token_id=3))
    model.save_pretrained(tmp_path / "wrapped")
    loaded = HeadsForSeq2SeqLM.from_pretrained(tmp_path / "wrapped").eval()
    assert loaded.config.decoder_stem == "cls.predictions.decoder"
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids, labels=labels).logits, ours.logits)


def test_from_base_of_a_loaded_encoder_decoder_model_leaves_it_intact(bert2bert):
    """A loaded `EncoderDecoderModel` is shared, not changed: its own decoder keeps its output layer."""
    _, base = bert2bert
    model = HeadsForSeq2SeqLM.from_base(base, head={"family": "margin", "margin": "cos", "m": 0.1})
    assert isinstance(base.decoder.cls.predictions.decoder, torch.nn.Linear)
    assert model.backbone.encoder.embeddings.word_embeddings.weight is base.encoder.embeddings.word_embeddings.weight


def test_decoder_stem_is_validated():
    """Refused on a backbone that is no encoder-decoder pair, and, on a pair, where it names no module of the decoder
    or a module that is not its final linear layer."""
    with pytest.raises(ValueError, match=r"decoder_stem='lm_head'.*backbone.model_type='bart'"):
        HeadsConfig(backbone=_bart().to_dict(), decoder_stem="lm_head")
    pair = EncoderDecoderConfig.from_encoder_decoder_configs(_bert(), _bert(is_decoder=True, add_cross_attention=True))
    refusals = {
        "lm_head": "decoder_stem='lm_head': BertLMHeadModel has no module 'lm_head'",
        "cls.predictions": "decoder_stem='cls.predictions' is a BertLMPredictionHead, not the final nn.Linear",
    }
    for stem, message in refusals.items():
        with pytest.raises(ValueError) as refused:
            HeadsForSeq2SeqLM(HeadsConfig(backbone=pair.to_dict(), decoder_stem=stem))
        assert str(refused.value) == message


@pytest.fixture
def bert_dir(tmp_path):
    torch.manual_seed(0)
    BertModel(_bert()).save_pretrained(tmp_path / "bert")
    return str(tmp_path / "bert")


def test_classifier_reads_its_labels_from_config(bert_dir):
    """`from_base(name, config=config)` reads num_labels / id2label / label2id / problem_type as
    `AutoModelForSequenceClassification.from_pretrained(name, config=config)` does."""
    model = HeadsForSequenceClassification.from_base(
        bert_dir, config=AutoConfig.from_pretrained(bert_dir, num_labels=5)
    )
    assert model.config.num_labels == 5 and model.head.num_classes == 5
    labels = {0: "neg", 1: "neu", 2: "pos"}
    config = AutoConfig.from_pretrained(
        bert_dir,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
        problem_type="single_label_classification",
    )
    model = HeadsForSequenceClassification.from_base(bert_dir, config=config)
    assert model.config.id2label == labels and model.config.label2id == {"neg": 0, "neu": 1, "pos": 2}
    assert model.config.problem_type == "single_label_classification" and model.head.num_classes == 3
    explicit = HeadsForSequenceClassification.from_base(bert_dir, num_labels=4, config=config)  # arguments win
    assert explicit.config.num_labels == 4
    multi = AutoConfig.from_pretrained(bert_dir, num_labels=3, problem_type="multi_label_classification")
    with pytest.raises(ValueError, match=r"problem_type='multi_label_classification'.*allowed"):
        HeadsForSequenceClassification.from_base(bert_dir, config=multi)


def test_a_classifier_of_another_problem_type_is_refused_every_way_it_arrives(bert_dir, tmp_path):
    """A head trains one class per example: a fine-tuned multi-label or regression classifier is refused, not wrapped
    as a softmax over its labels; so is problem_type given to from_pretrained, to from_base or in a config, and labels
    that are no class ids (multi-hot rows, floats)."""
    message = (
        "an hf_heads head trains one class per example (labels: a class id per example); allowed: None, "
        "'single_label_classification' (multi-label and regression targets are not head families)"
    )
    for problem in ("multi_label_classification", "regression"):
        path = tmp_path / problem
        BertForSequenceClassification(_bert(num_labels=3, problem_type=problem)).save_pretrained(path)
        with pytest.raises(ValueError) as refused:
            HeadsForSequenceClassification.from_pretrained(path)
        assert str(refused.value) == f"{str(path)!r} is a classifier with config.problem_type={problem!r}: {message}"
    for build in (HeadsForSequenceClassification.from_pretrained, HeadsForSequenceClassification.from_base):
        with pytest.raises(ValueError) as refused:
            build(bert_dir, num_labels=3, problem_type="regression")
        assert str(refused.value) == f"problem_type='regression': {message}", build.__name__
    with pytest.raises(ValueError) as refused:
        HeadsForSequenceClassification(
            HeadsConfig(backbone=_bert().to_dict(), num_labels=3, problem_type="multi_label_classification")
        )
    assert str(refused.value) == f"problem_type='multi_label_classification': {message}"
    model = HeadsForSequenceClassification.from_pretrained(bert_dir, num_labels=3)
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    with pytest.raises(ValueError) as refused:
        model(input_ids=ids, labels=torch.tensor([[1, 0, 1], [0, 1, 0]]))
    assert str(refused.value) == (
        "labels has shape (2, 3), expected (2,): one class id per example (multi-label and regression targets are "
        "not head families)"
    )
    with pytest.raises(ValueError) as refused:
        model(input_ids=ids, labels=torch.tensor([0.0, 1.0]))
    assert str(refused.value) == (
        "labels has dtype torch.float32; allowed: an integer dtype holding class ids (-100: ignored)"
    )
    loss = model(input_ids=ids, labels=torch.tensor([0, 2])).loss
    assert loss.isfinite() and torch.equal(model(input_ids=ids, labels=torch.tensor([[0], [2]])).loss, loss)


def test_ids_outside_the_vocabulary_are_refused_with_the_fix():
    """A tokenizer larger than the model (input ids or labels >= vocab_size) gets a message naming the sizes and the
    fix, not torch's `IndexError: index out of range in self`; -100 labels are fine."""
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict()))
    ok = torch.tensor([[4, 5, 60]])
    model(input_ids=ok, labels=torch.tensor([[4, -100, 60]]))
    fix = (
        "Is the tokenizer larger than the model's vocabulary (len(tokenizer) > vocab_size=61)? hf_heads models cannot "
        "be resized, so resize the base model before wrapping it: base = AutoModelFor….from_pretrained(name); "
        "base.resize_token_embeddings(len(tokenizer)); model = HeadsForCausalLM.from_base(base, ...) (or use the "
        "tokenizer the checkpoint was trained with)"
    )
    with pytest.raises(ValueError) as err:
        model(input_ids=torch.tensor([[4, 61]]))
    assert str(err.value) == (
        f"input_ids holds token id 61, but the model's embeddings have 61 ids (allowed: 0 <= id < 61). {fix}"
    )
    with pytest.raises(ValueError) as err:
        model(input_ids=ok, labels=torch.tensor([[4, 5, 64]]))
    assert str(err.value) == (
        "labels holds token id 64, but the head's vocabulary has 61 ids (allowed: 0 <= id < 61, or -100 to ignore a "
        f"position). {fix}"
    )
    with pytest.raises(ValueError, match=r"labels holds token id -3"):
        model(input_ids=ok, labels=torch.tensor([[4, -3, 5]]))
    seq2seq = HeadsForSeq2SeqLM(HeadsConfig(backbone=_bart().to_dict()))
    with pytest.raises(ValueError, match=r"decoder_input_ids holds token id 50.*HeadsForSeq2SeqLM\.from_base"):
        seq2seq(input_ids=torch.tensor([[4, 5]]), decoder_input_ids=torch.tensor([[2, 50]]))
    with pytest.raises(ValueError, match=r"labels holds token id 55"):
        seq2seq(input_ids=torch.tensor([[4, 5]]), labels=torch.tensor([[7, 55]]))


def test_class_labels_outside_num_labels_are_refused(bert_dir):
    model = HeadsForSequenceClassification.from_base(bert_dir, num_labels=5)
    model(input_ids=torch.tensor([[4, 5, 6]]), labels=torch.tensor([4]))
    with pytest.raises(ValueError, match=r"labels holds 5, but the classifier has num_labels=5.*label2id"):
        model(input_ids=torch.tensor([[4, 5, 6]]), labels=torch.tensor([5]))
    with pytest.raises(ValueError, match=r"input_ids holds token id 60"):
        model(input_ids=torch.tensor([[4, 60]]))


def test_accelerators_check_the_first_forward_of_each_mode_only():
    """On an accelerator reading the check back synchronises the host: only the first forward of training and of
    evaluation check; on CPU every forward does."""
    from hf_heads.modeling import inputs

    model = torch.nn.Linear(2, 2)
    cuda = torch.device("cuda")
    assert [inputs._this_forward_checks(model, cuda) for _ in range(3)] == [True, False, False]
    model.eval()
    assert [inputs._this_forward_checks(model, cuda) for _ in range(2)] == [True, False]
    assert all(inputs._this_forward_checks(model, torch.device("cpu")) for _ in range(3))


def test_a_forward_on_the_meta_device_gives_the_output_shapes():
    """A model built on the meta device (shapes without weights) runs an evaluation forward: its token ids have no
    values to check, and the logits have the shapes of the real model's."""
    with torch.device("meta"):
        causal = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict())).eval()
        classifier = HeadsForSequenceClassification(HeadsConfig(backbone=_bert().to_dict(), num_labels=3)).eval()
    ids = torch.tensor([[4, 5, 60]], device="meta")
    assert causal(input_ids=ids).logits.shape == (1, 3, 61)
    assert classifier(input_ids=ids).logits.shape == (1, 3)
