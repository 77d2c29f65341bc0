"""Known-answer learning tests: synthetic tasks whose answer is known, trained from scratch with a
plain torch loop (Adam, small batches drawn from a seeded generator, no Trainer) on the tiny backbones of conftest,
and scored by decoding, never by the training criterion:

- `lm`: next-token prediction of a fixed random bigram chain (every token t >= 4 has one fixed successor, a random
  permutation), tiny Llama; scored by greedy `generate()` from each of the 36 start tokens, 15 new tokens each,
  token accuracy against the chain.
- `copy` / `reverse`: a random sequence of 6 words out of 20 (seq2seq, tiny BART, labels = the sequence then EOS);
  scored by greedy `generate()` on 128 held-out random sequences, token accuracy over the 6 positions (the
  exact-sequence accuracy is asserted too where the token accuracy threshold is >= 95%).
- `copy-v40`: the copy task with 6 words out of 36 (vocabulary 40) on a larger BART (d_model 64, 2 + 2 layers,
  4 heads), AdamW lr 3e-3 for 400 steps, scored as `copy`: the scale at which K = 8 shared samples stop learning, so
  the sampled criteria run there with K = 8 (expected to fail, with the reason) and with K = 32 (`-k32`, asserted to
  learn; docs/choosing-a-head.md says what K a user needs).
- `clf`: 144-class classification whose label is 12·a + b for the two "key" tokens a, b (12 values each) at
  positions 1 and 2, followed by 2 random distractor tokens (tiny BERT, first-token pooling); scored by the argmax of
  `model(...).logits` in eval mode on 512 held-out draws (fresh distractors).

Every head family must reach a stated accuracy in the same budget: the default suite runs softmax plus one other family
per task and CE-IS with K = 32 on `copy-v40` (about a minute and a half on one core); `@pytest.mark.slow` runs the
whole family × option grid (margin lsm / arc / cos with word and context norms, every valid sampled criterion × method
with its correction, sparse with decode_k, continuous with every loss on a real GloVe 6B-50d sub-table of 24 (40 for
`copy-v40`) common English words, plain and frequency-centred). The thresholds are from measured runs with a margin
(see `EXPECTED`); a config that cannot learn a task in the budget is asserted to stay below a ceiling, with the reason.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from conftest import tiny_bert_config, tiny_enc_dec_config, tiny_llama_config

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification

# ---------------------------------------------------------------------------------------------------- the heads

MARGIN = {
    "margin-lsm": {"family": "margin", "margin": "lsm", "m": 2},
    "margin-lsm-uniform": {"family": "margin", "margin": "lsm", "m": 2, "word_norm": "uniform"},
    "margin-arc-s16": {"family": "margin", "margin": "arc", "m": 0.2, "scale": 16},
    "margin-arc-logrank-maxnorm": {
        "family": "margin",
        "margin": "arc",
        "m": 0.2,
        "word_norm": "log-rank",
        "context_norm": "max-norm",
    },
    "margin-cos-s16": {"family": "margin", "margin": "cos", "m": 0.1, "scale": 16},
    "margin-cos-logunigram-maxnorm": {
        "family": "margin",
        "margin": "cos",
        "m": 0.1,
        "word_norm": "log-unigram",
        "context_norm": "max-norm",
    },
    "margin-cos-unigram": {"family": "margin", "margin": "cos", "m": 0.1, "word_norm": "unigram"},
}
# every valid criterion x method (MSE has only `full`: the paper defines no sampled MSE); K = 8 uniform samples
SAMPLED = {
    f"sampled-{c}-{m}": {
        "family": "sampled",
        "criterion": c,
        "method": m,
        **({} if m == "full" else {"num_samples": 8, "noise": "uniform"}),
    }
    for c in ("ce", "bce", "mse")
    for m in ("full", "mcs", "is", "cps", "nce")
    if c != "mse" or m == "full"
}
# the sampling methods again with K = 32 of the 40 classes of `copy-v40` (docs/choosing-a-head.md: the K a user needs)
SAMPLED_K32 = {
    f"{name}-k32": {**head, "num_samples": 32} for name, head in SAMPLED.items() if head["method"] != "full"
}
DISCRETE = {
    "softmax": {"family": "softmax"},
    **MARGIN,
    **SAMPLED,
    "sparse": {"family": "sparse", "k": 5, "decode_k": 1},
}
CONTINUOUS = {
    f"continuous-{loss}{tag}": {"family": "continuous", "loss": loss, "embedding_dim": 50, "center_embeddings": how}
    for loss in ("vmf", "syn-margin-projection", "syn-margin-difference", "margin-random", "margin-most-informative")
    for how, tag in (("none", ""), ("frequency", "-centred"))
} | {  # the cross-entropies over s·cos(û, E_c), s = 20
    f"continuous-{loss}{tag}": {
        "family": "continuous",
        "loss": loss,
        "embedding_dim": 50,
        "center_embeddings": how,
        "logit_scale": 20.0,
    }
    for loss in ("cosine-softmax", "in-batch-softmax")
    for how, tag in (("none", ""), ("frequency", "-centred"))
}


def _counts(model, num_classes: int) -> None:
    """Word counts for the heads whose norms or noise need them: the synthetic data are uniform over the classes."""
    if model.head.options.needs_counts:
        model.set_word_counts(torch.full((num_classes,), 100.0))


# ---------------------------------------------------------------------------------------------------- the tasks

LM_V, LM_LEN = 40, 16  # tokens 4..39 form the chain; sequences of 16 tokens


def _chain_successor() -> torch.Tensor:
    """successor[t] for t in 4..V-1 (a fixed random permutation of 4..V-1); entries 0..3 unused."""
    perm = torch.randperm(LM_V - 4, generator=torch.Generator().manual_seed(0)) + 4
    return torch.cat([torch.zeros(4, dtype=torch.long), perm])


def _chain(successor: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    rows = [starts]
    for _ in range(length - 1):
        rows.append(successor[rows[-1]])
    return torch.stack(rows, 1)  # (B, length)


def train_lm(head: dict, steps: int = 150, lr: float = 1e-2, batch: int = 32) -> HeadsForCausalLM:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    successor = _chain_successor()
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config(LM_V), head=head))
    _counts(model, LM_V)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        x = _chain(successor, torch.randint(4, LM_V, (batch,), generator=g), LM_LEN)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def lm_accuracy(model: HeadsForCausalLM) -> float:
    """Greedy continuation of the chain from every start token: token accuracy of the 15 generated tokens."""
    starts = torch.arange(4, LM_V)
    reference = _chain(_chain_successor(), starts, LM_LEN)
    with torch.no_grad():
        out = model.generate(
            input_ids=starts[:, None],
            attention_mask=torch.ones(len(starts), 1, dtype=torch.long),
            max_new_tokens=LM_LEN - 1,
            min_new_tokens=LM_LEN - 1,
            do_sample=False,
            pad_token_id=1,
        )
    return float((out[:, 1:] == reference[:, 1:]).float().mean())


S2S_V, S2S_LEN = 24, 6  # tokens 4..23 are the words; 0 pad-ish, 1 pad, 2 bos, 3 eos (= BART's decoder start)
# `copy-v40`: the copy task at a larger scale, 6 words out of 36 (tokens 4..39) with a BART of d_model 64, 2 + 2
# layers, 4 heads, trained with AdamW for 400 steps (the setting where K = 8 shared samples stop learning)
WIDE_V, WIDE_STEPS = 40, 400
WIDE_BART = dict(
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=256,
    decoder_ffn_dim=256,
)


def _s2s_vocab(task: str) -> int:
    return WIDE_V if task == "copy-v40" else S2S_V


def _s2s_batch(task: str, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(4, _s2s_vocab(task), (n, S2S_LEN), generator=g)
    y = x if task.startswith("copy") else x.flip(1)
    return x, torch.cat([y, torch.full((n, 1), 3)], 1)  # labels end with EOS


@functools.lru_cache(maxsize=2)
def glove_subtable(num_words: int = S2S_V) -> tuple[tuple[str, ...], torch.Tensor]:
    """The real GloVe 6B-50d vectors of the `num_words` most frequent purely alphabetic words of two letters or more
    (the, of, to, and, in, ...; GloVe's rows are in frequency order): row i is token i. Function words are each other's
    near neighbours in GloVe, which is what nearest-neighbour decoding has to cope with."""
    from hf_heads.data.corpora import load_glove

    words, matrix = load_glove()
    rows = [i for i, w in enumerate(words[:300]) if w.isalpha() and len(w) > 1][:num_words]
    return tuple(words[i] for i in rows), torch.tensor(matrix[rows])


def train_s2s(task: str, head: dict, steps: int | None = None, lr: float = 3e-3, batch: int = 64) -> HeadsForSeq2SeqLM:
    """Adam for 200 steps on the tiny BART of conftest; `copy-v40`: AdamW for 400 steps on the larger BART."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    wide, vocab = task == "copy-v40", _s2s_vocab(task)
    sizes = WIDE_BART if wide else {}
    model = HeadsForSeq2SeqLM(
        HeadsConfig(backbone=tiny_enc_dec_config("bart", vocab_size=vocab, no_dropout=True, **sizes), head=head)
    )
    if head["family"] == "continuous":
        counts = None
        if head["center_embeddings"] == "frequency":  # the training targets' counts: 6 uniform words, then EOS
            counts = torch.bincount(
                _s2s_batch(task, 4096, torch.Generator().manual_seed(7))[1].flatten(), minlength=vocab
            )
        model.head.set_embedding_table(glove_subtable(vocab)[1], counts=counts)
    else:
        _counts(model, vocab)
    opt = (torch.optim.AdamW if wide else torch.optim.Adam)(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps or (WIDE_STEPS if wide else 200)):
        x, y = _s2s_batch(task, batch, g)
        loss = model(input_ids=x, attention_mask=torch.ones_like(x), labels=y).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def s2s_accuracy(model: HeadsForSeq2SeqLM, task: str) -> tuple[float, float]:
    """(token accuracy, exact-sequence accuracy) of greedy generate() on 128 held-out sequences."""
    x, y = _s2s_batch(task, 128, torch.Generator().manual_seed(123))
    with torch.no_grad():
        out = model.generate(
            input_ids=x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=S2S_LEN + 1,
            min_new_tokens=S2S_LEN + 1,
            do_sample=False,
        )
    hit = out[:, 1 : S2S_LEN + 1] == y[:, :S2S_LEN]  # position 0 is the decoder start token
    return float(hit.float().mean()), float(hit.all(1).float().mean())


CLF_KEYS, CLF_NOISE, CLF_V = 12, 2, 40  # key tokens 4..15, distractors 16..39; 144 classes


def _clf_batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = torch.randint(0, CLF_KEYS, (n,), generator=g), torch.randint(0, CLF_KEYS, (n,), generator=g)
    noise = torch.randint(4 + CLF_KEYS, CLF_V, (n, CLF_NOISE), generator=g)
    x = torch.cat([torch.full((n, 1), 2), (a + 4)[:, None], (b + 4)[:, None], noise], 1)  # [CLS] a b n n
    return x, a * CLF_KEYS + b


def train_clf(head: dict, steps: int = 300, lr: float = 1e-2, batch: int = 128) -> HeadsForSequenceClassification:
    """First-token pooling: BERT's tanh pooler bounds the pooled vector to [-1, 1]^32 and softmax over 144 classes
    then learns far more slowly (measured: 12% after 200 steps against 85% with `first`)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    num_classes = CLF_KEYS * CLF_KEYS
    config = HeadsConfig(
        backbone=tiny_bert_config(CLF_V, no_dropout=True), head=head, num_labels=num_classes, pooling="first"
    )
    model = HeadsForSequenceClassification(config)
    _counts(model, num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        x, y = _clf_batch(batch, g)
        loss = model(input_ids=x, attention_mask=torch.ones_like(x), labels=y).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def clf_accuracy(model: HeadsForSequenceClassification) -> float:
    """Argmax of the inference logits on 512 held-out draws."""
    x, y = _clf_batch(512, torch.Generator().manual_seed(123))
    with torch.no_grad():
        logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits
    return float((logits.argmax(-1) == y).float().mean())


def accuracy(task: str, head: dict) -> float:
    """Token accuracy (lm, copy, reverse) or accuracy (clf) of `head` trained on `task` in the fixed budget."""
    if task == "lm":
        return lm_accuracy(train_lm(head))
    if task == "clf":
        return clf_accuracy(train_clf(head))
    return s2s_accuracy(train_s2s(task, head), task)[0]


# ---------------------------------------------------------------------------------------------------- expectations

CHANCE = {
    "lm": 1 / (LM_V - 4),
    "copy": 1 / (S2S_V - 4),
    "reverse": 1 / (S2S_V - 4),
    "copy-v40": 1 / (WIDE_V - 4),
    "clf": 1 / CLF_KEYS**2,
}

# Why a config does not reach its target in the budget (measured: every one of them sits near chance, i.e. greedy
# decoding of a near-constant prediction, or well below softmax). These are failures within the budget of this test
# (150-300 Adam steps), not proofs that the criterion cannot learn the task.
FEW_NEGATIVES = (
    "K=8 shared uniform samples of {C} classes per step: each class is pushed down as a sampled negative in only "
    "~8/{C} of the steps, too few updates to learn the argmax in this budget (measured on clf: K=64 still reaches "
    "only 65% with CE-MCS and 45% with BCE-NCE)"
)
LSM = (
    "L-Softmax m=2 without the usual annealing from plain softmax (a λ-mixture): at initialisation θ ≈ 90°, where "
    "the target logit ψ(θ) ≈ −‖W‖‖h‖ is below every other class; on seq2seq and 144 classes training collapses to "
    "one class in this budget (measured; it reaches 100% on lm)"
)
CE_NCE = (
    "CE-NCE scores σ(z) ∈ (0, 1): the corrected log-posterior σ(z) + log D(c) spans less than 1 nat, so it cannot "
    "represent a peaked posterior and its gradient saturates; the argmax learns slowly or not at all"
)
SHARED_DRAW = (
    "K=8 uniform samples of 40 classes drawn once per batch and shared by its 448 positions (the paper's sec. 4.1): "
    "every position's sampled normaliser counts class c m_c times (mean K·D(c) = 0.2, relative spread "
    "sqrt((V-1)/K) = 2.2, which the batch does not reduce), so one step's gradient is 2.1-2.2 times its mean's norm "
    "away from it (drawn per position: 0.2 times); at AdamW lr 3e-3 training stays at ignoring the source (greedy "
    "2-9%, teacher-forced 14-22%: mostly the EOS). Not the criteria: a reference from the paper's equations gives the "
    "same loss and gradients (1e-7) and the same failure; K=32 learns (the -k32 rows), and so does K=8 at lr 1e-3 "
    "or drawn per position (docs/results/sampled_copy_k.md)"
)
VMF_SYN = (
    "the 20 target words are GloVe vectors of function words (mean pairwise cosine 0.78); their common direction is "
    "at cosine 0.88 (0.71-0.96) from every one of them, so predicting it leaves the synthetic-negative hinges "
    "max(0, 0.5 + u'ᵀû − uᵀû) near zero (0.10 for SMP) and lowers the vMF NLL by growing ‖û‖ along it: training "
    "stays near one nearest neighbour in this budget; the same losses on the frequency-centred table learn (the "
    "`-centred` rows), and so do the cross-entropies over s·cos(û, E_c) on this plain table (cosine-softmax, "
    "in-batch-softmax), which also push û away from the other words"
)
VMF_SYN_V40 = (
    "as on copy (VMF_SYN): the 36 target words of copy-v40 are GloVe vectors of function words too (mean pairwise "
    "cosine 0.77, their common direction at cosine 0.88 (0.69-0.96) from every one of them)"
)


def learns(floor: float, why: str = "") -> tuple[float, str, bool]:
    """Asserted accuracy >= floor (the measured value, with a margin)."""
    return floor, why, False


def fails(why: str) -> tuple[float, str, bool]:
    """An expected failure (xfail, not strict): the config does not learn the task in the budget, for the reason
    given. The test still asserts that it learns (>= 0.95), so a fix shows as XPASS and no ceiling turns red."""
    return 0.95, why, True


# (task, head) -> (lowest accuracy asserted, reason, expected to fail). Measured values (this file's seeds, one thread)
# are in the comments; a config measured at 100% is asserted >= 95%. The seq2seq values are with the tiny BART's
# init_std = d_model ** -0.5 (tests/conftest.py); with BART's default 0.02 the cross-attention started too small and
# several configs stayed at chance (e.g. vMF 4.7%, ArcFace log-rank max-norm 4.7%, BCE-MCS 4.4% on copy).
EXPECTED: dict[tuple[str, str], tuple[float, str, bool]] = {}
S2S_TASKS = ("copy", "reverse", "copy-v40")
for _task in ("lm", "copy", "reverse", "copy-v40", "clf"):
    for _name in {**DISCRETE, **(SAMPLED_K32 if _task == "copy-v40" else {})}:
        EXPECTED[_task, _name] = learns(0.95)
    if _task in S2S_TASKS:
        for _name in CONTINUOUS:
            EXPECTED[_task, _name] = learns(0.95)
EXPECTED.update(
    {
        # lm: every discrete config measured 100% except CE-NCE (77.8%; see test_ce_nce_cannot_represent_the_posterior)
        ("lm", "sampled-ce-nce"): learns(0.6, CE_NCE),
        # copy (token accuracy of greedy generate; chance 5%)
        # every other seq2seq config, the continuous ones on the plain table included, measured 100% (cosine-softmax
        # and in-batch-softmax on both tables, most-informative and random negatives centred among them)
        ("copy", "continuous-vmf"): fails(VMF_SYN),  # 10.8%
        ("copy", "continuous-syn-margin-projection"): fails(VMF_SYN),  # 13.9%
        ("copy", "continuous-syn-margin-difference"): fails(VMF_SYN),  # 5.7%
        ("copy", "continuous-margin-random"): learns(0.85, "5 random negatives per position: slower"),  # 97.4%
        ("copy", "continuous-margin-most-informative-centred"): learns(0.85),  # 96.4% (exact sequences 79.7%)
        ("copy", "margin-lsm"): fails(LSM),  # 6.1%
        ("copy", "margin-lsm-uniform"): fails(LSM),  # 4.7%
        ("copy", "sampled-ce-nce"): learns(0.2, CE_NCE),  # 32.9%
        # reverse (token accuracy; chance 5%)
        ("reverse", "continuous-vmf"): fails(VMF_SYN),  # 10.8%
        ("reverse", "continuous-syn-margin-projection"): fails(VMF_SYN),  # 23.8%
        ("reverse", "continuous-syn-margin-difference"): fails(VMF_SYN),  # 6.1%
        ("reverse", "continuous-margin-random"): learns(0.85, "5 random negatives per position: slower"),  # 97.1%
        ("reverse", "continuous-margin-most-informative-centred"): learns(0.9),  # 99.0% (exact 93.8%)
        ("reverse", "margin-lsm"): fails(LSM),  # 6.1%
        ("reverse", "margin-lsm-uniform"): fails(LSM),  # 4.7%
        ("reverse", "sampled-ce-nce"): learns(0.3, CE_NCE),  # 45.3%
        # copy-v40 (token accuracy of greedy generate after 400 AdamW steps; chance 2.8%): every other config measured
        # 99.7-100% (exact sequences >= 98.4%), the sampled criteria with K = 32 among them
        ("copy-v40", "margin-lsm"): fails(LSM),  # 2.1%
        ("copy-v40", "margin-lsm-uniform"): fails(LSM),  # 6.1%
        ("copy-v40", "sampled-ce-mcs"): fails(SHARED_DRAW),  # 5.9%
        ("copy-v40", "sampled-ce-is"): fails(SHARED_DRAW),  # 4.2%
        ("copy-v40", "sampled-ce-cps"): fails(SHARED_DRAW),  # 4.2%
        ("copy-v40", "sampled-ce-nce"): fails(SHARED_DRAW),  # 4.3%
        ("copy-v40", "sampled-bce-mcs"): fails(SHARED_DRAW),  # 5.2%
        ("copy-v40", "sampled-bce-is"): fails(SHARED_DRAW),  # 6.0%
        ("copy-v40", "sampled-bce-cps"): fails(SHARED_DRAW),  # 6.0%
        ("copy-v40", "sampled-bce-nce"): fails(SHARED_DRAW),  # 2.3%
        # CE-NCE with K = 32: 100% here, 93.7% with the draws of docs/results/sampled_copy_k.md (its bounded posterior)
        ("copy-v40", "sampled-ce-nce-k32"): learns(0.8, CE_NCE),
        ("copy-v40", "continuous-vmf"): fails(VMF_SYN_V40),  # 14.8%
        ("copy-v40", "continuous-syn-margin-projection"): fails(VMF_SYN_V40),  # 55.2%
        ("copy-v40", "continuous-syn-margin-difference"): fails(VMF_SYN_V40),  # 1.3%
        # clf (accuracy of the argmax of the logits; chance 0.7%)
        ("clf", "margin-lsm"): fails(LSM),  # 8.0%
        ("clf", "margin-lsm-uniform"): fails(LSM),  # 16.4%
        ("clf", "sampled-ce-mcs"): fails(FEW_NEGATIVES.format(C=CLF_KEYS**2)),  # 7.8%
        ("clf", "sampled-ce-is"): fails(FEW_NEGATIVES.format(C=CLF_KEYS**2)),  # 3.7%
        ("clf", "sampled-ce-cps"): fails(FEW_NEGATIVES.format(C=CLF_KEYS**2)),  # 3.7%
        ("clf", "sampled-ce-nce"): fails(CE_NCE),  # 1.6%
        ("clf", "sampled-bce-mcs"): fails(FEW_NEGATIVES.format(C=CLF_KEYS**2)),  # 8.6%
        ("clf", "sampled-bce-is"): fails(FEW_NEGATIVES.format(C=CLF_KEYS**2)),  # 1.4%
        ("clf", "sampled-bce-cps"): fails(FEW_NEGATIVES.format(C=CLF_KEYS**2)),  # 1.4%
        ("clf", "sampled-bce-nce"): fails(FEW_NEGATIVES.format(C=CLF_KEYS**2)),  # 3.9%
        # full MSE: 98.0% when first measured; over init seeds (as ArcFace log-rank max-norm below), one thread, seeds
        # 0-15: 70.9, 100 x 5, 99.6, 99.0, 100, 66.4, 100 x 4, 80.9 (seed 14), 100%; two threads, seeds 0-7: 60.0,
        # 100 x 5, 97.9, 98.8%. Floor 0.5: below every value seen.
        ("clf", "sampled-mse-full"): learns(0.5, "98-100% at most init seeds, 60-81% at some"),
        # k=5 of 144 classes: what 300 steps reach depends on float rounding, not on the code. At this file's seeds,
        # torch 2.13 on an AVX-512 Xeon: 32.6% with one thread, 50.0% with two, 47.1% with one thread and
        # MKL_ENABLE_INSTRUCTIONS=AVX2; the same 32.6% (one thread) at e791f97, the commit that recorded 62.7%, and at
        # 3f1e29e. Other init seeds (torch.manual_seed 1-7, one thread): 15.0, 26.4, 36.9, 95.3, 19.1, 30.7, 78.3%
        # (softmax: 64-100%). The 62.7% and the 46.9% measured later are not reproduced here; they fit this spread
        # (another CPU or thread count). Floor 0.2: below every value seen.
        ("clf", "sparse"): learns(0.2, "k=5 of 144 classes: 15-95% over init seeds, rounding-sensitive"),
        # ArcFace with log-rank word norms and max-norm: 100% at most init seeds, stalled at others, as rounding falls
        # (`accuracy("clf", head)` with train_clf's torch.manual_seed(0) replaced by seeds 0-15; 0 is this file's;
        # torch 2.13, AVX-512 Xeon): one thread 43.8, 100, 100, 51.6, 100 x 10, 24.2 (seed 14), 100%; two threads,
        # seeds 0-7, 98.4-100%. Floor 0.2: below every value seen.
        ("clf", "margin-arc-logrank-maxnorm"): learns(0.2, "100% at most init seeds, 24-52% at 3 of 16 (one thread)"),
    }
)


def check(task: str, name: str) -> None:
    head = {**DISCRETE, **SAMPLED_K32, **CONTINUOUS}[name]
    low, why, _ = EXPECTED[task, name]
    if task in S2S_TASKS:
        acc, exact = s2s_accuracy(train_s2s(task, head), task)
        if low >= 0.95:  # a config that learns the task generates whole sequences right
            assert exact >= 0.9, f"{task} {name}: exact-sequence accuracy {exact:.3f} < 0.9 (token {acc:.3f})"
    else:
        acc = accuracy(task, head)
    assert acc >= low, f"{task} {name}: accuracy {acc:.3f} < {low} (chance {CHANCE[task]:.3f}) {why}"


# ---------------------------------------------------------------------------------------------------- the tests

# The default suite: softmax plus one other family per task (CE-NCE on lm: test_ce_nce_cannot_represent_the_posterior)
DEFAULT = [
    ("lm", "softmax"),
    ("copy", "softmax"),
    ("copy", "continuous-syn-margin-projection-centred"),
    ("copy", "continuous-in-batch-softmax"),  # a continuous loss that learns on the plain GloVe table
    ("reverse", "continuous-cosine-softmax"),
    ("reverse", "softmax"),
    ("reverse", "margin-cos-logunigram-maxnorm"),
    # 100% at this file's init seed; over seeds 0-9 (one thread) 100% at eight, 72.7% and 64.5% at seeds 2 and 3 (as
    # CE-full of the sampled family, the same loss): a change in what the initialisation draws can move it there
    ("clf", "softmax"),
    ("clf", "margin-arc-s16"),  # 100% at seeds 0 and 2-5, 95.1% at seed 1
    # K = 32 of 40 classes; K = 8 stays near chance here (SHARED_DRAW, in the slow grid)
    ("copy-v40", "sampled-ce-is-k32"),
]
GRID = [
    pytest.param(task, name, id=f"{task}-{name}", marks=[pytest.mark.xfail(reason=why, strict=False)] if xfail else [])
    for (task, name), (_, why, xfail) in EXPECTED.items()
    if (task, name) not in DEFAULT and (task, name) != ("lm", "sampled-ce-nce")
]


@pytest.mark.parametrize(("task", "name"), DEFAULT, ids=[f"{t}-{n}" for t, n in DEFAULT])
def test_learns_known_answer(task, name):
    check(task, name)


def test_ce_nce_cannot_represent_the_posterior():
    """CE-NCE on the bigram chain (p(next | t) = 1): greedy decoding learns most of the chain, but the corrected
    posterior σ(z) + log D(c) (eq. 22) is bounded, so with uniform noise no class can get more than
    e / (e + V − 1) of the mass (6.5% for V = 40) however long it trains: the head cannot represent this posterior."""
    model = train_lm(SAMPLED["sampled-ce-nce"])
    acc = lm_accuracy(model)
    low, why, _ = EXPECTED["lm", "sampled-ce-nce"]
    assert acc >= low, f"CE-NCE greedy accuracy {acc:.3f} < {low}"  # measured 77.8%
    starts = torch.arange(4, LM_V)
    x = _chain(_chain_successor(), starts, LM_LEN)
    with torch.no_grad():
        probs = model(input_ids=x).logits.float().softmax(-1)  # (B, T, V)
    target = probs[:, :-1].gather(-1, x[:, 1:, None])  # p(true next token)
    bound = math.e / (math.e + LM_V - 1)
    assert float(probs.max()) <= bound + 1e-5, why
    assert float(target.mean()) < 0.1  # against ~1 for softmax on the same task


@pytest.mark.slow
@pytest.mark.parametrize(("task", "name"), GRID)
def test_learns_known_answer_grid(task, name):
    check(task, name)
