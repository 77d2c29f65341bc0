"""The one check that saved model directories load where hf_heads is not installed: a subprocess whose import system
cannot find hf_heads loads each directory with `AutoModelFor….from_pretrained(dir, trust_remote_code=True)` (the code
saved next to the weights), or, for an export to the base architecture (`remote_code=False`), with transformers' own
class and no `trust_remote_code`, and runs it. Used by the contract (tests/heads/test_contract.py, one subprocess per
task for every head family) and by the run-script tests on the directories their runs export. The subprocess cannot
import triton either (a CPU machine without it): the saved code must load and train without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = r"""
import importlib.util
import os
import sys

# hf_heads must not be importable here: drop the path entries and import finders that could find it, then block it
sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or os.getcwd(), "hf_heads"))]
sys.meta_path[:] = [f for f in sys.meta_path if "hf_heads" not in repr(f) + getattr(f, "__module__", "")]
assert importlib.util.find_spec("hf_heads") is None, "hf_heads is still importable"
sys.modules["hf_heads"] = None
sys.modules["triton"] = None  # nor triton: the saved code runs on a CPU machine without it

import torch
import transformers

results = []
for job in torch.load(sys.argv[1]):
    auto = getattr(transformers, job["auto"])
    result = {}
    if job["refusal"]:  # without trust_remote_code: the error transformers gives
        try:
            auto.from_pretrained(job["dir"])
            result["refused"] = None
        except ValueError as err:
            result["refused"] = str(err).splitlines()[0]
    if job["pipeline"] is not None:  # transformers.pipeline(task, model=dir, trust_remote_code=True) on the text
        task, kwargs = job["pipeline"]
        pipe = transformers.pipeline(task, model=job["dir"], trust_remote_code=job["remote_code"])
        result["pipeline"] = pipe(job["text"], **kwargs)
        result["pipeline_module"] = type(pipe.model).__module__
    model = auto.from_pretrained(job["dir"], trust_remote_code=job["remote_code"]).eval()
    result["module"] = type(model).__module__
    inputs = job["inputs"]
    if job["text"] is not None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(job["dir"])
        inputs = {k: v for k, v in tokenizer(job["text"], return_tensors="pt").items() if k != "token_type_ids"}
    result["inputs"] = inputs
    with torch.no_grad():
        if job["generate"] is not None:
            result["output"] = model.generate(**inputs, **job["generate"])
        else:
            result["output"] = model(**inputs).logits
    if job["labels"] is not None:  # the evaluation loss, then a training step's loss and gradients
        with torch.no_grad():
            result["eval_loss"] = model(**inputs, labels=job["labels"]).loss
        torch.manual_seed(1)
        model.train()
        train = model(**inputs, labels=job["labels"])
        train.loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        result["train_loss"] = train.loss.detach()
        result["grads_finite"] = bool(grads) and all(bool(torch.isfinite(g).all()) for g in grads)
    results.append(result)
torch.save(results, sys.argv[2])
"""


def export_job(
    directory,
    auto: str,
    inputs: dict | None = None,
    *,
    text: str | None = None,
    generate: dict | None = None,
    refusal: bool = False,
    pipeline: tuple[str, dict] | None = None,
    labels: torch.Tensor | None = None,
    remote_code: bool = True,
) -> dict:
    """One directory to load with `transformers.<auto>` and run: on `inputs` (keyword tensors), or on `text` encoded
    by the directory's tokenizer; `model.generate(**inputs, **generate)` when `generate` is given, else the logits.
    `refusal`: first try loading without `trust_remote_code` and keep the first line of the error. `pipeline`:
    (task, call kwargs): also run `transformers.pipeline(task, model=directory, trust_remote_code=True)` on `text`.
    `labels`: also the evaluation loss of `inputs` with them (`eval_loss`), and one training forward and backward
    after `torch.manual_seed(1)` (`train_loss`, and `grads_finite`: some gradient, all finite). `remote_code=False`:
    load without `trust_remote_code` (a directory of `export_base`: the model must be transformers' own class)."""
    if (inputs is None) == (text is None):
        raise ValueError("give inputs or text")
    if pipeline is not None and text is None:
        raise ValueError("a pipeline job needs text")
    return dict(
        dir=str(directory), auto=auto, inputs=inputs, text=text, generate=generate, refusal=refusal, pipeline=pipeline,
        labels=labels, remote_code=remote_code,
    )  # fmt: skip


def load_without_hf_heads(jobs: list[dict], workdir: Path, timeout: int = 300) -> list[dict]:
    """Run `jobs` (`export_job`) in one subprocess without hf_heads; returns per job {"module": the loaded model's
    module, "inputs": what it ran on, "output": logits or generated ids, "refused": the error (with refusal)}.
    Fails when the subprocess does, or when a model did not come from the directory's own code (or, with
    `remote_code=False`, from transformers' own modules)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    torch.save(jobs, workdir / "jobs.pt")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_MODULES_CACHE": str(workdir / "modules"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(workdir / "jobs.pt"), str(workdir / "results.pt")],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = torch.load(workdir / "results.pt")
    for job, result in zip(jobs, results, strict=True):
        own = "transformers_modules." if job["remote_code"] else "transformers.models."
        assert result["module"].startswith(own), (job["dir"], result["module"])
    return results
