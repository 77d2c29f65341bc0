#!/usr/bin/env python
"""Evaluation memory and time: `Trainer.evaluate()` (loss only, no `compute_metrics`) of a plain transformers
causal LM against the same model wrapped with an hf_heads softmax head, side by side in one run.

    python benchmarks/speed/bench_eval.py                 # V=200,000, N=2,048 tokens per eval batch, CPU
    python benchmarks/speed/bench_eval.py --device cuda

The model is a 1-layer Llama (hidden 512) so the output layer dominates; one eval batch of 8 × 256 tokens,
evaluated `--repeats` times. Plain transformers builds the (B, T, V) logits and their log-softmax in the loss;
hf_heads' `HeadsTrainer` asks the model for its loss only (`model.logits_skipped()`), computed in chunks from
the hidden states. Each method runs in a fresh process; peak memory is what evaluation adds on top of the model
(CUDA: max allocated; CPU: growth of peak RSS). Goal: <= 0.3x the peak memory at <= 1.0x the time.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from hf_heads import HeadsForCausalLM, HeadsTrainer, HeadsTrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _timing import bench_parser, device_line, measure, run_isolated, seconds_cell  # noqa: E402

METHODS = ("transformers Trainer.evaluate", "hf_heads HeadsTrainer.evaluate")


def run_one(method: str, tokens: int, hidden: int, vocab: int, device: str, repeats: int) -> dict:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=512,
    )
    base = LlamaForCausalLM(config).to(device).eval()
    batch, length = 8, tokens // 8
    ids = torch.randint(0, vocab, (batch, length)).tolist()
    data = Dataset.from_dict({"input_ids": ids, "labels": ids})
    out = tempfile.mkdtemp()
    common = dict(
        output_dir=out, per_device_eval_batch_size=batch, report_to="none", disable_tqdm=True, use_cpu=device == "cpu"
    )
    if method.startswith("transformers"):
        trainer = Trainer(model=base, args=TrainingArguments(**common), eval_dataset=data)
    else:
        model = HeadsForCausalLM.from_base(base, head={"family": "softmax"})
        trainer = HeadsTrainer(model=model, args=HeadsTrainingArguments(**common), eval_dataset=data)
    result = {}

    def step():
        result.update(trainer.evaluate())

    timing = measure(step, device, repeats)
    return {"method": method, "eval_loss": result["eval_loss"], **timing}


def main() -> None:
    parser = bench_parser(__doc__, tokens=2048, vocab=200_000)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(run_one(args.one, args.tokens, args.hidden, args.vocab, args.device, args.repeats)))
        return
    print(f"# Trainer.evaluate, loss only: 1-layer Llama H={args.hidden}, V={args.vocab:,}, N={args.tokens} tokens")
    print(device_line(args.device))
    options = dict(
        tokens=args.tokens,
        hidden=args.hidden,
        vocab=args.vocab,
        device=args.device,
        repeats=args.repeats,
        threads=args.threads,
    )
    rows = [run_isolated(__file__, method, options) for method in METHODS]
    ref = rows[0]
    print(
        f"\n| evaluation | s / eval: median (min–max), {args.repeats} runs | peak MiB | eval_loss | time vs "
        "transformers | memory vs transformers |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['method']} | {seconds_cell(r)} | {r['peak_mib']:.0f} | {r['eval_loss']:.4f} | "
            f"{r['seconds'] / ref['seconds']:.2f}× | {r['peak_mib'] / max(ref['peak_mib'], 1e-9):.2f}× |"
        )


if __name__ == "__main__":
    main()
