#!/usr/bin/env python
"""Starting point of every head family wrapped around the packaged SmolLM2-135M (`from_base`): eval NLL on held-out
World English Bible verses next to the base model's, with and without the calibrated warm start.

    python benchmarks/reproduce/warm_start_smollm2.py --out docs/results/warm_start/smollm2.md

Word counts (for the norm scalings and the log-uniform / unigram noise) are SmolLM2-token counts of the bundled
Bible's training split. The eval NLL is that of the head's inference distribution (no margin; sampled heads: the
corrected, normalised posterior); the training loss is the family's criterion on the same verses (K samples drawn
with a fixed seed).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_heads import HeadsForCausalLM
from hf_heads.data import load_lm_text, smollm2_path

HEADS = {
    "softmax": {"family": "softmax"},
    "margin arc m=0.001 + log-unigram + max-norm (README)": {
        "family": "margin",
        "margin": "arc",
        "m": 0.001,
        "word_norm": "log-unigram",
        "context_norm": "max-norm",
    },
    "margin arc m=0.001": {"family": "margin", "margin": "arc", "m": 0.001},
    "margin max-norm": {"family": "margin", "context_norm": "max-norm"},
    "margin log-unigram": {"family": "margin", "word_norm": "log-unigram"},
    "margin log-rank": {"family": "margin", "word_norm": "log-rank"},
    "margin unigram": {"family": "margin", "word_norm": "unigram"},
    "margin uniform": {"family": "margin", "word_norm": "uniform"},
    "margin cos s=64 m=0.1 (face)": {"family": "margin", "margin": "cos", "m": 0.1, "scale": 64.0},
    "sparse k=20": {"family": "sparse", "k": 20},
    **{
        f"sampled {c}-{m} K=1024": {
            "family": "sampled",
            "criterion": c,
            "method": m,
            "num_samples": 1024,
            "noise": "log-uniform",
        }
        for c, m in [
            ("ce", "mcs"),
            ("ce", "is"),
            ("ce", "cps"),
            ("ce", "nce"),
            ("bce", "mcs"),
            ("bce", "is"),
            ("bce", "cps"),
            ("bce", "nce"),
        ]
    },
    "sampled bce full": {"family": "sampled", "criterion": "bce", "method": "full"},
    "sampled mse full": {"family": "sampled", "criterion": "mse", "method": "full"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval_verses", type=int, default=16)
    parser.add_argument("--out", default=None, help="write the markdown table here")
    args = parser.parse_args()
    torch.manual_seed(0)
    path, gguf = smollm2_path()
    tok = AutoTokenizer.from_pretrained(path, gguf_file=gguf)
    base = AutoModelForCausalLM.from_pretrained(path, gguf_file=gguf).eval()
    corpus = load_lm_text("bible-web")
    train_ids = tok([t for t in corpus["train"]["text"] if t], add_special_tokens=False).input_ids
    counts = torch.bincount(torch.tensor([i for ids in train_ids for i in ids]), minlength=base.config.vocab_size)
    verses = [t for t in corpus["validation"]["text"] if t][: args.eval_verses]
    batch = tok(verses, return_tensors="pt", padding=True)
    labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)

    def eval_nll(model) -> float:
        with torch.no_grad():
            logits = model(**batch).logits.float()[:, :-1]
            return float(torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels[:, 1:]))

    def train_loss(model) -> float:
        model.train()
        torch.manual_seed(1)
        with torch.no_grad():
            loss = float(model(**batch, labels=labels).loss)
        model.eval()
        return loss

    rows = [("base SmolLM2-135M (AutoModelForCausalLM)", eval_nll(base), float("nan"), float("nan"), "")]
    for name, head in HEADS.items():
        row = [name]
        for calibrate in (False, True):
            start = time.perf_counter()
            model = HeadsForCausalLM.from_base(base, head=head, word_counts=counts, calibrate=calibrate).eval()
            seconds = time.perf_counter() - start
            row += [eval_nll(model)]
            if calibrate:
                row += [train_loss(model), f"{model.config.head.get('warm_start_gain', '')}", seconds]
            del model
        rows.append(tuple(row))
        print(rows[-1], flush=True)
    lines = [
        "| head | eval NLL, copied output layer | eval NLL, calibrated start | training loss (calibrated) | "
        "fitted warm_start_gain | from_base seconds |",
        "|---|---:|---:|---:|---:|---:|",
        f"| {rows[0][0]} | {rows[0][1]:.3f} | | | | |",
    ]
    for name, copied, calibrated, loss, gain, seconds in rows[1:]:
        gain = f"{float(gain):.4f}" if gain not in ("", "None") else ""
        lines.append(f"| {name} | {copied:.3f} | {calibrated:.3f} | {loss:.3f} | {gain} | {seconds:.1f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(
            f"# Warm start from SmolLM2-135M\n\n`python benchmarks/reproduce/warm_start_smollm2.py --out {args.out}` "
            f"({args.eval_verses} held-out verses of the World English Bible, nats/token).\n\n{table}\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
