"""ContinuousHead inside HeadsForSeq2SeqLM: nearest-neighbour decoding, tied decoder inputs, a frozen table, bad
tables, GloVe coverage (its losses against their equations, save / load and the export without hf_heads:
tests/heads/test_contract.py)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import seq2seq_batch, tiny_enc_dec_config

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM
from hf_heads.data import build_word_tokenizer, embedding_table, map_uncovered
from hf_heads.heads import ContinuousHead, head_dict, head_options
from hf_heads.heads.continuous import OUTPUT_VOCABULARIES
from hf_heads.heads.options import ReferenceBatch

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
        head = {"family": "continuous", "embedding_dim": D, "loss": "syn-margin-projection", "loss_margin": -0.5}
        ContinuousHead(32, V, head)
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


def test_a_frequency_centred_heads_loss_and_logits_are_its_familys_reference():
    """center_embeddings='frequency': the training loss and the inference logits are the family's reference given the
    same table and counts, whose count-weighted centre differs from the plain mean."""
    section = {"family": "continuous", "embedding_dim": D, "loss": "cosine-softmax", "center_embeddings": "frequency"}
    head = ContinuousHead(32, V, section)
    g = torch.Generator().manual_seed(4)
    table = torch.randn(V, D, generator=g) + 2.0  # a shared direction
    counts = torch.arange(V, dtype=torch.float64) ** 2
    head.set_embedding_table(table, counts=counts)
    hidden, labels = torch.randn(6, 32, generator=g), torch.tensor([4, 9, 9, 0, 49, 17])
    params = {name: p.detach().double() for name, p in head.named_parameters()}
    params.update({name: b if b.dtype == torch.bool else b.double() for name, b in head.named_buffers()})
    batch = ReferenceBatch(hidden.double(), labels, params, True, counts=counts, table=table.double())
    rows, logits = head.options.reference(batch)
    with torch.no_grad():
        torch.testing.assert_close(head.loss(hidden, labels).double(), rows.mean(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(head.eval().logits(hidden).double(), logits, rtol=1e-5, atol=1e-5)


def test_center_embeddings_help_says_what_it_subtracts_and_names_each_choice():
    """`--center_embeddings` in `--help`: a sentence saying what is subtracted, then every value the option takes."""
    from transformers import HfArgumentParser

    from hf_heads.heads.continuous import CENTERINGS
    from hf_heads.training import HeadsTrainingArguments

    parser = HfArgumentParser(HeadsTrainingArguments)
    (action,) = [a for a in parser._actions if "--center_embeddings" in a.option_strings]
    assert action.help.startswith("Subtract the table's mean unit row before normalising (not in the papers): ")
    assert f"{', '.join(CENTERINGS[:-1])}, or {CENTERINGS[-1]} (" in action.help


def test_glove_table_coverage_and_unk_mapping():
    tok = build_word_tokenizer(["the king spoke to the people", "qwzxv the king"])
    table, covered = embedding_table(tok)
    assert table.shape == (len(tok), 50)
    words = tok.convert_ids_to_tokens(list(range(len(tok))))
    assert covered[words.index("king")] and not covered[words.index("qwzxv")] and not covered[tok.eos_token_id]
    ids = tok("qwzxv king")["input_ids"]
    mapped = map_uncovered(ids, covered, tok.unk_token_id, {tok.eos_token_id})
    assert mapped == [tok.unk_token_id, ids[1], tok.eos_token_id]


# ---------------------------------------------------------------- output vocabulary, learned scale, tables, references


def _options_model(**options):
    torch.manual_seed(0)
    head = {"family": "continuous", "embedding_dim": D, **options}
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart"), head=head))
    model.head.set_embedding_table(torch.randn(V, D, generator=torch.Generator().manual_seed(1)))
    return model


@pytest.mark.parametrize("loss", ["cosine-softmax", "in-batch-softmax", "vmf"])
def test_output_vocabulary_restricts_decoding_and_is_saved(loss, tmp_path):
    model = _options_model(loss=loss, output_vocabulary="targets")
    vocab = torch.tensor([3, *range(10, 30)])  # </s> and 20 words
    model.head.set_output_vocabulary(vocab)
    x, mask, y = seq2seq_batch()
    y = torch.where(y == -100, -100, vocab[1:][y % 20])
    model.train()
    model(input_ids=x, attention_mask=mask, labels=y).loss.backward()
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=x, attention_mask=mask, labels=y).logits
        outside = torch.ones(V, dtype=torch.bool).index_fill_(0, vocab, False)
        assert torch.isinf(logits[..., outside]).all() and torch.isfinite(logits[..., vocab]).all()
        for beams in (1, 3):
            out = model.generate(input_ids=x, attention_mask=mask, max_new_tokens=5, num_beams=beams, do_sample=False)
            assert torch.isin(out[:, 1:], torch.cat([vocab, torch.tensor([1])])).all()  # words, </s>, then padding
    model.save_pretrained(tmp_path)
    loaded = HeadsForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.head.output_mask, model.head.output_mask)
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=x, attention_mask=mask, labels=y).logits, logits)


@pytest.mark.parametrize("vocabulary", OUTPUT_VOCABULARIES)
def test_cosine_softmax_decoding_logits_are_its_training_logits(vocabulary):
    """cosine-softmax: softmax of the inference logits is the distribution the loss is the NLL of (with the target-side
    output vocabulary, a softmax over its words alone)."""
    model = _options_model(loss="cosine-softmax", logit_scale=15.0, output_vocabulary=vocabulary).eval()
    labels = torch.tensor([4, 9, 9, 0, 49, 17])
    if vocabulary == "targets":
        model.head.set_output_vocabulary(torch.cat([labels, torch.arange(20, 30)]))
    hidden = torch.randn(6, 32)
    with torch.no_grad():
        nll = F.cross_entropy(model.head.logits(hidden), labels)
        torch.testing.assert_close(model.head.loss(hidden, labels), nll)


def test_learned_scale_trains_and_decodes_with_its_value(tmp_path):
    model = _options_model(loss="in-batch-softmax", learn_logit_scale=True, logit_scale=20.0)
    head = model.head
    assert head.logit_scale.item() == pytest.approx(20.0)
    hidden, labels = torch.randn(8, 32), torch.randint(0, V, (8,))
    head.train()
    head.loss(hidden, labels).backward()
    assert head.log_logit_scale.grad is not None and head.log_logit_scale.grad != 0
    with torch.no_grad():
        head.log_logit_scale.fill_(torch.log(torch.tensor(5.0)))
        cos = F.normalize(head.proj(hidden), dim=-1) @ head.embeddings.T
        torch.testing.assert_close(head.logits(hidden), 5.0 * cos)
        head.log_logit_scale.fill_(10.0)  # e^10: clamped at 100
        torch.testing.assert_close(head.logits(hidden), 100.0 * cos)
    assert head.diagnostics()["head/logit_scale"] == pytest.approx(100.0)


def test_diagnostics_are_empty_after_a_training_batch_without_targets():
    """A last batch whose labels are all ignored has nothing to measure: no diagnostics, not the scale alone."""
    head = _options_model(loss="in-batch-softmax", learn_logit_scale=True).head.train()
    head.loss(torch.randn(4, 32), torch.randint(0, V, (4,)))
    assert {"head/accuracy@1", "head/pred_norm_mean", "head/logit_scale"} <= set(head.diagnostics())
    head.loss(torch.randn(4, 32), torch.full((4,), -100))
    assert head.diagnostics() == {}


def test_projection_layer_norm_and_released_vmf_form():
    model = _options_model(loss="vmf", vmf_form="released", projection_layer_norm=True)
    head = model.head
    hidden = torch.randn(5, 32)
    with torch.no_grad():
        head.proj_norm.weight.fill_(2.0)
        expected = F.layer_norm(head.proj(hidden), (D,), head.proj_norm.weight, head.proj_norm.bias)
        torch.testing.assert_close(head.predict(hidden), expected)
    head.train()
    head.loss(hidden, torch.tensor([1, 2, 3, 4, 5])).backward()
    assert head.proj_norm.weight.grad is not None


def test_a_losss_parameters_are_its_own_and_the_flat_options_are_read_into_them():
    """`"loss": {"type": ..., **parameters}` (or `--loss name:p=v`) is how a config writes a continuous loss; the
    older flat options (`loss_margin`, `num_negatives`, `vmf_lambda1`, `vmf_lambda2`, `vmf_form`, `num_sampled`)
    become the loss's parameters, and those the loss has no parameter for are dropped at the value every older
    config stored (they never had an effect), refused at any other."""

    def section(**options):
        return head_dict({"family": "continuous", "embedding_dim": D, **options})

    nested = section(loss={"type": "margin-random", "margin": 0.3, "num_negatives": 3})
    assert nested["loss"] == {"type": "margin-random", "margin": 0.3, "num_negatives": 3}
    assert section(loss="margin-random:margin=0.3,num_negatives=3") == nested  # a flag's short form
    assert section(loss="margin-random", loss_margin=0.3, num_negatives=3, vmf_lambda1=0.0, vmf_form="nll") == nested
    assert "loss_margin" not in nested and "num_sampled" not in nested  # no flat keys in what a config stores
    assert section(loss="vmf", vmf_form="released")["loss"] == {"type": "vmf", "lambda1": 0.0, "lambda2": 1.0,
                                                                "form": "released"}  # fmt: skip
    vmf = {"type": "vmf", "lambda1": 0.1, "lambda2": 0.5, "form": "nll"}
    assert section(loss="vmf", vmf_lambda1=0.1, vmf_lambda2=0.5)["loss"] == vmf
    with pytest.raises(ValueError, match=r"head.loss_margin=0.7 is for loss in \('syn-margin-projection'"):
        section(loss="vmf", loss_margin=0.7)  # (ignored before: a value without effect is refused)
    with pytest.raises(ValueError, match="head.num_negatives=3 is given twice, as num_negatives and as loss.num_n"):
        section(loss={"type": "margin-random", "num_negatives": 4}, num_negatives=3)
    with pytest.raises(ValueError, match=r"^head\.loss\.form='released' has no λ1 / λ2 terms: leave lambda1=0 and"):
        section(loss="vmf:form=released", vmf_lambda1=0.1)  # a flat option at odds with the loss's own parameter
    with pytest.raises(ValueError, match="head.loss.lambda2=0 must be > 0"):
        section(loss={"type": "vmf", "lambda2": 0})
    with pytest.raises(
        ValueError, match="loss.margin=0.3 is not a parameter of continuous_loss 'vmf'; allowed: lambda1,"
    ):
        section(loss={"type": "vmf", "margin": 0.3})
    head = ContinuousHead(32, V, section(loss="in-batch-softmax:num_sampled=4"))
    assert head.options.component("loss").num_sampled == 4


@pytest.mark.parametrize(
    "loss, message",
    [
        (
            "nonesuch",
            "head.loss='nonesuch' is not allowed; allowed: 'vmf', 'syn-margin-projection', 'syn-margin-difference', "
            "'margin-random', 'margin-most-informative', 'cosine-softmax', 'in-batch-softmax'",
        ),
        ({"type": "margin-random", "margin": -1.0}, "head.loss.margin=-1.0 must be >= 0"),
        (
            {"type": "margin-random", "bogus": 1},
            "head.loss.bogus=1 is not a parameter of continuous_loss 'margin-random'; allowed: margin, num_negatives",
        ),
        (
            "cosine-softmax:logit_scale=5.0",
            "head.loss.logit_scale=5.0 is not a parameter of continuous_loss 'cosine-softmax'; allowed: none",
        ),
    ],
    ids=["unknown-loss", "bad-parameter", "unknown-parameter", "parameter-of-a-loss-without-any"],
)
@pytest.mark.parametrize("flat", [{}, {"num_negatives": 3}, {"loss_margin": 0.3}], ids=["nested", "flat", "flat-2"])
def test_a_bad_loss_is_refused_the_same_beside_flat_options(loss, message, flat):
    """A section of the older flat form (`num_negatives`, `loss_margin` beside `loss`) refuses a bad loss with the
    message of the nested form: it names the head's `loss` option (and the loss's parameter)."""
    with pytest.raises(ValueError) as raised:
        head_dict({"family": "continuous", "embedding_dim": D, "loss": loss, **flat})
    assert str(raised.value) == message


@pytest.mark.parametrize(
    "options, message",
    [
        ({"loss": "vmf", "num_sampled": 4}, "head.num_sampled=4 is for loss='in-batch-softmax'"),
        ({"loss": "vmf", "learn_logit_scale": True}, "head.learn_logit_scale=True is for loss in"),
        ({"loss": "syn-margin-projection", "vmf_form": "released"}, "head.vmf_form='released' is for loss='vmf'"),
        ({"loss": "vmf", "vmf_form": "released", "vmf_lambda2": 0.1}, "has no λ1 / λ2 terms"),
        ({"output_vocabulary": "source"}, "head.output_vocabulary='source' is not allowed"),
        ({"embedding_name": "fasttext"}, "head.embedding_name='fasttext' is not allowed; allowed: 'glove-6B-50d'"),
        ({"loss": "cosine-softmax", "learn_logit_scale": True, "logit_scale": 200.0}, "must be <= 100.0 when learned"),
    ],
)
def test_new_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D, **options})


def test_the_heads_label_names_its_table_unless_it_is_the_packaged_glove():
    """`describe()` (results tables, model cards, error messages): the loss, then the centring, a table other than
    the default glove-6B-50d, and a target-side output vocabulary."""
    plain = {"family": "continuous", "embedding_dim": D}
    assert head_options(plain).describe() == "continuous vmf lambda1=0.0 lambda2=1.0 form=nll"
    other = {**plain, "loss": "syn-margin-projection", "embedding_name": "runs/w2v.npz", "center_embeddings": "mean"}
    assert head_options({**other, "output_vocabulary": "targets"}).describe() == (
        "continuous syn-margin-projection margin=0.5, mean-centred table, table runs/w2v.npz, "
        "target-side output vocabulary"
    )


def test_set_output_vocabulary_checks():
    head = ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D})
    with pytest.raises(ValueError, match="set output_vocabulary='targets'"):
        head.set_output_vocabulary(torch.tensor([1, 2]))
    head = ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D, "output_vocabulary": "targets"})
    with pytest.raises(ValueError, match=r"ids must be in \[0, 50\)"):
        head.set_output_vocabulary(torch.tensor([1, 50]))
    with pytest.raises(ValueError, match="has 1 words, needs at least 2"):
        head.set_output_vocabulary(torch.tensor([4, 4]))
    with pytest.raises(ValueError, match=r"mask has shape \(3,\)"):
        head.set_output_vocabulary(torch.ones(3, dtype=torch.bool))
    head.set_output_vocabulary(torch.tensor([4, 7]))
    assert head.output_mask.sum() == 2 and head.output_mask[4] and head.output_mask[7]


def test_table_files_npz_and_word2vec_text(tmp_path):
    from hf_heads.data import load_word_vectors, save_table

    tok = build_word_tokenizer(["the king spoke to the people", "qwzxv the king"])
    words, vectors = ["king", "the", "people"], torch.randn(3, 6).numpy()
    npz = save_table(tmp_path / "t.npz", words, vectors)
    text = tmp_path / "t.vec"
    text.write_text(
        "3 6\n" + "".join(f"{w} {' '.join(map(str, v.tolist()))}\n" for w, v in zip(words, vectors, strict=True))
    )
    for path in (npz, text):
        got_words, got = load_word_vectors(str(path))
        assert got_words == words and got.shape == (3, 6)
        table, covered = embedding_table(tok, str(path))
        ids = tok.convert_tokens_to_ids(words)
        assert covered.sum() == 3 and covered[ids].all()
        torch.testing.assert_close(table[ids], torch.from_numpy(vectors), atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="does not exist"):
        load_word_vectors(str(tmp_path / "missing.npz"))
    with pytest.raises(ValueError) as err:
        load_word_vectors("fasttext-300")
    assert str(err.value) == (
        "embedding table 'fasttext-300' is not available; allowed: glove-6B-50d or a file ending in .npz, .txt, .vec"
    )


def test_train_word2vec_table_is_reproducible(tmp_path):
    from hf_heads.data import load_word_vectors, train_word2vec_table

    sentences = [["the", "king", "spoke", "to", "the", "people"], ["the", "people", "heard", "the", "king"]] * 20
    a = train_word2vec_table(sentences, tmp_path / "a.npz", dim=8, epochs=2)
    b = train_word2vec_table(sentences, tmp_path / "b.npz", dim=8, epochs=2)
    (wa, va), (wb, vb) = load_word_vectors(str(a)), load_word_vectors(str(b))
    assert wa == wb and set(wa) == {"the", "king", "spoke", "to", "people", "heard"} and va.shape == (6, 8)
    assert (va == vb).all()


def test_references_are_the_same_for_every_head():
    """Only the training labels of a continuous head map uncovered words to <unk>: the validation and test labels, and
    the references decoded from them, are a softmax run's."""
    import datasets

    from hf_heads.cli.seq2seq import DataArguments, scored_texts, tokenize_splits

    pairs = {"source": ["el rey habló", "qwzxv el pueblo"], "target": ["the king spoke .", "qwzxv the people ."]}
    raw = datasets.DatasetDict({k: datasets.Dataset.from_dict(pairs) for k in ("train", "validation", "test")})
    tok = build_word_tokenizer([*pairs["source"], *pairs["target"]], add_eos=True)
    _, covered = embedding_table(tok)
    data = DataArguments()
    softmax, continuous = tokenize_splits(raw, tok, data, None), tokenize_splits(raw, tok, data, covered)
    labels = {(k, s): [list(row) for row in d[s]["labels"]] for k, d in (("s", softmax), ("c", continuous)) for s in d}
    for split in ("validation", "test"):
        assert labels["c", split] == labels["s", split]
    assert labels["c", "train"] != labels["s", "train"]  # qwzxv -> <unk> for training only
    assert tok.unk_token_id in labels["c", "train"][1]
    decoded = [t.strip() for t in tok.batch_decode(labels["c", "test"], skip_special_tokens=True)]
    assert (
        decoded
        == scored_texts(tok, pairs["target"], data.max_target_length)
        == ["the king spoke .", "qwzxv the people ."]
    )


@pytest.mark.parametrize("loss", ["vmf", "margin-random", "syn-margin-projection", "cosine-softmax"])
def test_beam_search_scores_are_the_heads_decoding_scores(loss):
    """Beam search ranks hypotheses by the sum of log-softmax of the decoding scores: û·Eᵀ for vMF, s · cos(û, E_c)
    for the other losses (module docstring). Every returned beam's score (length_penalty 0: the plain sum) equals
    that sum recomputed from the decoder's û with the formula written out, so a change of the scores that keeps the
    argmax (û·E against s · cos: the same nearest neighbour, other beam scores) is caught, not only the greedy
    token."""
    model = _options_model(loss=loss, **({} if loss == "vmf" else {"logit_scale": 7.0})).eval()  # s != 1, ‖û‖ != 1
    x, mask, _ = seq2seq_batch()
    beams = 3
    with torch.no_grad():
        out = model.generate(
            input_ids=x, attention_mask=mask, num_beams=beams, num_return_sequences=beams, max_new_tokens=4,
            min_new_tokens=4, do_sample=False, length_penalty=0.0, return_dict_in_generate=True, output_scores=True,
        )  # fmt: skip
        captured = []
        hook = model.head.proj.register_forward_hook(lambda module, args, result: captured.append(result))
        model(
            input_ids=x.repeat_interleave(beams, 0),
            attention_mask=mask.repeat_interleave(beams, 0),
            decoder_input_ids=out.sequences[:, :-1],
        )
        hook.remove()
    u_hat = captured[-1].double()  # (B * beams, 4, d)
    table = model.head.embeddings.double()  # (V, d), unit rows
    if loss == "vmf":
        scores = u_hat @ table.T
    else:
        scores = 7.0 * F.normalize(u_hat, dim=-1) @ table.T
    tokens = out.sequences[:, 1:]  # (B * beams, 4), after the decoder start token
    want = torch.log_softmax(scores, dim=-1).gather(-1, tokens[..., None]).squeeze(-1).sum(-1)
    assert len(set(out.sequences_scores.tolist())) > 1  # the beams differ
    torch.testing.assert_close(out.sequences_scores.double(), want, rtol=1e-4, atol=1e-4)


def test_an_output_vocabulary_given_as_a_mask_is_the_one_given_as_ids():
    head = ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D, "output_vocabulary": "targets"})
    mask = torch.zeros(V, dtype=torch.bool)
    mask[[3, 9, 17]] = True
    head.set_output_vocabulary(mask)
    by_ids = ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D, "output_vocabulary": "targets"})
    by_ids.set_output_vocabulary(torch.tensor([17, 3, 9]))
    assert torch.equal(head.output_mask, mask) and torch.equal(by_ids.output_mask, mask)


def test_word_counts_are_refused_by_a_continuous_head_and_leave_it_unchanged():
    head = ContinuousHead(32, V, {"family": "continuous", "embedding_dim": D})
    before = {k: v.clone() for k, v in head.state_dict().items()}
    with pytest.raises(ValueError) as refused:
        head.set_word_counts(torch.ones(V))
    assert str(refused.value) == (
        "the continuous head uses no word counts (its targets are the embedding table's rows)"
    )
    assert all(torch.equal(v, head.state_dict()[k]) for k, v in before.items())
