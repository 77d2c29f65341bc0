#!/usr/bin/env python
"""Figure 1 of the margin paper: the output word vectors of the baseline and of the large-margin models in polar
coordinates, with the full-dimension statistics behind the paper's reading of it.

    python benchmarks/figures/plot_margin_word_vectors.py --models outputs/margin_models \\
        --out docs/results/margin_lm/key_rows --settings baseline "arc m=0.001 g=max-norm f=no-mod" \\
        "cos m=0.001 g=max-norm f=no-mod" "arc s=64 m=0.01" "cos s=64 m=0.01"

`--models` is the folder written by `reproduce_margin_lm.py --save_models` (the first seed's model of every row).
By default the panels are the paper's: the baseline and "the large-margin softmax in bold in table 3", arc and cos
with m = 0.001 and max-norm context vectors (PAPER_SETTINGS); `--settings` names others (one column each).

The paper does not say how its 128-dimensional vectors become 2-D points. Here: the two leading right singular
vectors of the top-100 rows (not centred: angles are measured from the origin, as the logits see them), then a
rotation and scale that put "the" at angle 0, radius 1 ("scaled and rotated to align the word 'the'"). Top row:
the 100 most frequent training words in blue over 2,000 other words in grey; bottom row: word pairs with a
semantic (reds) or syntactic (blues) relation. A 2-D projection can hide or invent separation, so
`word_vectors.md` states the claim in the full space: the mean pairwise angle and the mean nearest-neighbour angle
among the top-100 words (larger = "more evenly populate the embedding space"), and the angles of the pairs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from hf_heads import HeadsForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _lm_grid import setting_folder  # noqa: E402

TOP = 100
PAIRS = (  # (a, b, relation): semantic pairs first (reds), then syntactic (blues)
    ("lord", "god", "semantic"),
    ("king", "prince", "semantic"),
    ("city", "town", "semantic"),
    ("he", "himself", "syntactic"),
    ("she", "herself", "syntactic"),
    ("they", "themselves", "syntactic"),
)


PAPER_SETTINGS = ("baseline", "arc m=0.001 g=max-norm f=no-mod", "cos m=0.001 g=max-norm f=no-mod")


def angles_deg(vectors: torch.Tensor) -> torch.Tensor:
    """(n, n) angles in degrees between the rows of a (n, H) matrix."""
    unit = vectors / vectors.norm(dim=1, keepdim=True)
    return torch.rad2deg(torch.arccos((unit @ unit.T).clamp(-1, 1)))


def word_vectors(folder: Path):
    model = HeadsForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    counts = torch.load(folder / "word_counts.pt")
    return model.head.weight.detach().double(), tok, counts  # (V, H), tokenizer, (V,)


def word_id(tok, word: str) -> int:
    """The id of a word the vocabulary must hold (never silently <unk>)."""
    idx = tok.convert_tokens_to_ids(word)
    if idx is None or idx == tok.unk_token_id:
        raise SystemExit(f"word {word!r} is not in the model's vocabulary; edit PAIRS")
    return idx


def statistics_row(name: str, weight: torch.Tensor, tok, top: torch.Tensor) -> dict:
    ang = angles_deg(weight[top])  # (TOP, TOP)
    off = ~torch.eye(len(top), dtype=torch.bool)
    norms = weight[top].norm(dim=1)
    row = {
        "setting": name,
        "mean pairwise angle (deg)": float(ang[off].mean()),
        "mean nearest-neighbour angle (deg)": float(ang.masked_fill(~off, 360).min(dim=1).values.mean()),
        "norm std / mean": float(norms.std() / norms.mean()),
    }
    for a, b, _ in PAIRS:
        ia, ib = word_id(tok, a), word_id(tok, b)
        row[f"∠ {a}–{b}"] = float(angles_deg(weight[[ia, ib]])[0, 1])
    return row


def cell(key: str, value: float) -> str:
    return f"{value:.3f}" if "/" in key else f"{value:.1f}"


def polar_points(weight: torch.Tensor, top: torch.Tensor, anchor: int) -> torch.Tensor:
    """(V, 2) polar (angle, radius) of every row, projected on the top rows' two leading singular directions."""
    basis = torch.linalg.svd(weight[top], full_matrices=False).Vh[:2]  # (2, H)
    xy = weight @ basis.T  # (V, 2)
    z = torch.complex(xy[:, 0], xy[:, 1])
    z = z / z[anchor]  # "the" at angle 0, radius 1
    return torch.stack([z.angle(), z.abs()], dim=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="Folder of reproduce_margin_lm.py --save_models.")
    ap.add_argument("--settings", nargs="+", default=list(PAPER_SETTINGS), help="Setting names, one column each.")
    ap.add_argument("--out", default="docs/results/margin_lm/key_rows")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = args.settings
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, len(settings), figsize=(4.2 * len(settings), 8.4), subplot_kw={"projection": "polar"})
    stats = []
    reds, blues = plt.get_cmap("Reds"), plt.get_cmap("Blues")
    for col, name in enumerate(settings):
        folder = Path(args.models) / setting_folder(name)
        if not folder.is_dir():
            raise SystemExit(f"--models: no saved model for setting {name!r} at {folder}")
        weight, tok, counts = word_vectors(folder)
        top = counts.argsort(descending=True)[:TOP]
        stats.append(statistics_row(name, weight, tok, top))
        polar = polar_points(weight, top, word_id(tok, "the"))
        rest = torch.ones(len(weight), dtype=torch.bool)
        rest[top] = False
        rest = rest.nonzero().squeeze(1)[torch.randperm(int(rest.sum()), generator=torch.Generator().manual_seed(0))]
        ax = axes[0, col]
        ax.scatter(polar[rest[:2000], 0], polar[rest[:2000], 1], s=2, color="0.8", label="other words")
        ax.scatter(polar[top, 0], polar[top, 1], s=6, color="C0", label=f"top {TOP} frequent")
        ax.set_title(f"({chr(ord('a') + col)}) {name}", fontsize=9)
        ax = axes[1, col]
        for i, (a, b, relation) in enumerate(PAIRS):
            color = (reds if relation == "semantic" else blues)(0.45 + 0.18 * (i % 3))
            for word in (a, b):
                theta, r = polar[word_id(tok, word)]
                ax.plot([0, theta], [0, r], color=color, lw=1)
                ax.annotate(word, (theta, r), fontsize=7, color=color)
        ax.set_title(f"({chr(ord('a') + len(settings) + col)}) word pairs", fontsize=9)
    axes[0, 0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Output word vectors in polar coordinates (2-D projection; 'the' at angle 0, radius 1)")
    fig.tight_layout()
    fig.savefig(out / "word_vectors.png", dpi=110)
    plt.close(fig)

    keys = list(stats[0])
    lines = [
        f"Output word vectors of the first seed's models (`{args.models}`), full {weight.shape[1]}-dimensional "
        f"space; top {TOP} = the {TOP} most frequent training words. Written by "
        "`benchmarks/figures/plot_margin_word_vectors.py` with word_vectors.png.",
        "",
        "| " + " | ".join(keys) + " |",
        "|---|" + "---:|" * (len(keys) - 1),
        *[f"| {s['setting']} | " + " | ".join(cell(k, s[k]) for k in keys[1:]) + " |" for s in stats],
    ]
    (out / "word_vectors.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
