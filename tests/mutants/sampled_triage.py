"""The triage of the survivors of `make mutate-sample` (tests/mutate_sample.py, docs/results/mutation_sample.md).

A survivor passed the tests that run its lines: each is named here by its key (path:hash of the replacement, as the
report prints it) with ("test", node ids of the tests that now kill it) or ("equivalent", a one-line reason no test
can tell it from the original).
"""

from __future__ import annotations

TRIAGE: dict[str, tuple[str, str]] = {}
