"""An option reachable two ways is accepted when both ways agree and refused, naming both, when they disagree.

The ways: a head flag of `HeadsTrainingArguments` and `--head_options name=value`; a model's own head
(`config.head`) and the trainer's head flags (`bind_arguments_head`, what `HeadsTrainer` runs: `model.bind_head`); a
saved model reopened with `from_pretrained(path, head=...)` and then given head flags; `model.set_head_options(...)`
and then head flags. The options come from each registered family's options dataclass (a few per family, drawn with
a fixed seed from those that have a flag), each set to another allowed value built from its type
(tests/heads/test_option_flips.py `alternatives`)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch
from conftest import tiny_gpt2_config
from test_option_flips import alternatives

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.heads import FAMILIES, head_dict, head_options
from hf_heads.losses import OptionError
from hf_heads.training import HeadsTrainingArguments
from hf_heads.training.arguments import FLAG_TO_OPTION, NOT_FLAGS, option_flag
from hf_heads.training.trainer import bind_arguments_head

PER_FAMILY = 3  # options drawn per family
SOURCE = "the training arguments' head flags"


def _base(name: str) -> dict:
    return head_dict({"family": name, **next(iter(FAMILIES[name].options.examples.values()))})


def _scalar_change(base: dict, f) -> object | None:
    """The first other allowed value of option `f` on the head `base` that a flag can carry (not a component's
    config dict) and that makes a valid head, or None."""
    options = FAMILIES[base["family"]].options

    def build(value):
        return head_options({**base, f.name: value})

    for value in alternatives(options, f, base[f.name], build):
        if isinstance(value, bool | int | float | str):
            try:
                build(value)
            except OptionError:
                continue
            return value
    return None


def _cases() -> list:
    """(family, option, value): PER_FAMILY options with a flag of each family, drawn with a fixed seed, each with a
    value other than its base's."""
    out = []
    flagged = set(FLAG_TO_OPTION.values())
    for name, entry in FAMILIES.items():
        base = _base(name)
        fields = [f for f in dataclasses.fields(entry.options) if f.name in flagged and f.name not in NOT_FLAGS]
        changes = [(f.name, v) for f in fields if (v := _scalar_change(base, f)) is not None]
        for option, value in random.Random(name).sample(changes, min(PER_FAMILY, len(changes))):
            out.append(pytest.param(name, option, value, id=f"{name}-{option}-{value}"))
    return out


CASES = _cases()
CAUSAL = [case for case in CASES if "causal-lm" in FAMILIES[case.values[0]].head.tasks]


def _arguments(tmp_path, name: str, **flags) -> HeadsTrainingArguments:
    return HeadsTrainingArguments(
        output_dir=str(tmp_path / "out"), report_to="none", use_cpu=True, save_strategy="no", head=name, **flags
    )


def _flags(section: dict) -> dict:
    """The head flags that name `section` (every option with a flag, the component configs in their JSON form)."""
    flags = {}
    for flag, option in FLAG_TO_OPTION.items():
        if option in section and section[option] is not None and option != "family":
            value = section[option]
            flags[flag] = json.dumps(value) if isinstance(value, dict | list) else value
    return flags


def test_cases_cover_every_family():
    """Every registered family has options drawn (a family whose options no flag reaches would be untested)."""
    assert {case.values[0] for case in CASES} == set(FAMILIES)


@pytest.mark.parametrize(("family_name", "option", "value"), CASES)
def test_a_flag_and_head_options_agree_or_are_refused_naming_both(tmp_path, family_name, option, value):
    """`--<flag> v` with `--head_options option=v` is the head of either alone; with another value in
    `--head_options` it is refused, the error naming the flag and `--head_options`."""
    flag = option_flag(option)
    alone = _arguments(tmp_path, family_name, **{flag: value}).head_config()
    assert alone[option] == head_dict({**_base(family_name), option: value})[option]
    both = _arguments(tmp_path, family_name, **{flag: value}, head_options=[f"{option}={json.dumps(value)}"])
    assert both.head_config() == alone
    other = _base(family_name)[option]
    text = json.dumps(other) if not isinstance(other, str) else other
    clash = _arguments(tmp_path, family_name, **{flag: value}, head_options=[f"{option}={text}"])
    with pytest.raises(OptionError) as info:
        clash.head_config()
    assert f"--{flag}" in str(info.value) and "--head_options" in str(info.value), info.value


def _model(section: dict) -> HeadsForCausalLM:
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_gpt2_config(vocab_size=23), head=section))
    if model.head.has_output_matrix:
        model.set_word_counts(torch.arange(23, 0, -1).float())
    return model


def _refused_naming_both(model, arguments, option) -> None:
    """Binding `arguments`' head to `model` is refused naming the option, the model's value and the flags', and the
    model's head and config are left as they were."""
    before = dict(model.config.head)
    with pytest.raises(ValueError, match=rf"{SOURCE} name another head than this model's own \(.*{option}: model "):
        bind_arguments_head(model, arguments)
    assert dict(model.config.head) == before == model.head_section()


@pytest.mark.parametrize(("family_name", "option", "value"), CAUSAL)
def test_the_config_head_and_the_trainer_flags_agree_or_are_refused(tmp_path, family_name, option, value):
    """A model whose own head (its `config.head`) has `option=value`: head flags naming the same head bind (nothing
    changes), head flags with the option's other value are refused naming both values."""
    section = {**_base(family_name), option: value}
    model = _model(section)
    bind_arguments_head(model, _arguments(tmp_path, family_name, **_flags(section)))
    assert model.head_section() == head_dict(section) == dict(model.config.head)
    other = _flags({**section, option: _base(family_name)[option]})
    _refused_naming_both(model, _arguments(tmp_path, family_name, **other), option)


@pytest.mark.parametrize(("family_name", "option", "value"), CAUSAL)
def test_set_head_options_then_the_trainer_flags_agree_or_are_refused(tmp_path, family_name, option, value):
    """`model.set_head_options(option=value)` changes the head and `config.head` together; then head flags with the
    same value bind and head flags with the former value are refused naming both."""
    base = _base(family_name)
    model = _model(base)
    model.set_head_options(**{option: value})
    assert getattr(model.head.options, option) == head_dict({**base, option: value})[option]
    assert dict(model.config.head) == model.head_section()
    bind_arguments_head(model, _arguments(tmp_path, family_name, **_flags({**base, option: value})))
    _refused_naming_both(model, _arguments(tmp_path, family_name, **_flags(base)), option)


@pytest.mark.parametrize(("family_name", "option", "value"), CAUSAL)
def test_a_reopened_model_takes_head_and_then_the_flags_must_agree(tmp_path, family_name, option, value):
    """A saved model reopened with `from_pretrained(path, head=...)` runs that head (not the saved config's): its
    head options and `config.head` both say `option=value`; head flags naming it bind, head flags naming the saved
    head are refused naming both."""
    base = _base(family_name)
    _model(base).save_pretrained(tmp_path / "saved")
    wanted = {**base, option: value}
    try:
        model = HeadsForCausalLM.from_pretrained(tmp_path / "saved", head=wanted)
    except ValueError as err:  # another head whose tensors do not fit the saved ones: refused, naming them
        assert "head." in str(err), err
        return
    assert model.head_section() == head_dict(wanted) == dict(model.config.head)
    bind_arguments_head(model, _arguments(tmp_path, family_name, **_flags(wanted)))
    _refused_naming_both(model, _arguments(tmp_path, family_name, **_flags(base)), option)
