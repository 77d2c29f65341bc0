"""hf_heads' own calls trigger no deprecation warning of transformers (or torch): a training step through the
`HeadsTrainer`, greedy and beam `generate()` (causal, seq2seq, BERT2BERT, a recurrent-state decoder), and
`save_pretrained` -> `from_pretrained`. Upstream announces a removal this way (transformers 5.24: `past_key_values`
-> `cache`, removal in 5.40) long before it breaks; this test turns the announcement into a failure here, on
whichever release is installed (the lock in `make test`, the newest in `make test-latest`)."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from conftest import seq2seq_batch, tiny_enc_dec_config, tiny_llama_config
from transformers.utils import logging as hf_logging

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM

DEPRECATED = ("deprecat", "will be removed", "no longer supported")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _deprecations(run) -> list[str]:
    """The deprecation messages `run()` logs through transformers' logger or warns about (each once-only warning of
    transformers re-armed first)."""
    hf_logging.warning_once.cache_clear()
    hf_logging.info_once.cache_clear()
    handler, logger = _Records(), logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
    finally:
        logger.removeHandler(handler)
    texts = handler.messages + [
        f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        for w in caught
        if issubclass(w.category, DeprecationWarning | FutureWarning)
    ]
    return [t for t in texts if any(word in t.lower() for word in DEPRECATED)]


def _llama(head: dict, **backbone) -> HeadsForCausalLM:
    torch.manual_seed(0)
    return HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config(**backbone).to_dict(), head=head)).eval()


def _generate_both(model, **inputs) -> None:
    for beams in (1, 2):
        model.generate(**inputs, max_new_tokens=3, min_new_tokens=3, do_sample=False, num_beams=beams)


@pytest.mark.parametrize(
    "what",
    ["causal generate", "bart generate", "bert2bert generate", "mamba generate", "save and load", "trainer step"],
)
def test_no_deprecation_warning(what, tmp_path):
    ids = torch.randint(4, 61, (2, 6), generator=torch.Generator().manual_seed(0))
    if what == "causal generate":
        model = _llama({"family": "sparse", "k": 5})
        run = lambda: _generate_both(model, input_ids=ids, attention_mask=torch.ones_like(ids))  # noqa: E731
    elif what in ("bart generate", "bert2bert generate"):
        kind = what.split()[0]
        model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config(kind), head={"family": "softmax"})).eval()
        x, mask, _ = seq2seq_batch()
        run = lambda: _generate_both(model, input_ids=x, attention_mask=mask)  # noqa: E731
    elif what == "mamba generate":
        from transformers import MambaConfig

        config = MambaConfig(vocab_size=61, hidden_size=32, state_size=4, num_hidden_layers=2, pad_token_id=1)
        model = HeadsForCausalLM(HeadsConfig(backbone=config.to_dict())).eval()
        run = lambda: _generate_both(model, input_ids=ids)  # noqa: E731
    elif what == "save and load":
        model = _llama({"family": "margin", "margin": "arc", "m": 0.1})

        def run():
            model.save_pretrained(tmp_path)
            HeadsForCausalLM.from_pretrained(tmp_path)

    else:
        from hf_heads.training import HeadsTrainer, HeadsTrainingArguments

        model = _llama({"family": "softmax"}).train()
        data = [{"input_ids": row, "labels": row} for row in ids]
        args = HeadsTrainingArguments(
            output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, report_to=[], save_strategy="no"
        )
        run = lambda: HeadsTrainer(model=model, args=args, train_dataset=data).train()  # noqa: E731
    assert _deprecations(run) == []


def test_the_check_sees_a_deprecation():
    """The capture is live: transformers' own deprecated cache keyword, passed to a backbone directly, is caught
    (on releases that renamed it; on older ones the keyword is current and nothing is logged)."""
    from hf_heads.modeling.compat import CACHE

    assert _deprecations(lambda: warnings.warn("`old_arg` is deprecated", FutureWarning, stacklevel=1))
    model = _llama({"family": "softmax"})
    ids = torch.randint(4, 61, (1, 4))
    found = _deprecations(lambda: model.backbone(input_ids=ids, past_key_values=None, use_cache=False))
    assert bool(found) == (CACHE == "cache"), found
