"""Mutants of the chunk engine and its kernels (eager, compiled, Triton), the fused loss's branches;"""

from __future__ import annotations

from mutants import Mutant, m, selection  # noqa: F401

MUTANTS: list[Mutant] = []
