#!/usr/bin/env python
"""Seconds per training step (forward, backward, AdamW) and per evaluation step (forward with the loss and the
logits, as the Trainer's evaluation runs it) of `make demo`'s model with each of its heads, side by side in one
process: the steps of the heads interleaved, each row the median (min–max) of `--repeats` steps after two warm-up
rounds.

    python benchmarks/speed/bench_demo_step.py                  # tiny-gpt2, V=14,857, batch 16 x 128 tokens, 2 threads

The model is `make demo`'s (the built-in tiny-gpt2 backbone, the bundled Bible's vocabulary size) on random token
ids; word counts are random. `make demo`'s tokens/s comes from whole runs (evaluation included); this splits a step
into its training and evaluation parts.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.cli.backbones import TINY_BACKBONES

HEADS = {
    "softmax": {"family": "softmax"},
    "margin arc m=0.001 f=log-unigram g=max-norm": {
        "family": "margin", "margin": "arc", "m": 0.001, "word_norm": "log-unigram", "context_norm": "max-norm",
    },
    "sampled bce-nce K=1024 log-uniform": {
        "family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 1024, "noise": "log-uniform",
    },
}  # fmt: skip


def build(head: dict, vocab: int) -> tuple[HeadsForCausalLM, torch.optim.Optimizer]:
    torch.manual_seed(0)
    backbone = {**TINY_BACKBONES["tiny-gpt2"], "vocab_size": vocab}  # make demo's backbone
    model = HeadsForCausalLM(HeadsConfig(backbone=backbone, head=head, tie_word_embeddings=False))
    if model.head.needs_counts:
        model.set_word_counts(torch.randint(1, 1000, (vocab,)).float())
    return model.train(), torch.optim.AdamW(model.parameters(), lr=1e-3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=14_857)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    heads = {
        name: {**head, "num_samples": min(head["num_samples"], a.vocab // 2)} if "num_samples" in head else head
        for name, head in HEADS.items()
    }  # K < V at toy sizes
    models = {name: build(head, a.vocab) for name, head in heads.items()}
    x = torch.randint(0, a.vocab, (a.batch, a.block))
    train = {name: [] for name in models}
    evaluate = {name: [] for name in models}
    for round_ in range(a.repeats + 2):
        for name, (model, opt) in models.items():
            start = time.perf_counter()
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad()
            middle = time.perf_counter()
            model.eval()
            with torch.no_grad():
                model(input_ids=x, labels=x)  # loss and logits, as the Trainer's evaluation asks
            model.train()
            if round_ >= 2:
                train[name].append(middle - start)
                evaluate[name].append(time.perf_counter() - middle)
    print(f"# make demo's model: tiny-gpt2, V={a.vocab:,}, batch {a.batch} x {a.block} tokens, {a.threads} threads")
    print(f"# torch {torch.__version__}; medians (min–max) of {a.repeats} steps, heads interleaved\n")
    print("| head | train s / step | vs softmax | eval s / step | vs softmax |")
    print("|---|---:|---:|---:|---:|")
    base = {kind: statistics.median(times["softmax"]) for kind, times in (("train", train), ("eval", evaluate))}
    for name in models:
        cells = []
        for kind, times in (("train", train), ("eval", evaluate)):
            t = times[name]
            cells += [
                f"{statistics.median(t):.4f} ({min(t):.4f}–{max(t):.4f})",
                f"{statistics.median(t) / base[kind]:.2f}×",
            ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
