"""Registration knows a class by its module and qualified name (hf_heads.components.same_class): a module reloaded
with `importlib.reload` replaces its classes in every registry (components and head families), a class of another
module cannot take a registered name (refused, naming both), and a parameter named as a config key is refused when
the class registers, not when a saved config fails to load later."""

from __future__ import annotations

import importlib
import sys
import textwrap
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from hf_heads.components import REGISTRIES, register
from hf_heads.heads import FAMILIES, make_head
from hf_heads.heads.registry import FAMILIES as REGISTRY_FAMILIES
from hf_heads.losses.scorer import ArcFace, OneParameterMargin

MODULE = """
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from hf_heads.components import register
from hf_heads.heads.softmax import SoftmaxHead, SoftmaxHeadOptions
from hf_heads.losses.scorer import OneParameterMargin


@register("margin")
@dataclass(frozen=True)
class Shifted(OneParameterMargin):
    name: ClassVar[str] = "test-shifted"

    def phi(self, theta):
        return torch.cos(theta) - {shift}


@dataclass
class ShiftHeadOptions(SoftmaxHeadOptions):
    shift: float = field(default={shift}, metadata={{"help": "a constant"}})


@register("family")
class ShiftHead(SoftmaxHead):
    family = "test-shift"
    options_class = ShiftHeadOptions
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """write(shift): (re)writes the user's module `reg_user_module` with that constant and imports or reloads it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "reg_user_module.py"

    def write(shift: float):
        path.write_text(textwrap.dedent(MODULE.format(shift=shift)))
        importlib.invalidate_caches()
        if "reg_user_module" in sys.modules:
            return importlib.reload(sys.modules["reg_user_module"])
        return importlib.import_module("reg_user_module")

    yield write
    sys.modules.pop("reg_user_module", None)
    REGISTRIES["margin"].pop("test-shifted", None)
    REGISTRY_FAMILIES.pop("test-shift", None)


def test_a_reloaded_module_replaces_its_classes(user_module):
    first = user_module(0.25)
    old_margin, old_head = first.Shifted, first.ShiftHead
    assert REGISTRIES["margin"]["test-shifted"] is old_margin and FAMILIES["test-shift"].head is old_head
    second = user_module(0.5)  # importlib.reload: new class objects, same module and names
    assert second.Shifted is not old_margin and second.ShiftHead is not old_head
    assert REGISTRIES["margin"]["test-shifted"] is second.Shifted  # the new class runs, not the old one
    entry = FAMILIES["test-shift"]
    assert entry.head is second.ShiftHead and entry.options is second.ShiftHeadOptions
    theta = torch.tensor([0.3])
    assert torch.equal(REGISTRIES["margin"]["test-shifted"]().phi(theta), torch.cos(theta) - 0.5)
    assert make_head(4, 7, {"family": "test-shift"}).options.shift == 0.5


def test_a_class_of_another_module_cannot_take_a_registered_name():
    """A user's own `ArcFace` registered as "arc" was ignored without a word (the built-in kept running): refused."""

    @dataclass(frozen=True)
    class ArcFaceImpostor(OneParameterMargin):  # noqa: N801
        name: ClassVar[str] = "arc"

        def phi(self, theta):
            return torch.cos(theta + 2 * self.m)

    ArcFaceImpostor.__qualname__ = "ArcFace"
    ArcFaceImpostor.__module__ = "users_margins"
    with pytest.raises(ValueError, match=r"margin 'arc' is already registered by hf_heads\.losses\.scorer\.ArcFace; "
                                         r"users_margins\.ArcFace cannot take its name"):  # fmt: skip
        register("margin")(ArcFaceImpostor)
    assert REGISTRIES["margin"]["arc"] is ArcFace
    assert register("margin")(ArcFace) is ArcFace  # the registered class itself again: nothing changes


def test_a_parameter_named_as_a_config_key_is_refused_at_registration():
    @dataclass(frozen=True)
    class Typed(OneParameterMargin):
        name: ClassVar[str] = "test-typed"
        type: str = "x"

        def phi(self, theta):
            return torch.cos(theta)

    with pytest.raises(TypeError, match=r"Typed has a parameter named 'type', the key under which a config names"):
        register("margin")(Typed)
    assert "test-typed" not in REGISTRIES["margin"]
