"""The sampled mutation run's selection of tests for a mutant (tests/mutate_sample.py)."""

from collections import Counter

from mutate_sample import SampledMutant, _counts, _score, named_after, records, select, wider

SECONDS = {
    "tests/metrics/test_metrics.py::test_fast": 0.1,
    "tests/metrics/test_metrics.py::test_slow": 9.0,
    "tests/metrics/test_metrics.py::test_b": 0.5,
    "tests/data/test_data.py::test_c": 0.2,
}


def _mutant(path: str, lines: list[int]) -> SampledMutant:
    return SampledMutant(f"{path}:{lines[0]}#0", f"{path}:0", path, lines[0], "string", "a", "b", lines)


def test_a_mutant_runs_the_tests_of_its_lines_else_its_file_else_its_packages_folder():
    """A module no test's coverage records (evaluate runs hf_heads/metrics/modules/ from a copy in its cache) gets the
    fastest tests of each file of its package's test folder, within the limits; one outside any folder gets none."""
    data = "tests/data/test_data.py::test_c"
    cov = {"seconds": SECONDS, "lines": {"hf_heads/data/corpora.py": {"3": [data]}}}
    assert select(_mutant("hf_heads/data/corpora.py", [3]), cov, 8, 20.0) == ("line", [data])
    tier, tests = select(_mutant("hf_heads/data/corpora.py", [9]), cov, 8, 20.0)
    assert tier == "file" and tests[-1] == data  # after the hand-written mutants' selections for the file
    tier, tests = select(_mutant("hf_heads/metrics/modules/recall.py", [94]), cov, 8, 5.0)
    assert tier == "package"
    assert tests == ["tests/metrics/test_metrics.py::test_fast", "tests/metrics/test_metrics.py::test_b"]
    assert select(_mutant("hf_heads/integrations/peft_two.py", [1]), cov, 8, 5.0) == ("none", [])


def test_a_second_chance_of_a_module_no_coverage_records_takes_its_packages_folder():
    """A survivor whose first selection was the hand-written mutants' (a module evaluate runs from its cache) gets the
    fastest tests of its package's folder beside them in its second chance, within its limits; a covered module
    gets the tests of its own lines and file only."""
    data = "tests/data/test_data.py::test_c"
    cov = {"seconds": SECONDS, "lines": {"hf_heads/data/corpora.py": {"3": [data]}}}
    tests = wider(_mutant("hf_heads/metrics/modules/rouge.py", [11]), cov, 2, 5.0)
    assert tests[:2] == ["tests/metrics/test_metrics.py::test_fast", "tests/metrics/test_metrics.py::test_b"]
    assert "tests/metrics/test_metrics.py::test_slow" not in tests
    assert wider(_mutant("hf_heads/data/corpora.py", [9]), cov, 8, 20.0)[0] == data
    assert not any(t.startswith("tests/metrics/") for t in wider(_mutant("hf_heads/data/corpora.py", [9]), cov, 8, 20))


def test_module_level_code_also_runs_the_tests_named_after_its_module():
    """An `__all__` runs at import, inside no test: the tests parametrized by the module's dotted name join the file
    tier's selection first (a module whose name another extends, hf_heads.metrics.modules, is not taken for it)."""
    star = "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists[hf_heads.metrics]"
    others = [
        "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists[hf_heads.metrics.modules]",
        "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists[hf_heads]",
    ]
    seconds = {**SECONDS, star: 0.3, **dict.fromkeys(others, 0.3)}
    assert named_after("hf_heads/metrics/__init__.py", seconds) == [star]
    assert named_after("hf_heads/__init__.py", seconds) == [others[1]]
    cov = {
        "seconds": seconds,
        "lines": {"hf_heads/metrics/__init__.py": {"5": ["tests/metrics/test_metrics.py::test_b"]}},
    }
    tier, tests = select(_mutant("hf_heads/metrics/__init__.py", [20]), cov, 8, 20.0)
    assert tier == "file" and tests[0] == star and "tests/metrics/test_metrics.py::test_b" in tests


def test_import_time_code_also_runs_the_tests_that_compare_definitions_with_committed_records():
    """A class-level default or a registry entry runs at import, inside no test: the record tests (options and their
    defaults, flags, the cards' text) join the selection and the second chance of a mutant no test runs the lines
    of; a mutant whose lines a test runs keeps its own tests."""
    record = "tests/heads/test_api_record.py::test_the_built_in_options_and_their_defaults_are_the_committed_record"
    card = "tests/training/test_card_text.py::test_a_model_card_is_word_for_word_the_committed_one[seq2seq]"
    seconds = {**SECONDS, record: 1.0, card: 2.0}
    assert records(seconds) == sorted([card, record])
    cov = {"seconds": seconds, "lines": {"hf_heads/data/corpora.py": {"3": ["tests/data/test_data.py::test_c"]}}}
    tier, tests = select(_mutant("hf_heads/data/corpora.py", [9]), cov, 8, 20.0)
    assert tier == "file" and {record, card} <= set(tests) and "tests/data/test_data.py::test_c" in tests
    assert {record, card} <= set(wider(_mutant("hf_heads/data/corpora.py", [9]), cov, 8, 20.0))
    assert select(_mutant("hf_heads/data/corpora.py", [3]), cov, 8, 20.0) == (
        "line",
        ["tests/data/test_data.py::test_c"],
    )
    assert not {record, card} & set(wider(_mutant("hf_heads/data/corpora.py", [3]), cov, 8, 20.0))


def test_a_survivor_whose_line_was_fixed_since_is_counted_apart_after_triage():
    """After the re-run, a survivor triaged with a test is killed, still surviving, or (its line rewritten by a fix)
    counted as a line changed since, outside the score; an equivalent one is left out either way."""
    run = {"status": "survived", "detail": "", "s": 1.0}
    path = "hf_heads/data/x.py"
    mutants = [{"key": k, "path": path, "result": run, "second": run} for k in ("fixed", "test", "same", "open")]
    mutants.append({"key": "k", "path": path, "result": {"status": "killed"}, "second": {}})
    triage = {"fixed": ("test", "t"), "test": ("test", "t"), "same": ("equivalent", "why"), "open": ("test", "t")}
    after = {"fixed": {"status": "stale"}, "test": {"status": "killed"}, "open": {"status": "survived"}}
    c = _counts(mutants, triage, after)["data"]
    assert c == Counter({"line changed": 1, "killed after triage": 1, "equivalent": 1, "survived": 1, "killed": 1})
    assert _score(c) == "67 %"
    assert _counts(mutants, triage, None)["data"]["survived"] == 3
