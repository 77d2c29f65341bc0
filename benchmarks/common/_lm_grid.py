"""Shared driver of the reproduction grids: train a small word-level decoder once per head section and seed
on a bundled corpus, evaluate the model's own distribution, write results.md / results.csv / a plot, and with
`eval_steps` the validation perplexity every `eval_steps` steps (curves.csv / curves.png: has it flattened?)."""

from __future__ import annotations

import csv
import math
import os
import statistics
import time
from itertools import chain
from pathlib import Path

import torch
from transformers import GPT2Config, default_data_collator, set_seed

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.data import build_word_tokenizer, load_lm_text, word_counts
from hf_heads.training import HeadsTrainer, HeadsTrainingArguments


def blocks(dataset, tok, size):
    from datasets import Dataset

    ids = list(chain.from_iterable(tok(list(dataset["text"]))["input_ids"]))
    rows = [ids[i : i + size] for i in range(0, len(ids) - size + 1, size)]
    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * size] * len(rows), "labels": rows})


def lm_trainer(model, train, valid, *, out, steps: int, batch: int, lr: float, seed: int = 0, **extra) -> HeadsTrainer:
    """The reproductions' `HeadsTrainer`: `steps` of `batch` blocks, linear warm-up over a tenth, no checkpoints;
    `extra` goes to `HeadsTrainingArguments`."""
    targs = HeadsTrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=batch,
        per_device_eval_batch_size=32,
        learning_rate=lr,
        warmup_steps=steps // 10,
        seed=seed,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        **{"logging_steps": max(steps // 5, 1), **extra},
    )
    return HeadsTrainer(
        model=model, args=targs, train_dataset=train, eval_dataset=valid, data_collator=default_data_collator
    )


def run_grid(
    grid,
    *,
    corpus,
    out,
    steps,
    batch,
    block,
    lr,
    hidden=128,
    title="",
    max_eval_blocks=None,
    self_normalization=False,
    seeds=(0,),
    eval_steps=None,
    save_models=None,
    resume=False,
) -> list[dict]:
    """grid: [(group, name, head section)]. Returns one row per setting (perplexity = the mean over `seeds`,
    `perplexity_std` their sample std, `perplexity_per_seed`) and writes the outputs.

    `self_normalization=True` (sampled heads) adds the columns valid_self_norm_logz_mean / _std: the mean and std
    over every validation position of log Σ_c p̃(c|x), the corrected but unnormalised scores
    (`validation_self_normalization`) and valid_unnormalised_ppl: exp(mean NLL − mean log Z) over the same positions,
    the perplexity of the unnormalised scores (table 4's "without renormalisation"; not a distribution's perplexity).

    `save_models`: a folder; the first seed's model of every setting is saved there (`save_pretrained`, one
    sub-folder per setting, the name made path-safe) with `word_counts.pt`, for plots of the trained vectors.

    `resume=True` keeps the settings already in `out`'s results.csv / curves.csv (written after every setting) and
    runs only the others; the tables must come from the same configuration (checked on results.md's first line)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 2)))  # 2 cores unless told otherwise
    text = load_lm_text(corpus)
    tok = build_word_tokenizer(list(text["train"]["text"]))
    train, valid = blocks(text["train"], tok, block), blocks(text["validation"], tok, block)
    if max_eval_blocks:
        valid = valid.select(range(min(len(valid), max_eval_blocks)))
    counts = word_counts(text["train"], tok)
    backbone = GPT2Config(
        n_embd=hidden,
        n_layer=2,
        n_head=4,
        n_positions=block,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,  # not GPT-2's 50256
    )
    print(f"{corpus}: vocabulary {len(tok)}, {len(train)} training / {len(valid)} validation blocks of {block}")
    header = (
        f"Validation perplexity after {steps} steps (batch {batch} × {block} tokens, lr {lr}), 2-layer GPT-2 "
        f"hidden {hidden}, word-level vocabulary {len(tok):,}, corpus `{corpus}`, seeds {list(seeds)} "
        f"(perplexity: mean over the seeds). {title}"
    )
    names = [name for _, name, _ in grid]
    done, curves = finished_rows(out, header) if resume else ({}, [])
    done = {name: row for name, row in done.items() if name in names}
    curves = [c for c in curves if c["setting"] in done]
    rows, table = [], dict(done)  # table: every finished setting, written in grid order after each new one
    extra_args = {"eval_strategy": "steps", "eval_steps": eval_steps} if eval_steps else {}
    for group, name, head in grid:
        if name in done:
            rows.append(done[name])
            print(f"{group:10s} {name:42s} kept from {out / 'results.csv'}", flush=True)
            continue
        runs = []
        for seed in seeds:
            set_seed(seed)
            model = HeadsForCausalLM(HeadsConfig(backbone=backbone.to_dict(), head=head))
            model.set_word_counts(counts)
            trainer = lm_trainer(
                model, train, valid, out=out / "tmp", steps=steps, batch=batch, lr=lr, seed=seed, **extra_args
            )
            start = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - start  # includes the curve's evaluations when eval_steps is set
            loss = trainer.evaluate()["eval_loss"]
            run = {"perplexity": math.exp(loss) if math.isfinite(loss) else float("nan"), "seconds": seconds}
            if self_normalization:
                run["logz"] = validation_self_normalization(model, valid)
                run["unnormalised_ppl"] = math.exp(loss - run["logz"][0]) if math.isfinite(loss) else float("nan")
            if save_models and seed == seeds[0]:
                folder = Path(save_models) / setting_folder(name)
                model.save_pretrained(folder)
                torch.save(counts, folder / "word_counts.pt")
                tok.save_pretrained(folder)
            runs.append(run)
            for h in trainer.state.log_history[:-1]:  # the last entry is the final evaluate()
                if "eval_loss" in h:
                    curves.append(
                        {"setting": name, "seed": seed, "step": h["step"], "perplexity": math.exp(h["eval_loss"])}
                    )
            print(
                f"{group:10s} {name:42s} seed {seed} ppl {run['perplexity']:9.1f}  {seconds / steps:.3f} s/step",
                flush=True,
            )
        ppl = [r["perplexity"] for r in runs]
        row = {
            "group": group,
            "setting": name,
            "perplexity": statistics.mean(ppl),
            "seconds_per_step": statistics.median(r["seconds"] for r in runs) / steps,
            "perplexity_std": statistics.stdev(ppl) if len(ppl) > 1 else float("nan"),
        }
        if self_normalization:
            row["valid_self_norm_logz_mean"] = statistics.mean(r["logz"][0] for r in runs)
            row["valid_self_norm_logz_std"] = statistics.mean(r["logz"][1] for r in runs)
            row["valid_unnormalised_ppl"] = statistics.mean(r["unnormalised_ppl"] for r in runs)
        row["perplexity_per_seed"] = " / ".join(f"{p:.1f}" for p in ppl)
        rows.append(row)
        table[name] = row
        partial = f" **Partial: {len(table)} of {len(grid)} settings done.**" if len(table) < len(grid) else ""
        # after every setting, so an interrupted grid keeps its finished rows
        write_tables(out, [table[n] for n in names if n in table], curves, header + partial)

    print((out / "results.md").read_text())
    return rows


def finished_rows(out: Path, header: str) -> tuple[dict[str, dict], list[dict]]:
    """The rows and curve points of an earlier (possibly interrupted) run of the same grid in `out`."""
    if not (out / "results.csv").exists():
        return {}, []
    first = (out / "results.md").read_text().splitlines()[0]
    if not first.startswith(header):
        raise SystemExit(
            f"resume: {out / 'results.md'} was written by another configuration:\n  {first}\nthis run:\n  {header}"
        )
    text = ("group", "setting", "perplexity_per_seed")
    with open(out / "results.csv", newline="") as f:
        done = {r["setting"]: {k: v if k in text else float(v) for k, v in r.items()} for r in csv.DictReader(f)}
    curves = []
    if (out / "curves.csv").exists():
        with open(out / "curves.csv", newline="") as f:
            curves = [
                {**c, "seed": int(c["seed"]), "step": int(c["step"]), "perplexity": float(c["perplexity"])}
                for c in csv.DictReader(f)
            ]
    return done, curves


def write_tables(out: Path, rows: list[dict], curves: list[dict], header: str) -> None:
    """results.csv / results.md / perplexity.png, and curves.csv / curves.png when there are curves."""
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[-1]))
        writer.writeheader()
        writer.writerows(rows)
    extra = [
        k for k in rows[-1] if k not in ("group", "setting", "perplexity", "seconds_per_step", "perplexity_per_seed")
    ]
    lines = [
        header,
        "",
        "| group | setting | perplexity | s / step |" + "".join(f" {k} |" for k in extra) + " per seed |",
        "|---|---|---:|---:|" + "---:|" * len(extra) + "---|",
        *[
            f"| {r['group']} | {r['setting']} | {r['perplexity']:.1f} | {r['seconds_per_step']:.3f} |"
            + "".join(f" {r.get(k, float('nan')):.3f} |" for k in extra)
            + f" {r['perplexity_per_seed']} |"
            for r in rows
        ],
    ]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot_rows(rows, out / "perplexity.png")
    if curves:
        with open(out / "curves.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(curves[0]))
            writer.writeheader()
            writer.writerows(curves)
        plot_curves(curves, out / "curves.png")


def setting_folder(name: str) -> str:
    """A path-safe folder name for a grid setting ("cos s=64 m=0.01" -> "cos_s-64_m-0.01")."""
    return name.replace(" ", "_").replace("=", "-").replace("/", "-")


@torch.no_grad()
def validation_self_normalization(model, valid, batch_size: int = 8) -> tuple[float, float]:
    """Mean and std over every validation position that has a label (all but the last of each block) of
    log Σ_c p̃(c|x), p̃ the sampled head's corrected but unnormalised posterior (`posterior(..., normalize=False)`,
    the scores the sampling paper's table 4 rescores with); 0 means self-normalised. One extra pass over the
    validation blocks, `batch_size` blocks (a (batch_size · block, V) score matrix) at a time."""
    model.eval()
    device = next(model.parameters()).device
    log_z = []
    for i in range(0, len(valid), batch_size):
        rows = valid[i : i + batch_size]
        ids = torch.tensor(rows["input_ids"], device=device)
        mask = torch.tensor(rows["attention_mask"], device=device)
        states = model.backbone(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]  # (B, T-1, H)
        states = states[mask[:, 1:].bool()]  # (n, H): the positions whose next token is scored
        raw = model.head.posterior(model.head.scores(states), normalize=False)  # (n, V) log p̃
        log_z.append(torch.logsumexp(raw.float(), dim=-1).double())
    values = torch.cat(log_z)
    return float(values.mean()), float(values.std())


def plot_rows(rows: list[dict], path: Path) -> None:
    """Validation perplexity per setting (dots on a log axis, the first row as reference line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(r["group"] for r in rows))
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.5), dpi=120)
    for n, r in enumerate(rows):
        std = float(r.get("perplexity_std") or "nan")
        xerr = [[std], [std]] if math.isfinite(std) else None
        ax.errorbar([float(r["perplexity"])], [n], xerr=xerr, fmt="o", color=f"C{groups.index(r['group'])}")
    ax.set_yticks(range(len(rows)), [r["setting"] for r in rows])
    ax.axvline(float(rows[0]["perplexity"]), color="k", lw=0.8, ls="--", label=rows[0]["setting"])
    ax.set_xscale("log")
    ax.set_xlabel("validation perplexity (log scale, lower is better)")
    ax.grid(alpha=0.3, which="both", axis="x")
    ax.invert_yaxis()
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_curves(curves: list[dict], path: Path) -> None:
    """Validation perplexity against the step, mean over the seeds, one line per setting (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5), dpi=120)
    for i, name in enumerate(dict.fromkeys(c["setting"] for c in curves)):
        steps = sorted({c["step"] for c in curves if c["setting"] == name})
        mean = [
            statistics.mean(c["perplexity"] for c in curves if c["setting"] == name and c["step"] == s) for s in steps
        ]
        ax.plot(steps, mean, marker=".", color=f"C{i % 10}", ls="-" if i < 10 else "--", label=name)
    ax.set(xlabel="step", ylabel="validation perplexity (mean over seeds)", yscale="log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def replot(results_csv: str | Path) -> None:
    """Redraw perplexity.png next to a results.csv."""
    with open(results_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    plot_rows(rows, Path(results_csv).with_name("perplexity.png"))
