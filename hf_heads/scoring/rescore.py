"""N-best rescoring with a language model's scores, and a grid search of the combination weights on a dev set.

The second-pass rescoring of the sampling paper (sec. 4, tables 3-4), here log-linear with a word bonus:

    combined = score + lm_weight · lm_score + length_penalty · num_words

(a positive `length_penalty` offsets the LM's preference for short hypotheses). An n-best list is a list of records
`{"id", "hypotheses": [{"text", "score"}], "reference"?, "source"?}`; extra fields are kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

Metric = Callable[[list[str], list[str]], float]  # (hypotheses, references) -> corpus-level score, higher is better


# ---------------------------------------------------------------------------------------------- validation


def check_record(record, where: str, *, need_reference: bool = False, need_source: bool = False) -> None:
    """Raise a ValueError naming `where` (e.g. "nbest[3]" or "dev.jsonl line 4") and the first bad field."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a record is an object with id and hypotheses, not {type(record).__name__}")
    required = ["id", "hypotheses"] + (["reference"] if need_reference else []) + (["source"] if need_source else [])
    for name in required:
        if name not in record:
            raise ValueError(f"{where}: missing field {name!r} (a record needs {', '.join(required)})")
    for name in ("reference", "source"):
        if name in required and not isinstance(record[name], str):
            raise ValueError(f"{where}: field {name!r} is {record[name]!r}, not a string")
    hyps = record["hypotheses"]
    if not isinstance(hyps, list) or not hyps:
        raise ValueError(f"{where}: field 'hypotheses' is {hyps!r}: a non-empty list of {{text, score}} objects")
    for j, hyp in enumerate(hyps):
        if not isinstance(hyp, dict):
            raise ValueError(f"{where}: hypotheses[{j}] is {hyp!r}, not an object with text and score")
        for name in ("text", "score"):
            if name not in hyp:
                raise ValueError(f"{where}: missing field {name!r} in hypotheses[{j}] (needs text, score)")
        if not isinstance(hyp["text"], str):
            raise ValueError(f"{where}: hypotheses[{j}].text is {hyp['text']!r}, not a string")
        if not _is_number(hyp["score"]) or math.isnan(hyp["score"]):
            raise ValueError(f"{where}: hypotheses[{j}].score is {hyp['score']!r}, not a number")


def check_nbest(nbest, *, need_reference: bool = False, need_source: bool = False) -> None:
    """Validate every record (`check_record`), naming the first bad one by its index."""
    if isinstance(nbest, dict | str) or not isinstance(nbest, Sequence):
        raise ValueError(f"nbest must be a list of records, not {type(nbest).__name__}")
    for i, record in enumerate(nbest):
        check_record(record, f"nbest[{i}]", need_reference=need_reference, need_source=need_source)


def nbest_texts(nbest: Sequence[dict]) -> list[str]:
    """Every hypothesis text, record by record (the order `lm_scores` may be given in, flat)."""
    return [hyp["text"] for record in nbest for hyp in record["hypotheses"]]


def nbest_sources(nbest: Sequence[dict]) -> list[str]:
    """Each record's `source`, repeated once per hypothesis (aligned with `nbest_texts`)."""
    return [record["source"] for record in nbest for _ in record["hypotheses"]]


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _aligned(nbest: Sequence[dict], lm_scores) -> list[list[float]]:
    """lm_scores per record and hypothesis: nested lists, or one flat sequence / 1-D tensor in `nbest_texts` order."""
    sizes = [len(record["hypotheses"]) for record in nbest]
    if isinstance(lm_scores, torch.Tensor):
        lm_scores = lm_scores.detach().double().reshape(-1).tolist()
    if not isinstance(lm_scores, Sequence) or isinstance(lm_scores, str):
        raise ValueError(f"lm_scores must be a list (per record, per hypothesis) or a 1-D tensor, not {lm_scores!r}")
    if len(lm_scores) and all(_is_number(v) for v in lm_scores):  # flat
        if len(lm_scores) != sum(sizes):
            raise ValueError(
                f"lm_scores has {len(lm_scores)} scores but nbest has {sum(sizes)} hypotheses: one per hypothesis"
            )
        rows, start = [], 0
        for size in sizes:
            rows.append([float(v) for v in lm_scores[start : start + size]])
            start += size
    else:
        if len(lm_scores) != len(nbest):
            raise ValueError(f"lm_scores has {len(lm_scores)} rows but nbest has {len(nbest)} records")
        rows = []
        for i, (row, size) in enumerate(zip(lm_scores, sizes, strict=True)):
            row = row.tolist() if isinstance(row, torch.Tensor) else row
            if not isinstance(row, Sequence) or len(row) != size or not all(_is_number(v) for v in row):
                raise ValueError(f"lm_scores[{i}] is {row!r}: {size} numbers, one per hypothesis of nbest[{i}]")
            rows.append([float(v) for v in row])
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            if math.isnan(value) or value == math.inf:
                raise ValueError(f"lm_scores[{i}][{j}] is {value}: a log-probability (-inf allowed), not nan or +inf")
    return rows


def _check_weight(name: str, value) -> float:
    if not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name}={value!r} must be a finite number")
    return float(value)


def _combined(score: float, lm_score: float, num_words: int, lm_weight: float, length_penalty: float) -> float:
    lm = lm_weight * lm_score if lm_weight else 0.0  # a zero weight ignores the LM, a -inf score included (no nan)
    return score + lm + length_penalty * num_words


# ---------------------------------------------------------------------------------------------- rescoring


def rescore_nbest(nbest: Sequence[dict], lm_scores, *, lm_weight: float, length_penalty: float = 0.0) -> list[dict]:
    """The n-best lists reranked by `combined` (best first, ties in order), as new records, each hypothesis with
    `lm_score` and `combined`; `lm_scores` nested per record or flat in `nbest_texts` order."""
    check_nbest(nbest)
    lm_weight = _check_weight("lm_weight", lm_weight)
    length_penalty = _check_weight("length_penalty", length_penalty)
    out = []
    for record, lm_row in zip(nbest, _aligned(nbest, lm_scores), strict=True):
        hyps = [
            {
                **hyp,
                "lm_score": lm,
                "combined": _combined(float(hyp["score"]), lm, len(hyp["text"].split()), lm_weight, length_penalty),
            }
            for hyp, lm in zip(record["hypotheses"], lm_row, strict=True)
        ]
        out.append({**record, "hypotheses": sorted(hyps, key=lambda h: -h["combined"])})
    return out


@dataclass
class TuningResult:
    """The best weights of `tune_weights` and the whole grid (one row per pair, in grid order)."""

    lm_weight: float
    length_penalty: float
    metric: float
    table: list[dict] = field(default_factory=list)  # {"lm_weight", "length_penalty", "metric"}


def tune_weights(
    nbest: Sequence[dict],
    lm_scores,
    *,
    metric: Metric,
    lm_weights: Iterable[float],
    length_penalties: Iterable[float] = (0.0,),
) -> TuningResult:
    """Grid search of (lm_weight, length_penalty) maximising the corpus-level `metric(best_hypotheses, references)` on
    a dev set; ties go to the first pair in grid order (lm_weights outer)."""
    check_nbest(nbest, need_reference=True)
    if not callable(metric):
        raise ValueError(f"metric={metric!r} must be a callable (hypotheses, references) -> float")
    weights = [_check_weight("lm_weights[]", w) for w in lm_weights]
    penalties = [_check_weight("length_penalties[]", p) for p in length_penalties]
    if not weights or not penalties:
        raise ValueError("lm_weights and length_penalties must each hold at least one value")
    rows = _aligned(nbest, lm_scores)
    references = [record["reference"] for record in nbest]
    table, best = [], None
    for w in weights:
        for p in penalties:
            hyps = [_best_text(record, lm_row, w, p) for record, lm_row in zip(nbest, rows, strict=True)]
            value = metric(hyps, references)
            if not _is_number(value) or math.isnan(value):
                raise ValueError(f"metric returned {value!r} for lm_weight={w}, length_penalty={p}: expected a number")
            table.append({"lm_weight": w, "length_penalty": p, "metric": float(value)})
            if best is None or value > best["metric"]:
                best = table[-1]
    return TuningResult(best["lm_weight"], best["length_penalty"], best["metric"], table)


def _best_text(record: dict, lm_row: list[float], lm_weight: float, length_penalty: float) -> str:
    """The first hypothesis with the highest combined score."""
    combined = [
        _combined(float(h["score"]), lm, len(h["text"].split()), lm_weight, length_penalty)
        for h, lm in zip(record["hypotheses"], lm_row, strict=True)
    ]
    return record["hypotheses"][max(range(len(combined)), key=lambda j: (combined[j], -j))]["text"]


# ---------------------------------------------------------------------------------------------- metrics


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """Corpus BLEU of sacrebleu (one reference per hypothesis), 0-100."""
    import sacrebleu

    return float(sacrebleu.corpus_bleu(hypotheses, [references]).score)


def negative_wer(hypotheses: list[str], references: list[str]) -> float:
    """−WER of jiwer (so that higher is better, as `tune_weights` maximises)."""
    import jiwer

    return -float(jiwer.wer(references, hypotheses))
