"""The README.md of a model exported to its base architecture (`export_base`) is word for word the committed one.

After a deliberate change to its wording or to a head's description, rewrite the committed cards with
`HF_HEADS_REWRITE_CARDS=1 pytest tests/modeling/test_export_card_text.py` and read the diff before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_cards import causal_lm, classifier

CARDS = Path(__file__).resolve().parents[1] / "fixtures" / "cards"
CASES = {
    "export-causal-lm-margin": lambda: causal_lm({"family": "margin", "margin": "cos", "m": 0.1}),
    "export-classification-softmax": lambda: classifier({"family": "softmax", "label_smoothing": 0.1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_exported_models_card_is_word_for_word_the_committed_one(tmp_path, case):
    model = CASES[case]()
    text = (model.export_base(tmp_path / case) / "README.md").read_text(encoding="utf-8")
    expected = CARDS / f"{case}.md"
    if os.environ.get("HF_HEADS_REWRITE_CARDS") == "1":
        expected.write_text(text, encoding="utf-8")
    assert text == expected.read_text(encoding="utf-8")
