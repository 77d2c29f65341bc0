"""ContinuousHead inside HeadsForSeq2SeqLM: losses against the functions, nearest-neighbour decoding, the
embedding table saved with the weights, tied decoder inputs, export without hf_heads, bad tables."""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from test_modeling_tasks import EXPORT_CHECK, _enc_dec, _seq2seq_batch

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM
from hf_heads.data import build_word_tokenizer, embedding_table, map_uncovered
from hf_heads.heads import ContinuousHead
from hf_heads.losses import syn_margin_loss, vmf_nll

V, D = 50, 8
LOSSES = ["vmf", "syn-margin-projection", "syn-margin-difference", "margin-random", "margin-most-informative"]


def _model(loss="vmf", tie=False, kind="bart"):
    torch.manual_seed(0)
    head = {"family": "continuous", "loss": loss, "embedding_dim": D, "tie_decoder_inputs": tie}
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=_enc_dec(kind), head=head))
    model.head.set_embedding_table(torch.randn(V, D, generator=torch.Generator().manual_seed(1)))
    return model


@pytest.mark.parametrize("loss", LOSSES)
def test_head_loss_is_the_loss_function_on_valid_positions(loss):
    head = _model(loss).head.train()
    g = torch.Generator().manual_seed(2)
    hidden, labels = torch.randn(3, 5, 32, generator=g), torch.randint(0, V, (3, 5), generator=g)
    labels[0, 3:] = -100
    valid = labels != -100
    pred, ids = head.proj(hidden[valid]), labels[valid]
    table = head.embeddings
    if loss == "vmf":
        expected = vmf_nll(pred, table[ids])
    else:
        torch.manual_seed(5)
        expected = syn_margin_loss(pred, table[ids], negative=head.options.negative, margin=0.5, embeddings=table,
                                   target_ids=ids, num_negatives=5)  # fmt: skip
    torch.manual_seed(5)
    ours = head.loss(hidden, labels)
    torch.testing.assert_close(ours, expected)
    torch.manual_seed(5)
    summed = head.loss(hidden, labels, num_items_in_batch=20)
    torch.testing.assert_close(summed, expected * int(valid.sum()) / 20)
    assert torch.allclose(head.embeddings.norm(dim=1), torch.ones(V))  # the table is stored normalised


@pytest.mark.parametrize("loss", ["vmf", "syn-margin-projection"])
@pytest.mark.parametrize("tie", [False, True])
def test_greedy_decoding_is_nearest_neighbour_and_survives_save_load(loss, tie, tmp_path):
    model = _model(loss, tie).eval()
    x, mask, y = _seq2seq_batch()
    out = model(input_ids=x, attention_mask=mask, labels=y)
    assert torch.isfinite(out.loss) and out.logits.shape == (3, 5, V)
    model.train()
    model(input_ids=x, attention_mask=mask, labels=y).loss.backward()
    assert model.head.proj.weight.grad is not None and model.head.embeddings.grad is None  # E is frozen
    if tie:
        assert model.head.input_proj.weight.grad is not None
    model.eval()
    steps = model.generate(input_ids=x, attention_mask=mask, max_new_tokens=1, do_sample=False, min_new_tokens=1,
                           output_hidden_states=True, return_dict_in_generate=True)  # fmt: skip
    captured = []
    hook = model.head.proj.register_forward_hook(lambda module, args, out: captured.append(out))
    logits = model(input_ids=x, attention_mask=mask, decoder_input_ids=steps.sequences[:, :1]).logits
    hook.remove()
    cos = F.normalize(captured[-1].float(), dim=-1) @ model.head.embeddings.T  # (B, 1, V)
    assert torch.equal(steps.sequences[:, 1], cos[:, -1].argmax(-1))  # the nearest neighbour in cosine
    assert torch.equal(logits[:, -1].argmax(-1), steps.sequences[:, 1])
    beams = model.generate(input_ids=x, attention_mask=mask, max_new_tokens=4, num_beams=3, do_sample=False)
    model.save_pretrained(tmp_path)
    loaded = HeadsForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.head.embeddings, model.head.embeddings)
    assert torch.equal(loaded.generate(input_ids=x, attention_mask=mask, max_new_tokens=4, num_beams=3), beams)


def test_bad_tables_and_options():
    head = ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D})
    with pytest.raises(ValueError, match="no embedding table"):
        head.loss(torch.randn(2, 32), torch.tensor([1, 2]))
    table = torch.randn(V, D)
    table[7, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN/inf in 1 rows \\(first: row 7\\)"):
        head.set_embedding_table(table)
    table[7] = 0.0
    with pytest.raises(ValueError, match="1 all-zero rows \\(first: row 7\\)"):
        head.set_embedding_table(table)
    with pytest.raises(ValueError, match="dimension 9, but head.embedding_dim=8"):
        head.set_embedding_table(torch.randn(V, 9))
    with pytest.raises(ValueError, match=r"shape \(49, 8\), expected \(50, d\)"):
        head.set_embedding_table(torch.randn(49, D))
    with pytest.raises(ValueError, match="head.loss='cosine' is not allowed"):
        ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D, "loss": "cosine"})
    with pytest.raises(ValueError, match="head.loss_margin=-0.5 must be >= 0"):
        ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D, "loss_margin": -0.5})
    with pytest.raises(ValueError, match="head.embedding_dim is not set"):
        ContinuousHead(32, V, {"family": "continuous"})
    with pytest.raises(ValueError, match="is for HeadsForSeq2SeqLM"):
        from hf_heads import HeadsForCausalLM

        HeadsForCausalLM(HeadsConfig(backbone={"model_type": "gpt2", "n_embd": 32, "n_head": 2},
                                     head={"family": "continuous", "embedding_dim": D}))  # fmt: skip


def test_glove_table_coverage_and_unk_mapping():
    tok = build_word_tokenizer(["the king spoke to the people", "qwzxv the king"])
    table, covered = embedding_table(tok)
    assert table.shape == (len(tok), 50)
    words = tok.convert_ids_to_tokens(list(range(len(tok))))
    assert covered[words.index("king")] and not covered[words.index("qwzxv")] and not covered[tok.eos_token_id]
    ids = tok("qwzxv king")["input_ids"]
    mapped = map_uncovered(ids, covered, tok.unk_token_id, {tok.eos_token_id})
    assert mapped == [tok.unk_token_id, ids[1], tok.eos_token_id]


def test_export_of_a_continuous_model_loads_without_hf_heads(tmp_path):
    model = _model("syn-margin-projection", tie=True).eval()
    out = model.export_for_hub(tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["head"]["family"] == "continuous"
    x = _seq2seq_batch()[0]
    torch.save(x, tmp_path / "x.pt")
    proc = subprocess.run(
        [sys.executable, "-c", EXPORT_CHECK, str(out), str(tmp_path / "x.pt"), str(tmp_path / "y.pt"),
         "AutoModelForSeq2SeqLM"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    torch.testing.assert_close(torch.load(tmp_path / "y.pt"), model.generate(x, max_new_tokens=4, num_beams=2))
