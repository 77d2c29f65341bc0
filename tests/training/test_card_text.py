"""A model card is exactly the committed one, word for word, for one model of each task class.

The cards of tests/fixtures/cards/ were written by `write_model_card` and read through: after a change to the card's
wording, its template or a head's description, rewrite them with `HF_HEADS_REWRITE_CARDS=1 pytest
tests/training/test_card_text.py` and read the diff before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_cards import causal_lm, classifier, seq2seq

from hf_heads.training import write_model_card

CARDS = Path(__file__).resolve().parents[1] / "fixtures" / "cards"
ARGS = SimpleNamespace(
    learning_rate=3e-4,
    per_device_train_batch_size=8,
    gradient_accumulation_steps=2,
    max_steps=20,
    num_train_epochs=3.0,
    warmup_steps=0,
    weight_decay=0.01,
    lr_scheduler_type=SimpleNamespace(value="linear"),  # an enum, as TrainingArguments holds it
    seed=42,
    logging_steps=5,
)
CASES = {
    "causal-lm-margin": (
        lambda: causal_lm(
            {"family": "margin", "margin": "arc", "m": 0.1, "word_norm": "log-unigram", "context_norm": "max-norm"}
        ),
        dict(dataset="wikitext", task=None, base_model="HuggingFaceTB/SmolLM2-135M", built_from_config=False),
        {
            "train_loss": 4.25,
            "train_runtime": 12.5,
            "eval_loss": 3.5,
            "eval_perplexity": 33.115452,
            "eval_accuracy": 0.41234,
            "eval_samples": 64,
            "epoch": 3.0,
            "predict_perplexity": float("inf"),
            "eval_note": "a text | with a bar",
            "eval_resumed": True,
            "perplexity": 33.115452,  # run_clm.py adds exp(eval_loss) without a prefix
        },
    ),
    "seq2seq-continuous": (
        lambda: seq2seq({"family": "continuous", "loss": "vmf", "embedding_dim": 8}),
        dict(
            dataset="opus_books",
            task=("translation", "Translation de→en"),
            base_model="tiny-bart",
            built_from_config=True,
        ),
        {
            "train_loss": 1.75,
            "eval_loss": 0.875,
            "eval_bleu": 12.3456,
            "eval_rougeL": 0.33333,
            "eval_gen_len": 11.5,
            "predict_bleu": 10.0,
            "predict_rouge1": 0.5,
        },
    ),
    "classification-sampled": (
        lambda: classifier({"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 1}),
        dict(dataset="sst2", task=None, base_model=None, built_from_config=False),
        {"train_loss": 0.69, "eval_loss": 0.5, "eval_accuracy": 0.875, "eval_f1": 0.8, "eval_perplexity": 1.6487},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_model_card_is_word_for_word_the_committed_one(tmp_path, case):
    build, where, metrics = CASES[case]
    path = write_model_card(
        tmp_path / case,
        model=build(),
        metrics=metrics,
        training_args=ARGS,
        plots=[str(tmp_path / "loss_curves.png")],
        repo_id=f"someone/{case}",
        **where,
    )
    text = path.read_text(encoding="utf-8")
    expected = CARDS / f"{case}.md"
    if os.environ.get("HF_HEADS_REWRITE_CARDS") == "1":
        expected.write_text(text, encoding="utf-8")
    assert text == expected.read_text(encoding="utf-8")
