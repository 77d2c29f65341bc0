"""Word-level tokenizers for the papers' word-level experiments, and corpus word counts.

`build_word_tokenizer`: ids 0–3 are `<unk> <pad> <s> </s>`, every other id sorted by descending corpus frequency, so
`id - 4` is the frequency rank. Log-uniform noise and log-rank norm scaling still use a rank computed from counts
(`frequency_rank`), never the id, so they also work for Hub subword vocabularies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<unk>", "<pad>", "<s>", "</s>")


def build_word_tokenizer(
    texts: Iterable[str],
    *,
    vocab_size: int | None = None,
    min_frequency: int = 1,
    lowercase: bool = True,
    add_eos: bool = True,
) -> PreTrainedTokenizerFast:
    """Word-level tokenizer with the vocabulary sorted by descending frequency (ties alphabetically).

    Text is NFKC-normalised, lowercased with `lowercase`, and split on whitespace and punctuation (`\\w+|[^\\w\\s]+`);
    `vocab_size` counts the four special tokens. Decoding puts a space before every word, so a `text-generation`
    pipeline's `prompt + decode(new ids)` reads as words. With `add_eos` every text ends with `</s>` (as T5 / BART); a
    causal LM's tokenizer takes `add_eos=False` and its training lines end with `eos_token_id` explicitly."""
    if vocab_size is not None and vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} must exceed the {len(SPECIAL_TOKENS)} special tokens")
    if min_frequency < 1:
        raise ValueError(f"min_frequency={min_frequency} must be >= 1")
    normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Lowercase()] if lowercase else [normalizers.NFKC()]
    )
    pre = pre_tokenizers.Whitespace()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    words = sorted(
        (w for w, c in counts.items() if c >= min_frequency and w not in SPECIAL_TOKENS), key=lambda w: (-counts[w], w)
    )
    if vocab_size is not None:
        words = words[: vocab_size - len(SPECIAL_TOKENS)]
    vocab = {tok: i for i, tok in enumerate(list(SPECIAL_TOKENS) + words)}
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    if add_eos:
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", vocab["</s>"])]
        )
    tok.decoder = decoders.Replace(Regex("^"), " ")  # " word" per token: words stay apart when texts are joined
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )


def is_word_tokenizer(tokenizer) -> bool:
    """Whether `tokenizer` is a word-level tokenizer made by `build_word_tokenizer` (also after save / load)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not isinstance(backend.model, WordLevel) or len(tokenizer) < len(SPECIAL_TOKENS):
        return False
    return tokenizer.convert_ids_to_tokens(list(range(len(SPECIAL_TOKENS)))) == list(SPECIAL_TOKENS)


def _batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def label_counts(dataset, num_classes: int, column: str = "labels", ignore_index: int = -100) -> torch.Tensor:
    """(num_classes,) counts of the label ids in `dataset[column]` (ignored positions skipped)."""
    if column not in dataset.column_names:
        raise ValueError(f"the training dataset has no {column!r} column (columns: {dataset.column_names})")
    counts = torch.zeros(num_classes, dtype=torch.float64)
    for batch in dataset.iter(batch_size=1000):
        values = torch.as_tensor([v for row in batch[column] for v in (row if isinstance(row, list) else [row])])
        values = values[values != ignore_index]
        if values.numel() and (int(values.min()) < 0 or int(values.max()) >= num_classes):
            raise ValueError(f"{column}: found {int(values.max())}, allowed 0 <= label < {num_classes}")
        counts += torch.bincount(values, minlength=num_classes).double()
    return counts


def word_counts(dataset, tokenizer, column: str = "text", *, batch_size: int = 1000) -> torch.Tensor:
    """(V,) int64 counts of every token id over `dataset[column]` (e.g. `"translation.en"`), added special tokens
    included."""
    key, _, sub = column.partition(".")
    if hasattr(dataset, "column_names") and key not in dataset.column_names:
        raise ValueError(f"column={column!r}: the dataset has columns {dataset.column_names}")
    texts = (row[key][sub] if sub else row[key] for row in dataset)
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    for batch in _batches(texts, batch_size):
        ids = np.fromiter((i for seq in tokenizer(batch)["input_ids"] for i in seq), dtype=np.int64)
        counts += np.bincount(ids, minlength=len(tokenizer))
    return torch.from_numpy(counts)


def frequency_rank(counts: torch.Tensor) -> torch.Tensor:
    """(V,) rank of each id by descending count (0 = most frequent), ties in id order, as
    `hf_heads.losses.frequency_ranks`."""
    counts = torch.as_tensor(counts)
    order = torch.sort(counts, descending=True, stable=True).indices
    return torch.empty_like(order).scatter_(0, order, torch.arange(counts.numel(), device=counts.device))


def _special_affixes(tokenizer, texts: list[str] = ()) -> tuple[list[int], list[int]]:
    """The ids the tokenizer adds before and after a single sequence (e.g. [CLS] / [SEP], or </s>): found around the
    plain encoding of "hello", else of the first of `texts` that encodes to any token (a tokenizer without an unknown
    token drops the characters it lacks, and an empty text would match anywhere in the template)."""
    for probe in ("hello", *texts):
        bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
        if not bare:
            continue
        full = tokenizer(probe)["input_ids"]
        for start in range(len(full) - len(bare) + 1):
            if full[start : start + len(bare)] == bare:
                return full[:start], full[start + len(bare) :]
        raise ValueError(f"cannot locate the text inside {type(tokenizer).__name__}'s special-token template")
    raise ValueError(
        f"{type(tokenizer).__name__} encodes neither 'hello' nor any of the texts to a token, so the special tokens "
        "it adds cannot be told from the text"
    )


def encode_head_tail(tokenizer, texts: list[str], max_length: int, head_length: int | None = None) -> dict:
    """Tokenise `texts`, keeping the first `head_length` (default a quarter) and the last tokens of a text too long
    (the sparse-softmax paper's "head+tail" truncation, after Sun et al. 2019); `input_ids`, `attention_mask`, no
    padding."""
    texts = list(texts)
    prefix, suffix = _special_affixes(tokenizer, texts)
    budget = max_length - len(prefix) - len(suffix)
    if budget < 1:
        raise ValueError(f"max_length={max_length} leaves no room for text after {len(prefix) + len(suffix)} specials")
    head = budget // 4 if head_length is None else head_length
    if not 0 <= head <= budget:
        raise ValueError(f"head_length={head_length} must be between 0 and {budget} (max_length minus specials)")
    out = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        if len(ids) > budget:
            ids = ids[:head] + ids[len(ids) - (budget - head) :]
        out.append(prefix + ids + suffix)
    return {"input_ids": out, "attention_mask": [[1] * len(ids) for ids in out]}
