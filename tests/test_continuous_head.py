"""ContinuousHead inside HeadsForSeq2SeqLM: nearest-neighbour decoding, tied decoder inputs, a frozen table, bad
tables, GloVe coverage (its losses against their equations, save / load and the export without hf_heads:
tests/test_contract.py)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import seq2seq_batch, tiny_enc_dec_config

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM
from hf_heads.data import build_word_tokenizer, embedding_table, map_uncovered
from hf_heads.heads import ContinuousHead

V, D = 50, 8


def _model(loss="vmf", tie=False, kind="bart"):
    torch.manual_seed(0)
    head = {"family": "continuous", "loss": loss, "embedding_dim": D, "tie_decoder_inputs": tie}
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config(kind), head=head))
    model.head.set_embedding_table(torch.randn(V, D, generator=torch.Generator().manual_seed(1)))
    return model


@pytest.mark.parametrize("loss", ["vmf", "syn-margin-projection"])
@pytest.mark.parametrize("tie", [False, True])
def test_greedy_decoding_is_nearest_neighbour(loss, tie):
    model = _model(loss, tie).eval()
    x, mask, y = seq2seq_batch()
    out = model(input_ids=x, attention_mask=mask, labels=y)
    assert torch.isfinite(out.loss) and out.logits.shape == (3, 5, V)
    model.train()
    model(input_ids=x, attention_mask=mask, labels=y).loss.backward()
    assert model.head.proj.weight.grad is not None and model.head.embeddings.grad is None  # E is frozen
    if tie:
        assert model.head.input_proj.weight.grad is not None
    model.eval()
    steps = model.generate(
        input_ids=x,
        attention_mask=mask,
        max_new_tokens=1,
        do_sample=False,
        min_new_tokens=1,
        output_hidden_states=True,
        return_dict_in_generate=True,
    )
    captured = []
    hook = model.head.proj.register_forward_hook(lambda module, args, out: captured.append(out))
    logits = model(input_ids=x, attention_mask=mask, decoder_input_ids=steps.sequences[:, :1]).logits
    hook.remove()
    cos = F.normalize(captured[-1].float(), dim=-1) @ model.head.embeddings.T  # (B, 1, V)
    assert torch.equal(steps.sequences[:, 1], cos[:, -1].argmax(-1))  # the nearest neighbour in cosine
    assert torch.equal(logits[:, -1].argmax(-1), steps.sequences[:, 1])


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

        HeadsForCausalLM(
            HeadsConfig(
                backbone={"model_type": "gpt2", "n_embd": 32, "n_head": 2},
                head={"family": "continuous", "embedding_dim": D},
            )
        )


@pytest.mark.parametrize("how", ["none", "mean", "frequency"])
def test_centred_tables(how):
    """center_embeddings: the unit rows minus their (count-weighted) mean, normalised again; counts are required
    by `frequency` and refused by the others."""
    head = ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D, "center_embeddings": how})
    table = torch.randn(V, D, generator=torch.Generator().manual_seed(3)) + 2.0  # a shared direction
    counts = torch.arange(V, dtype=torch.float64) ** 2
    unit = table / table.norm(dim=1, keepdim=True)
    weights = {"none": None, "mean": torch.full((V,), 1.0 / V), "frequency": counts / counts.sum()}[how]
    want = unit if weights is None else unit - (weights[:, None].float() * unit).sum(0)
    want = want / want.norm(dim=1, keepdim=True)
    if how == "frequency":
        with pytest.raises(ValueError, match="center_embeddings='frequency' weights the mean row by the training"):
            head.set_embedding_table(table)
        with pytest.raises(ValueError, match=r"counts has shape \(49,\), expected \(50,\)"):
            head.set_embedding_table(table, counts=counts[:49])
        with pytest.raises(ValueError, match="positive sum"):
            head.set_embedding_table(table, counts=torch.zeros(V))
        head.set_embedding_table(table, counts=counts)
    else:
        with pytest.raises(ValueError, match=f"counts are used only by .*this head has '{how}'"):
            head.set_embedding_table(table, counts=counts)
        head.set_embedding_table(table)
    torch.testing.assert_close(head.embeddings, want)
    shared = (head.embeddings.mean(0) if how != "frequency" else weights.float() @ head.embeddings).norm()
    assert (shared < 0.2) == (how != "none")  # the plain table keeps its shared direction (~0.9 here)


def test_glove_table_coverage_and_unk_mapping():
    tok = build_word_tokenizer(["the king spoke to the people", "qwzxv the king"])
    table, covered = embedding_table(tok)
    assert table.shape == (len(tok), 50)
    words = tok.convert_ids_to_tokens(list(range(len(tok))))
    assert covered[words.index("king")] and not covered[words.index("qwzxv")] and not covered[tok.eos_token_id]
    ids = tok("qwzxv king")["input_ids"]
    mapped = map_uncovered(ids, covered, tok.unk_token_id, {tok.eos_token_id})
    assert mapped == [tok.unk_token_id, ids[1], tok.eos_token_id]
