"""The components of the user's package under tests/extension, for the suites generated from the registries
(tests/losses/test_components_contract.py, tests/losses/test_kernels.py): imported once, then taken out of the
registries again so that the rest of the suite sees the built-in ones only. A test that runs one of them by its name
registers it for the test's duration (`registered`)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

from hf_heads.components import REGISTRIES
from hf_heads.losses.chunks import CHUNK_KERNELS, ChunkKernel

EXTENSION = Path(__file__).parent / "extension"


def _extension_components() -> dict[str, list[type]]:
    """{kind: classes} registered by the modules under tests/extension."""
    before = {kind: dict(registry) for kind, registry in REGISTRIES.items()}
    modules = set(sys.modules)
    sys.path.insert(0, str(EXTENSION))
    try:
        for info in pkgutil.walk_packages([str(EXTENSION)]):
            importlib.import_module(info.name)
    finally:
        sys.path.remove(str(EXTENSION))
        for name in set(sys.modules) - modules:  # other tests import them again, registering them for themselves
            del sys.modules[name]
    found = {kind: [cls for name, cls in registry.items() if name not in before[kind]] for kind, registry in
             REGISTRIES.items()}  # fmt: skip
    for kind, registry in REGISTRIES.items():
        registry.clear()
        registry.update(before[kind])
    return found


EXTENSIONS = _extension_components()
COMPONENTS = {kind: [*REGISTRIES[kind].values(), *EXTENSIONS[kind]] for kind in REGISTRIES}
# every chunk kernel's name: the built-in ones (sorted), then the extension's
KERNELS = [*sorted(CHUNK_KERNELS), *(cls.name for cls in EXTENSIONS["kernel"])]


def registered(kind: str, name: str, monkeypatch) -> None:
    """Register the extension's component `name` of `kind` for the test's duration (nothing for a built-in one)."""
    for cls in EXTENSIONS[kind]:
        if cls.name == name:
            monkeypatch.setitem(REGISTRIES[kind], name, cls)


def kernel(name: str) -> ChunkKernel:
    """The chunk kernel called `name`, built-in or the extension's (without registering it)."""
    if name in CHUNK_KERNELS:
        return CHUNK_KERNELS[name]
    return next(cls for cls in EXTENSIONS["kernel"] if cls.name == name)()
