"""`import hf_heads` stays light: the trainer classes and training arguments resolve from the top-level
package on first access (module `__getattr__`), importing `hf_heads.training` only then."""

import json
import os
import subprocess
import sys

import pytest

LAZY = ["HeadsSeq2SeqTrainer", "HeadsSeq2SeqTrainingArguments", "HeadsTrainer", "HeadsTrainingArguments"]

PROBE = """
import json, sys
import hf_heads
report = {
    "after_import": sorted(m for m in sys.modules if m == "hf_heads.training" or m.startswith("hf_heads.training.")),
    "trainer_loaded": "transformers.trainer" in sys.modules,
    "all": list(hf_heads.__all__),
    "dir": dir(hf_heads),
}
from hf_heads import HeadsSeq2SeqTrainer, HeadsSeq2SeqTrainingArguments, HeadsTrainer, HeadsTrainingArguments
import hf_heads.training as training
report["same_objects"] = [
    HeadsTrainer is training.HeadsTrainer,
    HeadsSeq2SeqTrainer is training.HeadsSeq2SeqTrainer,
    HeadsTrainingArguments is training.HeadsTrainingArguments,
    HeadsSeq2SeqTrainingArguments is training.HeadsSeq2SeqTrainingArguments,
    hf_heads.HeadsTrainer is HeadsTrainer,
]
report["after_access"] = "hf_heads.training" in sys.modules
try:
    hf_heads.NoSuchThing
except AttributeError as err:
    report["missing"] = str(err)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def report() -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_hf_heads_does_not_import_training(report):
    assert report["after_import"] == []
    assert not report["trainer_loaded"]  # nor transformers' Trainer


def test_lazy_names_are_public(report):
    for name in LAZY:
        assert name in report["all"] and name in report["dir"]
    assert {"HeadsConfig", "HeadsForCausalLM", "__version__"} <= set(report["dir"])


def test_lazy_names_resolve_to_the_training_classes(report):
    assert report["same_objects"] == [True] * 5
    assert report["after_access"]


def test_unknown_attribute_raises_attribute_error(report):
    assert report["missing"] == "module 'hf_heads' has no attribute 'NoSuchThing'"


def test_version_is_the_installed_distributions():
    """`hf_heads.__version__` is the version pip installed (the package metadata of pyproject.toml), so a bug report
    quoting it names the release that ran."""
    import importlib.metadata

    import hf_heads

    assert hf_heads.__version__ == importlib.metadata.version("hf_heads")


def _modules_with_all() -> list[str]:
    import pkgutil

    import hf_heads

    names = ["hf_heads"]
    for info in pkgutil.walk_packages(hf_heads.__path__, "hf_heads."):
        if not info.name.endswith("__main__"):
            names.append(info.name)
    return names


@pytest.mark.parametrize("name", _modules_with_all())
def test_every_name_in_a_modules_all_exists(name):
    """`from module import *` works: every name a module's `__all__` lists is an attribute of it, listed once."""
    import importlib

    module = importlib.import_module(name)
    namespace: dict = {}
    exec(f"from {name} import *", namespace)  # noqa: S102 -- what a user's star import runs
    if "__all__" not in vars(module):
        return
    listed = module.__all__
    assert len(listed) == len(set(listed)), f"{name}.__all__ lists a name twice"
    missing = [n for n in listed if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists names it does not have: {missing}"
    assert set(listed) <= set(namespace), f"from {name} import * leaves out {sorted(set(listed) - set(namespace))}"
