"""The naive references share no code with what they check.

Every reference the contract and property suites compare the library with — a registered component's `reference`
(a margin's `phi`), a family's `reference*` methods, the functions of tests/references.py — is walked with the
helpers it calls (module-level `_naive_*` functions, methods of its own class that only references call). Each
global name they read must be torch / math / numpy / typing, a constant, `OptionError` (a reference refuses what
the component refuses), or a plain data container (`ReferenceBatch`, `ContinuousBatch`: dataclasses with no methods
but properties). A reference that calls the implementation's helper (the in-batch candidate pool, the frequency
ranks, the logit transform, the sample draw) would pass any bug of that helper by construction; this test names it.
Conversely no implementation code calls a `_naive_*` helper.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect
import pkgutil
import textwrap
import types

import references
import torch

import hf_heads
from hf_heads.components import REGISTRIES
from hf_heads.heads import FAMILIES
from hf_heads.losses import noise as noise_module
from hf_heads.losses.noise import UniformNoise
from hf_heads.validation import OptionError

ALLOWED_MODULES = ("torch", "math", "numpy", "typing", "itertools", "functools", "collections", "builtins")
# methods of an options class a reference may call for the component objects its fields name (the parameters)
ACCESSORS = {"component"}


def _is_reference_name(name: str) -> bool:
    return name.startswith("reference") or name == "phi"


def _tree(fn) -> ast.FunctionDef:
    return ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]


def _global_loads(fn) -> set[str]:
    """The names a function reads that are not its own (parameters, locals, comprehension and lambda variables)."""
    tree = _tree(fn)
    local = {a.arg for n in ast.walk(tree) if isinstance(n, (ast.arguments,)) for a in n.args + n.kwonlyargs}
    for n in ast.walk(tree):
        if isinstance(n, ast.arguments):
            local |= {a.arg for a in (n.vararg, n.kwarg) if a is not None}
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            local.add(n.id)
    loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loads - local - {"self", "cls"} - set(dir(builtins))


def _self_calls(fn) -> set[str]:
    """The methods a function calls on `self`."""
    return {
        n.func.attr
        for n in ast.walk(_tree(fn))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "self"
    }


def _has_source(fn) -> bool:
    try:
        inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return True


def _methods(cls) -> dict[str, types.FunctionType]:
    out: dict[str, types.FunctionType] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if inspect.isfunction(value) and _has_source(value):  # not a generated dunder (dataclasses)
                out[name] = value
    return out


def _reference_only(cls) -> set[str]:
    """The methods of `cls` that only references call (transitively): the reference names themselves, and any
    method called by one of them and by nothing else."""
    methods = _methods(cls)
    callers: dict[str, set[str]] = {name: set() for name in methods}
    for name, fn in methods.items():
        for called in _self_calls(fn) & methods.keys():
            callers[called].add(name)
    only = {name for name in methods if _is_reference_name(name)}
    grown = True
    while grown:
        grown = False
        for name in methods.keys() - only:
            if callers[name] and callers[name] <= only:
                only.add(name)
                grown = True
    return only


def _plain_container(obj) -> bool:
    return (
        isinstance(obj, type)
        and dataclasses.is_dataclass(obj)
        and all(
            name.startswith("__") or isinstance(value, property)
            for name, value in vars(obj).items()
            if name not in {f.name for f in dataclasses.fields(obj)}
        )
    )


def _constant(obj) -> bool:
    if isinstance(obj, (tuple, frozenset)):
        return all(_constant(item) for item in obj)
    return obj is None or isinstance(obj, (bool, int, float, str))


def _allowed(obj) -> bool:
    if inspect.ismodule(obj):
        return obj.__name__.split(".")[0] in ALLOWED_MODULES
    module = getattr(obj, "__module__", None) or ""
    return (
        _constant(obj)
        or obj is OptionError
        or _plain_container(obj)
        or module.split(".")[0] in ALLOWED_MODULES
        or type(obj).__module__.split(".")[0] in ALLOWED_MODULES  # torch.float64, a dtype
    )


def _references() -> list[tuple[str, types.FunctionType, type | None]]:
    """(label, function, its class or None) of every reference."""
    found: dict[tuple, tuple[str, types.FunctionType, type | None]] = {}
    classes = [(f"{kind} {name!r}", cls) for kind, reg in REGISTRIES.items() for name, cls in reg.items()]
    classes += [(f"family {name!r} options", family.options) for name, family in FAMILIES.items()]
    for label, cls in classes:
        for name, fn in _methods(cls).items():
            if _is_reference_name(name) and fn.__module__.startswith(("hf_heads", "tests", "references")):
                found.setdefault((fn, cls), (f"{label}: {fn.__qualname__}", fn, cls))
    for name, fn in vars(references).items():
        if inspect.isfunction(fn) and fn.__module__ == references.__name__:
            found.setdefault((fn, None), (f"tests/references.py: {name}", fn, None))
    return list(found.values())


def _walk(fn, cls, seen: set, problems: list[str], label: str) -> None:
    if (fn, cls) in seen:  # a method inherited by several classes is walked with each (its self-calls differ)
        return
    seen.add((fn, cls))
    for name in sorted(_global_loads(fn)):
        if name not in fn.__globals__:
            problems.append(f"{label}: {fn.__qualname__} reads {name}, which is not defined")
            continue
        obj = fn.__globals__[name]
        if name.startswith("_naive_") and inspect.isfunction(obj):
            _walk(obj, None, seen, problems, label)
        elif not _allowed(obj):
            where = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
            problems.append(f"{label}: {fn.__qualname__} uses {name} from {where}, the implementation's code")
    if cls is None:
        return
    methods, only = _methods(cls), _reference_only(cls)
    for called in sorted(_self_calls(fn) & methods.keys()):
        if called in ACCESSORS:
            continue
        if called not in only:
            problems.append(f"{label}: {fn.__qualname__} calls self.{called}, which the implementation calls too")
        else:
            _walk(methods[called], cls, seen, problems, label)


def _closure() -> tuple[set, list[str]]:
    seen: set = set()
    problems: list[str] = []
    for label, fn, cls in _references():
        _walk(fn, cls, seen, problems, label)
    return seen, problems


def test_references_share_no_code_with_what_they_check():
    references_found = _references()
    assert len(references_found) > 30  # every component kind and family has its references
    _, problems = _closure()
    assert not problems, "\n".join(problems)


def test_no_implementation_calls_a_naive_helper():
    seen, _ = _closure()
    allowed = {(fn.__module__, fn.__qualname__) for fn, _ in seen}
    offenders = []
    for info in pkgutil.walk_packages(hf_heads.__path__, "hf_heads."):
        module = importlib.import_module(info.name)
        try:
            tree = ast.parse(inspect.getsource(module))
        except (OSError, TypeError):
            continue

        def visit(node, prefix: str, module_name: str = info.name) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    qualname = f"{prefix}{child.name}"
                    if isinstance(child, ast.ClassDef):
                        visit(child, qualname + ".", module_name)
                        continue
                    uses = {
                        n.id
                        for n in ast.walk(child)
                        if isinstance(n, ast.Name) and n.id.startswith("_naive_") and isinstance(n.ctx, ast.Load)
                    }
                    if uses and (module_name, qualname) not in allowed:
                        offenders.append(f"{module_name}.{qualname} calls {sorted(uses)}")

        visit(tree, "")
    assert not offenders, "the `_naive_*` helpers are the references' own: " + "; ".join(offenders)


class _Borrowing(UniformNoise):
    """A toy noise for the check itself: its reference reads the implementation's module, calls a method the
    implementation calls too, and a helper only references call."""

    def reference(self, num_classes, counts, ranks):
        return noise_module.noise_distribution("uniform", num_classes) + self.shared(num_classes)

    def distribution(self, num_classes, counts, ranks):
        return self.shared(num_classes)

    def shared(self, num_classes):
        return torch.full((num_classes,), 1.0 / num_classes)

    def reference_plain(self, num_classes, counts, ranks):
        return self.only_mine(num_classes)

    def only_mine(self, num_classes):
        return torch.full((num_classes,), 1.0 / num_classes, dtype=torch.float64)


def test_the_check_names_a_reference_that_shares_code():
    problems: list[str] = []
    _walk(_Borrowing.reference, _Borrowing, set(), problems, "toy")
    assert len(problems) == 2, problems
    assert "uses noise_module from hf_heads.losses.noise" in problems[0]
    assert "calls self.shared, which the implementation calls too" in problems[1]
    problems = []
    _walk(_Borrowing.reference_plain, _Borrowing, set(), problems, "toy")
    assert problems == []  # a helper only references call is walked, and reads only torch
