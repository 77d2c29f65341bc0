"""Imports point downwards only, with no exception, and no module imports itself back through others.

The layers, bottom to top (a module imports modules of its own layer or of the layers below it; function-local
imports and `importlib.import_module("hf_heads....")` count as imports):

    validation, components             the ground floor: argument checks and the component registries
    data, metrics, integrations        corpora, offline `evaluate` modules, the PEFT glue (imports only peft)
    losses                             pure torch: the losses, the chunk engine and its kernels
    heads                              one head per family
    modeling                           the PreTrainedModel classes and the package itself (`hf_heads`)
    training                           the trainers, cards, TRL
    scoring, cli                       sentence scores and the run scripts' support

`integrations` sits low, not above `modeling`: the PEFT glue imports nothing of hf_heads, and the model classes
call it (`add_adapter`). The shipped `evaluate` scripts (hf_heads/metrics/modules) are loaded by `evaluate`, but are
held to their layer like the rest.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hf_heads"
LAYERS = (
    ("validation", "components"),
    ("data", "metrics", "integrations"),
    ("losses",),
    ("heads",),
    ("modeling", "hf_heads"),
    ("training",),
    ("scoring", "cli"),
)


def _module_name(path: Path) -> str:
    return ".".join(("hf_heads", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _layer(module: str) -> int:
    parts = module.split(".")[1:]
    unit = parts[0] if parts else "hf_heads"
    return next(i for i, names in enumerate(LAYERS) if unit in names)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every hf_heads import of a file: `from m import a, b` gives (m, [a, b]); `import m` and
    `importlib.import_module("m")` give (m, [])."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif getattr(node, "func", None) is not None and getattr(node.func, "attr", None) == "import_module":
            found += [(arg.value, []) for arg in node.args[:1] if isinstance(arg, ast.Constant)]
    return [(m, names) for m, names in found if m == "hf_heads" or m.startswith("hf_heads.")]


def _graph() -> dict[str, set[str]]:
    """{module: the hf_heads modules it imports} (a package is its __init__; `from package import submodule` is an
    edge to the package: that is what the statement runs first, and what the code saved with a model imports)."""
    return {name: {m for m, _ in _imports(path)} - {name} for name, path in MODULES.items()}


def test_imports_point_downwards():
    upward = []
    for module, path in MODULES.items():
        if module == "hf_heads":  # the package's own lazy names (PEP 562)
            continue
        for imported, _ in _imports(path):
            if _layer(imported) > _layer(module):
                upward.append(f"{path.relative_to(PACKAGE)}: imports {imported}")
    assert not upward, "\n".join(upward)


def test_the_ground_floor_imports_only_the_ground_floor():
    assert _imports(PACKAGE / "validation.py") == []
    assert [m for m, _ in _imports(PACKAGE / "components.py")] == ["hf_heads.validation"]


def test_no_import_cycle():
    """No module reaches itself through the modules it imports (function-local and importlib imports included):
    a cycle is an import order that works by luck, and breaks in the flat copy saved with a model."""
    graph, cycles = _graph(), set()

    def walk(module: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(module, ())):
            if nxt in path:
                cycle = path[path.index(nxt) :]
                start = cycle.index(min(cycle))
                cycles.add(" -> ".join([*cycle[start:], *cycle[:start], min(cycle)]))
            elif nxt in graph and len(path) < 40:
                walk(nxt, [*path, nxt])

    for module in sorted(graph):
        if module != "hf_heads":  # its lazy names are imported on first access, after it is imported
            walk(module, [module])
    assert not cycles, "\n".join(sorted(cycles))


def test_submodules_are_imported_by_their_own_name():
    """`from hf_heads.losses import kernels` (a submodule through its package) runs the package first and, in the
    code saved with a model, names a flat module that has no such attribute: write `from hf_heads.losses.kernels
    import ...`."""
    found = []
    for path in MODULES.values():
        for imported, names in _imports(path):
            if imported in PACKAGES:
                found += [f"{path.relative_to(PACKAGE)}: from {imported} import {n}" for n in names
                          if f"{imported}.{n}" in MODULES]  # fmt: skip
    assert not found, "\n".join(found)


def test_the_chunk_engine_names_no_concrete_kernel():
    assert not any(m.startswith("hf_heads.losses.triton") for m, _ in _imports(PACKAGE / "losses" / "chunks.py"))
