"""Mutation testing of the losses and heads: `make mutate` (or `python tests/mutate.py`).

Each mutant is one small plausible bug: a text replacement in one file of `hf_heads/losses` or `hf_heads/heads`
that occurs there exactly once. For every mutant the runner copies the package and the tests to a temporary
directory, applies the replacement, and runs the mutant's test files (default suite only, `-m "not slow"`, `-x`)
against the copy. A mutant is *killed* when a test fails, *survives* when every test passes. The unmutated copy runs
every selection first, so a selection that already fails is reported as broken, not counted as a kill.

The list is hand-written (`MUTANTS`): plausible bugs of the kind fused and sampled losses ship with (signs,
dropped terms, a correction shifted by a constant, statistics over the wrong rows), across every family. A mutant
whose text no longer occurs exactly once is reported as stale (the code moved: update the entry).

    python tests/mutate.py               # every mutant, 2 at a time; prints the table and the score
    python tests/mutate.py --only maxnorm-momentum-reversed --jobs 1
    python tests/mutate.py --list        # the mutants, without running them
    python tests/mutate.py --out docs/results/mutation.md
    python tests/mutate.py --rev HEAD    # the committed tree, whatever the working tree holds
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Test selections, by what they exercise. Each is a list of pytest arguments (files or node ids, and -k filters).
CONTRACT_HEADS = [
    f"tests/test_contract.py::{name}"
    for name in (
        "test_losses_logits_and_gradients_equal_the_naive_reference",
        "test_running_max_norm_follows_its_formula_and_is_what_evaluation_uses",
        "test_gradcheck_float64",
        "test_reductions_ignored_rows_and_num_items_in_batch",
        "test_every_row_ignored_trains_with_zero_loss_and_zero_gradients",
    )
]
MARGIN = ["tests/test_margin_losses.py", "tests/test_scorer.py", *CONTRACT_HEADS]
SAMPLED = ["tests/test_sampled_losses.py", *CONTRACT_HEADS]
SPARSE = ["tests/test_sparse.py", *CONTRACT_HEADS]
FUSED = ["tests/test_margin_losses.py", "tests/test_sparse.py", "tests/test_properties.py", *CONTRACT_HEADS]
KERNELS = ["tests/test_kernels.py"]
CONTINUOUS = ["tests/test_continuous_losses.py", *CONTRACT_HEADS]
TRANSFORMS = ["tests/test_transforms.py", *CONTRACT_HEADS]


@dataclass(frozen=True)
class Mutant:
    """One plausible bug: `old` (exactly once in `path`) becomes `new`; `tests` are the pytest arguments to run."""

    id: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


def _m(id: str, path: str, old: str, new: str, tests: list[str], why: str) -> Mutant:
    return Mutant(id, f"hf_heads/{path}", old, new, tuple(tests), why)


# fmt: off
MUTANTS = [
    # ---------------------------------------------------------------- margin: φ (eq. 14)
    _m("arc-sign", "losses/scorer.py", "x * math.cos(m) - sin * math.sin(m)", "x * math.cos(m) + sin * math.sin(m)",
       MARGIN, "ArcFace cos(θ − m) instead of cos(θ + m)"),
    _m("cos-sign", "losses/scorer.py", "        return cos - self.m\n", "        return cos + self.m\n", MARGIN,
       "CosFace cos θ + m"),
    _m("lsm-k-sign", "losses/scorer.py", "return sign * t_cur - 2.0 * k", "return sign * t_cur + 2.0 * k", MARGIN,
       "L-Softmax ψ with +2k"),
    _m("arc-past-pi", "losses/scorer.py", "past_pi = x < math.cos(math.pi - m)",
       "past_pi = x < math.cos(math.pi - 2 * m)", MARGIN, "ArcFace's continuation past π starts at the wrong angle"),
    _m("arc-no-continuation", "losses/scorer.py", "return torch.where(past_pi, -2.0 - shifted, shifted)",
       "return shifted", MARGIN, "ArcFace cos(θ + m) not continued past π (φ rises again)"),
    # ---------------------------------------------------------------- margin: f, g (eqs. 9-12)
    _m("log-unigram-plus-one", "losses/scorer.py", "torch.log(counts.clamp_min(1.0))", "torch.log1p(counts)", MARGIN,
       "log-unigram f = log(1 + c) instead of log c"),
    _m("unigram-divides-by-sum", "losses/scorer.py", "(top - bottom) / counts.gather(0, amax)[0].clamp_min(_EPS)",
       "(top - bottom) / counts.sum().clamp_min(_EPS)", MARGIN, "unigram u divides by the total count"),
    _m("uniform-uses-amin", "losses/scorer.py", "return top.expand(weight.shape[0])",
       "return bottom.expand(weight.shape[0])", MARGIN, "uniform f = ‖W_amin‖"),
    _m("log-rank-rank-plus-one", "losses/scorer.py", "frac = frequency_ranks(counts).to(counts.dtype) / vocab",
       "frac = (frequency_ranks(counts).to(counts.dtype) + 1) / vocab", MARGIN, "log-rank's rank counted from 1"),
    _m("max-norm-mean", "losses/scorer.py", "return norms.max().expand(hidden.shape[0])",
       "return norms.mean().expand(hidden.shape[0])", MARGIN, "max-norm g = mean ‖h‖"),
    _m("max-norm-over-ignored-rows", "losses/scorer.py", "norms = norms.masked_fill(~valid, 0.0)", "pass", MARGIN,
       "max-norm's batch maximum taken over the ignored rows too"),
    _m("gain-dropped", "losses/scorer.py", "g = (h_norm if g is None else g) * self.gain",
       "g = h_norm if g is None else g", MARGIN, "warm_start_gain ignored"),
    _m("logit-scale-not-on-bias", "losses/scorer.py", "bias = None if bias is None else bias * self.logit_multiplier",
       "bias = bias", MARGIN, "the checkpoint's logit scale skips the bias"),
    _m("margin-target-no-bias", "losses/scorer.py", "            t = t + bias[target]\n", "            t = t\n",
       MARGIN, "the margin's target logit loses its bias"),
    # ---------------------------------------------------------------- margin head: running max-norm
    _m("maxnorm-momentum-reversed", "heads/margin.py", "running.lerp(batch_max, self.options.context_norm_momentum)",
       "running.lerp(batch_max, 1 - self.options.context_norm_momentum)", MARGIN, "running max-norm moves by 1 − μ"),
    _m("maxnorm-eval-batch-max", "heads/margin.py",
       "context_norm_value=None if training else self.running_context_norm(),", "context_norm_value=None,", MARGIN,
       "eval loss uses the eval batch's own max, not the running max"),
    _m("maxnorm-over-ignored-rows", "heads/margin.py",
       ".norm(dim=1).masked_fill(~valid, 0.0)  # (N,)", ".norm(dim=1)  # (N,)", MARGIN,
       "running max taken over padding rows too"),
    _m("maxnorm-all-padding-batch-counts", "heads/margin.py",
       "running.copy_(torch.where(valid.any(), updated, running))", "running.copy_(updated)", MARGIN,
       "a batch of padding only moves the running max-norm towards 0"),
    _m("maxnorm-inference-batch-max", "heads/margin.py",
       "margin_logits(hidden, self.weight, self.bias, None, **self._scorer_arguments(False))",
       "margin_logits(hidden, self.weight, self.bias, None, **self._scorer_arguments(True))", MARGIN,
       "inference logits use the batch's own max (the training scorer's margin needs a target: none here)"),
    # ---------------------------------------------------------------- sampled criteria and corrections
    _m("hits-ce-zero", "losses/sampled.py", 'u_k = u_k.masked_fill(hit, float("-inf"))',
       "u_k = u_k.masked_fill(hit, 0.0)", SAMPLED, "CE accidental hits masked with 0 instead of −inf"),
    _m("hits-bce-kept", "losses/sampled.py", "        neg = neg.masked_fill(hit, 0.0)\n", "        neg = neg\n",
       SAMPLED, "BCE accidental hits not removed"),
    _m("log-kd-without-k", "losses/sampled.py",
       "log_kd = noise_probs.to(device=h.device, dtype=h.dtype).log() + math.log(num_samples)",
       "log_kd = noise_probs.to(device=h.device, dtype=h.dtype).log()", SAMPLED, "log(K·D) loses log K"),
    _m("is-candidate-sign", "losses/sampled.py", "        return s - log_kd\n\n    def bce_weight",
       "        return s + log_kd\n\n    def bce_weight", SAMPLED, "IS candidate s + log(K·D)"),
    _m("is-bce-weight", "losses/sampled.py", "return torch.exp(-log_kd)", "return torch.exp(log_kd)", SAMPLED,
       "BCE-IS weight K·D instead of 1 / (K·D)"),
    _m("cps-alpha-inverted", "losses/sampled.py", "return s + math.log(num_classes / num_samples)",
       "return s + math.log(num_samples / num_classes)", SAMPLED, "CE-CPS α = K / C"),
    _m("cps-bce-weight", "losses/sampled.py", "return num_classes / num_samples", "return num_samples / num_classes",
       SAMPLED, "BCE-CPS weight K / C"),
    _m("mcs-bce-correction", "losses/sampled.py", "else s + (log_d + math.log(num_samples))", "else s + log_d",
       SAMPLED, "BCE-MCS correction loses log K"),
    _m("cps-bce-correction", "losses/sampled.py", "else s + log_d + math.log(num_classes)", "else s + log_d", SAMPLED,
       "BCE-CPS correction loses log C"),
    _m("nce-ce-correction-shift", "losses/sampled.py",
       "return torch.sigmoid(s - (log_d + math.log(num_samples))) + log_d", "return torch.sigmoid(s - log_d) + log_d",
       SAMPLED, "CE-NCE correction shifted by log K"),
    _m("nce-ce-numerator", "losses/sampled.py", "        return target_term\n", "        return t\n", SAMPLED,
       "CE-NCE numerator s instead of σ(z)"),
    _m("full-bce-target-sign", "losses/kernels.py", "loss = torch.nn.functional.softplus(z).sum(1) - z[rows, y]",
       "loss = torch.nn.functional.softplus(z).sum(1) + z[rows, y]", SAMPLED, "full BCE target term sign"),
    _m("full-mse-target", "losses/kernels.py", "square() - 2 * z[rows, y] + 1  # (n,)", "square() + 1  # (n,)",
       SAMPLED, "full MSE target pulled to 0"),
    _m("full-bce-grad-target", "losses/kernels.py", "            grad_z[rows, y] -= 1.0\n",
       "            pass\n", SAMPLED, "full BCE / MSE gradient never pulls the target up"),
    _m("full-mse-grad-slope", "losses/kernels.py", "grad_z.mul_(slope_mse).mul_(2.0)", "grad_z.mul_(2.0)",
       SAMPLED, "full MSE gradient without the sigmoid's derivative"),
    _m("compiled-full-mse-grad-slope", "losses/kernels.py", "grad_z = 2 * grad_z * sig * (1 - sig)",
       "grad_z = 2 * grad_z", KERNELS, "the compiled kernel's full MSE gradient without the sigmoid's derivative"),
    _m("triton-full-bce-target", "losses/_triton_rows.py", "g = tl.where(cols == y, sig - 1.0, sig)", "g = sig",
       KERNELS, "the Triton kernel's full BCE gradient never pulls the target up"),
    # ---------------------------------------------------------------- noise distributions
    _m("log-uniform-rank", "losses/noise.py", "torch.log1p(1.0 / (r + 1.0))", "torch.log1p(1.0 / (r + 2.0))", SAMPLED,
       "Zipfian D over rank + 1"),
    _m("unigram-smoothing", "losses/noise.py", "probs = smoothed.pow(smoothing)", "probs = smoothed", SAMPLED,
       "unigram smoothing exponent ignored"),
    # ---------------------------------------------------------------- fused chunk kernel, sparse, reductions
    _m("ls-dropped-from-grad", "losses/kernels.py", "                grad_z -= smooth / z.shape[1]\n",
       "                pass\n", FUSED, "label smoothing dropped from the dense gradient"),
    _m("ls-dropped-from-loss", "losses/kernels.py",
       "loss = (1 - smooth) * loss - smooth * z.mean(dim=1)", "loss = loss", FUSED,
       "label smoothing dropped from the loss"),
    _m("log-softmax-not-in-place", "losses/kernels.py", "torch.log_softmax(z, dim=1, out=z)",
       "torch.log_softmax(z, dim=1)", FUSED, "the eager kernel's log-softmax result dropped (z left as raw logits)"),
    _m("ls-topk-over-all", "losses/kernels.py", "smooth * (lse - vals.mean(dim=1))",
       "smooth * (lse - z.mean(dim=1))", SPARSE, "sparse label smoothing over all V instead of the top k"),
    _m("softcap-slope", "losses/kernels.py", "return 1.0 - (z / softcap).square()", "return 1.0 - z / softcap",
       TRANSFORMS, "soft-cap derivative wrong"),
    _m("sparse-grad-target-coef", "losses/kernels.py",
       "coef.new_full((coef.shape[0], 1), -(1.0 - smooth))", "coef.new_full((coef.shape[0], 1), -1.0)",
       SPARSE, "sparse backward ignores label smoothing on the target"),
    _m("sparse-topk-plus-one", "losses/kernels.py",
       "vals, idx = torch.topk(z, top_k, dim=1)  # (n, k)\n        lse = torch.logsumexp(vals, dim=1)  # (n,)",
       "vals, idx = torch.topk(z, min(top_k + 1, z.shape[1]), dim=1)\n        lse = torch.logsumexp(vals, dim=1)",
       SPARSE, "top-k keeps k + 1"),
    _m("compiled-ls-dropped-from-grad", "losses/kernels.py", "p = torch.exp(z - lse[:, None]) - smooth / num",
       "p = torch.exp(z - lse[:, None])", KERNELS, "the compiled kernel drops label smoothing from the gradient"),
    _m("compiled-replaced-target-grad-kept", "losses/kernels.py",
       "grad_z = grad_z.index_put((rows, y), torch.zeros_like(grad_t))", "pass", KERNELS,
       "the compiled kernel lets the replaced target logit reach h · w_y"),
    _m("triton-ls-dropped-from-grad", "losses/_triton_rows.py", "g = tl.exp(x - lse) - smooth / num_classes",
       "g = tl.exp(x - lse)", KERNELS, "the Triton kernel drops label smoothing from the gradient"),
    _m("triton-softcap-slope-dropped", "losses/_triton_rows.py", "g = g * (1.0 - capped * capped)", "g = g",
       KERNELS, "the Triton kernel forgets the soft-cap's derivative"),
    _m("triton-replaced-target-grad-kept", "losses/_triton_rows.py",
       "g = tl.where(cols == y, 0.0, g)  # the replaced", "g = g  # the replaced", KERNELS,
       "the Triton kernel lets the replaced target logit reach h · w_y"),
    _m("triton-online-rescale-dropped", "losses/_triton_rows.py", "total = total * tl.exp(m - m_new) + tl.sum(",
       "total = total + tl.sum(", KERNELS, "the online log-sum-exp does not rescale the running sum"),
    _m("sync-free-ignored-rows-trained", "losses/fused_linear.py",
       "return row_weight if keep is None else row_weight * keep", "return row_weight", KERNELS,
       "on an accelerator, ignored rows reach the gradients"),
    _m("divisor-reciprocal-in-float32", "losses/fused_linear.py",
       "scale = 1.0 / (divisor.to(compute) if isinstance(divisor, torch.Tensor) else divisor)",
       "scale = 1.0 / divisor", KERNELS, "the mean's divisor counted on the device divides in float32"),
    _m("half-logits-kept-float32", "losses/triton_kernel.py", "            return gemm\n",
       "            return torch.float32\n", KERNELS, "triton-half computes its logits in float32 after all"),
    _m("sampled-candidates-in-float32", "losses/sampled.py", "out = (h.to(gemm) @ w.to(gemm).T).to(h.dtype)",
       "out = h @ w.to(h.dtype).T", SAMPLED, "the sampled candidates' product ignores the autocast / half dtype"),
    _m("column-scale-left-out-of-grad-h", "losses/kernels.py",
       "torch.mm(g.mul_(col_scale.to(g.dtype)), w, out=grads.h)", "torch.mm(g, w, out=grads.h)", KERNELS,
       "a word-norm column scale applied to the logits but not to d h"),
    _m("column-scale-grad-dropped", "losses/fused_linear.py", "        grad_w.mul_(scale.to(accumulate)[:, None])",
       "        grad_s = grad_s * 0", KERNELS, "the column scale gets no gradient"),
    _m("column-scale-copy-unscaled", "losses/fused_linear.py", "torch.mul(w_g, scale[:, None], out=",
       "torch.mul(w_g, 1.0, out=", KERNELS, "the scaled copy of W for the column scale leaves the scale out"),
    _m("norms-grad-second-buffer", "losses/scorer.py", "own = ctx.slot is not None and ctx.slot.take(grad_weight)",
       "own = False", MARGIN,
       "the norms' gradient of W goes into a second (V, H) buffer, not the fused loss's"),
    _m("frozen-w-scale-grad-lost", "losses/fused_linear.py",
       "wants_w or (scale is not None and needs[4])", "wants_w", KERNELS,
       "a frozen W's column scale loses its gradient (A skipped)"),
    _m("half-product-not-in-place", "losses/kernels.py",
       "out_dtype=accumulator.dtype, out=accumulator)", "out_dtype=accumulator.dtype)", KERNELS,
       "the half-precision weight-gradient product computed beside the accumulator, never added (CUDA)"),
    _m("decode-k-ignored", "heads/sparse.py", "truncate_to_top_k(super().inference_logits(hidden), self.top_k(True))",
       "truncate_to_top_k(super().inference_logits(hidden), self.options.k)", SPARSE,
       "sparse inference ignores decode_k"),
    _m("num-items-ignored", "losses/_rows.py",
       "    if num_items_in_batch is None:\n        return num_valid.clamp_min",
       "    if True:\n        return num_valid.clamp_min", FUSED, "num_items_in_batch ignored by mean"),
    _m("reduce-none-unscattered", "losses/_rows.py", "if valid is None or per_row.shape[0] == valid.numel():",
       "if True:", FUSED, "reduction='none' loses the positions of ignored rows"),
    _m("softcap-without-cap-factor", "losses/transforms.py", "torch.tanh(z / softcap) * softcap",
       "torch.tanh(z / softcap)", TRANSFORMS, "soft-cap without its cap factor"),
    # ---------------------------------------------------------------- continuous output
    _m("vmf-cosine-sign", "losses/continuous.py", "- lambda2 * (pred * target_emb).sum(-1) + lambda1 * kappa",
       "+ lambda2 * (pred * target_emb).sum(-1) + lambda1 * kappa", CONTINUOUS, "vMF pushes away from the target"),
    _m("vmf-logc-grad-sign", "losses/continuous.py", "return -grad * ratio.to(grad.dtype), None",
       "return grad * ratio.to(grad.dtype), None", CONTINUOUS, "d log C_m / dκ sign"),
    _m("smd-sum", "losses/continuous.py", 'u_hat - positive[..., None] * u if negative == "projection" else u_hat - u',
       'u_hat - positive[..., None] * u if negative == "projection" else u_hat + u', CONTINUOUS,
       "SMD negative along û + u"),
    _m("smp-not-detached", "losses/continuous.py", "        with torch.no_grad():\n            direction = u_hat",
       "        if True:\n            direction = u_hat", CONTINUOUS, "synthetic negatives not detached"),
    _m("in-batch-correction-sign", "losses/continuous.py", "math.log(pool.numel() / num_sampled)",
       "math.log(num_sampled / pool.numel())", CONTINUOUS, "in-batch sampled words: −log(K·D) with the wrong sign"),
    _m("in-batch-hits-kept", "losses/continuous.py",
       "sampled = sampled.masked_fill(torch.isin(draws, cand)[None, :], float(\"-inf\"))", "sampled = sampled",
       CONTINUOUS, "in-batch sampled words that are batch targets counted twice"),
    _m("cosine-softmax-target-outside", "losses/continuous.py",
       "outside[torch.arange(y.shape[0], device=y.device), y] = False", "pass", CONTINUOUS,
       "cosine-softmax: a target outside the candidates is masked away"),
    _m("cosine-softmax-unscaled", "losses/continuous.py", "logits = scale * (u_hat @ table.T)  # (n, V)",
       "logits = u_hat @ table.T  # (n, V)", CONTINUOUS, "cosine-softmax ignores its scale s"),
]
# fmt: on


TREE = ("hf_heads", "tests", "run_scripts", "benchmarks", "pyproject.toml")  # what a test run needs


def _copy_tree(dest: Path, rev: str | None) -> None:
    """The package, the tests, the run scripts and benchmarks they import, and pyproject.toml: from the working tree,
    or from the commit `rev` (`git archive`)."""
    if rev is not None:
        archive = subprocess.run(["git", "archive", rev, *TREE], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    for name in TREE[:-1]:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(ROOT / TREE[-1], dest / TREE[-1])


def _pytest(dest: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(dest), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timeout", time.perf_counter() - start
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start


def _first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ")[0]
    return ""


def run_mutant(mutant: Mutant | None, tests: tuple[str, ...], timeout: float, rev: str | None = None) -> dict:
    """Run `tests` on a copy of the tree (of commit `rev`, default the working tree) with `mutant` applied (None:
    the unmutated tree)."""
    with tempfile.TemporaryDirectory(prefix="hf_heads_mutant_") as tmp:
        dest = Path(tmp)
        _copy_tree(dest, rev)
        if mutant is not None:
            path = dest / mutant.path
            text = path.read_text()
            if text.count(mutant.old) != 1:
                return {"status": "stale", "detail": f"{text.count(mutant.old)} matches in {mutant.path}", "s": 0.0}
            path.write_text(text.replace(mutant.old, mutant.new))
        code, output, seconds = _pytest(dest, tests, timeout)
    if code == 0:
        return {"status": "survived", "detail": "", "s": seconds}
    if code == 1:
        return {"status": "killed", "detail": _first_failure(output), "s": seconds}
    if code == -1:
        return {"status": "timeout", "detail": f"over {timeout:.0f} s", "s": seconds}
    return {"status": "error", "detail": f"pytest exit {code}: " + output.strip().splitlines()[-1][:120], "s": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="mutant ids to run (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at a time (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant before it counts as timeout")
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    parser.add_argument("--out", type=Path, help="also write the table (markdown) to this file")
    parser.add_argument("--rev", help="mutate this commit (git archive) instead of the working tree")
    args = parser.parse_args(argv)

    mutants = [m for m in MUTANTS if not args.only or m.id in args.only]
    unknown = set(args.only or ()) - {m.id for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutant id(s): {', '.join(sorted(unknown))}")
    if args.list:
        for m in mutants:
            print(f"{m.id:32} {m.path:32} {m.why}")
        return 0

    start = time.perf_counter()
    selections = sorted({m.tests for m in mutants})
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = pool.map(lambda t: run_mutant(None, t, args.timeout, args.rev), selections)
        baselines = dict(zip(selections, runs, strict=True))
        broken = {t: r for t, r in baselines.items() if r["status"] != "survived"}
        for tests, result in broken.items():
            print(f"unmutated tree fails {' '.join(tests)}: {result['status']} {result['detail']}", file=sys.stderr)
        if broken:
            return 2
        results = list(pool.map(lambda m: run_mutant(m, m.tests, args.timeout, args.rev), mutants))

    rows = [
        "| mutant | file | the bug | result | first failing test | s |",
        "|---|---|---|---|---|---:|",
    ]
    for m, r in zip(mutants, results, strict=True):
        rows.append(f"| {m.id} | {m.path} | {m.why} | {r['status']} | {r['detail']} | {r['s']:.0f} |")
    counted = [r for r in results if r["status"] in ("killed", "survived")]
    killed = sum(r["status"] == "killed" for r in counted)
    minutes = (time.perf_counter() - start) / 60
    summary = (
        f"mutation score: {killed} / {len(counted)} killed"
        + (f" ({100 * killed / len(counted):.0f} %)" if counted else "")
        + f"; {sum(r['status'] in ('stale', 'error', 'timeout') for r in results)} stale / error / timeout;"
        + f" {minutes:.1f} min with {args.jobs} jobs"
    )
    table = "\n".join(rows)
    print(table)
    print(summary)
    if args.out:
        args.out.write_text(f"# Mutation testing (`python tests/mutate.py`)\n\n{table}\n\n{summary}\n")
    survivors = [m.id for m, r in zip(mutants, results, strict=True) if r["status"] != "killed"]
    if survivors:
        print("not killed: " + ", ".join(survivors))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
