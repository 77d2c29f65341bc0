"""Model cards, loss plots, `model-index`, saved directories and run defaults say what is true."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from transformers import AutoConfig

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification
from hf_heads.cli.runs import RunArguments, finish_run, parse_args
from hf_heads.modeling import export
from hf_heads.training import HeadsTrainer, HeadsTrainingArguments, plot_loss_curves, write_model_card
from hf_heads.training.cards import loss_labels, model_index_results

ROOT = Path(__file__).resolve().parents[2]
GPT2 = dict(n_embd=32, n_layer=2, n_head=2, vocab_size=50, n_positions=32, bos_token_id=2, eos_token_id=3)
BART = dict(
    d_model=16,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    vocab_size=50,
    max_position_embeddings=32,
    pad_token_id=1,
    bos_token_id=2,
    eos_token_id=3,
    decoder_start_token_id=2,
    forced_eos_token_id=None,
)
BERT = dict(
    hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=50, pad_token_id=1
)


def causal_lm(head: dict) -> HeadsForCausalLM:
    torch.manual_seed(0)
    return HeadsForCausalLM(HeadsConfig(backbone=AutoConfig.for_model("gpt2", **GPT2).to_dict(), head=head)).eval()


def seq2seq(head: dict) -> HeadsForSeq2SeqLM:
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=AutoConfig.for_model("bart", **BART).to_dict(), head=head))
    if head["family"] == "continuous":
        model.head.set_embedding_table(torch.randn(50, head["embedding_dim"]))
    return model.eval()


def classifier(head: dict) -> HeadsForSequenceClassification:
    torch.manual_seed(0)
    config = HeadsConfig(
        backbone=AutoConfig.for_model("bert", **BERT).to_dict(),
        head=head,
        id2label={0: "a", 1: "b"},
        label2id={"a": 0, "b": 1},
    )
    return HeadsForSequenceClassification(config).eval()


def card(tmp_path: Path, model, metrics: dict, task=None, name: str = "run") -> tuple[str, dict]:
    args = HeadsTrainingArguments(output_dir=str(tmp_path / "args"), max_steps=10, report_to="none")
    path = write_model_card(
        tmp_path / name,
        model=model,
        dataset="d",
        metrics=metrics,
        training_args=args,
        base_model="tiny-gpt2",
        built_from_config=True,
        task=task,
    )
    text = path.read_text()
    return text, yaml.safe_load(text.split("---")[1])


# ---------------------------------------------------------------- saved directories: loadable as the card says


def test_card_of_a_saved_directory_says_trust_remote_code(tmp_path):
    """A plain `save_pretrained` directory (what the Trainer writes into output_dir and checkpoints, and what
    `--push_to_hub` uploads) carries the code, so its card loads it with trust_remote_code (that it loads so where
    hf_heads is not installed, for every family and task: tests/heads/test_contract.py)."""
    model = causal_lm({"family": "margin", "margin": "arc", "m": 0.1})
    model.save_pretrained(tmp_path / "out")
    text, _ = card(tmp_path, model, {}, name="out")
    assert 'from_pretrained("out", trust_remote_code=True)' in text and "import hf_heads" in text


def test_card_of_a_directory_without_code_says_import_hf_heads(tmp_path):
    text, _ = card(tmp_path, causal_lm({"family": "softmax"}), {})  # nothing saved in tmp_path / "run"
    assert "trust_remote_code=True" not in text
    assert "pip install hf_heads" in text and "import hf_heads" in text and "does not recognize" in text


def test_model_whose_code_cannot_be_exported_is_saved_without_auto_map(tmp_path, monkeypatch, caplog):
    def broken():
        raise RuntimeError("hf_heads.x has `from hf_heads import y`")

    monkeypatch.setattr(export, "_code_sources", broken)
    model = causal_lm({"family": "softmax"})
    with caplog.at_level(logging.WARNING, logger="hf_heads.modeling.export"):
        model.save_pretrained(tmp_path / "run")
    assert "without its code" in caplog.text
    assert "auto_map" not in json.loads((tmp_path / "run" / "config.json").read_text())
    assert "trust_remote_code=True" not in card(tmp_path, model, {})[0]
    with pytest.raises(ValueError, match="cannot export the code of HeadsForCausalLM"):
        model.export_for_hub(tmp_path / "export")


def test_code_modules_follow_the_imports():
    modules = export.code_modules()
    assert {"hf_heads.modeling.base", "hf_heads.heads.discrete", "hf_heads.losses.margin"} <= set(modules)
    assert "hf_heads.modeling.export" not in modules and "hf_heads.training.cards" not in modules


def test_code_export_rewrites_import_statements_only():
    source = '"""Use it:\n\nimport hf_heads\n"""\nfrom hf_heads.losses.margin import (\n    m,\n)\n\n\ndef f():\n'
    source += "    from hf_heads.heads import make_head\n    return 'from hf_heads.x import y'\n"
    rewritten, imported = export._exportable("m", source)
    assert imported == ["hf_heads.losses.margin", "hf_heads.heads"]
    assert (
        "from .hf_heads_losses_margin import (" in rewritten
        and "    from .hf_heads_heads import make_head" in rewritten
    )
    assert "import hf_heads\n" in rewritten and "'from hf_heads.x import y'" in rewritten  # docstring, string kept
    for bad in ("import hf_heads.losses\n", "from hf_heads import HeadsConfig\n"):
        with pytest.raises(RuntimeError, match="cannot be exported"):
            export._exportable("m", bad)


def test_save_pretrained_push_to_hub_pushes_the_code(tmp_path, monkeypatch):
    model = causal_lm({"family": "softmax"})
    pushed = []

    def push_to_hub(repo_id, **kwargs):  # what PushToHubMixin.push_to_hub does: save_pretrained into a folder
        model.save_pretrained(tmp_path / "pushed")
        pushed.append((repo_id, kwargs))

    monkeypatch.setattr(model, "push_to_hub", push_to_hub)
    hub = dict(
        commit_message="m",
        create_pr=True,
        private=True,
        revision="dev",
        commit_description="d",
        tags=["hf-heads"],
        token="t",
    )
    model.save_pretrained(tmp_path / "out", push_to_hub=True, repo_id="me/lm", **hub)
    assert pushed == [("me/lm", hub)]
    assert export.has_code(tmp_path / "out") and export.has_code(tmp_path / "pushed")


# ---------------------------------------------------------------- losses labelled by what they are


@pytest.mark.parametrize(
    ("build", "head", "eval_has", "eval_lacks"),
    [
        (causal_lm, {"family": "softmax"}, "NLL of the word", "eq. 5"),
        (causal_lm, {"family": "margin", "margin": "cos", "m": 0.1}, "NLL of the word, no margin", "eq. 5"),
        (causal_lm, {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 8}, "corrected", "eq"),
        (causal_lm, {"family": "sparse", "k": 5}, "NLL of the word under the top-5 distribution, eq. 4", "eq. 5"),
        (
            seq2seq,
            {"family": "continuous", "loss": "vmf", "embedding_dim": 8},
            "vMF NLL of the target embedding",
            "NLL of the word",
        ),
        (
            seq2seq,
            {"family": "continuous", "loss": "syn-margin-projection", "embedding_dim": 8},
            "margin loss",
            "nats",
        ),
        (classifier, {"family": "margin", "margin": "arc", "m": 0.2, "scale": 8.0}, "NLL of the class", "word"),
    ],
)
def test_loss_labels_say_what_each_eval_loss_is(build, head, eval_has, eval_lacks):
    labels = loss_labels(build(head))
    assert eval_has in labels["eval_label"] and eval_lacks not in labels["eval_label"] + labels["ylabel"]
    assert ("example" if build is classifier else "token") in labels["ylabel"]


@pytest.mark.parametrize(
    "build, head, returns",
    [
        (causal_lm, {"family": "softmax"}, "the logits of a plain softmax"),
        (causal_lm, {"family": "margin", "margin": "cos", "m": 0.1}, "the model's own scores, never the margin"),
        (
            seq2seq,
            {"family": "continuous", "loss": "vmf", "embedding_dim": 8},
            "the similarity of each vocabulary embedding to the predicted embedding (nearest-neighbour decoding)",
        ),
    ],
    ids=["softmax", "margin", "continuous"],
)
def test_card_says_what_the_head_returns_at_inference(tmp_path, build, head, returns):
    text, _ = card(tmp_path, build(head), {})
    assert f"At inference the head returns {returns}, so " in text


def _drawn(monkeypatch):
    """Capture the figure `plot_loss_curves` saves."""
    import matplotlib.figure

    figures, save = [], matplotlib.figure.Figure.savefig

    def savefig(self, *args, **kwargs):
        figures.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return figures


def test_loss_curves_are_labelled_by_the_head(tmp_path, monkeypatch):
    figures = _drawn(monkeypatch)
    history = [{"step": 2, "loss": 3.0}, {"step": 4, "loss": 2.5}, {"step": 4, "eval_loss": 2.7}]
    plot_loss_curves(history, tmp_path / "c.png", "sparse head", model=causal_lm({"family": "sparse", "k": 5}))
    ax = figures[-1].axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("eq. 5" in t for t in legend) and not any("NLL, no margin" in t for t in legend)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_the_longest_loss_labels_fit_inside_the_plot(tmp_path, monkeypatch):
    """A continuous head's curves carry the longest labels (what its eval loss is, and is not): their legend stays
    inside the axes of the saved figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figures = _drawn(monkeypatch)
    history = [{"step": 2, "loss": 3.0}, {"step": 4, "loss": 2.5}, {"step": 4, "eval_loss": 2.7}]
    model = seq2seq({"family": "continuous", "loss": "vmf", "embedding_dim": 8})
    plot_loss_curves(history, tmp_path / "c.png", "continuous head", model=model)
    ax = figures[-1].axes[0]
    assert "not a word NLL" in ax.get_legend().get_texts()[1].get_text()
    renderer = FigureCanvasAgg(figures[-1]).get_renderer()  # the saved figure, closed: drawn on a canvas again
    inside, box = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert box.x0 < inside.x0 < inside.x1 < box.x1 and box.y0 < inside.y0 < inside.y1 < box.y1


def test_loss_curve_of_a_run_shorter_than_logging_steps(tmp_path, monkeypatch):
    figures = _drawn(monkeypatch)
    model = causal_lm({"family": "softmax"})
    plot_loss_curves([{"step": 3, "loss": 2.0}, {"step": 3, "eval_loss": 2.1}], tmp_path / "one.png", "t", model=model)
    lines = figures[-1].axes[0].get_lines()
    assert len(lines) == 2 and all(line.get_marker() not in (None, "None", "") for line in lines)
    plot_loss_curves([{"step": 3, "train_runtime": 1.0}], tmp_path / "none.png", "softmax head", model=model)
    ax = figures[-1].axes[0]
    assert "no loss logged" in ax.get_title()
    (note,) = ax.texts  # the empty plot says so inside its axes, where a curve would be
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figures[-1]).get_renderer()  # the saved figure, closed: drawn on a canvas again
    inside, box = note.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert note.get_text() == "no loss logged" and box.x0 < inside.x0 < inside.x1 < box.x1
    assert box.y0 < inside.y0 < inside.y1 < box.y1
    assert (tmp_path / "none.png").read_bytes()[:4] == b"\x89PNG"


def test_word_vector_figure_puts_the_most_frequent_word_at_angle_0_radius_1(tmp_path, monkeypatch):
    """The margin paper's figure 1: the left panel draws the most frequent words (the 15 most frequent named, in order
    of frequency), rotated and scaled so the most frequent one sits at angle 0 and radius 1; the right panel draws the
    word groups the vocabulary has whole, semantic ones in reds, syntactic ones in blues."""
    import sklearn.manifold

    from hf_heads.training.plots import plot_word_vectors

    class Projection:  # t-SNE's stand-in (seconds saved): the first two PCA components, a fixed 2-D layout
        def __init__(self, n_components, **kwargs):
            self.n_components = n_components

        def fit_transform(self, x):
            return x[:, : self.n_components]

    monkeypatch.setattr(sklearn.manifold, "TSNE", Projection)
    figures = _drawn(monkeypatch)
    words = ["king", "queen", "man", "woman", "they", "themselves", "he", *(f"w{i}" for i in range(33))]
    counts = torch.randperm(len(words), generator=torch.Generator().manual_seed(0)).double() + 1
    weight = torch.randn(len(words), 16, generator=torch.Generator().manual_seed(1))
    plot_word_vectors(weight, words, counts, tmp_path / "w.png", "margin head")
    left, right = figures[-1].axes[:2]
    by_frequency = [words[i] for i in counts.argsort(descending=True)]
    assert [t.get_text() for t in left.texts] == by_frequency[:15]
    theta, radius = left.collections[0].get_offsets()[0]
    assert theta == pytest.approx(0.0, abs=1e-9) and radius == pytest.approx(1.0)
    assert [t.get_text() for t in right.texts] == ["king", "queen", "man", "woman", "they", "themselves"]  # no "he"
    red, red_too, blue = (line.get_color() for line in right.get_lines())
    assert red[0] > red[2] and red_too[0] > red_too[2] and blue[2] > blue[0]
    assert {line.get_linewidth() for line in right.get_lines()} == {0.8}  # thin lines: the word labels stay legible
    assert (tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG"


def test_word_vector_figure_of_a_vocabulary_of_a_dozen_words(tmp_path, monkeypatch):
    """A vocabulary far smaller than t-SNE's usual perplexity of 30 still gets its figure, every word drawn, the most
    frequent at angle 0 and radius 1."""
    from hf_heads.training.plots import plot_word_vectors

    figures = _drawn(monkeypatch)
    words = [f"w{i}" for i in range(12)]
    weight = torch.randn(len(words), 16, generator=torch.Generator().manual_seed(1))
    plot_word_vectors(weight, words, torch.arange(12.0, 0.0, -1.0), tmp_path / "w.png", "margin head")
    points = figures[-1].axes[0].collections[0].get_offsets()
    assert len(points) == 12 and tuple(points[0]) == pytest.approx((0.0, 1.0), abs=1e-6)
    assert (tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG"


def test_word_vector_figure_draws_the_words_50_leading_principal_components(tmp_path, monkeypatch):
    """t-SNE lays out the words by their distances in the 50 leading principal components: variation of the vectors
    outside those directions does not move a word in the figure."""
    import sklearn.manifold

    from hf_heads.training.plots import plot_word_vectors

    class Distances:  # t-SNE's stand-in (seconds saved): a layout set by the distances alone, to words 0 and 1
        def __init__(self, n_components, **kwargs):
            pass

        def fit_transform(self, x):
            return np.linalg.norm(x[:, None] - x[None, :2], axis=-1)

    monkeypatch.setattr(sklearn.manifold, "TSNE", Distances)
    figures = _drawn(monkeypatch)
    g = np.random.default_rng(0)
    n = 80
    words = [f"w{i}" for i in range(n)]
    centred, _ = np.linalg.qr(np.hstack([np.ones((n, 1)), g.standard_normal((n, 60))]))  # orthonormal, mean 0
    leading = centred[:, 1:51] * np.linspace(30.0, 10.0, 50)
    for rest in (np.zeros((n, 10)), centred[:, 51:] * 5.0):
        weight = torch.tensor(np.hstack([leading, rest]), dtype=torch.float32)
        plot_word_vectors(weight, words, torch.arange(n, 0.0, -1.0), tmp_path / "w.png", "margin head")
    first, second = (f.axes[0].collections[0].get_offsets() for f in figures)
    np.testing.assert_allclose(second, first, rtol=0, atol=1e-4)


def test_speed_vs_perplexity_figure_is_a_720_by_480_png_with_a_point_per_run(tmp_path, monkeypatch):
    """compare_runs.py's speed / perplexity figure: one labelled point per run, saved as a 720 x 480 pixel PNG (6 x 4
    inches at 120 dpi)."""
    import struct

    from hf_heads.training.plots import plot_speed_vs_perplexity

    figures = _drawn(monkeypatch)
    runs = [("softmax", 1200.0, 35.0), ("sampled", 3400.0, 41.5)]
    path = plot_speed_vs_perplexity(runs, tmp_path / "s.png")
    png = path.read_bytes()
    assert png[:4] == b"\x89PNG" and png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (720, 480)
    ax = figures[-1].axes[0]
    assert [tuple(c.get_offsets()[0]) for c in ax.collections] == [(1200.0, 35.0), (3400.0, 41.5)]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["softmax", "sampled"]


# ---------------------------------------------------------------- model-index and tables


def test_model_index_lists_only_standard_metrics():
    metrics = {
        "eval_loss": 2.0,
        "eval_perplexity": 7.39,
        "eval_runtime": 1.0,
        "eval_samples_per_second": 3.0,
        "eval_bleu": 12.5,
        "eval_bleu_4": 3.0,
        "eval_rouge1": 0.456,
        "eval_accuracy@5": 0.5,
        "predict_bleu": 11.0,
        "train_loss": 2.5,
    }
    sparse = model_index_results(seq2seq({"family": "sparse", "k": 5}), metrics, "d", "translation", "T")
    values = {m["name"]: (m["type"], m["value"]) for m in sparse[0]["metrics"]}
    assert values == {
        "validation perplexity": ("perplexity", 7.39),  # exp of the NLL of its truncated distribution
        "validation BLEU (0-100)": ("bleu", 12.5),
        "validation BLEU-4 (0-100)": ("bleu", 3.0),
        "validation ROUGE-1 (0-100)": ("rouge", 45.6),
    }
    assert [m["name"] for m in sparse[1]["metrics"]] == ["test BLEU (0-100)"]
    assert [r["dataset"] for r in sparse] == [
        {"name": "d", "type": "d", "split": "validation"},
        {"name": "d", "type": "d", "split": "test"},
    ]
    # a sparse head's eval loss is its distribution's NLL: a finite perplexity is listed, an infinite one is not
    lm = causal_lm({"family": "sparse", "k": 5})
    listed = model_index_results(lm, metrics, "d", "text-generation", "LM")[0]["metrics"]
    assert ("perplexity", 7.39) in {(m["type"], m["value"]) for m in listed}
    infinite = {**metrics, "eval_loss": math.inf, "eval_perplexity": math.inf}
    listed = model_index_results(lm, infinite, "d", "text-generation", "LM")[0]["metrics"]
    assert "perplexity" not in {m["type"] for m in listed}
    margin = model_index_results(causal_lm({"family": "margin"}), metrics, "d", "text-generation", "LM")
    assert ("perplexity", 7.39) in {(m["type"], m["value"]) for m in margin[0]["metrics"]}
    clf = {
        "eval_loss": 0.6,
        "eval_perplexity": 1.8,
        "eval_accuracy": 0.75,
        "eval_f1_macro": 0.5,
        "eval_majority_class_accuracy": 0.5,
    }
    results = model_index_results(classifier({"family": "softmax"}), clf, "d", "text-classification", "C")
    assert {(m["type"], m["value"]) for m in results[0]["metrics"]} == {("accuracy", 75.0), ("f1", 50.0)}


def test_question_generation_card_puts_bleu_and_rouge_on_one_scale(tmp_path):
    metrics = {
        "eval_bleu": 12.5,
        "eval_bleu_1": 40.0,
        "eval_rouge1": 0.456,
        "eval_rougeL": 0.4,
        "eval_loss": 3.0,
        "eval_perplexity": 20.1,
    }
    text, meta = card(tmp_path, seq2seq({"family": "softmax"}), metrics, task=("text2text-generation", "QG"))
    assert "Scores on a 0-100 scale" in text
    assert "| eval_rouge1 | 45.6 |" in text and "| eval_bleu | 12.5 |" in text and "| eval_rougeL | 40 |" in text
    assert "| eval_loss | 3 | loss (NLL of the word) |" in text
    assert all(m["type"] != "loss" for r in meta["model-index"][0]["results"] for m in r["metrics"])


def test_card_describes_the_train_loss_by_its_criterion_and_only_a_splits_metrics_by_the_eval_loss(tmp_path):
    """The train loss is named by the head's training criterion (a mean over the run); a split's loss and perplexity
    by the eval loss; a metric of no split (a bare `loss`, `perplexity`) gets no description."""
    metrics = {"train_loss": 2.5, "eval_loss": 2.0, "predict_perplexity": 7.39, "loss": 2.4, "perplexity": 11.0}
    text, _ = card(tmp_path, causal_lm({"family": "softmax"}), metrics)
    for row in (
        "| train_loss | 2.5 | loss (cross-entropy), mean |",
        "| eval_loss | 2 | loss (NLL of the word) |",
        "| predict_perplexity | 7.39 | exp(test NLL per token) |",
        "| loss | 2.4 |  |",
        "| perplexity | 11 |  |",
    ):
        assert row in text, row


def test_card_lists_a_score_that_is_no_number_as_it_is_outside_the_scores_table(tmp_path):
    """A score the run could not compute (None, a note, a flag) is shown as written, never scaled to 0-100."""
    metrics = {"eval_bleu": 12.5, "eval_rouge1": None, "eval_accuracy": True, "eval_f1": "n/a"}
    text, _ = card(tmp_path, seq2seq({"family": "softmax"}), metrics, task=("text2text-generation", "QG"))
    assert "| eval_bleu | 12.5 |" in text
    for row in ("| eval_rouge1 | None |  |", "| eval_accuracy | True |  |", "| eval_f1 | n/a |  |"):
        assert row in text, row


def test_seq2seq_card_shows_generate_not_pipelines(tmp_path):
    text, meta = card(tmp_path, seq2seq({"family": "sparse", "k": 5}), {}, task=("translation", "Translation"))
    assert meta["pipeline_tag"] == "translation"  # the run's task files the model on the Hub, not the class's
    assert "model.generate(**batch" in text and "tokenizer(" in text and "batch_decode" in text
    assert "pipeline(" not in text and "pipelines" not in text.replace("no translation / summarization", "")
    readme = (ROOT / "README.md").read_text()
    assert 'pipeline("translation' not in readme and 'pipeline("summarization' not in readme


def _long_seq2seq(head: dict) -> HeadsForSeq2SeqLM:
    """`seq2seq` with room for the card's `max_new_tokens=64`, ending its output at once (</s> scored far above any
    word), so that its beam search takes a moment."""
    torch.manual_seed(0)
    bart = AutoConfig.for_model("bart", **{**BART, "max_position_embeddings": 80})
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=bart.to_dict(), head=head)).eval()
    with torch.no_grad():
        model.head.bias[BART["eos_token_id"]] = 100.0
    return model


@pytest.mark.parametrize("build", [causal_lm, _long_seq2seq, classifier])
def test_the_cards_code_runs_as_written(tmp_path, monkeypatch, capsys, build):
    """Every Python block of a saved model's card (load with hf_heads, load with the carried code, use) runs as
    written next to the model directory, and the usage example prints what it says: decoded texts, or a label; the
    pipeline a causal LM's or a classifier's card names runs on the directory by that name."""
    import re

    import transformers

    from hf_heads.data import build_word_tokenizer

    texts = ["In the beginning God created the heavens and the earth", "the source text", "a text to classify"]
    tok = build_word_tokenizer(texts, add_eos=build is not causal_lm)
    model = build({"family": "softmax"})
    model.save_pretrained(tmp_path / "run")
    tok.save_pretrained(tmp_path / "run")
    args = HeadsTrainingArguments(output_dir=str(tmp_path / "args"), max_steps=10, report_to="none")
    text = write_model_card(tmp_path / "run", model=model, dataset="d", metrics={}, training_args=args).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3 and "trust_remote_code=True" in blocks[1]  # the directory carries the code
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out.strip().splitlines()[-1]  # the example's line, after any library's notice
    if build is classifier:
        assert printed in ("a", "b")
    else:
        (decoded,) = eval(printed)  # noqa: S307 - the printed list of decoded texts
        assert isinstance(decoded, str)
        assert decoded.startswith(" in the beginning") == (build is causal_lm)  # a causal LM continues the prompt
    if build is not _long_seq2seq:  # (transformers 5 has no seq2seq pipeline, as that card says)
        (task,) = re.findall(r"`([\w-]+)` pipeline", text)
        pipe = transformers.pipeline(task, model="run")
        if build is classifier:
            assert pipe(texts[2])[0]["label"] in ("a", "b")
        else:
            assert pipe(texts[0], max_new_tokens=2)[0]["generated_text"].startswith(texts[0])


@pytest.mark.parametrize(
    "name, hub_id",
    [
        ("tiny-gpt2", None),
        ("tiny-bart", None),
        ("tiny-t5", None),
        ("tiny-bert", None),
        ("minilm", "sentence-transformers/all-MiniLM-L6-v2"),
        ("org/some-model", "org/some-model"),
    ],
)
def test_card_names_a_hub_base_model_only_for_a_model_from_the_hub(tmp_path, name, hub_id):
    """A run's card (`card_base_model` of its --model_name_or_path) gives `base_model` metadata only for a model that
    is on the Hub; a backbone built from a config says so in the text and has no `base_model`."""
    from hf_heads.cli.backbones import card_base_model

    args = HeadsTrainingArguments(output_dir=str(tmp_path / "args"), report_to="none")
    path = write_model_card(
        tmp_path / "run", model=causal_lm({"family": "softmax"}), dataset="d", metrics={}, training_args=args,
        **card_base_model(name),
    )  # fmt: skip
    text = path.read_text()
    meta = yaml.safe_load(text.split("---")[1])
    assert meta.get("base_model") == hub_id
    assert ("built from a config" in text) == (hub_id is None)


def test_card_is_written_in_utf_8_whatever_the_locale(tmp_path):
    """The card is UTF-8 (what the Hub reads) also under a locale whose encoding is another (ASCII in the C locale):
    a model, dataset or task name in any script reaches the card as written."""
    import locale

    args = HeadsTrainingArguments(output_dir=str(tmp_path / "args"), report_to="none")
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        path = write_model_card(
            tmp_path / "modèle", model=seq2seq({"family": "softmax"}), dataset="données", metrics={"eval_bleu": 12.5},
            training_args=args, task=("translation", "Traduction es→en"),
        )  # fmt: skip
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    text = path.read_text(encoding="utf-8")
    meta = yaml.safe_load(text.split("---")[1])
    assert meta["datasets"] == ["données"] and meta["model-index"][0]["name"] == "modèle"
    assert meta["model-index"][0]["results"][0]["task"] == {"type": "translation", "name": "Traduction es→en"}


# ---------------------------------------------------------------- finish_run


class FakeTrainer:
    """The parts of a Trainer `finish_run` uses; `push_to_hub` writes a generic card first, as the Trainer does."""

    def __init__(self, out: Path):
        self.out, self.pushed = out, None
        self.state = SimpleNamespace(log_history=[{"step": 1, "loss": 4.0}, {"step": 1, "eval_loss": 4.2}])

    def is_world_process_zero(self) -> bool:
        return True

    def create_model_card(self, **kwargs) -> None:
        (self.out / "README.md").write_text("generic card")

    def push_to_hub(self) -> None:
        self.create_model_card()
        self.pushed = (self.out / "README.md").read_text()


def test_finish_run_export_card_and_push_keep_the_hf_heads_card(tmp_path, capsys):
    out, hub = tmp_path / "out", tmp_path / "hub"
    model = causal_lm({"family": "sparse", "k": 5})
    model.save_pretrained(out)
    args = HeadsTrainingArguments(output_dir=str(out), max_steps=4, report_to="none")
    args.push_to_hub = True  # set after construction: no Hub repository is created
    trainer = FakeTrainer(out)
    finish_run(
        trainer,
        model=model,
        tokenizer=None,
        run_args=RunArguments(hub_export_dir=str(hub)),
        training_args=args,
        dataset="d",
        base_model="tiny-gpt2",
        metrics={"eval_loss": 4.2},
    )
    printed = [line for line in capsys.readouterr().out.splitlines() if " written to " in line]  # not a library's
    assert printed == [f"Hub export written to {hub}", f"model, card and plots written to {out}"]  # where each part is
    assert trainer.pushed.startswith("---") and "hf_heads `sparse` head" in trainer.pushed
    for directory in (out, hub):
        text = (directory / "README.md").read_text()
        assert 'from_pretrained("out", trust_remote_code=True)' in text and "eq. 4" in text
        assert (directory / "loss_curves.png").is_file()


def test_finish_run_on_a_rank_other_than_the_main_process_writes_nothing(tmp_path, capsys):
    """Only the main process writes the run's artefacts: another rank leaves the output directory alone."""

    class OtherRank(FakeTrainer):
        def is_world_process_zero(self) -> bool:
            return False

    out, hub = tmp_path / "out", tmp_path / "hub"
    model = causal_lm({"family": "softmax"})
    args = HeadsTrainingArguments(output_dir=str(out), max_steps=4, report_to="none")
    trainer = OtherRank(out)
    finish_run(
        trainer,
        model=model,
        tokenizer=None,
        run_args=RunArguments(hub_export_dir=str(hub), export_base_dir=str(tmp_path / "base")),
        training_args=args,
        dataset="d",
        base_model="tiny-gpt2",
        metrics={"eval_loss": 4.2},
    )
    assert not out.exists() and not hub.exists() and not (tmp_path / "base").exists()
    assert trainer.pushed is None and " written to " not in capsys.readouterr().out


# ---------------------------------------------------------------- training arguments


def test_logging_steps_default_follows_max_steps():
    def parsed(*flags: str) -> HeadsTrainingArguments:
        return parse_args((HeadsTrainingArguments,), ["--output_dir", "o", "--report_to", "none", *flags])[0]

    assert parsed("--max_steps", "40").logging_steps == 2
    assert parsed("--max_steps", "10").logging_steps == 1
    assert parsed("--max_steps", "40", "--logging_steps", "500").logging_steps == 500  # given: kept
    assert parsed("--max_steps", "40", "--logging_steps", "0.25").logging_steps == 0.25
    assert parsed().logging_steps == 500  # epochs: the transformers default
    assert HeadsTrainingArguments(output_dir="o", max_steps=200, report_to="none").logging_steps == 10


def test_fp16_on_cpu_warns_and_trains_in_float32(caplog, tmp_path):
    with caplog.at_level(logging.WARNING, logger="hf_heads.training.arguments"):
        args = HeadsTrainingArguments(output_dir=str(tmp_path), max_steps=2, fp16=True, use_cpu=True, report_to="none")
    lines = [r.getMessage() for r in caplog.records if r.name == "hf_heads.training.arguments"]
    assert len(lines) == 1 and "--bf16" in lines[0] and "\n" not in lines[0]
    # the claim: accelerate (the Trainer's autocast) has no fp16 autocast on CPU, the forward runs in float32
    trainer = HeadsTrainer(model=causal_lm({"family": "softmax"}), args=args)
    assert trainer.accelerator.mixed_precision == "fp16" and not trainer.accelerator.native_amp
    with trainer.accelerator.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_heads.training.arguments"):
        HeadsTrainingArguments(output_dir=str(tmp_path), max_steps=2, bf16=True, use_cpu=True, report_to="none")
    assert not [r for r in caplog.records if r.name == "hf_heads.training.arguments"]


def test_no_head_flag_shadows_a_training_argument(monkeypatch):
    """A head option named like a `TrainingArguments` field would replace the Trainer's flag (a family option `seed`
    silently taking `--seed`): such an option gets `--head_<name>`, and every flag of every registered family, and of
    a family registered with a `seed` option, leaves the Trainer's fields alone."""
    import dataclasses

    from transformers import Seq2SeqTrainingArguments

    from hf_heads.heads.registry import FAMILIES, HeadFamily
    from hf_heads.heads.softmax import SoftmaxHead, SoftmaxHeadOptions
    from hf_heads.training import arguments

    trainer = {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)} | {"logging_steps", "eval_accuracy_top_k"}
    assert not set(arguments.FLAG_TO_OPTION) & trainer
    seeded = dataclasses.make_dataclass(
        "Seeded", [("seed", int, dataclasses.field(default=0))], bases=(SoftmaxHeadOptions,)
    )
    monkeypatch.setitem(FAMILIES, "seeded", HeadFamily("seeded", seeded, SoftmaxHead))
    flags = arguments._option_flags()
    assert flags["head_seed"][0] == "seed" and "seed" not in flags and not set(flags) & trainer
    parsed = parse_args((HeadsTrainingArguments,), ["--output_dir", "o", "--report_to", "none", "--seed", "7"])[0]
    assert parsed.seed == 7 and "seed" not in parsed.head_config()


def test_head_flags_reach_the_head_section_and_errors_name_the_flag():
    def parsed(*flags: str) -> HeadsTrainingArguments:
        return parse_args((HeadsTrainingArguments,), ["--output_dir", "o", "--report_to", "none", *flags])[0]

    assert parsed("--head_bias", "false").head_config()["bias"] is False  # a false flag is a value, not "unset"
    assert parsed("--head", "sparse", "--k", "3", "--head_label_smoothing", "0").head_config()["label_smoothing"] == 0
    assert parsed("--loss_chunk_size", "64").head_config()["chunk_size"] == 64
    assert parsed("--loss_memory_budget", "256").head_config()["memory_budget"] == 256
    with pytest.raises(ValueError, match="--loss_memory_budget=8 cannot be combined with --loss_chunk_size=64: both"):
        parsed("--loss_chunk_size", "64", "--loss_memory_budget", "8").head_config()
    with pytest.raises(ValueError, match="--loss_chunk_size=0"):
        parsed("--loss_chunk_size", "0").head_config()
    with pytest.raises(ValueError, match="--head_bias is not an option of head family 'continuous'"):
        parsed("--head", "continuous", "--head_bias", "true").head_config()
    assert parsed("--head", "sparse").head_flags_given() and not parsed().head_flags_given()


def test_an_unknown_family_or_component_points_to_head_modules_and_an_unknown_fixed_choice_does_not():
    """A family or component name that is not registered may be the user's own, registered in a module not imported:
    the error says to add --head_modules; an option with a fixed set of choices (the criterion) says no such thing."""

    def refusal(*flags: str) -> str:
        args = parse_args((HeadsTrainingArguments,), ["--output_dir", "o", "--report_to", "none", *flags])[0]
        with pytest.raises(ValueError) as err:
            args.head_config()
        return str(err.value)

    own = "a component or family of your own is registered in your module: add --head_modules your.module"
    assert refusal("--head", "sparse_max") == (
        f"--head='sparse_max' is not allowed; allowed: 'softmax', 'margin', 'sampled', 'sparse', 'continuous'; {own}"
    )
    assert refusal("--head", "margin", "--margin", "arcface").endswith(f"; {own}")
    assert refusal("--head", "sampled", "--criterion", "nope") == (
        "--criterion='nope' is not allowed; allowed: 'ce', 'bce', 'mse'"
    )
    registered = refusal("--head", "sampled", "--criterion", "mse", "--method", "is")  # refused for another reason
    assert registered.startswith("--method='is' is not allowed") and "--head_modules" not in registered


@pytest.mark.parametrize(
    "build, task",
    [
        (lambda: causal_lm({"family": "softmax"}), ("text-generation", "Causal language modeling")),
        (lambda: seq2seq({"family": "softmax"}), ("text2text-generation", "Sequence-to-sequence generation")),
        (lambda: classifier({"family": "softmax"}), ("text-classification", "Sequence classification")),
    ],
)
def test_card_metadata_names_each_model_classes_task(tmp_path, build, task):
    """Without a task of the run's own, the card's tags, model-index and text name the model class's task."""
    text, meta = card(tmp_path, build(), {"eval_loss": 1.0, "eval_accuracy": 0.5})
    assert task[0] in meta["tags"] and task[1] in text.split("---", 2)[2]
    assert meta["pipeline_tag"] == task[0]  # the Hub files the model under its task (no architecture it knows)
    assert meta["model-index"][0]["results"][0]["task"] == {"type": task[0], "name": task[1]}
