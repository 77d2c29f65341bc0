"""No code of hf_heads asks a component "which one are you?" by its name: what varies by component is a method or a
class attribute of the component (DESIGN: parts as types). A test walks the AST of every module and fails on a
comparison (==, !=, in, not in) of a registered component's or family's name with something that names a component
(a criterion, a margin, a norm, a method, a noise, a kernel, a family, a continuous loss, or a `.name`). Parsing and
the registries (hf_heads/components.py, hf_heads/heads/registry.py) look names up in dicts, which is no comparison."""

from __future__ import annotations

import ast
from pathlib import Path

from hf_heads.components import REGISTRIES
from hf_heads.heads import FAMILIES

PACKAGE = Path(__file__).resolve().parents[2] / "hf_heads"
COMPONENT_WORDS = ("criterion", "margin", "norm", "method", "sampler", "noise", "kernel", "family", "loss", ".name")


def _names() -> set[str]:
    return set(FAMILIES) | {name for registry in REGISTRIES.values() for name in registry}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def name_dispatches(source: str) -> list[tuple[int, str]]:
    """(line, expression) of every comparison of a component's name with something that names a component."""
    names, found = _names(), []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        literal = [s for o in operands for s in _strings(o) if s in names]
        others = [ast.unparse(o) for o in operands if not _strings(o)]
        if literal and any(word in other for other in others for word in COMPONENT_WORDS):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_dispatches_on_a_component_name():
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {expr}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, expr in name_dispatches(path.read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)


def test_the_check_sees_a_name_dispatch():
    """The rule itself: a criterion compared by name is found, a reduction compared with "none" is not."""
    assert name_dispatches('if opts.criterion == "bce":\n    pass\n')
    assert name_dispatches('if sampler.name in ("mcs", "is"):\n    pass\n')
    assert not name_dispatches('if reduction == "none":\n    pass\n')
