"""Pictures saved next to a trained model and embedded in its card (matplotlib, PNG).

- `plot_word_vectors`: the margin paper's figure 1 (sec. 5): output word vectors reduced to 2-D by
  PCA then t-SNE, drawn in polar coordinates, scaled and rotated so the most frequent word sits
  at angle 0 and radius 1; left the 100 most frequent words, right selected word groups.
- `plot_speed_vs_perplexity`: training tokens/s against evaluation perplexity for several runs
  (the sampled heads' trade-off).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

# (word, word) groups in the spirit of figure 1 (d-f): semantic pairs, then syntactic pairs. Words
# missing from the vocabulary are skipped.
WORD_GROUPS = (
    *(("semantic", g) for g in (("king", "queen"), ("man", "woman"), ("father", "mother"), ("son", "daughter"))),
    *(("syntactic", g) for g in (("he", "himself"), ("she", "herself"), ("they", "themselves"), ("say", "said"))),
)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _polar_embedding(vectors: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE

    reduced = PCA(n_components=min(50, vectors.shape[1], vectors.shape[0] - 1), random_state=seed).fit_transform(
        vectors
    )
    xy = TSNE(n_components=2, perplexity=min(30.0, (len(vectors) - 1) / 3), init="pca", random_state=seed)
    xy = xy.fit_transform(reduced)
    xy = xy - xy.mean(0)
    radius, angle = np.hypot(xy[:, 0], xy[:, 1]), np.arctan2(xy[:, 1], xy[:, 0])
    return radius / max(radius[0], 1e-12), angle - angle[0]  # row 0 (the most frequent word) at (1, 0)


def plot_word_vectors(
    weight: torch.Tensor, words: list[str], counts: torch.Tensor, path: str | Path, title: str, seed: int = 0
) -> Path:
    """Figure 1 of the margin paper for output vectors `weight` (V, H) of vocabulary `words` (V)."""
    counts = torch.as_tensor(counts, dtype=torch.float64)
    top = torch.argsort(counts, descending=True, stable=True)[:100].tolist()
    index = {w: i for i, w in enumerate(words)}
    kinds = [(kind, g) for kind, g in WORD_GROUPS if all(w in index for w in g)]
    groups = [g for _, g in kinds]
    extra = [index[w] for g in groups for w in g if index[w] not in top]
    ids = top + extra
    radius, angle = _polar_embedding(weight.detach().float().cpu()[ids].numpy(), seed)
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, subplot_kw={"projection": "polar"}, figsize=(10, 5), dpi=120)
    axes[0].scatter(angle[: len(top)], radius[: len(top)], s=10, color="C0")
    for j in range(min(15, len(top))):
        axes[0].annotate(words[ids[j]], (angle[j], radius[j]), fontsize=7)
    axes[0].set_title("top 100 frequent words", fontsize=9)
    position = {i: j for j, i in enumerate(ids)}
    for n, group in enumerate(groups):
        js = [position[index[w]] for w in group]
        cmap = plt.cm.Reds if kinds[n][0] == "semantic" else plt.cm.Blues
        color = cmap(0.45 + 0.55 * n / max(len(groups), 1))
        axes[1].plot(angle[js], radius[js], "o-", color=color, ms=3, lw=0.8)
        for j, w in zip(js, group, strict=True):
            axes[1].annotate(w, (angle[j], radius[j]), fontsize=7, color=color)
    axes[1].set_title("word groups (semantic: reds, syntactic: blues)", fontsize=9)
    fig.suptitle(f"{title}: output word vectors, PCA + t-SNE, polar", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def plot_speed_vs_perplexity(runs: list[tuple[str, float, float]], path: str | Path) -> Path:
    """runs: (label, training tokens per second, evaluation perplexity)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for n, (label, speed, ppl) in enumerate(runs):
        ax.scatter([speed], [ppl], color=f"C{n}", label=label)
    ax.set_xlabel("training tokens / s (higher is faster)")
    ax.set_ylabel("evaluation perplexity (lower is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
