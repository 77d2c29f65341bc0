#!/usr/bin/env python
"""Correctness of every chunk kernel on the device: the fused cross-entropy of each registered kernel against a naive
float64 reference (loss and gradients, every option of the kernel seam, shapes that are no multiple of the chunk
size), then under autocast bf16 against float32 (loss within 2%, gradients finite, in each input's dtype).

    python benchmarks/gpu_check.py --device cuda      # prints one line per case and exits 1 on any mismatch
"""

from __future__ import annotations

import argparse
import sys

import torch

from hf_heads.losses import fused_linear_cross_entropy
from hf_heads.losses.chunks import CHUNK_KERNELS, KERNEL_ENV

OPTIONS = {
    "plain": {},
    "smoothing": {"label_smoothing": 0.1},
    "softcap": {"softcap": 30.0},
    "target-logit": {"target": True},
    "top-k": {"top_k": 20},
    "top-k-target-smoothing": {"top_k": 20, "target": True, "label_smoothing": 0.1},
}


def naive(h, w, b, y, t, top_k=None, label_smoothing=0.0, softcap=None):
    z = h @ w.T + b
    if t is not None:
        z = z.scatter(1, y[:, None], t[:, None])
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    support = z if top_k is None else z.topk(top_k, dim=1).values
    lse = torch.logsumexp(support, dim=1)
    loss = lse - z.gather(1, y[:, None]).squeeze(1)
    return ((1 - label_smoothing) * loss + label_smoothing * (lse - support.mean(1))).mean()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=5003)
    a = ap.parse_args()
    import os

    failures = 0
    g = torch.Generator(device="cpu").manual_seed(0)
    h32 = torch.randn(a.rows, a.hidden, generator=g)
    w32 = torch.randn(a.vocab, a.hidden, generator=g) * 0.2
    b32, t32 = torch.randn(a.vocab, generator=g) * 0.1, torch.randn(a.rows, generator=g)
    y = torch.randint(0, a.vocab, (a.rows,), generator=g).to(a.device)
    for kernel in sorted(CHUNK_KERNELS):
        os.environ[KERNEL_ENV] = kernel
        for name, options in OPTIONS.items():
            opts = dict(options)
            use_t = opts.pop("target", False)
            results = {}
            for precision in ("float64", "bf16"):
                dtype = torch.float64 if precision == "float64" else torch.float32
                h, w, b, t = (x.to(a.device, dtype).requires_grad_() for x in (h32, w32, b32, t32))
                kw = dict(target_logit=t if use_t else None, chunk_size=333, **opts)
                if precision == "float64":
                    loss = fused_linear_cross_entropy(h, w, b, y, **kw)
                    ref = naive(h, w, b, y, t if use_t else None, **opts)
                    got = torch.autograd.grad(loss, (h, w, b))
                    want = torch.autograd.grad(ref, (h, w, b))
                    ok = torch.allclose(loss, ref, rtol=1e-9) and all(
                        torch.allclose(x, z, rtol=1e-7, atol=1e-10) for x, z in zip(got, want, strict=True)
                    )
                    results[precision] = (ok, f"|Δloss| {abs(loss - ref).item():.1e}")
                else:
                    full = fused_linear_cross_entropy(h, w, b, y, **kw).item()
                    with torch.autocast(a.device.split(":")[0], dtype=torch.bfloat16):
                        loss = fused_linear_cross_entropy(h, w, b, y, **kw)
                    loss.backward()
                    rel = abs(loss.item() - full) / abs(full)
                    finite = all(torch.isfinite(x.grad).all() for x in (h, w, b))
                    ok = rel <= 0.02 and finite and h.grad.dtype == w.grad.dtype == torch.float32
                    results[precision] = (ok, f"bf16 vs float32 {rel:.2%}")
            ok = all(r[0] for r in results.values())
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {kernel:9s} {name:24s} " + "; ".join(r[1] for r in results.values()))
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
