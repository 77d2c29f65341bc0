#!/usr/bin/env python
"""Small reproduction of the margin paper's tables 1-3 on the bundled World English Bible.

    python benchmarks/reproduce_margin_lm.py            # full grid, ~30 min on 2 CPU cores
    python benchmarks/reproduce_margin_lm.py --steps 20 --out /tmp/smoke   # smoke run

A 2-layer GPT-2-style decoder (hidden 128, word-level vocabulary of the training text) is trained
from scratch for the same number of steps with each output layer; the validation perplexity is
the model's own distribution (no margin at inference). Writes `results.md`, `results.csv` and
`perplexity.png` into `--out` (default docs/results/margin_lm). The paper trains 2-layer LSTMs on
Switchboard (25M tokens) for full epochs; this grid is orders of magnitude smaller, so compare
orderings, not numbers.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from itertools import chain
from pathlib import Path

import torch
from transformers import GPT2Config, default_data_collator, set_seed

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.data import build_word_tokenizer, load_lm_text, word_counts
from hf_heads.training import HeadsTrainer, HeadsTrainingArguments

BASE = {"family": "softmax"}
GRID = [
    ("table 1", "baseline", BASE),
    ("table 1", "lsm m=1", {"family": "margin", "margin": "lsm", "m": 1}),
    ("table 1", "lsm m=2", {"family": "margin", "margin": "lsm", "m": 2}),
    *[("table 1", f"{mg} s=64 m={m}", {"family": "margin", "margin": mg, "m": m, "scale": 64.0})
      for mg in ("arc", "cos") for m in (0.0, 0.001, 0.01)],
    *[("table 2", f"g={g} f={f}", {"family": "margin", "word_norm": f, "context_norm": g})
      for g in ("no-mod", "max-norm") for f in ("no-mod", "uniform", "log-rank", "unigram", "log-unigram")
      if (g, f) != ("no-mod", "no-mod")],
    *[("table 3", f"{mg} m=0.001 g=max-norm f=log-unigram",
       {"family": "margin", "margin": mg, "m": 0.001, "word_norm": "log-unigram", "context_norm": "max-norm"})
      for mg in ("arc", "cos")],
]  # fmt: skip


def blocks(dataset, tok, size):
    ids = list(chain.from_iterable(tok(list(dataset["text"]))["input_ids"]))
    rows = [ids[i : i + size] for i in range(0, len(ids) - size + 1, size)]
    from datasets import Dataset

    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * size] * len(rows), "labels": rows})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--out", default="docs/results/margin_lm")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)

    text = load_lm_text("bible-web")
    tok = build_word_tokenizer(list(text["train"]["text"]))
    train, valid = blocks(text["train"], tok, args.block), blocks(text["validation"], tok, args.block)
    counts = word_counts(text["train"], tok)
    backbone = GPT2Config(n_embd=128, n_layer=2, n_head=4, n_positions=args.block, vocab_size=len(tok))
    print(f"vocabulary {len(tok)}, {len(train)} training blocks, {len(valid)} validation blocks of {args.block}")

    rows = []
    for table, name, head in GRID:
        set_seed(0)
        model = HeadsForCausalLM(HeadsConfig(backbone=backbone.to_dict(), head=head))
        model.set_word_counts(counts)
        targs = HeadsTrainingArguments(
            output_dir=str(out / "tmp"), max_steps=args.steps, per_device_train_batch_size=args.batch,
            per_device_eval_batch_size=32, learning_rate=args.lr, warmup_steps=args.steps // 10, seed=0,
            logging_steps=max(args.steps // 5, 1), save_strategy="no", report_to="none", disable_tqdm=True,
        )  # fmt: skip
        trainer = HeadsTrainer(model=model, args=targs, train_dataset=train, eval_dataset=valid,
                               data_collator=default_data_collator)  # fmt: skip
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        loss = trainer.evaluate()["eval_loss"]
        ppl = math.exp(loss) if math.isfinite(loss) else float("nan")
        rows.append({"table": table, "setting": name, "perplexity": ppl, "seconds_per_step": seconds / args.steps})
        print(f"{table:8s} {name:42s} ppl {ppl:9.1f}  {seconds / args.steps:.3f} s/step", flush=True)

    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"Validation perplexity after {args.steps} steps (batch {args.batch} × {args.block} tokens, lr {args.lr}), "
        f"2-layer GPT-2 hidden 128, word-level vocabulary {len(tok):,}, World English Bible.",
        "",
        "| table | setting | perplexity | s / step |",
        "|---|---|---:|---:|",
        *[f"| {r['table']} | {r['setting']} | {r['perplexity']:.1f} | {r['seconds_per_step']:.3f} |" for r in rows],
    ]
    (out / "results.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 6), dpi=120)
    names = [r["setting"] for r in rows]
    ax.barh(
        names,
        [r["perplexity"] for r in rows],
        color=["C0" if r["table"] == "table 1" else "C1" if r["table"] == "table 2" else "C2" for r in rows],
    )
    ax.axvline(rows[0]["perplexity"], color="k", lw=0.8, ls="--", label="softmax baseline")
    ax.set_xscale("log")
    ax.set_xlabel("validation perplexity (log scale, lower is better)")
    ax.invert_yaxis()
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "perplexity.png")
    print((out / "results.md").read_text())


if __name__ == "__main__":
    main()
