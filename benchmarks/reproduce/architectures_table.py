"""The "architectures tested" table: every model type of the test matrix (tests/arch_matrix.py: tiny random-weight
models, weights ~ N(0, 0.5), each output transform pushed up) wrapped with `HeadsFor*.from_base(model,
head={"family": "softmax"})`, compared with the original `AutoModelFor*`. tests/modeling/test_architectures.py asserts
the same; this script writes the measured numbers.

    python benchmarks/reproduce/architectures_table.py                  # docs/results/architectures.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from arch_matrix import _TASKS as MATRIX  # noqa: E402
from arch_matrix import NO_BEAM_SEARCH, SKIPPED, TASKS, build, cache_mismatches, is_tied, probe_inputs  # noqa: E402

from hf_heads import HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification  # noqa: E402

WRAPPERS = {
    "causal_lm": HeadsForCausalLM,
    "seq2seq": HeadsForSeq2SeqLM,
    "encoder_classification": HeadsForSequenceClassification,
    "decoder_classification": HeadsForSequenceClassification,
}


@torch.no_grad()
def row(task: str, key: str) -> dict:
    original = build(key, task)
    batch = probe_inputs(task)
    out = {"task": task, "key": key, "class": type(original).__name__, "tied": is_tied(original)}
    try:
        model = WRAPPERS[task].from_base(original, head={"family": "softmax"}).eval()
    except ValueError as err:
        text = str(err)
        if "differ from the checkpoint" in text:
            note = "by the probe guard, " + text.split("differ from the checkpoint's ")[1].split(" on a probe")[0]
        else:
            note = "its output layer is not a (vocab, H) nn.Linear on the final states"
        return {**out, "status": "refused", "note": note}
    a = torch.log_softmax(original(**batch).logits.double(), -1)
    b = torch.log_softmax(model(**batch).logits.double(), -1)
    out["delta"] = float((a - b).abs().max())
    head = model.config.head
    transform = [f"×{head['logit_multiplier']:.4g}"] if head.get("logit_multiplier", 1.0) != 1.0 else []
    transform += [f"cap {head['logit_softcap']:g}"] if head.get("logit_softcap") else []
    out["transform"] = ", ".join(transform) or "—"
    if task in ("causal_lm", "seq2seq"):
        prompt = {k: v for k, v in batch.items() if k != "decoder_input_ids"}
        beams = (1,) if key in NO_BEAM_SEARCH else (1, 2)
        same = [
            torch.equal(
                model.generate(**prompt, max_new_tokens=4, do_sample=False, num_beams=n),
                original.generate(**prompt, max_new_tokens=4, do_sample=False, num_beams=n),
            )
            for n in beams
        ]
        out["generate"] = ("same" if all(same) else "DIFFERENT") + (
            " (greedy; beam search with a cache is refused by transformers' own class)" if len(beams) == 1 else ""
        )
        sparse = WRAPPERS[task].from_base(original, head={"family": "sparse", "k": 5}).eval()
        if cache_mismatches(original, prompt, beams=beams):  # transformers' own model: its cache changes the output
            out["cached"] = "as the original, which decodes differently with its own cache"
        else:
            wrong = cache_mismatches(model, prompt, beams=beams) + cache_mismatches(sparse, prompt, beams=beams)
            out["cached"] = "same" if not wrong else "DIFFERENT"
    else:
        out["generate"] = out["cached"] = "—"
    out["status"] = "same" if out["delta"] <= 1e-5 else "DIFFERENT"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "docs/results/architectures.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = [
        "# Architectures tested: from_base parity (`python benchmarks/reproduce/architectures_table.py`)",
        "",
        f"transformers tiny random-weight models (tests/arch_matrix.py), transformers {transformers.__version__}, "
        f"torch {torch.__version__}; max |Δ log p| "
        "over a (2, 7) probe between `AutoModelFor*` and `HeadsFor*.from_base(model, head={'family': 'softmax'})`; "
        "generate: greedy and 2-beam output, 4 new tokens; cached generate: `generate(use_cache=True)` equals "
        "`use_cache=False` (greedy and 2-beam tokens, greedy scores to 1e-4) for the softmax head and a sparse k=5 "
        "head.",
        "",
    ]
    counts = {}
    for task in TASKS:
        rows = [row(task, key) for key in MATRIX[task][0]]
        counts[task] = sum(r["status"] == "same" for r in rows), len(rows)
        lines += [f"## {task} ({counts[task][0]} of {counts[task][1]} model types exact)", ""]
        lines += [
            "| model type | class | tied | transform | max Δ log p | generate | cached generate | result |",
            "|---|---|---|---|---:|---|---|---|",
        ]
        for r in rows:
            if r["status"] == "refused":
                lines.append(f"| {r['key']} | {r['class']} | {r['tied']} | — | — | — | — | refused: {r['note']} |")
            else:
                lines.append(
                    f"| {r['key']} | {r['class']} | {r['tied']} | {r['transform']} | {r['delta']:.1e} | "
                    f"{r['generate']} | {r['cached']} | {r['status']} |"
                )
        lines.append("")
    lines += ["Not built (transformers itself cannot run them tiny):", ""]
    lines += [f"- {key}: {reason}" for key, reason in SKIPPED.items()]
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(f"{task}: {same}/{total} exact" for task, (same, total) in counts.items()))


if __name__ == "__main__":
    main()
