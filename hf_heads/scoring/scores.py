"""Sentence and token log-probabilities under an hf_heads model's inference distribution, for rescoring.

The score of a text is Σ_t log p(y_t | y_<t [, source]) with p the distribution the head's inference logits define,
computed by the model's own forward with its statistics recorded: one (chunk, V) block of logits at a time.

Per family: softmax, log_softmax of W h + b (with the output transform); margin (margin paper, eq. 13), the scores
without the margin of eq. 14 (max-norm heads need their running max ‖h‖); sampled (sampling paper, eqs. 2-22), the
corrected posterior, renormalised with `normalize=True` (tables 2-3) or the corrected log-score log p̃(c|x) itself with
`normalize=False` (table 4, meaningful for self-normalising criteria); sparse (sparse-softmax paper, eq. 4), log of the
truncated distribution (-inf for a token outside the top `decode_k`, as `generate()` decodes); continuous, log_softmax
of the decoding scores (not the vMF density). `normalize=False` is refused for the other families: their raw logits
carry an arbitrary per-position offset.

Sequences: a causal LM scores `[BOS] + tokens + [EOS]` after the first token (`add_bos` / `add_eos`), a seq2seq model
`tokens + [EOS]` given the source. BOS / EOS are the tokenizer's, else the config's (a disagreement is refused). Right
padding makes a text score the same in any batch. A text longer than the model's context is refused, not truncated: a
truncated score would silently be the score of another text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import PretrainedConfig

from hf_heads.modeling.inputs import head_classes, model_head

Where = Callable[[int], str]  # index -> how an error names that text, e.g. "texts[3]" or "input.txt line 4"


@dataclass
class _Example:
    """One text to score: `inputs` (T,) fed to the (decoder of the) model, position t predicting `targets[t]`."""

    index: int
    inputs: list[int]
    targets: list[int]
    source: list[int] | None = None  # encoder input ids (seq2seq)


def token_log_probs(
    model,
    tokenizer,
    texts: Sequence[str],
    *,
    sources: Sequence[str] | None = None,
    normalize: bool = True,
    batch_size: int = 32,
    add_bos: bool = True,
    add_eos: bool = True,
    chunk_size: int | None = None,
    progress: bool = False,
    where: Where | None = None,
    source_where: Where | None = None,
) -> list[torch.Tensor]:
    """Log-probability of every scored token of each text: a list of float64 tensors (n_i,). `sources`: seq2seq only,
    one per text; `normalize`: module docstring; `chunk_size`: positions per (chunk, V) block of logits (default 2^23
    logits, at least 512 positions); `where` / `source_where`: how an error names text / source i."""
    return _score(
        model, tokenizer, texts, sources, normalize, batch_size, add_bos, add_eos, chunk_size, progress, where,
        source_where,
    )  # fmt: skip


def sentence_log_probs(model, tokenizer, texts: Sequence[str], **options) -> torch.Tensor:
    """(len(texts),) float64 sums of `token_log_probs` (whose `options` it takes); -inf where a token has
    probability 0."""
    rows = token_log_probs(model, tokenizer, texts, **options)
    return torch.stack([row.sum() for row in rows]) if rows else torch.zeros(0, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------- checks


def _task(model) -> str:
    task = getattr(model, "head_task", None)
    if task not in ("causal-lm", "seq2seq") or not hasattr(model, "head") or not hasattr(model, "backbone"):
        raise ValueError(
            f"model is a {type(model).__name__}: scoring needs an hf_heads HeadsForCausalLM or HeadsForSeq2SeqLM "
            "(load a saved one with AutoModelForCausalLM / AutoModelForSeq2SeqLM after `import hf_heads`)"
        )
    return task


def _check_normalize(head, normalize: bool) -> None:
    if not isinstance(normalize, bool):
        raise ValueError(f"normalize={normalize!r} must be True or False")
    if not normalize and not head.has_unnormalized_scores:
        raise ValueError(
            f"normalize=False: the {head.family} head has no unnormalised scores; it is the sampling paper's "
            "rescoring with the corrected scores without renormalisation (table 4), allowed for sampled heads only "
            "(softmax, margin and continuous logits are not self-normalised, a sparse head's raw logit is no "
            "probability): use normalize=True"
        )
    head.check_scorable()


def _check_texts(texts, name: str) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ValueError(f"{name} must be a list of strings, not {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{name}[{i}] is a {type(text).__name__}, not a string")
    return list(texts)


def _scorable_ids(model) -> int:
    """The token ids the model both embeds and scores: 0 <= id < this."""
    return min(head_classes(model.head), model.get_input_embeddings().num_embeddings)


def _check_vocab(tokenizer, model) -> None:
    size = _scorable_ids(model)
    if len(tokenizer) > size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model scores only {size} classes: use the model's own "
            "tokenizer (or one whose vocabulary matches it)"
        )


def _max_positions(config) -> int | None:
    """The context of a backbone (sub-)config: `max_position_embeddings` (GPT-2's `n_positions` maps to it), or
    None where positions are relative (T5) or rotary without a stated maximum."""
    value = getattr(config, "max_position_embeddings", None)
    if value is None:
        value = getattr(config, "n_positions", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def _special_id(tokenizer, model, name: str) -> int | None:
    """`bos_token_id` / `eos_token_id` of the tokenizer, else of the config; refused when both are set and differ."""
    value = getattr(tokenizer, name, None)
    config = model.config.backbone_token_id(name)
    allowed = config if isinstance(config, list | tuple) else [config]  # a list: several EOS ids (Llama 3)
    if value is not None and config is not None and value not in allowed:
        raise ValueError(
            f"the tokenizer's {name} is {value} but the model config's is {config}: the model generates with the "
            "config's, so a score with the tokenizer's would not be the model's: score with the tokenizer the model "
            "was trained with"
        )
    return value if value is not None else config


# ---------------------------------------------------------------------------------------------- encoding


def _encode(
    model,
    tokenizer,
    texts: list[str],
    sources: list[str] | None,
    add_bos: bool,
    add_eos: bool,
    where: Where,
    source_where: Where,
) -> list[_Example]:
    task = _task(model)
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    eos = [_required_id(tokenizer, model, "eos_token_id", "add_eos")] if add_eos else []
    backbone = model.config.backbone
    examples = []
    if task == "causal-lm":
        bos = [_required_id(tokenizer, model, "bos_token_id", "add_bos")] if add_bos else []
        limit = _max_positions(backbone.get_text_config(decoder=True))
        for i, (text, row) in enumerate(zip(texts, ids, strict=True)):
            _check_nonempty(text, row, where(i))
            seq = bos + list(row) + eos
            if len(seq) < 2:
                raise ValueError(
                    f"{where(i)} is a single token without BOS or EOS: nothing predicts it (use add_bos or add_eos)"
                )
            _check_length(len(seq) - 1, limit, where(i), f"{len(seq)} tokens with BOS/EOS, fed as {len(seq) - 1}")
            examples.append(_Example(i, seq[:-1], seq[1:]))
        return examples
    if not add_bos:
        raise ValueError(
            "add_bos=False: a seq2seq decoder always starts from its decoder_start_token_id (the role BOS plays "
            "for a causal LM); add_bos applies to causal LMs only"
        )
    start = model.config.backbone_token_id("decoder_start_token_id")
    if start is None:
        raise ValueError("backbone.decoder_start_token_id is not set: set it in the model's backbone config")
    src_ids = tokenizer(sources)["input_ids"]
    encoder = getattr(backbone, "encoder", None)  # an EncoderDecoderConfig (BERT2BERT) holds the encoder's config
    if not isinstance(encoder, PretrainedConfig):
        encoder = backbone.get_text_config(encoder=True)
    enc_limit = _max_positions(encoder)
    dec_limit = _max_positions(backbone.get_text_config(decoder=True))
    for i, (text, row, source, src) in enumerate(zip(texts, ids, sources, src_ids, strict=True)):
        _check_nonempty(text, row, where(i))
        _check_nonempty(source, src, source_where(i))
        target = list(row) + eos
        _check_length(len(target), dec_limit, where(i), f"{len(target)} target tokens with EOS")
        _check_length(len(src), enc_limit, source_where(i), f"{len(src)} tokens")
        examples.append(_Example(i, [start] + target[:-1], target, list(src)))
    return examples


def _required_id(tokenizer, model, name: str, flag: str) -> int:
    value = _special_id(tokenizer, model, name)
    if value is None:
        raise ValueError(f"{flag}=True, but neither the tokenizer nor the model config has {name}: pass {flag}=False")
    return value


def _check_nonempty(text: str, ids, where: str) -> None:
    if not text.strip():
        raise ValueError(f"{where} is empty: every text needs at least one token (an empty string cannot be scored)")
    if len(ids) == 0:
        raise ValueError(f"{where} ({text[:40]!r}) tokenizes to no tokens")


def _check_length(length: int, limit: int | None, where: str, what: str) -> None:
    if limit is not None and length > limit:
        raise ValueError(
            f"{where} is too long for the model: {what}, more than its context of {limit} positions "
            "(max_position_embeddings); long texts are refused, not truncated: split it"
        )


# ---------------------------------------------------------------------------------------------- scoring


def _score(
    model, tokenizer, texts, sources, normalize, batch_size, add_bos, add_eos, chunk_size, progress, where,
    source_where,
) -> list[torch.Tensor]:  # fmt: skip
    """`token_log_probs` with its arguments checked here."""
    task = _task(model)
    where = where or (lambda i: f"texts[{i}]")
    source_where = source_where or (lambda i: f"sources[{i}]")
    texts = _check_texts(texts, "texts")
    if task == "seq2seq":
        if sources is None:
            raise ValueError("sources=None: a seq2seq model scores a target given its source; pass sources=[...]")
        sources = _check_texts(sources, "sources")
        if len(sources) != len(texts):
            raise ValueError(f"sources has {len(sources)} items but texts has {len(texts)}: give one source per text")
    elif sources is not None:
        raise ValueError("sources= is for seq2seq models; a causal LM scores texts on their own")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size={chunk_size!r} must be an integer >= 1 or None")
    head = model_head(model)  # also under a PEFT adapter on the head
    _check_normalize(head, normalize)
    _check_vocab(tokenizer, model)
    if not texts:
        return []
    examples = _encode(model, tokenizer, texts, sources, add_bos, add_eos, where, source_where)
    order = sorted(examples, key=lambda e: -(len(e.inputs) + len(e.source or ())))  # less padding per batch
    out: list[torch.Tensor | None] = [None] * len(examples)
    pad = _pad_id(tokenizer, model)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), tqdm(total=len(examples), desc="scoring", unit="text", disable=not progress) as bar:
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                for example, row in zip(batch, _score_batch(model, batch, pad, normalize, chunk_size), strict=True):
                    out[example.index] = row
                bar.update(len(batch))
    finally:
        model.train(was_training)
    return out


def _pad_id(tokenizer, model) -> int:
    """Any valid id works (padded positions are masked and never scored); the tokenizer's, else the config's where it
    is a token id (some configs have -1), else 0."""
    size = _scorable_ids(model)
    for value in (getattr(tokenizer, "pad_token_id", None), model.config.backbone_token_id("pad_token_id")):
        if isinstance(value, int) and 0 <= value < size:
            return value
    return 0


def _padded(rows: list[list[int]], value: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) and attention mask (B, T)."""
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), value, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def _score_batch(model, batch: list[_Example], pad: int, normalize: bool, chunk_size: int | None):
    """The model's own forward with its statistics recorded: log p(target) per scored position, in chunks of rows."""
    device = model.get_input_embeddings().weight.device
    inputs, mask = _padded([e.inputs for e in batch], pad, device)  # (B, T)
    targets, _ = _padded([e.targets for e in batch], -100, device)  # (B, T), -100 past each row's end
    if batch[0].source is None:  # causal LM: position t predicts targets[t] (already shifted)
        args = dict(input_ids=inputs, attention_mask=mask, shift_labels=targets)
    else:
        src, src_mask = _padded([e.source for e in batch], pad, device)  # (B, S)
        args = dict(input_ids=src, attention_mask=src_mask, decoder_input_ids=inputs, decoder_attention_mask=mask)
        args["labels"] = targets
    with model.logits_skipped():
        with model.statistics_recorded(normalized=normalize, loss=False, chunk_size=chunk_size) as recorded:
            model(**args, use_cache=False)
    log_p = recorded[0]["log_prob"][targets != -100].double()  # (N,) row-major over (B, T)
    return log_p.cpu().split([len(e.targets) for e in batch])
