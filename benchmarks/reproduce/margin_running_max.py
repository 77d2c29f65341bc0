#!/usr/bin/env python
"""How far the running max-norm is from the batch max after the short runs of `reproduce_margin_lm.py`.

    python benchmarks/reproduce/margin_running_max.py          # g=max-norm f=no-mod, 60 steps, ~1-4 min
    python benchmarks/reproduce/margin_running_max.py --all    # also the two max-norm + log-unigram settings

Trains a max-norm setting of `benchmarks/reproduce/reproduce_margin_lm.py` exactly as that script does (same corpus,
model, seed, batch, lr, warm-up), records at every step the batch max ‖h‖ the training criterion uses and the running
max the head keeps for evaluation (momentum `context_norm_momentum`, 0.01), then scores the validation blocks (the same
positions as the script's evaluation, no margin) with the trained model and g(i) set five ways: the running max (what
`results.md` reports), the last training batch's max, the max of each evaluation batch of 32 blocks (the paper's
"largest norm in the batch where h_i appears"), and the value a running max with momentum 0.1, or a bias-corrected
(zero start, divided by 1 − (1 − momentum)^t) running max with momentum 0.01, would hold after the same batches. The
hidden states do not depend on g, so they are computed once. Writes `docs/results/margin_lm/running_max.md` (or
`--out`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, set_seed

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.data import build_word_tokenizer, load_lm_text, word_counts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _lm_grid import blocks, lm_trainer  # noqa: E402

SETTINGS = [
    ("g=max-norm f=no-mod", {"family": "margin", "word_norm": "no-mod", "context_norm": "max-norm"}),
    ("g=max-norm f=log-unigram", {"family": "margin", "word_norm": "log-unigram", "context_norm": "max-norm"}),
    (
        "arc m=0.001 g=max-norm f=log-unigram",
        {"family": "margin", "margin": "arc", "m": 0.001, "word_norm": "log-unigram", "context_norm": "max-norm"},
    ),
]


def ema(values: list[float], momentum: float, bias_corrected: bool) -> float:
    """A running mean of `values`: the head's (first value copied, then lerp) or a zero-start bias-corrected one."""
    if bias_corrected:
        run = 0.0
        for v in values:
            run += momentum * (v - run)
        return run / (1 - (1 - momentum) ** len(values))
    run = values[0]
    for v in values[1:]:
        run += momentum * (v - run)
    return run


@torch.no_grad()
def perplexity(head, states, targets, g: float | None) -> float:
    """exp mean NLL of the head's scores without margin, with g(i) = g (None: each evaluation batch's own max)."""
    head.context_norm_running.fill_(-1.0 if g is None else g)
    nll, n = 0.0, 0
    for h, y in zip(states, targets, strict=True):
        logp = torch.log_softmax(head.scores(h), dim=-1)
        nll += float(-logp.gather(1, y[:, None]).sum())
        n += y.numel()
    return math.exp(nll / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--all", action="store_true", help="all three max-norm settings (default: the first)")
    ap.add_argument(
        "--out", default=str(Path(__file__).resolve().parents[2] / "docs/results/margin_lm/running_max.md")
    )
    args = ap.parse_args()
    torch.set_num_threads(2)
    text = load_lm_text("bible-web")
    tok = build_word_tokenizer(list(text["train"]["text"]))
    train, valid = blocks(text["train"], tok, 128), blocks(text["validation"], tok, 128)
    counts = word_counts(text["train"], tok)
    backbone = GPT2Config(n_embd=128, n_layer=2, n_head=4, n_positions=128, vocab_size=len(tok))
    lines = [
        f"Running max-norm vs batch max after {args.steps} steps, the setting of `reproduce_margin_lm.py --steps "
        f"{args.steps}` (batch 16 × 128 tokens, lr 0.001, seed 0, bible-web, {len(valid)} validation blocks). "
        "Command: `python benchmarks/reproduce/margin_running_max.py"
        + ("" if args.steps == 60 else f" --steps {args.steps}")
        + "`.",
        "",
    ]
    for name, head in SETTINGS if args.all else SETTINGS[:1]:
        set_seed(0)
        model = HeadsForCausalLM(HeadsConfig(backbone=backbone.to_dict(), head=head))
        model.set_word_counts(counts)
        hd = model.head
        batch_max: list[float] = []
        running: list[float] = []
        observe = hd._observe

        def recording(hidden, labels, ignore_index, observe=observe, batch_max=batch_max, running=running, hd=hd):
            valid_rows = hidden.reshape(-1, hidden.shape[-1])[labels.reshape(-1) != ignore_index]
            batch_max.append(float(valid_rows.detach().float().norm(dim=1).max()))
            observe(hidden, labels, ignore_index)
            running.append(float(hd.context_norm_running))

        hd._observe = recording
        trainer = lm_trainer(model, train, valid, out="/tmp/running_max_check", steps=args.steps, batch=16, lr=1e-3)
        start = time.perf_counter()
        trainer.train()
        hd._observe = observe
        # the validation hidden states (positions with a label) and their next tokens, in evaluation batches of 32
        model.eval()
        states, targets = [], []
        with torch.no_grad():
            for i in range(0, len(valid), 32):
                ids = torch.tensor(valid[i : i + 32]["input_ids"])
                states.append(model.backbone(input_ids=ids).last_hidden_state[:, :-1].reshape(-1, 128))
                targets.append(ids[:, 1:].reshape(-1))
        eval_max = [float(h.norm(dim=1).max()) for h in states]

        values = {
            "running max, momentum 0.01 (as reported)": running[-1],
            "last training batch max": batch_max[-1],
            "running max, momentum 0.1": ema(batch_max, 0.1, False),
            "bias-corrected running max, momentum 0.01": ema(batch_max, 0.01, True),
        }
        rows = [(label, f"{g:.2f}", perplexity(hd, states, targets, g)) for label, g in values.items()]
        rows.append(
            (
                "each evaluation batch's own max (paper's definition)",
                f"{min(eval_max):.2f}–{max(eval_max):.2f}",
                perplexity(hd, states, targets, None),
            )
        )
        first_weight = (1 - 0.01) ** (len(batch_max) - 1)
        lines += [
            f"**{name}** ({time.perf_counter() - start:.0f} s). Training batch max ‖h‖: step 1 {batch_max[0]:.2f}, "
            f"step {len(batch_max) // 2} {batch_max[len(batch_max) // 2 - 1]:.2f}, step {len(batch_max)} "
            f"{batch_max[-1]:.2f} (min {min(batch_max):.2f}, max {max(batch_max):.2f}); the step-1 batch carries "
            f"weight 0.99^{len(batch_max) - 1} = {first_weight:.3f} in the running max.",
            "",
            "| g(i) at evaluation | value | validation perplexity |",
            "|---|---:|---:|",
            *[f"| {label} | {g} | {ppl:.1f} |" for label, g, ppl in rows],
            "",
        ]
        print("\n".join(lines[-len(rows) - 5 :]), flush=True)
    Path(args.out).write_text("\n".join(lines))
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
