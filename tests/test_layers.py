"""Imports point downwards only: each module of hf_heads imports modules of its own layer or of the layers below it
(DESIGN: cli -> training -> modeling -> heads -> losses -> validation), function-local imports included. The old
paths kept until 0.3 are the only arrows up: all of them in hf_heads/compat.py (which names the new homes it imports
when an old name is used, counted here as imports), on the ground floor so that any layer can use it."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bottom to top; `hf_heads` is the package itself (`import hf_heads` registers the model classes)
LAYERS = (
    ("validation", "components", "compat"),
    ("integrations", "integrations.peft", "integrations.trl"),
    ("losses",),
    ("heads", "data"),
    ("modeling", "hf_heads"),
    ("metrics", "scoring"),
    ("training",),
    ("cli",),
)
# the deprecated names and modules that moved up (removed in 0.3): hf_heads.compat and the layers it names
OLD_PATHS = {
    ("compat.py", "losses"), ("compat.py", "heads"), ("compat.py", "training"), ("compat.py", "cli"),
    ("compat.py", "integrations"),
}  # fmt: skip
MODULE_NAME = re.compile(r"hf_heads(\.\w+)+")


def _layer(module: str) -> int:
    parts = module.split(".")[1:]
    unit = "hf_heads" if not parts else ".".join(parts[:2]) if parts[0] == "integrations" else parts[0]
    return next(i for i, names in enumerate(LAYERS) if unit in names)


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif getattr(node, "func", None) is not None and getattr(node.func, "attr", None) == "import_module":
            found += [arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant)]
        elif (
            path == ROOT / "hf_heads" / "compat.py" and isinstance(node, ast.Constant) and isinstance(node.value, str)
        ):
            found += [node.value] if MODULE_NAME.fullmatch(node.value) else []  # a module its tables name
    return [name for name in found if name == "hf_heads" or name.startswith("hf_heads.")]


def test_imports_point_downwards():
    package = ROOT / "hf_heads"
    upward = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative == Path("__init__.py"):  # the package's own lazy names (PEP 562)
            continue
        module = ".".join(("hf_heads", *relative.with_suffix("").parts)).removesuffix(".__init__")
        for imported in _imports(path):
            if _layer(imported) > _layer(module) and (relative.as_posix(), imported.split(".")[1]) not in OLD_PATHS:
                upward.append(f"{relative}: imports {imported}")
    assert not upward, "\n".join(upward)


def test_validation_is_the_ground_floor():
    assert _imports(ROOT / "hf_heads" / "validation.py") == []
    assert _imports(ROOT / "hf_heads" / "components.py") == ["hf_heads.validation"]
    module_level = ast.parse((ROOT / "hf_heads" / "compat.py").read_text(encoding="utf-8")).body
    assert not [
        node for node in module_level if isinstance(node, ast.ImportFrom) and "hf_heads" in (node.module or "")
    ]


def test_the_old_paths_are_shims_of_compat_only():
    """Each deprecated module is its docstring and its re-export through hf_heads.compat: no logic of its own."""
    from hf_heads.compat import MOVED_MODULES

    for module in MOVED_MODULES:
        path = ROOT / Path(*module.split(".")).with_suffix(".py")
        body = ast.parse(path.read_text(encoding="utf-8")).body[1:]  # after the docstring: the import, the update
        assert _imports(path) == ["hf_heads.compat"] and len(body) == 2, module


def _losses_graph() -> dict[str, set[str]]:
    """{module: the hf_heads.losses modules it imports} over hf_heads/losses (function-local imports included;
    `from hf_heads.losses import kernels` is the module kernels)."""
    folder = ROOT / "hf_heads" / "losses"
    names = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
    graph = {}
    for name in names:
        edges = set()
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "hf_heads.losses":
                edges |= {alias.name for alias in node.names if alias.name in names} or {"__init__"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hf_heads.losses."):
                edges.add(node.module.split(".")[2])
        graph[name] = edges
    return graph


def test_no_import_cycle_inside_the_losses():
    graph, cycles = _losses_graph(), []

    def walk(module: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(module, ())):
            if nxt in path:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt in graph:
                walk(nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    assert not cycles, "\n".join(sorted(set(cycles)))
    assert "triton_kernel" not in graph["chunks"]  # the engine names no concrete kernel
