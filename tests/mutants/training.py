"""Mutants of the trainers, arguments, cards, metrics, data loaders and the run scripts' support (cli)."""

from __future__ import annotations

from mutants import Mutant, m, selection  # noqa: F401

MUTANTS: list[Mutant] = []
