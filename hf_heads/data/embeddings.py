"""Pretrained target-embedding tables for the continuous-output head (Bhat et al. 2019; Kumar & Tsvetkov 2019), named
by `ContinuousHeadOptions.embedding_name`: `glove-6B-50d` (packaged), a file (`.npz` with arrays `words` (M,) and
`vectors` (M, d), or the word2vec text format `.txt` / `.vec`), or `word2vec-targets` (trained by the run scripts on
the training targets with gensim, `train_word2vec_table`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from hf_heads.data.corpora import load_glove

EMBEDDING_TABLES = ("glove-6B-50d",)
TABLE_SUFFIXES = (".npz", ".txt", ".vec")


def load_word_vectors(name: str) -> tuple[list[str], np.ndarray]:
    """(words, matrix (M, d) float32) of a packaged table name or a table file (see the module docstring)."""
    if name in EMBEDDING_TABLES:
        return load_glove(name.removeprefix("glove-"))
    path = Path(name)
    if not name.endswith(TABLE_SUFFIXES):
        raise ValueError(
            f"embedding table {name!r} is not available; allowed: {', '.join(EMBEDDING_TABLES)} or a file ending in "
            f"{', '.join(TABLE_SUFFIXES)}"
        )
    if not path.is_file():
        raise ValueError(f"embedding table file {name!r} does not exist")
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            if "words" not in data or "vectors" not in data:
                raise ValueError(f"{name}: an .npz table needs arrays `words` and `vectors`, found {sorted(data)}")
            words, matrix = [str(w) for w in data["words"]], data["vectors"].astype(np.float32)
    else:
        words, rows = [], []
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f):
                parts = line.rstrip("\n").rstrip().split(" ")
                if n == 0 and len(parts) == 2 and all(p.isdigit() for p in parts):
                    continue  # the `M d` header
                if len(parts) < 2:
                    continue
                words.append(parts[0])
                rows.append(np.asarray(parts[1:], dtype=np.float32))
        if not rows or len({r.shape[0] for r in rows}) != 1:
            raise ValueError(f"{name}: word2vec text needs one `word v1 ... vd` line per word, all with the same d")
        matrix = np.stack(rows)
    if matrix.ndim != 2 or len(words) != matrix.shape[0]:
        raise ValueError(f"{name}: {len(words)} words but vectors of shape {matrix.shape}")
    return words, matrix


def embedding_table(tokenizer, name: str = "glove-6B-50d", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(table (V, d) float32, covered (V,) bool) for `tokenizer`'s vocabulary; special and uncovered tokens get
    seeded random rows, so `</s>` stays predictable and ids stay aligned (map uncovered targets to `<unk>`,
    `map_uncovered`)."""
    words, matrix = load_word_vectors(name)
    index = {w: i for i, w in enumerate(words)}
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    specials = set(tokenizer.all_special_tokens)
    rows = [index.get(t) if t not in specials else None for t in tokens]
    covered = torch.tensor([r is not None for r in rows])
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(len(tokens), matrix.shape[1], generator=generator)
    hits = [i for i, r in enumerate(rows) if r is not None]
    if hits:
        table[hits] = torch.from_numpy(matrix[[rows[i] for i in hits]])
    return table, covered


def map_uncovered(ids: list[int], covered: torch.Tensor, unk_id: int, keep: set[int]) -> list[int]:
    """Target ids with every uncovered id (other than those in `keep`, e.g. `</s>`) replaced by `unk_id`."""
    return [i if (i in keep or bool(covered[i])) else unk_id for i in ids]


def save_table(path: str | Path, words: list[str], vectors: np.ndarray) -> Path:
    """Write a table file (.npz with `words` and `vectors`) that `embedding_name=<path>` reads."""
    path = Path(path)
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise ValueError(f"{len(words)} words but vectors of shape {vectors.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, words=np.asarray(words, dtype=str), vectors=vectors)
    return path


def _stable_hash(text: str) -> int:
    """gensim seeds word vectors with hashfxn(word + seed); Python's `hash` of a str changes between processes."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest(), "little")


def train_word2vec_table(
    sentences: Iterable[list[str]],
    path: str | Path,
    *,
    dim: int = 300,
    window: int = 5,
    min_count: int = 1,
    epochs: int = 5,
    seed: int = 0,
    workers: int = 1,
) -> Path:
    """Train skip-gram word2vec (Mikolov et al. 2013; gensim `Word2Vec(sg=1)`) on `sentences` and save it as an .npz
    table (extra `tables`); with `workers=1` and a fixed `seed` the table is the same in every process."""
    try:
        from gensim.models import Word2Vec
    except ImportError as err:
        raise ImportError(
            "training a word2vec table needs gensim: pip install 'hf_heads[tables]' (or pip install gensim)"
        ) from err
    sentences = [list(s) for s in sentences]
    if not any(sentences):
        raise ValueError("train_word2vec_table: no words to train on")
    model = Word2Vec(
        sentences, vector_size=dim, window=window, min_count=min_count, sg=1, epochs=epochs, seed=seed,
        workers=workers, hashfxn=_stable_hash,
    )  # fmt: skip
    words = list(model.wv.index_to_key)
    return save_table(path, words, model.wv.vectors)
