"""benchmarks/gpu/gpu.sh runs end to end on the CPU (GPU_DRY_RUN=1: toy sizes, the Triton kernels under Triton's
interpreter): every section in order, the Gemma-sized bf16 section first, no command failed or cut short, no row
failed, and the rows that cannot run here (the peers' CUDA kernels) listed as not available, not left out."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = [
    "## (a) bf16 autocast, the Gemma-sized row",
    "## (b) correctness of every chunk kernel and every head on the device",
    "## (c) float32 at the Gemma-sized row, TF32 off and on",
    "## (d) the rest",
]


def test_the_gpu_script_dry_run(tmp_path):
    env = {
        **os.environ,
        "GPU_DRY_RUN": "1",
        "GPU_BUDGET_S": "600",  # the toy run takes well under a minute; a loaded machine must not cut it short
        "OUT": str(tmp_path),
        "PYTHON": sys.executable,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    env.pop("TRITON_INTERPRET", None)  # the script sets it
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu" / "gpu.sh")], capture_output=True, text=True, env=env, timeout=900
    )
    log = (tmp_path / "gpu_cpu-dry-run_progress.log").read_text()
    assert proc.returncode == 0, proc.stdout[-3000:] + log[-3000:]
    text = (tmp_path / "gpu_cpu-dry-run.md").read_text()
    positions = [text.find(title) for title in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), positions
    for bad in ("(failed:", "(cut short", "(not run", "\nfailed: ", "FAIL ", "Traceback"):
        assert bad not in text, f"{bad!r} in the output:\n{text[-3000:]}"
    assert "0 failures" in text  # gpu_check
    assert "torch " in text.splitlines()[2] and "liger-kernel " in text.splitlines()[2]  # versions named
    section_a = text[positions[0] : positions[1]]
    for row in (
        "| naive logits, softmax |",
        "| naive logits, softmax + float32 upcast (transformers) |",
        "| naive logits, softmax, half weights, no bias |",
        "| three bare GEMMs (no softmax, one (N, V) buffer) |",
        "| hf_heads softmax, triton kernel |",
        "| hf_heads softmax, triton-half kernel |",
        "| hf_heads arc+log-unigram+max-norm, triton kernel |",
        "| hf_heads lsm m=2, triton kernel |",
        "| hf_heads chunked, sparse k=20 |",
        "| hf_heads softmax, compiled kernel |",
        "| z-loss + class weights |",
        "| FLOP floor (6·N·H·V at measured",
    ):
        assert row in section_a, row
    for peer in ("Liger-Kernel fused linear CE, no bias", "Liger-Kernel fused linear CE, with bias"):
        assert re.search(rf"(\| {re.escape(peer)} \||not available here: {re.escape(peer)}: )", section_a), peer
    for peer in ("Cut Cross-Entropy, filter on, no bias", "Cut Cross-Entropy, filter off, no bias"):
        assert re.search(rf"(\| {re.escape(peer)} \||not available here: {re.escape(peer)}: )", section_a), peer
    assert "float32, TF32 on, peaked inputs" in text and "float32, TF32 off, peaked inputs" in text
    assert "| hf_heads sampled bce-nce K=8192 log-uniform |" in text  # the whole-model step
