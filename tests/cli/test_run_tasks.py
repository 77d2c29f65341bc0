"""run_translation / run_summarization / run_question_generation / run_classification end to end on the
real bundled corpora, their Hub exports, and their bad-input paths."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from export_check import export_job, load_without_hf_heads
from reopen_check import assert_reopens

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "run_scripts"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
QUIET = ["--report_to", "none", "--seed", "0", "--save_strategy", "no", "--disable_tqdm", "true"]


def run(script: str, *args: str, launcher: list[str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run a script; every line it logs is written (a log call whose arguments do not fit its format makes logging
    print "--- Logging error ---" to stderr in place of the line)."""
    cmd = (launcher or [sys.executable]) + [str(SCRIPTS / script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=timeout)
    assert "Logging error" not in proc.stderr, proc.stderr[-4000:]
    return proc


def test_run_translation_sparse_end_to_end_under_accelerate(tmp_path):
    """Bible es→en with a tiny BART and the sparse head: accelerate launch, train / eval / predict with
    beam search, BLEU through the shipped evaluate module, card, and an export that loads without hf_heads."""
    out, hub = tmp_path / "run", tmp_path / "hub"
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--cpu",
        "--num_processes",
        "1",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ]
    proc = run(
        "run_translation.py",
        "--output_dir",
        str(out),
        "--hub_export_dir",
        str(hub),
        "--dataset_name",
        "bible-es-en",
        "--model_name_or_path",
        "tiny-bart",
        "--word_vocab_size",
        "4000",
        "--max_train_samples",
        "800",
        "--max_eval_samples",
        "24",
        "--max_predict_samples",
        "16",
        "--max_source_length",
        "48",
        "--max_target_length",
        "48",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--predict_with_generate",
        "--generation_num_beams",
        "3",
        "--max_steps",
        "30",
        "--per_device_train_batch_size",
        "16",
        "--learning_rate",
        "1e-3",
        "--logging_steps",
        "10",
        "--head",
        "sparse",
        "--k",
        "10",
        "--head_label_smoothing",
        "0.1",
        *QUIET,
        launcher=launch,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for split in ("train", "eval", "predict"):  # the Trainer's metric blocks (printed), under their split's name
        assert f"***** {split} metrics *****" in proc.stdout + proc.stderr, split
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["head"]["family"] == "sparse" and summary["head"]["k"] == 10
    for key in ("eval_bleu", "eval_bleu_1", "eval_bleu_4", "predict_bleu", "eval_loss"):
        assert key in summary and summary[key] >= 0, key
    # the eval loss is the NLL of the truncated distribution (+inf once a label falls outside the top k): its
    # perplexity is logged as it is, with eq. 5's loss and the share of labels inside the top k beside it
    loss = summary["eval_loss"]
    assert summary["eval_perplexity"] == (math.inf if loss == math.inf else pytest.approx(math.exp(loss)))
    assert 0 <= summary["eval_in_top_k"] <= 1 and math.isfinite(summary["eval_sparse_loss"])
    assert (summary["eval_loss"] == math.inf) == (summary["eval_in_top_k"] < 1)
    losses = [e["loss"] for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in e]
    assert losses[-1] < losses[0]
    rows = [json.loads(line) for line in (out / "generated_predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and {"source", "reference", "prediction"} <= rows[0].keys()
    card = (out / "README.md").read_text()
    assert "AutoModelForSeq2SeqLM" in card and "type: translation" in card and "eval_bleu" in card
    text, beams = "Y dijo Dios: Sea la luz: y fué la luz.", dict(max_new_tokens=8, num_beams=3)
    (got,) = load_without_hf_heads(
        [export_job(hub, "AutoModelForSeq2SeqLM", text=text, generate=beams)], tmp_path / "export-check"
    )
    from transformers import AutoTokenizer

    from hf_heads import HeadsForSeq2SeqLM

    model, tok = HeadsForSeq2SeqLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    assert torch.equal(got["output"], model.generate(**tok([text], return_tensors="pt"), **beams))
    assert_reopens(
        run,
        "run_translation.py",
        out,
        "--dataset_name",
        "bible-es-en",
        "--max_train_samples",
        "64",
        "--max_eval_samples",
        "8",
        "--max_source_length",
        "48",
        "--max_target_length",
        "48",
    )


def test_run_translation_continuous_reports_its_target_coverage_in_one_step(tmp_path):
    """A continuous head's translation run reports how much of the training split's target side its embedding table
    covers (words outside GloVe are <unk>), from one training step; frequency centring and the target-side output
    vocabulary are taken from that training split: the saved model outputs target words, not source words."""
    from transformers import PreTrainedTokenizerFast

    from hf_heads import HeadsForSeq2SeqLM

    out = tmp_path / "run"
    proc = run(
        "run_translation.py", "--output_dir", str(out), "--dataset_name", "bible-es-en", "--model_name_or_path",
        "tiny-bart", "--word_vocab_size", "3000", "--max_train_samples", "32", "--max_source_length", "24",
        "--max_target_length", "24", "--do_train", "--max_steps", "1", "--per_device_train_batch_size", "8",
        "--head", "continuous", "--center_embeddings", "frequency", "--output_vocabulary", "targets", *QUIET,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "run_summary.json").read_text())
    assert 0.5 < summary["target_token_coverage"] <= 1.0 and summary["head"]["family"] == "continuous"
    assert summary["head"]["center_embeddings"] == "frequency"
    mask, tok = HeadsForSeq2SeqLM.from_pretrained(out).head.output_mask, PreTrainedTokenizerFast.from_pretrained(out)
    words = set(tok.convert_ids_to_tokens(mask.nonzero().flatten().tolist()))
    assert {"the", "and", "</s>"} <= words and {"y", "de"} <= tok.get_vocab().keys() - words  # source side: out


@pytest.mark.slow  # suite time: translation's default end-to-end run is the sparse one under accelerate
def test_run_translation_continuous_syn_margin(tmp_path):
    """The continuous-output head end to end: GloVe targets, words outside GloVe -> <unk>, SMP loss, tied decoder
    inputs, beam-search (nearest-neighbour) decoding scored with sacreBLEU, model card."""
    out = tmp_path / "run"
    proc = run(
        "run_translation.py",
        "--output_dir",
        str(out),
        "--dataset_name",
        "bible-es-en",
        "--model_name_or_path",
        "tiny-bart",
        "--word_vocab_size",
        "3000",
        "--max_train_samples",
        "400",
        "--max_eval_samples",
        "16",
        "--max_source_length",
        "40",
        "--max_target_length",
        "40",
        "--do_train",
        "--do_eval",
        "--predict_with_generate",
        "--generation_num_beams",
        "2",
        "--max_steps",
        "8",
        "--logging_steps",
        "4",
        "--per_device_train_batch_size",
        "16",
        "--head",
        "continuous",
        "--loss",
        "syn-margin-projection",
        "--tie_decoder_inputs",
        "true",
        "--center_embeddings",
        "frequency",
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["head"]["center_embeddings"] == "frequency"
    assert summary["head"]["embedding_dim"] == 50 and 0.5 < summary["target_token_coverage"] <= 1.0
    assert "eval_bleu" in summary and "eval_perplexity" not in summary
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert "head/accuracy@10" in history[0] and "head/wrong_similarity_to_target" in history[0]
    assert "Continuous-output" in (out / "README.md").read_text()


@pytest.mark.slow
def test_run_translation_continuous_in_batch_on_a_trained_target_table(tmp_path):
    """in-batch-softmax on a 16-d word2vec table trained on the training targets (gensim), with the target-side
    output vocabulary: the table file and the vocabulary are saved, and every predicted word is in the vocabulary."""
    from hf_heads import HeadsForSeq2SeqLM

    out = tmp_path / "run"
    args = ["--dataset_name", "bible-es-en", "--model_name_or_path", "tiny-bart", "--word_vocab_size", "3000",
            "--max_train_samples", "300", "--max_predict_samples", "8", "--max_source_length", "32",
            "--max_target_length", "32", "--do_train", "--do_predict", "--predict_with_generate", "--max_steps", "4",
            "--per_device_train_batch_size", "16", "--head", "continuous", "--loss", "in-batch-softmax",
            "--num_sampled", "32", "--learn_logit_scale", "true", "--logit_scale", "20", "--output_vocabulary",
            "targets", "--embedding_name", "word2vec-targets", "--word2vec_dim", "16"]  # fmt: skip
    proc = run("run_translation.py", "--output_dir", str(out), *args, *QUIET)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (out / "target_word2vec.npz").is_file()
    model = HeadsForSeq2SeqLM.from_pretrained(out)
    mask = model.head.output_mask
    assert model.head.embeddings.shape == (model.head.num_classes, 16) and 20 < int(mask.sum()) < mask.numel()
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(out)
    for row in (out / "generated_predictions.jsonl").read_text().splitlines():
        ids = tok(json.loads(row)["prediction"], add_special_tokens=False)["input_ids"]
        assert all(bool(mask[i]) for i in ids)


def test_run_summarization_tiny_t5_head_tail(tmp_path):
    out = tmp_path / "run"
    proc = run(
        "run_summarization.py",
        "--output_dir",
        str(out),
        "--dataset_name",
        "bbc-news",
        "--model_name_or_path",
        "tiny-t5",
        "--word_vocab_size",
        "3000",
        "--max_train_samples",
        "200",
        "--max_eval_samples",
        "12",
        "--max_source_length",
        "160",
        "--max_target_length",
        "16",
        "--head_tail",
        "--do_train",
        "--do_eval",
        "--predict_with_generate",
        "--max_steps",
        "12",
        "--per_device_train_batch_size",
        "8",
        "--head",
        "margin",
        "--margin",
        "cos",
        "--m",
        "0.1",
        "--word_norm",
        "log-unigram",
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "run_summary.json").read_text())
    for key in ("eval_rouge1", "eval_rouge2", "eval_rougeL", "eval_bleu", "eval_perplexity"):
        assert key in summary, key
    # without --eval_accuracy_top_k a seq2seq run reports the teacher-forced accuracy@1/2/5/10 (Bhat et al. table 2)
    accuracy = {int(key.split("@")[1]): value for key, value in summary.items() if key.startswith("eval_accuracy@")}
    assert sorted(accuracy) == [1, 2, 5, 10]
    assert 0 <= accuracy[1] <= accuracy[2] <= accuracy[5] <= accuracy[10] <= 1
    assert "type: summarization" in (out / "README.md").read_text()
    assert_reopens(
        run,
        "run_summarization.py",
        out,
        "--dataset_name",
        "bbc-news",
        "--max_train_samples",
        "16",
        "--max_eval_samples",
        "4",
        "--max_source_length",
        "160",
        "--max_target_length",
        "16",
        "--head_tail",
    )


def test_run_question_generation_minilm_bert2bert(tmp_path):
    """The BERT2BERT warm start from the packaged MiniLM (WordPiece vocabulary, tied head)."""
    out = tmp_path / "run"
    proc = run(
        "run_question_generation.py",
        "--output_dir",
        str(out),
        "--model_name_or_path",
        "minilm",
        "--max_train_samples",
        "48",
        "--max_eval_samples",
        "8",
        "--max_source_length",
        "64",
        "--max_target_length",
        "24",
        "--do_train",
        "--do_eval",
        "--predict_with_generate",
        "--max_steps",
        "3",
        "--per_device_train_batch_size",
        "8",
        "--head",
        "sampled",
        "--criterion",
        "ce",
        "--method",
        "mcs",
        "--num_samples",
        "512",
        "--noise",
        "uniform",
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "run_summary.json").read_text())
    assert {"eval_bleu_1", "eval_bleu_4", "eval_rouge1", "eval_perplexity"} <= summary.keys()
    config = json.loads((out / "config.json").read_text())
    assert config["backbone"]["model_type"] == "encoder-decoder" and config["tie_word_embeddings"] is True
    assert_reopens(
        run,
        "run_question_generation.py",
        out,
        "--max_train_samples",
        "8",
        "--max_eval_samples",
        "4",
        "--max_source_length",
        "64",
        "--max_target_length",
        "24",
    )


@pytest.mark.slow
def test_run_classification_minilm_beats_majority_class(tmp_path):
    """The real check of the classification path: MiniLM fine-tuned on WordNet's 45 lexicographer classes
    for 30 steps of 16 glosses with the sparse head is far above the majority-class baseline (measured with one
    thread: accuracy 0.383 against 0.123, 50 s)."""
    out = tmp_path / "run"
    proc = run(
        "run_classification.py",
        "--output_dir",
        str(out),
        "--dataset_name",
        "wordnet-lexnames",
        "--model_name_or_path",
        "minilm",
        "--max_train_samples",
        "960",
        "--max_eval_samples",
        "300",
        "--max_seq_length",
        "24",
        "--do_train",
        "--do_eval",
        "--max_steps",
        "30",
        "--per_device_train_batch_size",
        "16",
        "--learning_rate",
        "4e-4",
        "--head",
        "sparse",
        "--k",
        "10",
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["eval_accuracy"] > summary["eval_majority_class_accuracy"] + 0.15, summary
    assert 0 < summary["eval_f1_macro"] <= summary["eval_f1_micro"] == pytest.approx(summary["eval_accuracy"])
    config = json.loads((out / "config.json").read_text())
    assert len(config["id2label"]) == 45 and config["id2label"]["0"] == "adj.all"


@pytest.fixture
def label_files(tmp_path):
    train = [
        {"sentence": f"text number {i} about {'cats' if i % 2 else 'dogs'}", "topic": ["pets", "farm"][i % 2]}
        for i in range(40)
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    valid = [{"sentence": "a text", "topic": "pets"}, {"sentence": "another", "topic": "space"}]
    (tmp_path / "valid.jsonl").write_text("".join(json.dumps(r) + "\n" for r in valid))
    return tmp_path / "train.jsonl", tmp_path / "valid.jsonl"


@pytest.mark.slow
def test_run_classification_local_files_tiny_gpt2_margin(label_files, tmp_path):
    train, _ = label_files
    out = tmp_path / "run"
    proc = run(
        "run_classification.py",
        "--output_dir",
        str(out),
        "--train_file",
        str(train),
        "--validation_file",
        str(train),
        "--test_file",
        str(train),
        "--text_column",
        "sentence",
        "--label_column",
        "topic",
        "--model_name_or_path",
        "tiny-gpt2",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--max_steps",
        "4",
        "--per_device_train_batch_size",
        "8",
        "--head",
        "margin",
        "--margin",
        "arc",
        "--m",
        "0.2",
        "--scale",
        "16",
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "farm", "1": "pets"} and config["head"]["scale"] == 16.0
    assert (out / "predictions.tsv").read_text().startswith("index\tprediction\tlabel\n")
    assert_reopens(
        run,
        "run_classification.py",
        out,
        "--train_file",
        str(train),
        "--validation_file",
        str(train),
        "--text_column",
        "sentence",
        "--label_column",
        "topic",
    )


def test_run_classification_csv_string_labels_tiny_bert(tmp_path):
    """A CSV file whose label column holds strings: labels map to ids in sorted order (the model's id2label),
    and the majority-class baseline is computed on those ids."""
    import csv

    labels = ["pos", "neg", "pos", "mixed"]
    for name, n in (("train", 32), ("valid", 4)):
        with open(tmp_path / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows((f"a text about {labels[i % 4]} things, number {i}", labels[i % 4]) for i in range(n))
    out = tmp_path / "run"
    proc = run(
        "run_classification.py",
        "--output_dir",
        str(out),
        "--train_file",
        str(tmp_path / "train.csv"),
        "--validation_file",
        str(tmp_path / "valid.csv"),
        "--model_name_or_path",
        "tiny-bert",
        "--do_train",
        "--do_eval",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "8",
        *QUIET,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "mixed", "1": "neg", "2": "pos"}
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["eval_majority_class_accuracy"] == pytest.approx(0.5) and 0 <= summary["eval_accuracy"] <= 1


CLF = ["--train_file", "{train}", "--text_column", "sentence"]


@pytest.mark.parametrize(
    "script, args, message",
    [
        (
            "run_classification.py",
            [*CLF, "--label_column", "topic", "--validation_file", "{valid}", "--do_eval"],
            "labels ['space']",
        ),
        ("run_classification.py", [*CLF], "--label_column='label'"),
        ("run_classification.py", [*CLF, "--label_column", "topic", "--pooling", "cls"], "pooling='cls'"),
        (
            "run_translation.py",
            ["--head", "sparse", "--k", "2", "--generation_num_beams", "4"],
            "--generation_num_beams=4 must be <= decode_k=2",
        ),
        ("run_translation.py", ["--source_column", "es"], "go together"),
        ("run_translation.py", ["--source_lang", "fr"], "--source_lang='fr'"),
        ("run_summarization.py", ["--train_file", "{txt}"], "extension 'txt'"),
        ("run_question_generation.py", ["--head", "sampled", "--method", "nce"], "--num_samples"),
        ("run_translation.py", ["--head", "continuous", "--loss", "cosine"], "--loss='cosine'"),
        (
            "run_translation.py",
            ["--head", "continuous", "--loss", "margin-random", "--loss_margin", "-1"],
            "--loss_margin=-1.0 must be >= 0",
        ),
        ("run_translation.py", ["--head", "continuous", "--embedding_name", "word2vec"], "'word2vec'"),
        ("run_translation.py", ["--head", "softmax", "--loss", "vmf"], "--loss is not an option of head family"),
        (
            "run_classification.py",
            ["--dataset_name", "wordnet-lexnamse"],
            "--dataset_name='wordnet-lexnamse' is not a built-in corpus (did you mean 'wordnet-lexnames'?)",
        ),
        ("run_translation.py", ["--dataset_name", "bible-es-em"], "Hub datasets need a network"),
        (
            "run_classification.py",
            [*CLF, "--label_column", "topic", "--model_name_or_path", "bert-base-uncased"],
            "--model_name_or_path='bert-base-uncased' is not a local directory",
        ),
        ("run_translation.py", ["--model_name_or_path", "facebook/bart-base"], "offline, use a local directory"),
        ("run_translation.py", ["--config_overrides", "d_model=1.5"], "d_model='1.5' must be an integer"),
        ("run_translation.py", ["--config_overrides", "no_such_field=1"], "is not key=value of a BartConfig field"),
        (
            "run_translation.py",
            ["--config_overrides", "forced_eos_token_id=x"],
            "--config_overrides: forced_eos_token_id='x' is refused by BartConfig: TypeError: Field "
            "'forced_eos_token_id' with value 'x' doesn't match any type",
        ),
        (
            "run_summarization.py",
            ["--validation_file", "{valid}", "--source_column", "sentence", "--target_column", "topic"],
            "--do_train needs a training split",
        ),
    ],
)
def test_task_scripts_bad_input_is_one_line_and_exit_2(label_files, tmp_path, script_error, script, args, message):
    train, valid = label_files
    (tmp_path / "t.txt").write_text("hello\n")
    args = [a.format(train=train, valid=valid, txt=tmp_path / "t.txt") for a in args]
    model = "tiny-gpt2" if script == "run_classification.py" else "tiny-bart"
    common = ["--output_dir", tmp_path / "o", "--do_train", "--max_steps", "1", "--max_train_samples", "20"]
    code, stderr = script_error(script, *common, "--model_name_or_path", model, *args)
    assert code == 2, stderr[-3000:]
    lines = [line for line in stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], stderr[-3000:]


def test_seq2seq_evaluation_of_a_built_in_backbone_without_a_training_split(label_files, tmp_path, script_error):
    """A built-in backbone's word-level tokenizer is built from the training text: evaluating a new one with only a
    validation split is one error line saying what to give instead."""
    _, valid = label_files
    code, stderr = script_error(
        "run_summarization.py", "--output_dir", tmp_path / "o", "--model_name_or_path", "tiny-bart",
        "--validation_file", valid, "--source_column", "sentence", "--target_column", "topic", "--do_eval", *QUIET,
    )  # fmt: skip
    assert code == 2, stderr[-3000:]
    assert [line for line in stderr.strip().splitlines() if line.startswith("error:")] == [
        "error: --model_name_or_path='tiny-bart' is a built-in backbone whose word-level tokenizer is built from the "
        "training text: give --train_file too, or --model_name_or_path of a trained model to evaluate"
    ], stderr[-3000:]


def test_seq2seq_evaluation_of_a_head_that_needs_word_counts_without_a_training_split(label_files, tmp_path,
                                                                                     script_error):  # fmt: skip
    """Evaluating (no --do_train) a new model whose head needs word counts, with no training split to count them
    from: one error line naming the head flag that needs them and what to give."""
    from hf_heads.data import build_word_tokenizer

    _, valid = label_files
    rows = [json.loads(line) for line in valid.read_text().splitlines()]
    build_word_tokenizer([r[k] for r in rows for k in ("sentence", "topic")], add_eos=True).save_pretrained(
        tmp_path / "tok"
    )
    code, stderr = script_error(
        "run_summarization.py", "--output_dir", tmp_path / "o", "--model_name_or_path", "tiny-bart",
        "--tokenizer_name", tmp_path / "tok", "--validation_file", valid, "--source_column", "sentence",
        "--target_column", "topic", "--do_eval", "--head", "margin", "--margin", "cos", "--m", "0.1",
        "--word_norm", "log-unigram", *QUIET,
    )  # fmt: skip
    assert code == 2, stderr[-3000:]
    assert [line for line in stderr.strip().splitlines() if line.startswith("error:")] == [
        "error: --word_norm='log-unigram' needs word counts of the training data, and this run has no training split "
        "to count them from: give --train_file (or a --dataset_name with a train split; its tokens are counted), or "
        "--model_name_or_path of a trained hf_heads model (it saves its counts)"
    ], stderr[-3000:]


@pytest.mark.slow
def test_classification_two_process_ddp_matches_one_process(label_files, tmp_path):
    """run_classification under `accelerate launch` with 2 CPU processes (DDP over gloo) follows the one-process
    loss curve at the same global batch (see test_run_clm for the launcher flags)."""
    train, _ = label_files
    common = [
        "--train_file",
        str(train),
        "--text_column",
        "sentence",
        "--label_column",
        "topic",
        "--model_name_or_path",
        "tiny-llama",
        "--do_train",
        "--max_steps",
        "4",
        "--logging_steps",
        "1",
        "--train_sampling_strategy",
        "sequential",
        "--use_cpu",
        "--head",
        "sparse",
        "--k",
        "1",
        "--classifier_dropout",
        "0",
        *QUIET,
    ]
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ]
    curves = {}
    for procs, per_device in ((1, 8), (2, 4)):
        out = tmp_path / f"p{procs}"
        proc = run(
            "run_classification.py",
            *common,
            "--output_dir",
            str(out),
            "--per_device_train_batch_size",
            str(per_device),
            launcher=launch + (["--multi_gpu", "--num_processes", "2"] if procs == 2 else ["--cpu"]),
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        history = json.loads((out / "trainer_state.json").read_text())["log_history"]
        curves[procs] = torch.tensor([[e["loss"], e["grad_norm"]] for e in history if "loss" in e])
    torch.testing.assert_close(curves[2], curves[1], rtol=1e-4, atol=1e-4)


def test_config_overrides_parse_as_the_field_type(monkeypatch):
    """`--config_overrides` values take the type of the field they replace: a string field stays a string even
    when it looks like a number, a float field accepts an integer literal, a bool field needs true / false, and
    `none` unsets a string or unset field."""
    from transformers import BartConfig

    from hf_heads.cli.seq2seq import _override_config

    config = BartConfig(d_model=128, init_std=0.02, activation_function="gelu", scale_embedding=False)
    _override_config(config, "d_model=256,init_std=1,activation_function=relu,scale_embedding=true,dropout=0.0")
    assert (config.d_model, config.init_std, config.activation_function, config.scale_embedding) == (
        256,
        1.0,
        "relu",
        True,
    )
    assert isinstance(config.d_model, int) and isinstance(config.init_std, float) and config.dropout == 0.0
    _override_config(config, "activation_function=2")
    assert config.activation_function == "2"
    config.forced_bos_token_id = None
    _override_config(config, "activation_function=None,forced_bos_token_id=none")
    assert config.activation_function is None and config.forced_bos_token_id is None
