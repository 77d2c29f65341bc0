"""Pretrained target-embedding tables for the continuous-output head (Bhat et al. 2019; Kumar & Tsvetkov 2019)."""

from __future__ import annotations

import torch

from hf_heads.data.corpora import load_glove

EMBEDDING_TABLES = ("glove-6B-50d",)


def embedding_table(tokenizer, name: str = "glove-6B-50d", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(table (V, d) float32, covered (V,) bool) for the vocabulary of `tokenizer`.

    Row i is the pretrained vector of token i when the table has it (`covered`). Special tokens and tokens
    the table lacks get fixed random vectors (seeded): `</s>` must stay predictable, and an uncovered id keeps
    a row so ids stay aligned; training targets on uncovered words should be mapped to `<unk>` (see
    `map_uncovered`). Rows are normalised by the head, not here."""
    if name not in EMBEDDING_TABLES:
        raise ValueError(f"embedding table {name!r} is not available; allowed: {', '.join(EMBEDDING_TABLES)}")
    words, matrix = load_glove(name.removeprefix("glove-"))
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
