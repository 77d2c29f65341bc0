#!/usr/bin/env python
"""Continuous-output layer vs full softmax: output-layer forward+backward seconds and peak memory, training
instances per second per loss (Bhat et al. figure 2, as a PNG), and nearest-neighbour decoding throughput.

    python benchmarks/speed/bench_continuous.py                      # N=4096, H=512, V=50,000, CPU
    python benchmarks/speed/bench_continuous.py --plot docs/results/continuous/instances_per_second.png

Output layer rows: the softmax layer (naive (N, V) logits + CE, and hf_heads' chunked CE) against the
continuous head (H -> d projection + loss against the frozen table) for d = 50 and 300 and every loss;
ratios are against the naive softmax row. Decoding rows: a 2+2-layer BART (hidden 256) with V = 50,000,
32 sources of 32 tokens, 32 new tokens, greedy and beam 5; tokens/s = generated tokens / second.
Each measurement runs in a fresh process; see `_timing.measure` for how time and memory are taken.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hf_heads.heads import ContinuousHead
from hf_heads.losses import fused_linear_cross_entropy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import bench_parser, device_line, measure, run_isolated  # noqa: E402

LOSSES = ["vmf", "margin-random", "margin-most-informative", "syn-margin-projection", "syn-margin-difference"]
LAYER = {"softmax, naive logits": ("softmax", None, None), "softmax, hf_heads chunked": ("chunked", None, None)}
LAYER.update({f"continuous d={d}, {loss}": ("continuous", d, loss) for d in (50, 300) for loss in LOSSES})
DECODE = {
    f"{name}, {how}": (name, how)
    for name in ("softmax", "continuous d=50", "continuous d=300")
    for how in ("greedy", "beam 5")
}


def run_layer(name: str, n: int, hidden: int, vocab: int, device: str, repeats: int) -> dict:
    kind, dim, loss = LAYER[name]
    torch.manual_seed(0)
    h = torch.randn(n, hidden, device=device, requires_grad=True)
    y = torch.randint(0, vocab, (n,), device=device)
    if kind == "continuous":
        head = ContinuousHead(hidden, vocab, {"embedding_dim": dim, "loss": loss}).to(device)
        head.set_embedding_table(torch.randn(vocab, dim))
        params = [h, *head.parameters()]
    else:
        w = (torch.randn(vocab, hidden, device=device) * 0.05).requires_grad_()
        b = torch.zeros(vocab, device=device, requires_grad=True)
        params = [h, w, b]
    for p in params:  # gradients belong to the inputs, not to the method
        p.grad = torch.zeros_like(p)

    def step():
        if kind == "continuous":
            loss_value = head.loss(h, y)
        elif kind == "softmax":
            loss_value = F.cross_entropy(F.linear(h, w, b), y)
        else:
            loss_value = fused_linear_cross_entropy(h, w, b, y)
        loss_value.backward()

    result = measure(step, device, repeats)
    return {"method": name, **result, "instances_per_second": n / result["seconds"]}


def run_decode(name: str, vocab: int, device: str) -> dict:
    from transformers import BartConfig

    from hf_heads import HeadsConfig, HeadsForSeq2SeqLM

    family, how = DECODE[name]
    torch.manual_seed(0)
    backbone = BartConfig(
        vocab_size=vocab,
        d_model=256,
        encoder_layers=2,
        decoder_layers=2,
        encoder_ffn_dim=512,
        decoder_ffn_dim=512,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        max_position_embeddings=128,
        forced_eos_token_id=None,
    )
    if family == "softmax":
        head = {"family": "softmax"}
    else:
        head = {"family": "continuous", "embedding_dim": int(family.split("=")[1]), "loss": "syn-margin-projection"}
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=backbone, head=head)).to(device).eval()
    if family != "softmax":
        model.head.set_embedding_table(torch.randn(vocab, head["embedding_dim"]))
    x = torch.randint(4, vocab, (32, 32), device=device)
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, num_beams=1 if how == "greedy" else 5)
    with torch.no_grad():
        model.generate(x[:2], **kw)  # warm-up
        start = time.perf_counter()
        out = model.generate(x, **kw)
        seconds = time.perf_counter() - start
    return {"method": name, "seconds": seconds, "tokens_per_second": (out.shape[1] - 1) * out.shape[0] / seconds}


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 3.8), dpi=120)
    names = [r["method"] for r in rows]
    ax.barh(names, [r["instances_per_second"] for r in rows])
    ax.set_xlabel("tokens / s, output layer forward + backward")
    ax.set_title("Bhat et al. figure 2 analogue (CPU)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = bench_parser(__doc__, vocab=50_000)
    parser.add_argument("--plot", default=None, help="write the instances-per-second plot here (PNG)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        if args.one in DECODE:
            print(json.dumps(run_decode(args.one, args.vocab, args.device)))
        else:
            print(json.dumps(run_layer(args.one, args.tokens, args.hidden, args.vocab, args.device, args.repeats)))
        return
    print(f"# continuous output layer vs softmax, N={args.tokens}, H={args.hidden}, V={args.vocab:,}, float32")
    print(device_line(args.device) + "\n")
    options = dict(
        tokens=args.tokens,
        hidden=args.hidden,
        vocab=args.vocab,
        device=args.device,
        repeats=args.repeats,
        threads=args.threads,
    )
    rows = [run_isolated(__file__, name, options) for name in LAYER]
    ref = rows[0]
    print("| output layer | s / step | peak MiB | instances / s | time vs softmax | memory vs softmax |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ratios = r["seconds"] / ref["seconds"], r["peak_mib"] / max(ref["peak_mib"], 1e-9)
        print(
            f"| {r['method']} | {r['seconds']:.4f} | {r['peak_mib']:.0f} | {r['instances_per_second']:,.0f} | "
            f"{ratios[0]:.3f}× | {ratios[1]:.3f}× |"
        )
    if args.plot:
        plot([r for r in rows if r["method"].startswith("continuous d=300")] + rows[:2], args.plot)
    decode = [run_isolated(__file__, name, options) for name in DECODE]
    print("\n| decoding (BART 2+2, hidden 256, 32 x 32 new tokens) | seconds | tokens / s |")
    print("|---|---:|---:|")
    for r in decode:
        print(f"| {r['method']} | {r['seconds']:.2f} | {r['tokens_per_second']:,.0f} |")


if __name__ == "__main__":
    main()
