"""The mutants of `make mutate` (tests/mutate.py): one module per part of the package, each a list `MUTANTS` of
plausible bugs with the tests that should catch them.

- `losses`: the losses and heads (hf_heads/losses, hf_heads/heads): signs, dropped terms, corrections, reductions;
- `kernels`: the chunk engine and its kernels (eager, compiled, Triton), the fused loss's branches;
- `models`: the task models, save / reload and the Hub export, generation and continuous decoding, scoring;
- `training`: the trainers, arguments, cards, metrics, data loaders and the run scripts' support (cli).

A new public function or option lands with at least one mutant here that its tests kill (docs/contributing.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Mutant:
    """One plausible bug: `old` (exactly once in `path`) becomes `new`; `tests` are the pytest arguments to run."""

    id: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str
    part: str = ""  # the list of tests/mutants/ it comes from


def m(id: str, path: str, old: str, new: str, tests: list[str], why: str) -> Mutant:
    return Mutant(id, f"hf_heads/{path}", old, new, tuple(tests), why)


def selection(*tests: str) -> list[str]:
    """pytest arguments (files, node ids) of a mutant's targeted selection, in the order they run: put the test most
    likely to catch the bug first (the run stops at the first failure)."""
    return list(tests)


def _collect() -> list[Mutant]:
    from mutants import kernels, losses, models, training

    found = [
        replace(mutant, part=module.__name__.rsplit(".", 1)[1])
        for module in (losses, kernels, models, training)
        for mutant in module.MUTANTS
    ]
    seen: set[str] = set()
    for mutant in found:
        if mutant.id in seen:
            raise ValueError(f"two mutants are called {mutant.id!r}")
        seen.add(mutant.id)
    return found


MUTANTS = _collect()
