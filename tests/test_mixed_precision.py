"""Mixed precision as the Trainer runs it: autocast bf16 / fp16 (bf16 activations, fp32 weights) and a model cast
entirely to bf16, for every head family × {training step, eval loss, generate}.

The losses compute in float32 with autocast off and hand gradients back in each tensor's own dtype; inference
logits come back in the model's dtype; a training loss stays within 2% (relative) of float32 on the same batch.
"""

import pytest
import torch
from conftest import tiny_gpt2_config
from test_modeling_tasks import _enc_dec, _seq2seq_batch
from test_run_clm import SMALL, run_clm, text_files  # noqa: F401 (fixture)

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM

V = 61
CAUSAL_HEADS = {
    "softmax": {"family": "softmax"},
    "softmax-ls": {"family": "softmax", "label_smoothing": 0.1},
    "margin-arc-norms": {"family": "margin", "margin": "arc", "m": 0.2, "word_norm": "log-unigram",
                         "context_norm": "max-norm"},
    "margin-lsm": {"family": "margin", "margin": "lsm", "m": 2},
    "margin-cos-scale": {"family": "margin", "margin": "cos", "m": 0.1, "scale": 8.0},
    "sampled-ce-is": {"family": "sampled", "criterion": "ce", "method": "is", "num_samples": 10},
    "sampled-bce-nce": {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 10},
    "sparse": {"family": "sparse", "k": 5},
}  # fmt: skip
MODES = ["autocast-bf16", "autocast-fp16", "bf16-model"]
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def _causal(head: dict) -> HeadsForCausalLM:
    torch.manual_seed(0)
    config = tiny_gpt2_config(
        vocab_size=V, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )  # same masks in every dtype
    model = HeadsForCausalLM(HeadsConfig(backbone=config.to_dict(), head=head))
    with torch.no_grad():
        model.head.weight.normal_(0.0, 0.3)  # logits far from uniform, so a precision loss would show
    if model.head_needs_counts():
        model.set_word_counts(torch.arange(V, 0, -1).float() * 7)
    return model


def _continuous() -> HeadsForSeq2SeqLM:
    torch.manual_seed(0)
    head = {"family": "continuous", "loss": "vmf", "embedding_dim": 8}
    backbone = _enc_dec("bart")
    backbone.dropout = backbone.attention_dropout = backbone.activation_dropout = 0.0
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=backbone, head=head))
    model.head.set_embedding_table(torch.randn(model.head.num_classes, 8, generator=torch.Generator().manual_seed(1)))
    return model


def _context(mode: str, device: str):
    if mode == "bf16-model":
        return torch.autocast(device, enabled=False)
    return torch.autocast(device, dtype=torch.bfloat16 if mode == "autocast-bf16" else torch.float16)


def _run_matrix(model, batch: dict, prompt: dict, mode: str, device: str) -> None:
    model = model.to(device).train()
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    prompt = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in prompt.items()}
    torch.manual_seed(3)
    reference = model(**batch).loss.detach()
    if mode == "bf16-model":
        model = model.to(torch.bfloat16)
    dtype = next(model.parameters()).dtype
    with _context(mode, device):
        torch.manual_seed(3)
        loss = model(**batch).loss
        loss.backward()
        model.eval()
        with torch.no_grad():
            out = model(**batch)
            generated = model.generate(**prompt, max_new_tokens=3, do_sample=False)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert abs(loss.item() - reference.item()) <= 0.02 * abs(reference.item()), (loss.item(), reference.item())
    grads = [(p.dtype, p.grad) for p in model.parameters() if p.requires_grad and p.grad is not None]
    assert grads and all(g.dtype == d and bool(torch.isfinite(g).all()) for d, g in grads)
    assert torch.isfinite(out.loss) and out.logits.dtype == dtype
    assert generated.shape[1] >= 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", CAUSAL_HEADS)
def test_causal_lm_trains_evaluates_and_generates(family, mode, device):
    model = _causal(CAUSAL_HEADS[family])
    ids = torch.randint(4, V, (2, 12), generator=torch.Generator().manual_seed(2))
    _run_matrix(model, {"input_ids": ids, "labels": ids}, {"input_ids": ids[:, :4], "pad_token_id": 1}, mode, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_continuous_seq2seq_trains_evaluates_and_generates(mode, device):
    x, mask, y = _seq2seq_batch()
    prompt = {"input_ids": x, "attention_mask": mask}
    _run_matrix(_continuous(), {"input_ids": x, "attention_mask": mask, "labels": y}, prompt, mode, device)


def test_run_clm_bf16_on_cpu(text_files, tmp_path):  # noqa: F811 (the imported fixture)
    """`run_clm.py --bf16 --use_cpu`, the Trainer's own autocast, with a margin head (crashed before)."""
    train, valid = text_files
    out = tmp_path / "bf16"
    proc = run_clm(
        "--train_file", str(train), "--validation_file", str(valid), "--output_dir", str(out), "--do_train",
        "--do_eval", "--max_steps", "2", "--max_train_samples", "16", "--max_eval_samples", "8", "--bf16", "--use_cpu",
        "--head", "margin", "--margin", "arc", "--m", "0.1", "--save_strategy", "no", *SMALL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "model.safetensors").is_file()
