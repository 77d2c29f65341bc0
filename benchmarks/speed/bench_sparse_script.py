#!/usr/bin/env python
"""Seconds per training step and per evaluation of the sparse head against the softmax head inside the Trainer, as a
run_clm-shaped script runs them (HeadsTrainer: `train_accuracy` recorded by every training pass, the evaluation's
`eval_sparse_loss` / `eval_in_top_k`), side by side in one process: the two heads alternate, each row the median
(min–max) of `--repeats` runs of `--steps` training steps and one evaluation, after one warm-up run of each.

    python benchmarks/speed/bench_sparse_script.py   # tiny Llama, V=49,152, H=128, 2 layers, batch 4 x 256, 2 threads

The backbone is the built-in tiny-llama sized to SmolLM2's vocabulary (V=49,152) on random token ids, so the output
layer is most of a step, as in a real run at that vocabulary; `--hidden` changes its width. Seconds per step are the
median of a run's steps (the Trainer's callbacks time each one), evaluation seconds the whole `evaluate()` over
`--eval_blocks` blocks. The output-layer benchmark (bench_sparse.py) times the loss alone; this one adds what a script
adds around it.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time

import datasets
import torch
from transformers import TrainerCallback, default_data_collator

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.cli.backbones import TINY_BACKBONES
from hf_heads.training import HeadsTrainer, HeadsTrainingArguments

HEADS = {"softmax": {"family": "softmax"}, "sparse k=20": {"family": "sparse", "k": 20}}


class StepSeconds(TrainerCallback):
    """The wall-clock seconds of every training step."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self._start)


def run(head: dict, a, train: datasets.Dataset, evaluation: datasets.Dataset, out: str) -> tuple[float, float]:
    """(median seconds per training step, evaluation seconds) of one fresh model with `head`."""
    torch.manual_seed(0)
    backbone = {**TINY_BACKBONES["tiny-llama"], "vocab_size": a.vocab, "hidden_size": a.hidden}
    model = HeadsForCausalLM(HeadsConfig(backbone=backbone, head=head, tie_word_embeddings=False))
    args = HeadsTrainingArguments(
        output_dir=out, max_steps=a.steps, per_device_train_batch_size=a.batch, per_device_eval_batch_size=a.batch,
        logging_steps=max(1, a.steps // 2), report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    timer = StepSeconds()
    trainer = HeadsTrainer(
        model=model, args=args, train_dataset=train, eval_dataset=evaluation, data_collator=default_data_collator,
        callbacks=[timer],
    )  # fmt: skip
    trainer.train()
    start = time.perf_counter()
    trainer.evaluate()
    return statistics.median(timer.seconds), time.perf_counter() - start


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=49_152)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--eval_blocks", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    logging.disable(logging.WARNING)
    g = torch.Generator().manual_seed(0)
    blocks = a.batch * a.steps
    ids = torch.randint(0, a.vocab, (blocks + a.eval_blocks, a.block), generator=g).tolist()
    data = datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * a.block] * len(ids), "labels": ids})
    train, evaluation = data.select(range(blocks)), data.select(range(blocks, len(ids)))
    results = {name: ([], []) for name in HEADS}
    with tempfile.TemporaryDirectory() as out:
        for head in HEADS.values():  # warm-up
            run(head, a, train, evaluation, out)
        for _ in range(a.repeats):
            for name, head in HEADS.items():  # alternating
                step, evaluate = run(head, a, train, evaluation, out)
                results[name][0].append(step)
                results[name][1].append(evaluate)
    print(
        f"# HeadsTrainer, tiny-llama H={a.hidden}, V={a.vocab:,}, batch {a.batch} x {a.block} tokens, {a.steps} steps "
        f"+ evaluation of {a.eval_blocks} blocks, {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"median (min–max) of {a.repeats} alternating runs\n"
    )
    soft_step, soft_eval = (statistics.median(v) for v in results["softmax"])
    print("| head | s / training step | vs softmax | evaluation s | vs softmax |")
    print("|---|---:|---:|---:|---:|")
    for name, (steps, evals) in results.items():
        ratio_step = statistics.median(steps) / soft_step
        ratio_eval = statistics.median(evals) / soft_eval
        print(f"| {name} | {cell(steps)} | {ratio_step:.2f}× | {cell(evals)} | {ratio_eval:.2f}× |")


if __name__ == "__main__":
    main()
