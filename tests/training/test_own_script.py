"""A transformers example script with its classes swapped for hf_heads' (docs/own-script.md): the head flags parsed
by `HeadsTrainingArguments` alone, `from_pretrained(base, config=...)` / `from_config(config)` building the model with
the default head, `HeadsTrainer` binding the head the flags name to it, counting the words and calibrating a pending
warm start before the first step, the saved result reloading to the same logits; no state shared through the process
(arguments built elsewhere change no model); and no silent bad start: an uncalibrated head refuses to train, and
every family `from_base` makes starts near the checkpoint's own loss."""

import logging
import math
from dataclasses import dataclass

import pytest
import torch
from conftest import tiny_llama_config
from datasets import Dataset
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertModel,
    HfArgumentParser,
    LlamaForCausalLM,
    default_data_collator,
)

from hf_heads import (
    HeadsForCausalLM,
    HeadsForSeq2SeqLM,
    HeadsForSequenceClassification,
    HeadsSeq2SeqTrainer,
    HeadsSeq2SeqTrainingArguments,
    HeadsTrainer,
    HeadsTrainingArguments,
)
from hf_heads.heads import head_dict
from hf_heads.training import prepare_head
from hf_heads.training.arguments import FLAG_TO_OPTION

V = 61
MARGIN = ["--head", "margin", "--margin", "arc", "--m", "0.001", "--word_norm", "log-unigram", "--context_norm"]
MARGIN += ["max-norm"]
MARGIN_HEAD = {"family": "margin", "margin": "arc", "m": 0.001, "word_norm": "log-unigram", "context_norm": "max-norm"}


@dataclass
class ModelArguments:  # the shape of a transformers example script's own dataclasses
    model_name_or_path: str
    config_name: str | None = None


@dataclass
class DataTrainingArguments:
    max_train_samples: int | None = None


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny Llama with peaked output distributions (initializer_range 0.3), saved, and 16 sequences it samples
    itself: its own loss on them is low, so a bad start shows."""
    torch.manual_seed(0)
    lm = LlamaForCausalLM(tiny_llama_config(vocab_size=V, initializer_range=0.3)).eval()
    path = tmp_path_factory.mktemp("base")
    lm.save_pretrained(path)
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(1)
        ids = lm.generate(
            torch.full((16, 1), 2), do_sample=True, max_new_tokens=23, min_new_tokens=23, top_k=0, pad_token_id=1
        )  # (16, 24)
    return str(path), lm, ids


def _args(tmp_path, argv, cls=HeadsTrainingArguments, extra=()):
    common = ["--output_dir", str(tmp_path / "out"), "--max_steps", "2", "--per_device_train_batch_size", "4"]
    common += ["--report_to", "none", "--use_cpu", "true", "--save_strategy", "no", "--disable_tqdm", "true"]
    common += ["--logging_steps", "1", "--learning_rate", "1e-3", *extra]
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, cls))
    return parser.parse_args_into_dataclasses(args=[*argv, *common])


def test_head_flags_come_from_the_training_arguments_alone(base, tmp_path):
    """The flags' head reaches the model through the trainer it is given to, the model built as the script builds it
    (the default head until then); building arguments changes no model built elsewhere."""
    path, _, ids = base
    model_args, _, training_args = _args(tmp_path, ["--model_name_or_path", path, *MARGIN])
    assert training_args.head_config() == head_dict(MARGIN_HEAD)  # the flat form given, the nested one kept
    assert training_args.head_config()["margin"] == {"type": "arc", "m": 0.001}
    config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    model = HeadsForCausalLM.from_pretrained(
        model_args.model_name_or_path, config=config, revision="main", token=None, trust_remote_code=False, dtype=None
    )
    assert model.config.head["family"] == "softmax" and model.head_origin == "checkpoint"  # nothing global
    softmax_weight = model.head.weight.detach().clone()
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    HeadsTrainer(model=model, args=training_args, train_dataset=data, data_collator=default_data_collator)
    assert model.config.head["family"] == "margin" and model.config.head["word_norm"] == "log-unigram"
    assert model.head.family == "margin" and model.head_origin is None
    assert torch.equal(model.head.weight, softmax_weight)  # started from the checkpoint's output layer
    assert model.head.warm_start_pending  # calibrated by the trainer's train() (word counts first)
    scratch = HeadsForCausalLM.from_config(config, trust_remote_code=False)
    assert scratch.config.head["family"] == "softmax" and scratch.head_origin == "init"
    HeadsTrainer(model=scratch, args=training_args, train_dataset=data, data_collator=default_data_collator)
    assert scratch.config.head["family"] == "margin" and scratch.config.backbone.model_type == "llama"
    assert not scratch.head.warm_start_pending  # built new: nothing to calibrate to
    assert HeadsForCausalLM.from_pretrained(path, head={"family": "sparse", "k": 5}).config.head["family"] == "sparse"
    assert HeadsForCausalLM.from_pretrained(path).config.head["family"] == "softmax"


def test_a_model_the_trainer_builds_again_for_training_takes_the_head_the_flags_name(base, tmp_path):
    """A trainer with a model_init builds the model again when training starts (as each trial of a hyper-parameter
    search does): the flags' head is bound to that model too, and it is the one that trains."""
    path, _, ids = base
    argv = ["--model_name_or_path", path, "--head", "sparse", "--k", "5"]
    _, _, training_args = _args(tmp_path, argv, extra=["--max_steps", "1"])
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    config = AutoConfig.from_pretrained(path)
    first = HeadsForCausalLM.from_config(config)
    trainer = HeadsTrainer(model=first, args=training_args, train_dataset=data, data_collator=default_data_collator)
    trainer.model_init = lambda: HeadsForCausalLM.from_config(config)
    trainer.train()
    model = trainer.model
    assert model is not first and model.config.head == head_dict({"family": "sparse", "k": 5})
    assert model.head.family == "sparse" and model.head.options.k == 5
    assert trainer.state.log_history[0]["loss"] > 0


def test_a_trainer_given_model_init_trains_the_model_it_builds_with_the_flags_head_prepared(base, tmp_path):
    """`HeadsTrainer(model_init=...)`, as a hyper-parameter search builds it: constructed with the flags' head bound
    to the first model, and at `train()` the fresh model gets that head, its word counts and its warm start before
    the first step (a norm-scaled margin refuses to train uncalibrated), its training accuracy recorded."""
    path, _, ids = base
    _, _, training_args = _args(tmp_path, ["--model_name_or_path", path, *MARGIN], extra=["--max_steps", "1"])
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    built = []

    def model_init():
        built.append(HeadsForCausalLM.from_pretrained(path))
        return built[-1]

    trainer = HeadsTrainer(
        model_init=model_init, args=training_args, train_dataset=data, data_collator=default_data_collator
    )
    assert len(built) == 1 and built[0].config.head == head_dict(MARGIN_HEAD)
    trainer.train()
    assert len(built) == 2 and trainer.model is built[1]
    head, section = trainer.model.head, dict(trainer.model.config.head)
    assert section.pop("warm_start_gain") != 1.0  # fitted on the training rows
    assert section == {k: v for k, v in head_dict(MARGIN_HEAD).items() if k != "warm_start_gain"}
    assert head.has_word_counts and not head.warm_start_pending
    logged = trainer.state.log_history[0]
    assert math.isfinite(logged["loss"]) and "train_accuracy" in logged


def test_label_smoothing_factor_is_refused_before_the_flags_head_reaches_the_model(base, tmp_path):
    """transformers' --label_smoothing_factor smooths logits the heads do not return in training: refused, naming the
    head's own option, with the model left as it was (its checkpoint head, not the flags' margin head)."""
    path, _, ids = base
    _, _, training_args = _args(
        tmp_path, ["--model_name_or_path", path, *MARGIN], extra=["--label_smoothing_factor", "0.1"]
    )
    model = HeadsForCausalLM.from_pretrained(path)
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    with pytest.raises(ValueError) as err:
        HeadsTrainer(model=model, args=training_args, train_dataset=data, data_collator=default_data_collator)
    assert str(err.value) == (
        "--label_smoothing_factor=0.1 smooths logits that hf_heads heads do not return in training; use the head's "
        "own option (--head sparse --head_label_smoothing 0.1)"
    )
    assert model.config.head["family"] == "softmax" and model.head.family == "softmax"
    assert model.head_origin == "checkpoint"


def test_compute_loss_func_is_refused_for_an_hf_heads_model(base, tmp_path):
    """transformers' compute_loss_func gets the model's inference logits (the model called without labels): with
    head flags or a model's own head, the training loss would not be the head's; refused before the model changes,
    naming the head, for a model given directly and for one from model_init."""
    path, _, ids = base
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    loss = lambda outputs, labels, num_items_in_batch=None: outputs.logits.sum()  # noqa: E731
    _, _, flags_args = _args(tmp_path, ["--model_name_or_path", path, *MARGIN])
    model = HeadsForCausalLM.from_pretrained(path)
    with pytest.raises(ValueError) as err:
        HeadsTrainer(model=model, args=flags_args, train_dataset=data, compute_loss_func=loss)
    assert str(err.value) == (
        "compute_loss_func: the Trainer would call the model without labels and the function on the margin head's "
        "inference logits, so the training loss would not be the margin head's criterion (nor keep its training "
        "options); hf_heads models compute their training loss themselves: leave compute_loss_func unset (the "
        "head's options give label smoothing, z-loss, class weights and a confidence penalty)"
    )
    assert model.head.family == "softmax" and model.head_origin == "checkpoint"
    _, _, plain_args = _args(tmp_path, ["--model_name_or_path", path])
    with pytest.raises(ValueError, match="^compute_loss_func: .* on the softmax head's inference logits"):
        HeadsTrainer(model=HeadsForCausalLM.from_pretrained(path), args=plain_args, compute_loss_func=loss)
    init = lambda: HeadsForCausalLM.from_pretrained(path)  # noqa: E731
    with pytest.raises(ValueError, match="^compute_loss_func: .* on the softmax head's inference logits"):
        HeadsTrainer(model_init=init, args=plain_args, compute_loss_func=loss)
    HeadsTrainer(model=LlamaForCausalLM.from_pretrained(path), args=plain_args, compute_loss_func=loss)  # its own


def test_an_optimizer_built_before_the_flags_head_is_refused_and_the_two_ways_that_work_train_it(base, tmp_path):
    """An optimizer given in optimizers=, built over the default head's parameters, would never train the flags'
    margin head that replaces it: refused before the model changes. optimizer_cls_and_kwargs (built after the head),
    or the head bound first and the optimizer built after, train the margin head's weight."""
    path, _, ids = base
    _, _, training_args = _args(tmp_path, ["--model_name_or_path", path, *MARGIN], extra=["--max_steps", "1"])
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    common = {"args": training_args, "train_dataset": data, "data_collator": default_data_collator}
    model = HeadsForCausalLM.from_pretrained(path)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as err:
        HeadsTrainer(model=model, optimizers=(torch.optim.AdamW(model.parameters()), None), **common)
    assert str(err.value) == (
        "the training arguments' head flags replace the model's softmax head by a margin head with new parameters, "
        "which the optimizer given in optimizers= (built before) does not hold: they would never train; give the "
        "Trainer optimizer_cls_and_kwargs=(torch.optim.AdamW, {...}) instead (it builds the optimizer after the "
        "head), or bind the head first (model.bind_head(training_args.head_config())) and build the optimizer after"
    )
    assert model.head.family == "softmax" and model.head_origin == "checkpoint"
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())

    model = HeadsForCausalLM.from_pretrained(path)
    trainer = HeadsTrainer(model=model, optimizer_cls_and_kwargs=(torch.optim.AdamW, {"lr": 1e-2}), **common)
    start = model.head.weight.detach().clone()
    trainer.train()
    assert model.head.family == "margin" and not torch.equal(start, model.head.weight.detach())

    model = HeadsForCausalLM.from_pretrained(path)
    model.bind_head(training_args.head_config())
    trainer = HeadsTrainer(model=model, optimizers=(torch.optim.AdamW(model.parameters(), lr=1e-2), None), **common)
    start = model.head.weight.detach().clone()
    trainer.train()
    assert model.head.family == "margin" and not torch.equal(start, model.head.weight.detach())


def test_from_pretrained_of_a_base_checkpoint_refuses_from_tf(base):
    with pytest.raises(ValueError, match="from_tf=True"):
        HeadsForCausalLM.from_pretrained(base[0], from_tf=True)


def test_causal_lm_script_flow_trains_saves_and_reloads_the_same_logits(base, tmp_path):
    path, _, ids = base
    model_args, _, training_args = _args(tmp_path, ["--model_name_or_path", path, *MARGIN])
    config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    model = HeadsForCausalLM.from_pretrained(model_args.model_name_or_path, config=config)
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    trainer = HeadsTrainer(model=model, args=training_args, train_dataset=data, data_collator=default_data_collator)
    assert model.head.warm_start_pending  # no word counts yet to calibrate with
    trainer.train()
    trainer.save_model()
    assert not model.head.warm_start_pending and model.head.has_word_counts
    assert model.config.head["warm_start_gain"] != 1.0  # fitted on the first training examples
    model.eval()
    for cls in (HeadsForCausalLM, AutoModelForCausalLM):
        again = cls.from_pretrained(training_args.output_dir).eval()
        assert again.config.head == model.config.head
        with torch.no_grad():
            assert torch.equal(again(ids[:3]).logits, model(ids[:3]).logits)


def test_seq2seq_script_flow_trains_saves_and_reloads_the_same_logits(tmp_path):
    torch.manual_seed(0)
    bart = BartConfig(
        vocab_size=V, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2,
    )  # fmt: skip
    BartForConditionalGeneration(bart).save_pretrained(tmp_path / "bart")
    model_args, _, training_args = _args(
        tmp_path, ["--model_name_or_path", str(tmp_path / "bart"), *MARGIN], HeadsSeq2SeqTrainingArguments
    )
    config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    model = HeadsForSeq2SeqLM.from_pretrained(model_args.model_name_or_path, config=config)
    g = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(4, V, (16, 12), generator=g), torch.randint(4, V, (16, 9), generator=g)
    data = Dataset.from_dict({"input_ids": src.tolist(), "labels": tgt.tolist()})
    trainer = HeadsSeq2SeqTrainer(model=model, args=training_args, train_dataset=data)
    assert model.config.head["family"] == "margin" and model.head.warm_start_pending
    trainer.train()
    trainer.save_model()
    assert not model.head.warm_start_pending
    model.eval()
    again = HeadsForSeq2SeqLM.from_pretrained(training_args.output_dir).eval()
    with torch.no_grad():
        assert torch.equal(
            again(input_ids=src[:2], labels=tgt[:2]).logits, model(input_ids=src[:2], labels=tgt[:2]).logits
        )


def test_classification_script_flow_takes_num_labels_from_config(tmp_path):
    torch.manual_seed(0)
    bert = BertConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64,
    )  # fmt: skip
    BertModel(bert).save_pretrained(tmp_path / "bert")
    argv = ["--model_name_or_path", str(tmp_path / "bert"), "--head", "margin", "--margin", "cos", "--m", "0.2"]
    argv += ["--scale", "8"]
    model_args, _, training_args = _args(tmp_path, argv)
    config = AutoConfig.from_pretrained(model_args.model_name_or_path, num_labels=3, finetuning_task="demo")
    model = HeadsForSequenceClassification.from_pretrained(model_args.model_name_or_path, config=config)
    model.config.label2id = {"a": 0, "b": 1, "c": 2}  # what run_glue does with the labels it finds
    model.config.id2label = {0: "a", 1: "b", 2: "c"}
    g = torch.Generator().manual_seed(4)
    data = Dataset.from_dict(
        {"input_ids": torch.randint(4, V, (16, 10), generator=g).tolist(), "labels": [i % 3 for i in range(16)]}
    )
    trainer = HeadsTrainer(model=model, args=training_args, train_dataset=data, data_collator=default_data_collator)
    assert model.config.num_labels == 3 and model.config.head["margin"]["type"] == "cos"
    trainer.train()
    trainer.save_model()
    model.eval()
    again = HeadsForSequenceClassification.from_pretrained(training_args.output_dir).eval()
    assert again.config.id2label == {0: "a", 1: "b", 2: "c"}
    x = torch.tensor(data["input_ids"][:4])
    with torch.no_grad():
        assert torch.equal(again(input_ids=x).logits, model(input_ids=x).logits)


def test_an_uncalibrated_warm_start_refuses_to_train_and_names_the_line(base, caplog):
    """Training a warm start not yet calibrated is refused, naming `prepare_head`; `prepare_head` calibrates it and
    logs how many training examples it took and what it fitted."""
    path, _, ids = base
    model = HeadsForCausalLM.from_base(path, head=MARGIN_HEAD).train()
    with pytest.raises(ValueError, match=r"hf_heads\.training\.prepare_head\(model, train_dataset\)"):
        model(input_ids=ids[:2], labels=ids[:2])
    with caplog.at_level(logging.INFO, logger="hf_heads.training.trainer"):
        prepare_head(model, Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()}))
    fitted = {
        "context_norm_running": float(model.head.context_norm_running),
        "warm_start_gain": model.config.head["warm_start_gain"],
    }
    assert [r.getMessage() for r in caplog.records if r.name == "hf_heads.training.trainer"] == [
        f"warm start calibrated on the first 8 training examples: {fitted}"
    ]
    assert float(model(input_ids=ids[:2], labels=ids[:2]).loss.detach()) > 0
    plain = HeadsForCausalLM.from_base(path, head=MARGIN_HEAD, calibrate=False).train()  # asked for: the copy as is
    with pytest.raises(ValueError, match="needs word counts"):  # and still told what it lacks
        plain(input_ids=ids[:2], labels=ids[:2])


# Every family from_base makes (the margins small, as the margin paper trains LMs: a large one, L-Softmax m=2, raises
# the training criterion itself ~4x), the heads that need word counts made without them: HeadsTrainer's first logged
# training loss (learning rate 0) against the checkpoint's own loss on the same rows (the softmax head's: from_base
# checks that it is the checkpoint's distribution). Without the trainer's calibration the margin with log-unigram word
# norms started at 1.96x and BCE-NCE at 11x the checkpoint's loss here (16.2 against 3.4 on SmolLM2).
FAMILIES = {
    "margin arc log-unigram max-norm": MARGIN_HEAD,
    "margin lsm log-rank": {"family": "margin", "margin": "lsm", "m": 1, "word_norm": "log-rank"},
    "margin cos unigram": {"family": "margin", "margin": "cos", "m": 0.01, "word_norm": "unigram"},
    "sparse": {"family": "sparse", "k": 20},
    "sampled ce-mcs log-uniform": {"family": "sampled", "criterion": "ce", "method": "mcs", "num_samples": 20,
                                   "noise": "log-uniform"},
    "sampled bce-nce unigram": {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 20,
                                "noise": "unigram", "noise_add": 1.0},
}  # fmt: skip
START_FACTOR = 1.25  # the first training loss is at most this many times the checkpoint's own loss


def _first_loss(path, head, ids, tmp_path) -> float:
    """HeadsTrainer's first logged training loss (learning rate 0) of `from_base(path, head=head)`, no word counts
    given: the training set (the 16 rows 40 times) gives them and the rows the warm start is calibrated on."""
    model = HeadsForCausalLM.from_base(path, head=head)
    args = HeadsTrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=8, learning_rate=0.0, logging_steps=1,
        report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True, seed=0,
    )  # fmt: skip
    rows = ids.tolist() * 40
    data = Dataset.from_dict({"input_ids": rows, "labels": rows})
    trainer = HeadsTrainer(model=model, args=args, train_dataset=data, data_collator=default_data_collator)
    trainer.train()
    return trainer.state.log_history[0]["loss"]


@pytest.fixture(scope="module")
def checkpoint_loss(base, tmp_path_factory) -> float:
    return _first_loss(base[0], {"family": "softmax"}, base[2], tmp_path_factory.mktemp("softmax"))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_first_step_loss_of_every_family_is_near_the_checkpoints(base, checkpoint_loss, tmp_path, name):
    first = _first_loss(base[0], FAMILIES[name], base[2], tmp_path)
    assert first <= START_FACTOR * checkpoint_loss, f"{name}: first loss {first:.3f} vs {checkpoint_loss:.3f}"


def test_head_flags_help_says_what_each_option_does():
    """`--help` of a script parsing the training arguments explains a head option by its own text (the confidence
    penalty: the loss it trains; no head flag goes without one), and `--head_modules` / `--head_options` by what they
    take, with an example each."""
    parser = HfArgumentParser(HeadsTrainingArguments)
    (action,) = [a for a in parser._actions if "--confidence_penalty" in a.option_strings]
    assert action.help.startswith("Coefficient β of the confidence penalty (Pereyra et al. 2017")
    assert "the training loss becomes cross-entropy − β·H, H the entropy of each target token" in action.help
    helps = {a.option_strings[0]: a.help for a in parser._actions if a.option_strings}
    assert [flag for flag in FLAG_TO_OPTION if not helps[f"--{flag}"]] == []
    assert helps["--head_modules"].startswith("Modules to import before the head flags are read: your own components")
    assert helps["--head_modules"].endswith("e.g. --head_modules my_pkg.margins --margin mine.")
    assert helps["--head_options"].startswith("Head options that have no flag of their own, as name=value")
    assert helps["--head_options"].endswith("--head_options alpha=0.5 schedule=cosine.")


def test_the_trainer_refuses_head_flags_that_disagree_with_the_models_own_head(base, tmp_path):
    """A model with a head of its own (a saved hf_heads model reopened, or `head=` given) and head flags: the same head
    trains (the checkpoint's own options aside), another one is refused naming both sides and the model is left as it
    was; a model that is no hf_heads model is refused (its output layer would train the plain loss, the flags
    unused)."""
    path, lm, ids = base
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    model = HeadsForCausalLM.from_base(path, head={"family": "sparse", "k": 5})
    _, _, same = _args(tmp_path, ["--model_name_or_path", path, "--head", "sparse", "--k", "5"])
    HeadsTrainer(model=model, args=same, train_dataset=data, data_collator=default_data_collator)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _, _, other = _args(tmp_path, ["--model_name_or_path", path, "--head", "sparse", "--k", "7"])
    with pytest.raises(ValueError, match=r"the training arguments' head flags name another head than this model's "
                                         r"own \(k: model 5, the training arguments' head flags 7\)"):  # fmt: skip
        HeadsTrainer(model=model, args=other, train_dataset=data, data_collator=default_data_collator)
    assert model.config.head["k"] == 5 and model.head.options.k == 5
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with pytest.raises(TypeError, match="the model is a LlamaForCausalLM, not an hf_heads model"):
        HeadsTrainer(model=lm, args=other, train_dataset=data, data_collator=default_data_collator)
    _, _, none = _args(tmp_path, ["--model_name_or_path", path])  # no head flags: the model's own head, whatever
    HeadsTrainer(model=model, args=none, train_dataset=data, data_collator=default_data_collator)
    assert model.config.head["k"] == 5


WORDS = "the a king queen man woman city river house tree stone light dark water fire road".split()


def _word_bart(path, d_model: int):
    """A word tokenizer over WORDS and a one-layer BART on its ids, both saved at `path`; returns the tokenizer."""
    from hf_heads.data import build_word_tokenizer

    tok = build_word_tokenizer([" ".join(WORDS)], add_eos=True)
    tok.save_pretrained(path)
    torch.manual_seed(0)
    bart = BartConfig(
        vocab_size=len(tok), d_model=d_model, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
        max_position_embeddings=64, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.eos_token_id, forced_eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    BartForConditionalGeneration(bart).save_pretrained(path)
    return tok


@pytest.mark.parametrize("table", ["file", "word2vec-targets"])
def test_translation_script_flow_starts_a_continuous_head_from_flags(tmp_path, table):
    """run_translation.py with the one-line swap and `--head continuous`: the trainer gives the head its embedding
    table over the script's tokenizer (a table file named by `--embedding_name`, or `word2vec-targets` trained on the
    training targets), `embedding_dim` the table's; it trains, saves and reloads to the same logits, and the saved
    directory evaluates with labels where hf_heads is not installed."""
    from export_check import export_job, load_without_hf_heads

    from hf_heads.data import save_table

    tok = _word_bart(tmp_path / "bart", d_model=32)
    name = table
    if table == "file":  # d = 6, every word but "fire" and "road"
        name = str(save_table(tmp_path / "table.npz", WORDS[:-2], torch.randn(len(WORDS) - 2, 6).numpy()))
    argv = ["--model_name_or_path", str(tmp_path / "bart"), "--head", "continuous", "--loss", "vmf"]
    argv += ["--embedding_name", name, "--word2vec_dim", "6"]
    model_args, _, training_args = _args(tmp_path, argv, HeadsSeq2SeqTrainingArguments)
    config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    model = HeadsForSeq2SeqLM.from_pretrained(model_args.model_name_or_path, config=config)
    g = torch.Generator().manual_seed(5)
    words = torch.randint(4, len(tok), (16, 6), generator=g)
    eos = torch.full((16, 1), tok.eos_token_id)
    data = Dataset.from_dict(
        {"input_ids": torch.cat([words, eos], 1).tolist(), "labels": torch.cat([words.flip(1), eos], 1).tolist()}
    )
    trainer = HeadsSeq2SeqTrainer(model=model, args=training_args, train_dataset=data, processing_class=tok)
    assert model.config.head["family"] == "continuous" and model.config.head["embedding_dim"] == 6
    assert bool((model.head.embeddings.norm(dim=1) > 0).all())  # a row for every token: the table is attached
    trainer.train()
    trainer.save_model()
    model.eval()
    again = HeadsForSeq2SeqLM.from_pretrained(training_args.output_dir).eval()
    x, y = torch.tensor(data["input_ids"][:2]), torch.tensor(data["labels"][:2])
    with torch.no_grad():
        logits = model(input_ids=x, labels=y).logits
        assert torch.equal(again(input_ids=x, labels=y).logits, logits)
    job = export_job(training_args.output_dir, "AutoModelForSeq2SeqLM", {"input_ids": x}, labels=y)
    (got,) = load_without_hf_heads([job], tmp_path / "check")
    with torch.no_grad():
        torch.testing.assert_close(got["output"], again(input_ids=x).logits)  # decoder inputs from input_ids, as BART
    assert torch.isfinite(torch.as_tensor(got["eval_loss"])) and got["grads_finite"]


def test_a_continuous_head_from_flags_takes_its_counts_and_output_vocabulary_from_the_training_set(tmp_path, caplog):
    """`--center_embeddings frequency --output_vocabulary targets` with the one-line swap: the trainer centres the
    head's table on the training targets' count-weighted mean row and restricts its output vocabulary to the distinct
    training targets, and logs how many of the tokenizer's tokens the table covers and that vocabulary's size (the
    same table, uncentred, is what `--center_embeddings none` attaches)."""
    from hf_heads.data import label_counts, save_table

    tok = _word_bart(tmp_path / "bart", d_model=16)
    table = save_table(tmp_path / "table.npz", WORDS, torch.randn(len(WORDS), 6).numpy())
    g = torch.Generator().manual_seed(5)
    words = torch.randint(4, 4 + len(WORDS) // 2, (8, 5), generator=g)  # the first half of the words only
    data = Dataset.from_dict({"input_ids": words.tolist(), "labels": words.flip(1).tolist()})
    heads = {}
    for centring, vocabulary in (("none", "all"), ("frequency", "targets")):
        argv = ["--model_name_or_path", str(tmp_path / "bart"), "--head", "continuous", "--loss", "vmf"]
        argv += ["--embedding_name", str(table), "--center_embeddings", centring, "--output_vocabulary", vocabulary]
        _, _, training_args = _args(tmp_path, argv, HeadsSeq2SeqTrainingArguments)
        model = HeadsForSeq2SeqLM.from_pretrained(str(tmp_path / "bart"))
        with (
            caplog.at_level(logging.INFO, logger="hf_heads.training.tables"),
            caplog.at_level(logging.INFO, logger="hf_heads.training.trainer"),
        ):
            HeadsSeq2SeqTrainer(model=model, args=training_args, train_dataset=data, processing_class=tok)
        heads[centring] = model.head
    plain, head = heads["none"].embeddings, heads["frequency"]
    counts = label_counts(data, len(tok)).to(torch.float64)
    expected = torch.nn.functional.normalize(plain - (counts / counts.sum()).float() @ plain, dim=1)
    torch.testing.assert_close(head.embeddings, expected)
    targets = sorted(set(words.flatten().tolist()))
    assert head.output_mask.nonzero().flatten().tolist() == targets
    line = f"continuous head: output vocabulary of {len(targets)} target words (of {len(tok)})"
    assert [m for m in caplog.messages if "output vocabulary" in m] == [line]
    coverage = f"continuous head: {len(WORDS)} of {len(tok)} tokens of the vocabulary are in {table}"
    assert [m for m in caplog.messages if "tokens of the vocabulary" in m] == [coverage, coverage]


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--center_embeddings", "frequency"],
            "head.center_embeddings='frequency' counts the training targets: give a training set",
        ),
        (
            ["--output_vocabulary", "targets"],
            "head.output_vocabulary='targets' takes the training targets' words: give a training set",
        ),
    ],
    ids=["frequency", "targets"],
)
def test_a_continuous_head_from_flags_that_reads_the_training_targets_needs_a_training_set(tmp_path, flags, message):
    """A count-weighted centring or a target-side output vocabulary comes from the training targets: a trainer given
    no train_dataset says which option needs them, and leaves the model's head as it was."""
    from hf_heads.data import save_table

    tok = _word_bart(tmp_path / "bart", d_model=16)
    table = save_table(tmp_path / "table.npz", WORDS, torch.randn(len(WORDS), 6).numpy())
    argv = ["--model_name_or_path", str(tmp_path / "bart"), "--head", "continuous", "--embedding_name", str(table)]
    _, _, training_args = _args(tmp_path, [*argv, *flags], HeadsSeq2SeqTrainingArguments)
    model = HeadsForSeq2SeqLM.from_pretrained(str(tmp_path / "bart"))
    before = (
        type(model.head),
        model.config.head,
        model.head_origin,
        {k: v.clone() for k, v in model.state_dict().items()},
    )
    with pytest.raises(ValueError) as err:
        HeadsSeq2SeqTrainer(model=model, args=training_args, processing_class=tok)
    assert str(err.value) == message
    after = (type(model.head), model.config.head, model.head_origin, model.state_dict())
    assert after[:3] == before[:3], "the refusal left the model with another head"
    assert after[3].keys() == before[3].keys() and all(torch.equal(after[3][k], v) for k, v in before[3].items())


def test_a_continuous_table_over_a_vocabulary_larger_than_the_tokenizer_is_the_same_on_every_build(tmp_path):
    """A model vocabulary padded past the tokenizer's ids: the table the head flags give the continuous head has the
    tokenizer's words from the file, and for the extra ids rows that no token covers, drawn from a fixed seed, so two
    runs started from the same flags start from the same table."""
    from hf_heads.data import build_word_tokenizer, save_table
    from hf_heads.training.tables import continuous_table

    tok = build_word_tokenizer([" ".join(WORDS)])
    vectors = torch.randn(len(WORDS), 6)
    section = {"family": "continuous", "embedding_name": str(save_table(tmp_path / "t.npz", WORDS, vectors.numpy()))}
    (filled, table, covered), (_, again, covered_again) = (
        continuous_table(section, tok, num_classes=len(tok) + 3) for _ in range(2)
    )
    assert filled == {**section, "embedding_dim": 6} and table.shape == (len(tok) + 3, 6)
    ids = tok.convert_tokens_to_ids(WORDS)
    assert torch.equal(table[ids], vectors) and bool(covered[ids].all())
    assert not covered[len(tok) :].any() and bool((table[len(tok) :].norm(dim=1) > 0).all())
    assert torch.equal(table, again) and torch.equal(covered, covered_again)


def test_a_continuous_table_of_another_dimension_than_the_heads_embedding_dim_is_refused_naming_both(tmp_path):
    from hf_heads.data import build_word_tokenizer, save_table
    from hf_heads.training.tables import continuous_table

    tok = build_word_tokenizer([" ".join(WORDS)])
    path = save_table(tmp_path / "t.npz", WORDS, torch.randn(len(WORDS), 6).numpy())
    section = {"family": "continuous", "embedding_name": str(path), "embedding_dim": 8}
    with pytest.raises(ValueError) as err:
        continuous_table(section, tok)
    assert str(err.value) == f"head embedding_dim=8 but {path} has d=6"


def test_a_continuous_head_from_flags_needs_the_tokenizer(base, tmp_path):
    """Without the tokenizer the table cannot be built: the trainer says what to pass instead of failing later."""
    path, _, ids = base
    bart = BartConfig(vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                      decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)  # fmt: skip
    BartForConditionalGeneration(bart).save_pretrained(tmp_path / "bart")
    argv = ["--model_name_or_path", str(tmp_path / "bart"), "--head", "continuous"]
    _, _, training_args = _args(tmp_path, argv, HeadsSeq2SeqTrainingArguments)
    model = HeadsForSeq2SeqLM.from_pretrained(str(tmp_path / "bart"))
    with pytest.raises(ValueError) as err:
        HeadsSeq2SeqTrainer(model=model, args=training_args)
    assert str(err.value) == (
        "the continuous head the head flags name predicts rows of an embedding table over the tokenizer's vocabulary: "
        "give the trainer the tokenizer (processing_class=tokenizer, as transformers' example scripts do)"
    )
    assert model.config.head["family"] == "softmax"  # refused before anything changed


# SmolLM2-135M through the script's path (from_pretrained with the default head, the head flags bound by HeadsTrainer,
# its calibration on the first 8 blocks of the training set, learning rate 0): the first logged training NLL against
# the checkpoint's own loss on the same batch. The word norm replaces ‖W_c‖, which a trained LM's rows carry, by f(c)
# of this training set's counts: no gain makes that the checkpoint's distribution, so the start is the best the family
# allows (measured 2.03x: docs/own-script.md), while a margin without word norms starts at the checkpoint.
SMOLLM2_STARTS = {  # head flags: the bound on first train_nll / checkpoint loss
    "arc": (["--head", "margin", "--margin", "arc", "--m", "0.001"], 1.001),
    "arc max-norm": (["--head", "margin", "--margin", "arc", "--m", "0.001", "--context_norm", "max-norm"], 1.02),
    "arc log-unigram max-norm": (MARGIN, 2.3),
}


@pytest.fixture(scope="module")
def smollm2_run(tmp_path_factory):
    """SmolLM2 saved once as a plain checkpoint (fast to reopen) and 64 blocks of 128 tokens of bible-web."""
    import itertools

    from transformers import AutoTokenizer

    from hf_heads.data import load_lm_text, smollm2_path

    path, gguf = smollm2_path()
    tok = AutoTokenizer.from_pretrained(path, gguf_file=gguf)
    out = tmp_path_factory.mktemp("smollm2")
    lm = AutoModelForCausalLM.from_pretrained(path, gguf_file=gguf)  # dequantised to float32 on load
    config = lm.config.to_dict()
    config.pop("quantization_config", None)  # a GGUF-loaded model does not save: its weights go to a plain one
    plain = LlamaForCausalLM(type(lm.config).from_dict(config))
    plain.load_state_dict(lm.state_dict())
    plain.save_pretrained(out)
    tok.save_pretrained(out)
    ids = list(itertools.chain.from_iterable(tok(load_lm_text("bible-web")["train"]["text"][:3000])["input_ids"]))
    blocks = [ids[i : i + 128] for i in range(0, 64 * 128, 128)]
    data = Dataset.from_dict({"input_ids": blocks, "attention_mask": [[1] * 128] * 64, "labels": blocks})
    return str(out), tok, data


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SMOLLM2_STARTS))
def test_smollm2_margin_start_through_the_script_path(smollm2_run, tmp_path, name):
    """The margin head's start on SmolLM2 as transformers' run_clm.py reaches it (docs/own-script.md's figures): no
    word norm starts at the checkpoint (the margin m = 0.001 aside, eval NLL = the checkpoint's loss); a word norm
    starts where the fitted gain leaves it, which is the least KL over gains (a gain 20% either way is not closer)."""
    path, tok, data = smollm2_run
    flags, bound = SMOLLM2_STARTS[name]
    model_args, _, args = _args(tmp_path, ["--model_name_or_path", path, *flags], extra=["--seed", "42"])
    args.max_steps, args.learning_rate, args.per_device_train_batch_size = 1, 0.0, 4
    config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    model = HeadsForCausalLM.from_pretrained(model_args.model_name_or_path, config=config)
    trainer = HeadsTrainer(model=model, args=args, train_dataset=data, processing_class=tok,
                           data_collator=default_data_collator)  # fmt: skip
    plain = AutoModelForCausalLM.from_pretrained(path).eval()
    batch = next(iter(trainer.get_train_dataloader()))
    with torch.no_grad():
        own = float(plain(input_ids=batch["input_ids"], labels=batch["labels"]).loss)
    trainer.train()
    first = trainer.state.log_history[0]["train_nll"]
    assert first <= bound * own, f"{name}: first train_nll {first:.3f} against the checkpoint's {own:.3f}"
    if model.head.options.norm_scaled:  # the gain is the KL optimum on the calibration rows
        rows = torch.tensor(data["input_ids"][:8])
        with torch.no_grad():
            hidden = model.backbone(input_ids=rows).last_hidden_state.reshape(-1, config.hidden_size)
            base = torch.log_softmax(plain.lm_head(hidden), dim=-1)
            gain = model.head.options.warm_start_gain

            def kl(g: float) -> float:
                logits = model.head.posterior(model.head.scores(hidden, gain=g))
                return float((base.exp() * (base - torch.log_softmax(logits, dim=-1))).sum(-1).mean())

            assert kl(gain) <= min(kl(gain * 1.2), kl(gain / 1.2))


def test_word2vec_targets_without_a_training_set_is_refused(tmp_path):
    from hf_heads.training.tables import table_source

    section = {"family": "continuous", "embedding_name": "word2vec-targets", "word2vec_dim": 8}
    for sentences in (None, lambda: None):
        with pytest.raises(ValueError) as refused:
            table_source(section, sentences, tmp_path, seed=0)
        assert str(refused.value) == (
            "embedding_name='word2vec-targets' trains the table on the training targets: give a training set"
        )
    assert not (tmp_path / "target_word2vec.npz").exists()


def test_a_continuous_table_for_a_tokenizer_larger_than_the_models_vocabulary_is_refused(tmp_path):
    from hf_heads.data import build_word_tokenizer, save_table
    from hf_heads.training.tables import continuous_table

    tok = build_word_tokenizer([" ".join(WORDS)])
    section = {
        "family": "continuous",
        "embedding_name": str(save_table(tmp_path / "t.npz", WORDS, torch.randn(len(WORDS), 6).numpy())),
    }
    with pytest.raises(ValueError) as refused:
        continuous_table(section, tok, num_classes=len(tok) - 1)
    assert str(refused.value) == f"the tokenizer has {len(tok)} ids, the model's vocabulary {len(tok) - 1}"


def test_a_continuous_table_that_covers_no_token_is_refused(tmp_path):
    from hf_heads.data import build_word_tokenizer, save_table
    from hf_heads.training.tables import continuous_table

    tok = build_word_tokenizer([" ".join(WORDS)])
    path = save_table(tmp_path / "t.npz", ["zebra", "quokka"], torch.randn(2, 6).numpy())
    with pytest.raises(ValueError) as refused:
        continuous_table({"family": "continuous", "embedding_name": str(path)}, tok)
    assert str(refused.value) == f"no token of the target vocabulary is in {path}: nothing to predict"


def test_prepare_head_without_a_training_set_says_what_the_head_still_needs(base):
    """A head that needs word counts, or whose warm start is still to be calibrated, cannot be prepared without a
    training set: the error says so, naming the head; a transformers model (no head) has nothing to prepare."""
    path, lm, _ = base
    model = HeadsForCausalLM.from_base(path, head=MARGIN_HEAD)
    with pytest.raises(ValueError) as refused:
        prepare_head(model, None)
    assert str(refused.value) == "this head needs word counts: give a train_dataset or call model.set_word_counts(...)"
    model.set_word_counts(torch.ones(V))
    assert model.head.warm_start_pending
    with pytest.raises(ValueError) as refused:
        prepare_head(model, None)
    assert str(refused.value) == (
        "the margin arc m=0.001 f=log-unigram g=max-norm head's warm start is calibrated on training examples: give a "
        "train_dataset"
    )
    assert model.head.warm_start_pending
    before = {k: v.clone() for k, v in lm.state_dict().items()}
    assert prepare_head(lm, None) is None
    assert all(torch.equal(v, lm.state_dict()[k]) for k, v in before.items())
