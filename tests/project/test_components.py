"""A component written outside hf_heads (tests/extension/user_margins.py: a margin registered from the user's own
module) survives its checkpoint: the config records the module, loading imports it before it reads the head, saving
copies it next to the model's code, and the model then loads in a fresh process with hf_heads and, with
`trust_remote_code=True`, where neither hf_heads nor the module can be imported. A component defined in a script
(`__main__`) cannot travel: saving for the Hub refuses it, and loading it elsewhere says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from conftest import tiny_llama_config
from export_check import export_job, load_without_hf_heads

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.cli.runs import parse_args
from hf_heads.components import component_config, make_component
from hf_heads.losses.scorer import MARGIN_TYPES, Margin, register_margin
from hf_heads.modeling.export import export_for_hub
from hf_heads.training import HeadsTrainingArguments
from hf_heads.validation import OptionError

EXTENSION = Path(__file__).parents[1] / "extension"
HEAD = {"family": "margin", "margin": "user-half-arc", "m": 0.4, "context_norm": "max-norm"}


@pytest.fixture
def user_margins(monkeypatch):
    """tests/extension on the path and its margin registered for this test only."""
    monkeypatch.syspath_prepend(str(EXTENSION))
    import user_margins

    yield user_margins
    MARGIN_TYPES.pop("user-half-arc", None)
    sys.modules.pop("user_margins", None)


def _trained(tmp_path: Path) -> tuple[HeadsForCausalLM, torch.Tensor, Path]:
    """A model with the user's margin after one training step, saved; (model, input ids, directory)."""
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=HEAD))
    ids = torch.randint(4, 61, (2, 8), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    directory = tmp_path / "saved"
    model.save_pretrained(directory)
    return model.eval(), ids, directory


LOAD = """
import sys, torch
from hf_heads import HeadsForCausalLM
model = HeadsForCausalLM.from_pretrained(sys.argv[1]).eval()
ids = torch.load(sys.argv[2])
with torch.no_grad():
    torch.save(model(input_ids=ids).logits, sys.argv[3])
"""


def _load_in_fresh_process(directory: Path, ids: torch.Tensor, tmp_path: Path, pythonpath: list[str]):
    torch.save(ids, tmp_path / "ids.pt")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", LOAD, str(directory), str(tmp_path / "ids.pt"), str(tmp_path / "logits.pt")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_margin_from_the_users_module_survives_save_and_load(user_margins, tmp_path):
    model, ids, directory = _trained(tmp_path)
    assert model.config.components == {"margin": "user_margins"}
    assert json.loads((directory / "config.json").read_text())["components"] == {"margin": "user_margins"}
    copy = (directory / "user_margins.py").read_text()
    assert "from .hf_heads_losses import OneParameterMargin, register_margin" in copy
    assert "__hf_heads_component_module__ = 'user_margins'" in copy
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    assert model.head.scorer().margin.name == "user-half-arc"

    root = str(Path(__file__).parents[2])
    proc = _load_in_fresh_process(directory, ids, tmp_path, [root, str(EXTENSION)])  # the module installed
    assert proc.returncode == 0, proc.stderr[-3000:]
    torch.testing.assert_close(torch.load(tmp_path / "logits.pt"), expected)

    # hf_heads, but not the user's module: what the config records is named, and the ways out
    config = json.loads((directory / "config.json").read_text())
    config["components"] = {"margin": "not_installed_margins"}
    with pytest.raises(ValueError, match=r"head.margin: this config's margin comes from module 'not_installed_margins'"
                       r", which does not import here .*trust_remote_code=True"):  # fmt: skip
        HeadsConfig.from_dict(config)

    # neither hf_heads nor user_margins importable: the copies saved with the model, which evaluate and train too
    job = export_job(directory, "AutoModelForCausalLM", {"input_ids": ids}, labels=ids)
    (result,) = load_without_hf_heads([job], tmp_path)
    torch.testing.assert_close(result["output"], expected)
    with torch.no_grad():
        torch.testing.assert_close(result["eval_loss"], model(input_ids=ids, labels=ids).loss)
    assert torch.isfinite(result["train_loss"]) and result["grads_finite"]


def test_a_config_without_components_from_outside_records_none_and_saves_no_extra_module(tmp_path):
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "margin"}))
    assert model.config.components is None
    model.save_pretrained(tmp_path)
    assert not [p.name for p in tmp_path.glob("*.py") if not p.name.startswith("hf_heads_")]
    with pytest.raises(ValueError, match="components=.*must be a dict"):
        HeadsConfig(backbone=tiny_llama_config().to_dict(), components=["user_margins"])


def test_a_component_defined_in_a_script_is_refused_for_the_hub_and_explained_on_load(tmp_path, caplog):
    @dataclass(frozen=True)
    class ScriptMargin(Margin):
        name: ClassVar[str] = "script-margin"

        def phi(self, theta):
            return torch.cos(theta)

    ScriptMargin.__module__ = "__main__"  # as defined in the training script itself
    register_margin(ScriptMargin)
    try:
        model = HeadsForCausalLM(
            HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "margin", "margin": "script-margin"})
        )
        assert model.config.components == {"margin": "__main__"}
        with pytest.raises(ValueError, match=r"head.margin is defined in a script \(__main__\)"):
            export_for_hub(model, tmp_path / "hub")
        with caplog.at_level("WARNING"):
            model.save_pretrained(tmp_path / "saved")
        assert "without its code" in caplog.text and "__main__" in caplog.text
    finally:
        MARGIN_TYPES.pop("script-margin")
    with pytest.raises(ValueError, match=r"defined in a script \(__main__\) when it was saved: run the code"):
        HeadsConfig.from_pretrained(tmp_path / "saved")


def test_head_modules_flag_imports_the_users_components_before_the_head_flags(monkeypatch):
    monkeypatch.syspath_prepend(str(EXTENSION))
    try:
        argv = ["--output_dir", "o", "--report_to", "none", "--head_modules", "user_margins"]
        argv += ["--head", "margin", "--margin", "user-half-arc", "--m", "0.2"]
        args = parse_args((HeadsTrainingArguments,), argv)[0]
        assert args.head_config()["margin"] == {"type": "user-half-arc", "m": 0.2}
    finally:
        MARGIN_TYPES.pop("user-half-arc", None)
        sys.modules.pop("user_margins", None)
    with pytest.raises(ValueError, match="--head_modules no_such_module: the module does not import"):
        HeadsTrainingArguments(output_dir="o", report_to="none", head_modules=["no_such_module"])


def test_a_saved_directory_carries_the_code_of_its_task_and_family_only(tmp_path):
    """Every saved model carried every task's and family's modules (33 files); now the closure of its own class and
    head family: a softmax causal LM needs no seq2seq, classification, margin, sampled, sparse or continuous code
    (the vocabulary-parallel loss, hf_heads_losses_vocab_parallel.py, is part of the chunked loss; the loss entry
    point, hf_heads_losses_entry.py, is what the heads call, with its parts, hf_heads_losses_parts.py, and the
    candidates of every class, hf_heads_losses_margin.py; the built-in chunk kernels, eager, compiled and triton with
    its programs and their loader (which also scales the gradients by d loss on a GPU), run it; the backbone helpers
    the export to the base architecture shares, modeling_bodies.py; what the model does under DeepSpeed ZeRO-3,
    modeling_zero3.py; the row algebra the kernels and the vocabulary-parallel loss share, losses_tiles.py; the dtype
    rules and the reduction, losses_precision.py and losses_reduction.py)."""
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"}))
    model.save_pretrained(tmp_path)
    files = {p.name for p in tmp_path.glob("hf_heads_*.py")}
    assert "hf_heads_modeling_causal_lm.py" in files and "hf_heads_heads_softmax.py" in files
    for other in ("modeling_seq2seq", "modeling_classification", "heads_margin", "heads_sampled", "heads_sparse",
                  "heads_continuous", "losses_continuous", "losses_sampled", "losses_sparse"):  # fmt: skip
        assert f"hf_heads_{other}.py" not in files, other
    assert "hf_heads_losses_entry.py" in files and "hf_heads_losses_kernels.py" in files and len(files) <= 33
    heads = (tmp_path / "hf_heads_heads.py").read_text()
    assert "hf_heads_heads_softmax import" in heads and "hf_heads_heads_margin import" not in heads


def test_a_component_set_on_the_live_head_is_recorded_and_copied_when_saved(user_margins, tmp_path):
    """`model.set_head_options(margin="user-half-arc:m=0.4")` on a model built with a built-in margin: the config
    records the user's module for it at once and the saved directory carries its copy, as for a model built with
    it."""
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "margin"}))
    model.set_head_options(margin="user-half-arc:m=0.4")
    assert model.head.options.margin == {"type": "user-half-arc", "m": 0.4}
    assert model.config.components == {"margin": "user_margins"}
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["head"]["margin"] == {"type": "user-half-arc", "m": 0.4}
    assert saved["components"] == {"margin": "user_margins"} and (tmp_path / "user_margins.py").exists()


def test_a_components_parameters_written_as_json_gives_them_are_stored_as_their_annotated_types():
    """A config read from JSON or a command line gives an `int` parameter as 2.0 and a sequence as whatever the caller
    built: the component holds an int and a list, so its config value is what `config.json` reads back."""

    @dataclass(frozen=True)
    class StepMargin(Margin):
        name: ClassVar[str] = "test-step-margin"
        steps: int = 1
        weights: list | None = None

        def phi(self, theta):
            return torch.cos(theta) - 0.1 * self.steps

    register_margin(StepMargin)
    try:
        margin = make_component("margin", {"type": "test-step-margin", "steps": 2.0, "weights": (0.5, 1.0)})
        assert type(margin.steps) is int and margin.steps == 2
        assert type(margin.weights) is list and margin.weights == [0.5, 1.0]
        value = component_config(margin)
        assert value == {"type": "test-step-margin", "steps": 2, "weights": [0.5, 1.0]}
        assert json.loads(json.dumps(value)) == value
        assert make_component("margin", "test-step-margin:steps=3.0").steps == 3
        with pytest.raises(OptionError, match=r"^head\.margin\.steps=2\.5 must be an integer$"):
            make_component("margin", {"type": "test-step-margin", "steps": 2.5}, field="head.margin")
    finally:
        MARGIN_TYPES.pop("test-step-margin")


def test_a_component_written_on_a_command_line_takes_the_text_after_a_parameters_first_equals_sign_as_its_value():
    """`name:p=v,q=w`: a text parameter's value may hold "=" itself (`tag=a=b` sets tag to "a=b"), and is the text
    written even where it reads as a number or a boolean (`tag=3` sets tag to "3"; a parameter that may be a number,
    `str | int` included, gets 3)."""

    @dataclass(frozen=True)
    class TaggedMargin(Margin):
        name: ClassVar[str] = "test-tagged-margin"
        tag: str = ""
        m: float = 0.0
        rank: str | int = 0

        def phi(self, theta):
            return torch.cos(theta) - self.m

    register_margin(TaggedMargin)
    try:
        margin = make_component("margin", "test-tagged-margin:tag=a=b,m=0.5")
        assert (margin.tag, margin.m) == ("a=b", 0.5)
        margin = make_component("margin", "test-tagged-margin:tag=3,m=1")  # the text "3", the number 1.0
        assert (margin.tag, margin.m) == ("3", 1)
        assert make_component("margin", "test-tagged-margin:rank=3").rank == 3
        assert make_component("margin", "test-tagged-margin:tag=true").tag == "true"
        assert make_component("margin", 'test-tagged-margin:tag="3"').tag == "3"  # a JSON string is its content
        with pytest.raises(
            OptionError, match=r"^head\.margin\.tag=3 must be a string$"
        ):  # in a dict it stays a number
            make_component("margin", {"type": "test-tagged-margin", "tag": 3}, field="head.margin")
    finally:
        MARGIN_TYPES.pop("test-tagged-margin")


def test_a_component_parameter_that_may_be_text_or_an_object_takes_an_object_from_a_config_or_a_command_line():
    """A `str | dict` parameter holds the object a JSON config gives, or `name:p={...}` writes, as an object; its
    config value reads back the same."""

    @dataclass(frozen=True)
    class ShapedMargin(Margin):
        name: ClassVar[str] = "test-shaped-margin"
        shape: str | dict = "flat"

        def phi(self, theta):
            return torch.cos(theta)

    register_margin(ShapedMargin)
    try:
        margin = make_component("margin", {"type": "test-shaped-margin", "shape": {"kind": "step", "at": 2}})
        assert margin.shape == {"kind": "step", "at": 2}
        assert component_config(margin) == {"type": "test-shaped-margin", "shape": {"kind": "step", "at": 2}}
        assert make_component("margin", 'test-shaped-margin:shape={"kind": "step"}').shape == {"kind": "step"}
        assert make_component("margin", "test-shaped-margin:shape=step").shape == "step"
    finally:
        MARGIN_TYPES.pop("test-shaped-margin")


def test_a_component_parameter_that_may_be_text_or_a_number_takes_either():
    """A `str | int` parameter keeps a text value as text and a number as a number, from a config or a command line;
    a value of neither kind is refused naming the field."""

    @dataclass(frozen=True)
    class RankedMargin(Margin):
        name: ClassVar[str] = "test-ranked-margin"
        rank: str | int = "auto"

        def phi(self, theta):
            return torch.cos(theta)

    register_margin(RankedMargin)
    try:
        assert make_component("margin", {"type": "test-ranked-margin", "rank": "top"}).rank == "top"
        assert make_component("margin", "test-ranked-margin:rank=top").rank == "top"
        assert make_component("margin", "test-ranked-margin:rank=3").rank == 3
        assert make_component("margin", {"type": "test-ranked-margin", "rank": 2.0}).rank == 2
        with pytest.raises(OptionError, match=r"^margin.rank=\[1\] must be an integer"):
            make_component("margin", {"type": "test-ranked-margin", "rank": [1]})
    finally:
        MARGIN_TYPES.pop("test-ranked-margin")


def test_a_component_missing_a_parameter_without_default_is_refused_naming_the_field_and_the_parameter():
    @dataclass(frozen=True)
    class ScaledMargin(Margin):
        name: ClassVar[str] = "test-scaled-margin"
        scale: float

        def phi(self, theta):
            return self.scale * torch.cos(theta)

    register_margin(ScaledMargin)
    try:
        with pytest.raises(OptionError) as err:
            HeadsConfig(
                backbone=tiny_llama_config().to_dict(), head={"family": "margin", "margin": "test-scaled-margin"}
            )
        assert str(err.value).startswith("head.margin={'type': 'test-scaled-margin'} cannot be built: ")
        assert str(err.value).endswith("__init__() missing 1 required positional argument: 'scale'")
    finally:
        MARGIN_TYPES.pop("test-scaled-margin")


@pytest.mark.parametrize("value", [3, ["arc"], {"m": 0.2}])
def test_a_head_component_that_is_neither_a_name_nor_a_dict_with_its_type_is_refused_naming_the_field(value):
    with pytest.raises(OptionError) as err:
        HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "margin", "margin": value})
    expected = f"head.margin={value!r} must be a margin name or a dict with its 'type' and its parameters"
    assert str(err.value) == expected
