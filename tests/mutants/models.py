"""Mutants of the task models, save / reload and the Hub export, generation and continuous decoding, scoring;"""

from __future__ import annotations

from mutants import Mutant, m, selection  # noqa: F401

MUTANTS: list[Mutant] = []
