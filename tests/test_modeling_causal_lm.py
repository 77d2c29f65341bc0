"""HeadsForCausalLM: wrapping, save/load, Auto classes, export without hf_heads, generate, accumulation."""

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from hf_heads import HeadsConfig, HeadsForCausalLM

MARGIN_HEAD = {"family": "margin", "margin": "arc", "m": 0.1, "word_norm": "log-unigram", "context_norm": "max-norm"}


def _batch(vocab=61, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (3, 9), generator=g)


def test_softmax_head_reproduces_base_model(tiny_base):
    path, base = tiny_base
    model = HeadsForCausalLM.from_base(path, head={"family": "softmax"}).eval()
    x = _batch()
    torch.testing.assert_close(model(x).logits, base(x).logits, rtol=0, atol=1e-6)
    torch.testing.assert_close(model(x, labels=x).loss, base(x, labels=x).loss, rtol=1e-6, atol=1e-6)
    assert model.config.tie_word_embeddings == base.config.tie_word_embeddings
    greedy = dict(max_new_tokens=6, do_sample=False)
    assert torch.equal(model.generate(x[:1, :3], **greedy), base.generate(x[:1, :3], **greedy))


def test_save_load_round_trip_bit_exact(tiny_base, tmp_path):
    path, _ = tiny_base
    counts = torch.arange(61.0)
    model = HeadsForCausalLM.from_base(path, head=MARGIN_HEAD, word_counts=counts)
    model.train()
    x = _batch()
    out = model(x, labels=x)
    assert out.logits is None and torch.isfinite(out.loss)
    out.loss.backward()
    model.save_pretrained(tmp_path / "saved")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert isinstance(loaded, HeadsForCausalLM) and loaded.config.head == model.config.head
    sd, sd2 = model.state_dict(), loaded.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    model.eval(), loaded.eval()
    assert torch.equal(model(x).logits, loaded(x).logits)
    assert float(loaded.head.context_norm_running) > 0  # max-norm's running value survived


def test_generate_greedy_sample_beam(tiny_base):
    path, _ = tiny_base
    model = HeadsForCausalLM.from_base(path, head={"family": "margin", "margin": "cos", "m": 0.2}).eval()
    prompt = _batch()[:2, :4]
    assert model.generate(prompt, max_new_tokens=5, do_sample=False).shape == (2, 9)
    torch.manual_seed(0)
    assert model.generate(prompt, max_new_tokens=5, do_sample=True, top_k=5).shape == (2, 9)
    beams = model.generate(prompt, max_new_tokens=5, num_beams=3, num_return_sequences=2, do_sample=False)
    assert beams.shape == (4, 9)


def test_margin_not_applied_at_inference(tiny_base):
    path, _ = tiny_base
    plain = HeadsForCausalLM.from_base(path, head={"family": "softmax"}).eval()
    cos = HeadsForCausalLM.from_base(path, head={"family": "margin", "margin": "cos", "m": 0.5}).eval()
    x = _batch()
    torch.testing.assert_close(cos(x).logits, plain(x).logits, rtol=1e-5, atol=1e-5)
    # eval-mode loss is the NLL of the inference distribution: no margin
    torch.testing.assert_close(cos(x, labels=x).loss, plain(x, labels=x).loss, rtol=1e-5, atol=1e-5)
    nll = torch.nn.functional.cross_entropy(cos(x).logits[:, :-1].reshape(-1, 61), x[:, 1:].reshape(-1))
    torch.testing.assert_close(cos(x, labels=x).loss, nll, rtol=1e-5, atol=1e-5)
    cos.train(), plain.train()
    for model in (cos, plain):
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    assert cos(x, labels=x).loss > plain(x, labels=x).loss  # the margin is in the training loss only


def test_gradient_accumulation_exact(tiny_base):
    path, _ = tiny_base
    torch.manual_seed(0)
    model = HeadsForCausalLM.from_base(path, head={"family": "margin", "margin": "arc", "m": 0.2})
    model.train()
    for module in model.modules():  # dropout off: compare gradients exactly
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    x = _batch()
    labels = x.clone()
    labels[0, 5:] = -100
    n_items = int((labels[:, 1:] != -100).sum())
    model.zero_grad()
    model(x, labels=labels).loss.backward()
    full = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for rows in (slice(0, 1), slice(1, 3)):
        model(x[rows], labels=labels[rows], num_items_in_batch=n_items).loss.backward()
    for a, c in zip(full, [p.grad for p in model.parameters()], strict=False):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_config_validation_at_construction_and_load(tmp_path):
    with pytest.raises(ValueError, match="head.margin='big'"):
        HeadsConfig(backbone={"model_type": "gpt2"}, head={"family": "margin", "margin": "big"})
    with pytest.raises(ValueError, match="head.family='sampledd'"):
        HeadsConfig(backbone={"model_type": "gpt2"}, head={"family": "sampledd"})
    with pytest.raises(ValueError, match="head.mm is not an option of head family 'margin'"):
        HeadsConfig(backbone={"model_type": "gpt2"}, head={"family": "margin", "mm": 1})
    with pytest.raises(ValueError, match="head.m=2.5 must be an integer"):
        HeadsConfig(backbone={"model_type": "gpt2"}, head={"family": "margin", "margin": "lsm", "m": 2.5})
    cfg = HeadsConfig(
        backbone={"model_type": "gpt2", "n_embd": 32}, head={"family": "margin", "margin": "lsm", "m": 2}
    )
    cfg.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).head == cfg.head
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["head"]["word_norm"] = "sqrt"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="head.word_norm='sqrt'"):
        AutoConfig.from_pretrained(tmp_path)


def test_counts_required_and_checked(tiny_base):
    path, _ = tiny_base
    model = HeadsForCausalLM.from_base(path, head={"family": "margin", "word_norm": "unigram"})
    x = _batch()
    with pytest.raises(ValueError, match="needs word counts"):
        model(x, labels=x)
    with pytest.raises(ValueError, match=r"word_counts has shape \(5,\), expected \(61,\)"):
        model.set_word_counts(torch.ones(5))
    with pytest.raises(ValueError, match="labels: found 99"):
        HeadsForCausalLM.from_base(path)(x, labels=torch.full_like(x, 99))


def test_all_ignored_labels_zero_loss(tiny_base):
    path, _ = tiny_base
    model = HeadsForCausalLM.from_base(path, head=MARGIN_HEAD, word_counts=torch.ones(61)).train()
    x = _batch()
    loss = model(x, labels=torch.full_like(x, -100)).loss
    loss.backward()
    assert loss.item() == 0.0
    assert all(torch.all(p.grad == 0) for p in model.parameters() if p.grad is not None)


EXPORT_CHECK = """
import sys
sys.modules["hf_heads"] = None  # hf_heads must not be importable here
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
x = torch.load(sys.argv[2])
torch.save(model(x).logits, sys.argv[3])
print(type(model).__module__)
"""


def test_export_loads_without_hf_heads(tiny_base, tmp_path):
    path, _ = tiny_base
    model = HeadsForCausalLM.from_base(path, head=MARGIN_HEAD, word_counts=torch.arange(61.0)).eval()
    out = model.export_for_hub(tmp_path / "export")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["auto_map"]["AutoModelForCausalLM"].endswith(".HeadsForCausalLM")
    x = _batch()
    torch.save(x, tmp_path / "x.pt")
    proc = subprocess.run(
        [sys.executable, "-c", EXPORT_CHECK, str(out), str(tmp_path / "x.pt"), str(tmp_path / "y.pt")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hf_heads" not in proc.stdout.split(".")[0]  # loaded from the exported code, not the package
    torch.testing.assert_close(torch.load(tmp_path / "y.pt"), model(x).logits)
