"""N-best rescoring with language models trained with each head: a **synthetic** ASR-style experiment.

Both language-model papers judge their heads by rescoring n-best lists (the margin paper: WER after rescoring; the
sampling paper, table 4: rescoring with and without renormalisation). No speech recogniser or n-best lists exist
offline, so the lists here are made from held-out text by a stated word-confusion model:

- sentences: World English Bible verses of 8-30 tokens from the chapters held out of LM training (`load_lm_text`:
  dev = validation chapters, test = test chapters), tokenised as the word-level tokenizer splits them (words and
  punctuation, lower case);
- each of `--nbest` hypotheses edits every word independently: substitution with probability 0.12 by one of its 5
  nearest vocabulary words in normalised Levenshtein similarity (rapidfuzz; an "acoustically close" word), deletion
  0.03, insertion 0.03 of a word drawn by unigram frequency; the reference itself is in the list with probability
  0.7; duplicates are removed;
- first-pass score = −Σ edit costs − noise: a substitution costs its dissimilarity (1 − similarity), an insertion or
  deletion 1.0, and every hypothesis (the reference too) gets Gaussian noise of std `--noise` (2.0), so the first
  pass alone is imperfect;
- WER (jiwer) on those tokens, before rescoring (first-pass best), after (lm_weight and length_penalty tuned on the
  dev lists by `hf_heads.scoring.tune_weights`), and the oracle (best hypothesis per sentence).

The LMs: a 2-layer GPT-2 (hidden 128) per head on the training chapters (`_lm_grid.blocks`, each verse ends with
</s>, so a verse is scored after </s>, the context it followed in training), word vocabulary 8,000. Scores:
`hf_heads.scoring.sentence_log_probs`; sampled heads are scored normalised and unnormalised (table 4).

Command: `python benchmarks/reproduce/reproduce_rescoring.py` (writes
docs/results/rescoring/asr_synthetic.{csv,md,png}).
With `--translation_model DIR` (an es→en model trained by `run_scripts/run_translation.py`, e.g. the recipe of
docs/results/seq2seq_recipes), a second table reranks that model's beam-8 n-best lists (all 8 beams, first-pass
score = summed log-probability) of Bible validation (dev) and test verses by BLEU (sacreBLEU on the lower-cased,
tokenised form above); the English sides of those verses are removed from the LMs' training text.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import re
import shlex
import sys
import time
from pathlib import Path

import jiwer
import torch
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein
from transformers import GPT2Config, set_seed

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.data import build_word_tokenizer, load_lm_text, load_translation, word_counts
from hf_heads.scoring import sentence_log_probs, tune_weights
from hf_heads.scoring.rescore import corpus_bleu, negative_wer, rescore_nbest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common: the shared helpers
from _lm_grid import blocks, lm_trainer  # noqa: E402

K = 512
LMS = [  # (name, head section, score normalised?)
    ("softmax", {"family": "softmax"}, (True,)),
    ("margin cos s=64 m=0.01", {"family": "margin", "margin": "cos", "m": 0.01, "scale": 64.0}, (True,)),
    (
        f"sampled CE-MCS K={K}",
        {"family": "sampled", "criterion": "ce", "method": "mcs", "num_samples": K, "noise": "log-uniform"},
        (True, False),
    ),
    (
        f"sampled BCE-NCE K={K}",
        {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": K, "noise": "log-uniform"},
        (True, False),
    ),
    ("sparse k=20", {"family": "sparse", "k": 20}, (True,)),
]
WORD = re.compile(r"\w+")


def tokens_of(tok, text: str) -> list[str]:
    """The words and punctuation the word-level tokenizer sees (lower case)."""
    return [
        w
        for w, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(
            tok.backend_tokenizer.normalizer.normalize_str(text)
        )
    ]


class Confusions:
    """The word-confusion model of the module docstring."""

    def __init__(self, vocab: list[str], freqs: list[float], rng: random.Random) -> None:
        self.vocab, self.freqs, self.rng = vocab, freqs, rng
        self.words = [w for w in vocab if WORD.fullmatch(w)]
        self._near: dict[str, list[tuple[str, float]]] = {}

    def near(self, word: str) -> list[tuple[str, float]]:
        if word not in self._near:
            found = process.extract(word, self.words, scorer=Levenshtein.normalized_similarity, limit=6)
            self._near[word] = [(w, s) for w, s, _ in found if w != word][:5]
        return self._near[word]

    def hypothesis(self, ref: list[str]) -> tuple[list[str], float]:
        out, cost = [], 0.0
        for word in ref:
            r = self.rng.random()
            if WORD.fullmatch(word) and r < 0.12 and self.near(word):
                sub, sim = self.rng.choice(self.near(word))
                out.append(sub)
                cost += 1.0 - sim
            elif r < 0.15:
                cost += 1.0  # deletion
            else:
                out.append(word)
            if self.rng.random() < 0.03:
                out.append(self.rng.choices(self.words, weights=self.freqs_words, k=1)[0])
                cost += 1.0
        return out, cost

    @property
    def freqs_words(self) -> list[float]:
        if not hasattr(self, "_fw"):
            index = {w: f for w, f in zip(self.vocab, self.freqs, strict=True)}
            self._fw = [index[w] for w in self.words]
        return self._fw


def make_nbest(
    sentences: list[list[str]], confusions: Confusions, size: int, rng: random.Random, noise: float
) -> list[dict]:
    records = []
    for i, ref in enumerate(sentences):
        hyps: dict[str, float] = {}
        if rng.random() < 0.7:
            hyps[" ".join(ref)] = -rng.gauss(0.0, noise)
        for _ in range(size * 3):
            if len(hyps) >= size:
                break
            words, cost = confusions.hypothesis(ref)
            text = " ".join(words)
            if words and text not in hyps:
                hyps[text] = -cost - rng.gauss(0.0, noise)
        records.append(
            {"id": i, "reference": " ".join(ref), "hypotheses": [{"text": t, "score": s} for t, s in hyps.items()]}
        )
    return records


def translation_nbest(model_dir: str, pairs: list[dict], tok, beams: int, batch: int = 16) -> list[dict]:
    """N-best lists of an es→en hf_heads translation model: beam search with `beams` beams returning all of them,
    first-pass score = the hypothesis' summed log-probability (length_penalty 0). Hypotheses and references are
    put in the LM tokenizer's form (lower case, words and punctuation separated by spaces) for BLEU and scoring."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    mt = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    mtok = AutoTokenizer.from_pretrained(model_dir)
    records = []
    for i in range(0, len(pairs), batch):
        chunk = pairs[i : i + batch]
        enc = mtok([p["es"] for p in chunk], return_tensors="pt", padding=True, truncation=True, max_length=128)
        with torch.no_grad():
            gen = mt.generate(
                **enc,
                num_beams=beams,
                num_return_sequences=beams,
                max_new_tokens=96,
                length_penalty=0.0,
                output_scores=True,
                return_dict_in_generate=True,
            )
        texts = mtok.batch_decode(gen.sequences, skip_special_tokens=True)
        scores = gen.sequences_scores.tolist()
        for j, pair in enumerate(chunk):
            hyps: dict[str, float] = {}
            for text, score in zip(
                texts[j * beams : (j + 1) * beams], scores[j * beams : (j + 1) * beams], strict=True
            ):
                words = " ".join(tokens_of(tok, text))
                if words and words not in hyps:
                    hyps[words] = score
            if hyps:
                records.append(
                    {
                        "id": i + j,
                        "reference": " ".join(tokens_of(tok, pair["en"])),
                        "hypotheses": [{"text": t, "score": v} for t, v in hyps.items()],
                    }
                )
        print(f"translation n-best: {len(records)} lists", flush=True)
    return records


def bleu_oracle(records: list[dict]) -> list[str]:
    import sacrebleu

    return [
        max(r["hypotheses"], key=lambda h: sacrebleu.sentence_bleu(h["text"], [r["reference"]]).score)["text"]
        for r in records
    ]


def wer_oracle(records: list[dict]) -> list[str]:
    return [min(r["hypotheses"], key=lambda h: jiwer.wer(r["reference"], h["text"]))["text"] for r in records]


def first_pass(records: list[dict]) -> list[str]:
    return [max(r["hypotheses"], key=lambda h: h["score"])["text"] for r in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--nbest", type=int, default=16)
    parser.add_argument("--noise", type=float, default=2.0, help="std of the first-pass score noise")
    parser.add_argument("--dev", type=int, default=200)
    parser.add_argument("--test", type=int, default=300)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "docs/results/rescoring"))
    parser.add_argument(
        "--translation_model", default=None, help="a trained es→en model directory: adds the translation table"
    )
    parser.add_argument("--beams", type=int, default=8)
    parser.add_argument("--mt_dev", type=int, default=150)
    parser.add_argument("--mt_test", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    text = load_lm_text("bible-web")
    mt_pairs = {}
    if args.translation_model:
        mt = load_translation("bible-es-en")
        mt_pairs = {
            "dev": [r["translation"] for r in mt["validation"].select(range(args.mt_dev))],
            "test": [r["translation"] for r in mt["test"].select(range(args.mt_test))],
        }
        held_out = {p["en"] for pairs in mt_pairs.values() for p in pairs}  # never in the LMs' training text
        text["train"] = text["train"].filter(lambda r: r["text"] not in held_out)
    tok = build_word_tokenizer(list(text["train"]["text"]), vocab_size=args.vocab)
    counts = word_counts(text["train"], tok)
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    rng = random.Random(0)
    confusions = Confusions(vocab, counts.tolist(), rng)

    def sentences(split: str, n: int) -> list[list[str]]:
        rows = [tokens_of(tok, t) for t in text[split]["text"]]
        rows = [
            r for r in rows if 8 <= len(r) <= 30 and all(tok.convert_tokens_to_ids(w) != tok.unk_token_id for w in r)
        ]
        random.Random(1).shuffle(rows)
        return rows[:n]

    dev = make_nbest(sentences("validation", args.dev), confusions, args.nbest, rng, args.noise)
    test = make_nbest(sentences("test", args.test), confusions, args.nbest, rng, args.noise)
    print(
        f"n-best: dev {len(dev)} / test {len(test)} lists, "
        f"mean size {sum(len(r['hypotheses']) for r in test) / len(test):.1f}"
    )
    base = {
        "first_pass": -negative_wer(first_pass(test), [r["reference"] for r in test]),
        "oracle": -negative_wer(wer_oracle(test), [r["reference"] for r in test]),
    }
    print(f"test WER first pass {base['first_pass']:.4f}, oracle {base['oracle']:.4f}", flush=True)
    tasks = {"asr": (dev, test, negative_wer)}
    if mt_pairs:
        mt_dev, mt_test = (translation_nbest(args.translation_model, mt_pairs[k], tok, args.beams) for k in mt_pairs)
        tasks["translation"] = (mt_dev, mt_test, corpus_bleu)
        mt_base = {
            "first_pass": corpus_bleu(first_pass(mt_test), [r["reference"] for r in mt_test]),
            "oracle": corpus_bleu(bleu_oracle(mt_test), [r["reference"] for r in mt_test]),
        }
        print(f"test BLEU first pass {mt_base['first_pass']:.2f}, oracle {mt_base['oracle']:.2f}", flush=True)

    train = blocks(text["train"], tok, args.block)
    valid = blocks(text["validation"], tok, args.block).select(range(200))
    backbone = GPT2Config(
        n_embd=128,
        n_layer=2,
        n_head=4,
        n_positions=args.block,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,  # not GPT-2's 50256
    )
    scorer_tok = build_word_tokenizer(list(text["train"]["text"]), vocab_size=args.vocab)
    scorer_tok.bos_token = scorer_tok.eos_token  # each verse followed </s> in training
    lm_weights = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0]
    penalties = [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0]
    rows = []
    for name, head, normalizations in LMS:
        set_seed(0)
        model = HeadsForCausalLM(HeadsConfig(backbone=backbone.to_dict(), head=head))
        model.set_word_counts(counts)
        trainer = lm_trainer(model, train, valid, out=out / "tmp", steps=args.steps, batch=args.batch, lr=args.lr)
        start = time.perf_counter()
        trainer.train()
        minutes = (time.perf_counter() - start) / 60
        eval_loss = trainer.evaluate()["eval_loss"]
        model.eval()
        for normalize in normalizations:
            for task, (task_dev, task_test, metric) in tasks.items():
                scores = {}
                for split, records in (("dev", task_dev), ("test", task_test)):
                    texts = [h["text"] for r in records for h in r["hypotheses"]]
                    flat = sentence_log_probs(model, scorer_tok, texts, normalize=normalize, batch_size=64).tolist()
                    it = iter(flat)
                    scores[split] = [[next(it) for _ in r["hypotheses"]] for r in records]
                tuned = tune_weights(
                    task_dev, scores["dev"], metric=metric, lm_weights=lm_weights, length_penalties=penalties
                )
                reranked = rescore_nbest(
                    task_test, scores["test"], lm_weight=tuned.lm_weight, length_penalty=tuned.length_penalty
                )
                best = [r["hypotheses"][0]["text"] for r in reranked]
                value = metric(best, [r["reference"] for r in task_test])
                row = {
                    "task": task,
                    "lm": name,
                    "normalized": normalize,
                    "valid_perplexity": math.exp(eval_loss) if head["family"] != "sparse" else float("nan"),
                    "lm_weight": tuned.lm_weight,
                    "length_penalty": tuned.length_penalty,
                    "dev": abs(tuned.metric),
                    "test_rescored": abs(value),
                    "train_minutes": minutes,
                }
                rows.append(row)
                print(row, flush=True)

    for task, (_, task_test, _) in tasks.items():
        task_rows = [r for r in rows if r["task"] == task]
        task_base = base if task == "asr" else mt_base
        write_table(out, task, task_rows, task_base, len(task_test), args)
        plot(task_rows, task_base, out / f"{TABLES[task][0]}.png", TABLES[task][1])


TABLES = {  # task -> (file stem, metric name)
    "asr": ("asr_synthetic", "WER (%)"),
    "translation": ("translation_bible_es_en", "BLEU"),
}


def write_table(out: Path, task: str, rows: list[dict], base: dict, size: int, args) -> None:
    stem, metric = TABLES[task]
    with open(out / f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) + ["test_first_pass", "test_oracle"])
        writer.writeheader()
        writer.writerows([r | {"test_first_pass": base["first_pass"], "test_oracle": base["oracle"]} for r in rows])
    show = (lambda v: f"{100 * v:.2f}") if task == "asr" else (lambda v: f"{v:.2f}")
    what = (
        "synthetic ASR-style n-best lists from a word-confusion model, not a recogniser"
        if task == "asr"
        else f"beam-{args.beams} n-best lists of the es→en model `{args.translation_model}` on Bible test verses"
    )
    command = shlex.join(["python", "benchmarks/reproduce/reproduce_rescoring.py", *sys.argv[1:]])
    lines = [
        f"N-best rescoring, {what} (`{command}`"
        + f", {args.steps} steps of batch {args.batch} × {args.block} tokens per LM; see the script's docstring). "
        f"Test: {size} lists; {metric} first pass {show(base['first_pass'])}, oracle {show(base['oracle'])}. "
        "lm_weight and length_penalty tuned on the dev lists.",
        "",
        f"| LM | scores | valid ppl | lm_weight | length_penalty | dev {metric} | test {metric} rescored "
        "| train min |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {r['lm']} | {'normalised' if r['normalized'] else 'unnormalised'} | {r['valid_perplexity']:.1f} | "
            f"{r['lm_weight']} | {r['length_penalty']} | {show(r['dev'])} | {show(r['test_rescored'])} | "
            f"{r['train_minutes']:.1f} |"
            for r in rows
        ],
    ]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def plot(rows: list[dict], base: dict, path: Path, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["first pass"] + [f"{r['lm']}{'' if r['normalized'] else ' (unnorm.)'}" for r in rows] + ["oracle"]
    values = [base["first_pass"]] + [r["test_rescored"] for r in rows] + [base["oracle"]]
    scale = 100.0 if metric.startswith("WER") else 1.0
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(range(len(values)), [scale * v for v in values], color=["grey"] + ["C0"] * len(rows) + ["grey"])
    ax.set_yticks(range(len(values)), labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"test {metric}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
