"""Command line: score texts with a saved hf_heads model, or rescore n-best lists with it.

    python -m hf_heads.scoring score --model DIR --input texts.txt --output scores.jsonl \\
        [--sources src.txt] [--no-normalize] [--batch_size 32] [--per_token]
    python -m hf_heads.scoring rescore --model DIR --nbest nbest.jsonl --output reranked.jsonl \\
        --lm_weight 0.5 [--length_penalty 0] [--no-normalize] [--batch_size 32]

`--model` is a directory saved by hf_heads (a run's output_dir). `texts.txt` / `src.txt` hold one text per line.
`nbest.jsonl` holds one record per line, `{"id", "hypotheses": [{"text", "score"}], "reference"?, "source"?}`.
Log-probabilities of -inf are written as null. Bad input prints one line `error: ...` and exits with status 2
(HF_HEADS_TRACEBACK=1 for the traceback). `run_scripts/score.py` is the same command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

from hf_heads.scoring.rescore import check_record, nbest_sources, nbest_texts, rescore_nbest
from hf_heads.scoring.scores import token_log_probs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hf_heads.scoring", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    score = commands.add_parser("score", help="Log-probability of each line of a text file.")
    rescore = commands.add_parser("rescore", help="Rerank n-best lists with the model's log-probabilities.")
    for sub in (score, rescore):
        sub.add_argument("--model", required=True, help="Directory of a saved hf_heads model and its tokenizer.")
        sub.add_argument("--output", required=True, help="JSON Lines file to write.")
        sub.add_argument(
            "--no-normalize",
            "--no_normalize",
            dest="normalize",
            action="store_false",
            help="Sampled heads: corrected scores without renormalisation (sampling paper, table 4).",
        )
        sub.add_argument("--batch_size", "--batch-size", type=int, default=32, help="Texts per forward pass.")
        sub.add_argument("--no_bos", "--no-bos", dest="add_bos", action="store_false", help="Causal LM: no BOS.")
        sub.add_argument("--no_eos", "--no-eos", dest="add_eos", action="store_false", help="Do not score an EOS.")
        sub.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu).")
    score.add_argument("--input", required=True, help="Text file, one text per line.")
    score.add_argument("--sources", default=None, help="Seq2seq: source file, one source per line of --input.")
    score.add_argument("--per_token", "--per-token", action="store_true", help="Also write token log-probs.")
    rescore.add_argument("--nbest", required=True, help="n-best JSON Lines file.")
    rescore.add_argument("--lm_weight", "--lm-weight", type=float, required=True, help="Weight of the LM score.")
    rescore.add_argument(
        "--length_penalty", "--length-penalty", type=float, default=0.0, help="Bonus per word of a hypothesis."
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status (0, or 2 after a one-line error on stderr)."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "score":
            score_file(args)
        else:
            rescore_file(args)
    except (ValueError, OSError) as err:
        if os.environ.get("HF_HEADS_TRACEBACK"):
            raise
        print(f"error: {str(err).splitlines()[0] if str(err) else type(err).__name__}", file=sys.stderr)
        return 2
    return 0


def load_config(path: str):
    """The config of a saved hf_heads model (read before the weights, so bad input files fail fast)."""
    from transformers import AutoConfig

    import hf_heads  # noqa: F401  (registers HeadsConfig and the model classes with the Auto classes)

    config = AutoConfig.from_pretrained(path)
    if config.model_type != "hf_heads":
        raise ValueError(f"--model={path!r} is a {config.model_type!r} model, not a model saved by hf_heads")
    return config


def load(path: str, config, device: str | None):
    """The saved model (causal LM or seq2seq, from its config) in eval mode on `device`, and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    model = auto.from_pretrained(path, config=config)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), AutoTokenizer.from_pretrained(path)


def read_lines(path: str, flag: str) -> list[str]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            raise ValueError(f"{flag} {path} line {n} is empty: one non-empty text per line")
    return lines


def read_nbest(path: str, need_source: bool) -> tuple[list[dict], list[int]]:
    """The records of an n-best JSON Lines file (blank lines skipped) and their line numbers."""
    records, numbers = [], []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} line {n}: not valid JSON ({err.msg})") from None
        check_record(record, f"{path} line {n}", need_source=need_source)
        records.append(record)
        numbers.append(n)
    return records, numbers


def _number(value: float) -> float | None:
    """JSON has no -inf: it is written as null (probability 0)."""
    return value if math.isfinite(value) else None


def _write(path: str, rows: list[dict]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _common(args) -> dict:
    return dict(normalize=args.normalize, batch_size=args.batch_size, add_bos=args.add_bos, add_eos=args.add_eos)


def score_file(args) -> None:
    texts = read_lines(args.input, "--input")
    sources = read_lines(args.sources, "--sources") if args.sources else None
    if sources is not None and len(sources) != len(texts):
        raise ValueError(f"--sources has {len(sources)} lines but --input has {len(texts)}: one source per text")
    config = load_config(args.model)
    if config.is_encoder_decoder and sources is None:
        raise ValueError(f"--model={args.model!r} is a seq2seq model: give --sources (one source per line of --input)")
    model, tokenizer = load(args.model, config, args.device)
    rows = token_log_probs(
        model,
        tokenizer,
        texts,
        sources=sources,
        **_common(args),
        chunk_size=None,
        progress=True,
        where=lambda i: f"--input {args.input} line {i + 1}",
        source_where=lambda i: f"--sources {args.sources} line {i + 1}",
    )
    out = []
    for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
        item = {"line": i + 1, "text": text, "log_prob": _number(float(row.sum())), "num_tokens": len(row)}
        if args.per_token:
            item["token_log_probs"] = [_number(v) for v in row.tolist()]
        out.append(item)
    _write(args.output, out)


def rescore_file(args) -> None:
    config = load_config(args.model)
    seq2seq = bool(config.is_encoder_decoder)
    records, numbers = read_nbest(args.nbest, need_source=seq2seq)
    model, tokenizer = load(args.model, config, args.device)
    place = [(n, j) for n, record in zip(numbers, records, strict=True) for j in range(len(record["hypotheses"]))]
    lm = token_log_probs(
        model,
        tokenizer,
        nbest_texts(records),
        sources=nbest_sources(records) if seq2seq else None,
        **_common(args),
        chunk_size=None,
        progress=True,
        where=lambda k: f"{args.nbest} line {place[k][0]} hypotheses[{place[k][1]}].text",
        source_where=lambda k: f"{args.nbest} line {place[k][0]} source",
    )
    reranked = rescore_nbest(
        records, [float(row.sum()) for row in lm], lm_weight=args.lm_weight, length_penalty=args.length_penalty
    )
    for record in reranked:
        for hyp in record["hypotheses"]:
            hyp["lm_score"], hyp["combined"] = _number(hyp["lm_score"]), _number(hyp["combined"])
    _write(args.output, reranked)


if __name__ == "__main__":
    sys.exit(main())
