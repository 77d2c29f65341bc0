"""run_scripts/run_clm.py end to end, its bad-input paths, HeadsTrainer resume and word counts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from export_check import export_job, load_without_hf_heads
from reopen_check import assert_reopens

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.cli.errors import UsageError
from hf_heads.cli.resume import resolve_checkpoint
from hf_heads.data import label_counts, load_lm_text
from hf_heads.training import HeadsTrainer, HeadsTrainingArguments

ROOT = Path(__file__).resolve().parents[2]
RUN_CLM = str(ROOT / "run_scripts" / "run_clm.py")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
MARGIN_FLAGS = ["--head", "margin", "--margin", "arc", "--m", "0.001", "--word_norm", "log-unigram"]
SMALL = ["--block_size", "32", "--per_device_train_batch_size", "4", "--report_to", "none", "--seed", "0"]


@pytest.fixture(scope="module")
def text_files(tmp_path_factory):
    """A small slice of the bundled World English Bible as local .txt files (the --train_file path)."""
    corpus = load_lm_text("bible-web")
    d = tmp_path_factory.mktemp("text")
    (d / "train.txt").write_text("\n".join(corpus["train"]["text"][:600]) + "\n", encoding="utf-8")
    (d / "valid.txt").write_text("\n".join(corpus["validation"]["text"][:100]) + "\n", encoding="utf-8")
    return d / "train.txt", d / "valid.txt"


def run_clm(*args: str, launcher: list[str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = (launcher or [sys.executable]) + [RUN_CLM, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=timeout)


def run_clm_script(script: str, *args: str) -> subprocess.CompletedProcess:
    assert script == "run_clm.py"
    return run_clm(*args)


def test_run_clm_margin_end_to_end(text_files, tmp_path):
    train, valid = text_files
    out, hub = tmp_path / "run", tmp_path / "hub"
    proc = run_clm(
        "--train_file",
        str(train),
        "--validation_file",
        str(valid),
        "--output_dir",
        str(out),
        "--hub_export_dir",
        str(hub),
        "--do_train",
        "--do_eval",
        "--max_steps",
        "6",
        "--logging_steps",
        "2",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "3",
        "--save_strategy",
        "no",
        *MARGIN_FLAGS,
        "--context_norm",
        "max-norm",
        *SMALL,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"model, card and plots written to {out}" in proc.stdout
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["head"]["margin"] == {"type": "arc", "m": 0.001} and summary["head"]["word_norm"] == "log-unigram"
    assert 1.0 < summary["eval_perplexity"] < 1e6 and summary["train_tokens_per_second"] > 0
    card = (out / "README.md").read_text()
    assert "model-index" in card and "eval_perplexity" in card and "trust_remote_code=True" in card
    assert '"type": "arc"' in card and "![loss_curves](loss_curves.png)" in card
    assert (out / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "word_vectors.png").read_bytes()[:4] == b"\x89PNG" and "![word_vectors](word_vectors.png)" in card

    # the export is what --push_to_hub would upload: it loads where hf_heads is not importable
    assert {"config.json", "model.safetensors", "README.md", "loss_curves.png", "tokenizer.json"} <= {
        p.name for p in hub.iterdir()
    }
    job = export_job(hub, "AutoModelForCausalLM", text="In the beginning God")  # a prompt: no </s> appended
    ids = torch.tensor([[5, 9, 14, 3, 22, 7]])  # and a forward with labels there: the evaluation a user runs
    labelled = export_job(hub, "AutoModelForCausalLM", {"input_ids": ids}, labels=ids)
    got, with_labels = load_without_hf_heads([job, labelled], tmp_path / "export-check")
    model = HeadsForCausalLM.from_pretrained(out).eval()
    assert float(model.head.context_norm_running) > 0 and bool((model.head.word_counts >= 0).all())
    torch.testing.assert_close(got["output"], model(**got["inputs"]).logits)
    with torch.no_grad():
        want = model(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(torch.as_tensor(with_labels["eval_loss"]).float(), want.float())
    assert with_labels["grads_finite"]

    # the run directory reopens: evaluated as it is (no training, no head flags), and trained further
    data = (
        "--train_file",
        str(train),
        "--validation_file",
        str(valid),
        "--block_size",
        "32",
        "--max_train_samples",
        "8",
        "--max_eval_samples",
        "8",
    )
    reopened = assert_reopens(run_clm_script, "run_clm.py", out, *data, eval_only=True)
    assert reopened["eval_loss"] > 0 and "train_loss" not in reopened
    assert "train_loss" in assert_reopens(run_clm_script, "run_clm.py", out, *data)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--no_such_flag", "1"], "unknown arguments: --no_such_flag"),
        (["--head", "margin", "--margin", "arcface"], "--margin='arcface'"),
        (["--head", "softmax", "--margin", "arc"], "--margin is not an option of head family 'softmax'"),
        (["--head", "margin", "--margin", "lsm", "--m", "1.5"], "--m"),
        (["--head", "sparse_max"], "--head='sparse_max'"),
        (["--text_column", "body"], "--text_column='body'"),
        (["--learning_rate", "fast"], "invalid arguments"),
    ],
)
def test_bad_command_line_is_one_line_and_exit_2(text_files, tmp_path, script_error, args, message):
    train, _ = text_files
    code, stderr = script_error(
        "run_clm.py", "--train_file", train, "--output_dir", tmp_path / "o", "--do_train", *args
    )
    assert code == 2, stderr[-3000:]
    lines = [line for line in stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], stderr[-3000:]
    assert not (tmp_path / "o").exists()


def test_help_exits_0(script_error):
    code, _ = script_error("run_clm.py", "--help")
    assert code == 0


def test_output_dir_holding_a_run_is_refused(text_files, tmp_path, script_error):
    train, _ = text_files
    out = tmp_path / "o"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"previous run")
    code, stderr = script_error(
        "run_clm.py", "--train_file", train, "--output_dir", out, "--do_train", "--max_steps", 1
    )
    assert code == 2 and "--overwrite_output_dir" in stderr
    assert (out / "model.safetensors").read_bytes() == b"previous run"  # nothing overwritten


def test_resume_from_checkpoint_of_another_head_is_refused(tmp_path):
    ckpt = tmp_path / "checkpoint-3"
    ckpt.mkdir()
    from hf_heads.heads import head_dict

    softmax = {"family": "softmax", "bias": True, "chunk_size": None}  # a section saved before label_smoothing
    (ckpt / "config.json").write_text(json.dumps({"model_type": "hf_heads", "head": softmax}))
    softmax = head_dict(softmax)  # what the scripts ask for: every option filled in
    assert resolve_checkpoint(str(tmp_path), True, softmax) == str(ckpt)
    margin = head_dict({"family": "margin", "margin": "arc"})
    with pytest.raises(UsageError, match="was trained with head"):
        resolve_checkpoint(str(tmp_path), str(ckpt), margin)
    with pytest.raises(UsageError, match="no checkpoint"):
        resolve_checkpoint(str(tmp_path / "empty"), True, softmax)


def test_label_counts():
    ds = Dataset.from_dict({"labels": [[1, 2, 2, -100], [0, 2, -100, -100]]})
    assert label_counts(ds, 4).tolist() == [1.0, 1.0, 3.0, 0.0]
    with pytest.raises(ValueError, match="allowed 0 <= label < 2"):
        label_counts(ds, 2)
    with pytest.raises(ValueError, match="no 'target' column"):
        label_counts(ds, 4, column="target")


def _lm_dataset(n=24, length=16, vocab=61):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, vocab, (n, length), generator=g).tolist()
    return Dataset.from_dict({"input_ids": ids, "labels": ids})


def _trainer(out, max_steps, head):
    from conftest import tiny_llama_config

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
    args = HeadsTrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        logging_steps=1,
        save_steps=3,
        eval_accuracy_top_k=[5],  # and train_accuracy@5 from the training passes
        report_to="none",
        seed=0,
        use_cpu=True,
        disable_tqdm=True,
    )
    return HeadsTrainer(model=model, args=args, train_dataset=_lm_dataset())


@pytest.mark.parametrize(
    "head",
    [
        {"family": "margin", "margin": "cos", "m": 0.1, "word_norm": "log-unigram", "context_norm": "max-norm"},
        {"family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 12, "noise": "log-uniform"},
    ],
    ids=["margin", "sampled"],
)
def test_trainer_counts_words_and_resume_reproduces_the_run(tmp_path, head):
    full = _trainer(tmp_path / "full", 6, head)
    full.train()
    counts = full.model.head.word_counts
    assert torch.equal(counts, label_counts(_lm_dataset(), 61).float())  # collected from the training set
    losses = [e["loss"] for e in full.state.log_history if "loss" in e]
    assert "head/weight_norm_mean" in full.state.log_history[0]
    # the same-pass accuracy of the training batches: margin heads count it, sampled criteria have no full softmax
    accuracies = [e.get("train_accuracy") for e in full.state.log_history if "loss" in e]
    at_5 = [e.get("train_accuracy@5") for e in full.state.log_history if "loss" in e]
    if head["family"] == "margin":
        assert all(0.0 <= a <= b <= 1.0 for a, b in zip(accuracies, at_5, strict=True)), (accuracies, at_5)
        assert sum(at_5) > sum(accuracies)
        # each a share of the logging window's labels (2 accumulated batches of 4 sequences, 15 predicted tokens
        # each), logged to 4 decimals as train_nll
        labels = 2 * 4 * 15
        assert all(a == round(round(a * labels) / labels, 4) for a in accuracies + at_5), (accuracies, at_5)
    else:
        assert accuracies == at_5 == [None] * len(accuracies)

    resumed = _trainer(tmp_path / "full", 6, head)  # a fresh process would rebuild the same objects
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))
    again = [e["loss"] for e in resumed.state.log_history if "loss" in e]
    assert len(again) == 6
    torch.testing.assert_close(torch.tensor(again[3:]), torch.tensor(losses[3:]), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(text_files, tmp_path):
    """Two processes of DDP over gloo follow the one-process loss curve with the same global batch
    (2 x 2 = 1 x 4 sequences per step). accelerate 1.15 starts ONE process for `--cpu --num_processes 2`
    (its simple launcher), so CPU data parallelism is `--multi_gpu --num_processes 2` plus `--use_cpu`."""
    train, _ = text_files
    common = [
        "--train_file",
        str(train),
        "--model_name_or_path",
        "tiny-llama",
        "--do_train",
        "--max_steps",
        "4",
        "--logging_steps",
        "1",
        "--save_strategy",
        "no",
        "--block_size",
        "32",
        "--report_to",
        "none",
        "--seed",
        "0",
        "--head",
        "margin",
        "--margin",
        "cos",
        "--m",
        "0.1",
        "--word_norm",
        "log-unigram",
        "--train_sampling_strategy",
        "sequential",
        "--use_cpu",  # the same global batches in both runs
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
    for procs, per_device in ((1, 4), (2, 2)):
        out = tmp_path / f"p{procs}"
        proc = run_clm(
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
        assert f"world size {procs}" in proc.stderr
    assert len(curves[1]) == 4
    torch.testing.assert_close(curves[2], curves[1], rtol=1e-4, atol=1e-4)


@pytest.fixture
def word_tokenizer_dir(text_files, tmp_path):
    """A saved word-level tokenizer (for a tiny backbone run with --tokenizer_name)."""
    from hf_heads.data import build_word_tokenizer

    train, _ = text_files
    path = tmp_path / "tok"
    build_word_tokenizer(train.read_text(encoding="utf-8").splitlines(), add_eos=False).save_pretrained(path)
    return path


@pytest.mark.parametrize(
    "args, messages",
    [
        (
            ["--dataset_name", "bible-wbe", "--do_train"],
            [
                "--dataset_name='bible-wbe' is not a built-in corpus (did you mean 'bible-web'?)",
                "offline mode",
                "bible-web, bbc-news, wordnet-glosses",
            ],
        ),
        (
            ["--train_file", "{train}", "--model_name_or_path", "gpt2", "--do_train"],
            ["--model_name_or_path='gpt2' is not a local directory", "offline mode", "tiny-gpt2, tiny-llama"],
        ),
        (
            ["--train_file", "{train}", "--tokenizer_name", "no-such/tokenizer", "--do_train"],
            ["--tokenizer_name='no-such/tokenizer' is not a local directory", "offline mode"],
        ),
        (["--validation_file", "{valid}", "--do_eval"], ["built-in backbone", "give --train_file"]),
        (["--validation_file", "{valid}", "--do_train"], ["--do_train needs a training split"]),
        (
            ["--validation_file", "{valid}", "--tokenizer_name", "{tok}", "--do_eval", *MARGIN_FLAGS],
            ["--word_norm='log-unigram' needs word counts", "give --train_file"],
        ),
    ],
    ids=[
        "dataset-name",
        "hub-model-offline",
        "hub-tokenizer-offline",
        "validation-only",
        "train-without-train-split",
        "eval-counts-without-training-data",
    ],
)
def test_data_and_model_errors_are_one_line_and_exit_2(
    text_files, word_tokenizer_dir, tmp_path, script_error, args, messages
):
    train, valid = text_files
    args = [a.format(train=train, valid=valid, tok=word_tokenizer_dir) for a in args]
    code, stderr = script_error("run_clm.py", "--output_dir", tmp_path / "o", *args, *SMALL)
    assert code == 2, stderr[-3000:]
    lines = [line for line in stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and all(m in lines[0] for m in messages), stderr[-3000:]


def test_main_wrapper_turns_a_hub_oserror_into_one_line(capsys, tmp_path):
    """Any transformers / huggingface_hub / datasets OSError the scripts do not catch themselves (a model or a Hub
    dataset it cannot reach)."""
    import datasets
    from transformers import AutoConfig

    from hf_heads.cli.errors import main_wrapper

    with pytest.raises(SystemExit) as exit_info:
        main_wrapper(lambda: AutoConfig.from_pretrained("no-such-org/no-such-model"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "local directories" in err[0] and "minilm" in err[0]
    with pytest.raises(SystemExit) as exit_info:  # offline: a ConnectionError raised inside datasets
        main_wrapper(lambda: datasets.load_dataset_builder("no-such-org/no-such-dataset"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "'no-such-org/no-such-dataset'" in err[0], err
    with pytest.raises(OSError):  # the script's own I/O errors keep their traceback
        main_wrapper(lambda: open(tmp_path, "w"))  # noqa: SIM115 (IsADirectoryError)


def test_main_wrapper_keeps_the_traceback_of_a_users_code_in_a_folder_named_like_a_hub_package(tmp_path):
    """Code of the user's own that raises an OSError (not a missing file) from a folder named `datasets/` (or
    `transformers/`) is not transformers' or datasets' code: its error keeps its traceback."""
    import importlib.util

    from hf_heads.cli.errors import main_wrapper

    for name in ("datasets", "transformers"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "own_io.py").write_text("def write(path):\n    return open(path, 'w')\n")
        spec = importlib.util.spec_from_file_location(f"own_io_{name}", folder / "own_io.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with pytest.raises(IsADirectoryError):
            main_wrapper(lambda: module.write(tmp_path))  # noqa: B023 (called at once)


def test_main_wrapper_closes_the_process_group_of_a_distributed_run(tmp_path):
    """After `main` returns, the default process group (what `accelerate launch --num_processes N` gives each rank)
    is destroyed: left to interpreter shutdown, gloo's threads can abort a rank whose run succeeded."""
    import torch.distributed as dist

    from hf_heads.cli.errors import main_wrapper

    def main():
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        assert dist.is_initialized()

    try:
        main_wrapper(main)
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    main_wrapper(lambda: None)  # no process group: nothing to close


@pytest.mark.slow
def test_word_level_lm_ends_training_lines_with_eos_and_eval_only_counts_words(text_files, tmp_path):
    """run_clm's word-level tokenizer adds no </s> to a prompt, yet every training line ends with </s> (the
    saved counts of the training labels include it); the saved model generates after its prompt; and a head
    that needs word counts can be evaluated without training (the training split is counted)."""
    import transformers

    train, valid = text_files
    out = tmp_path / "run"
    data = ["--train_file", str(train), "--validation_file", str(valid), "--max_eval_samples", "8"]
    proc = run_clm(
        *data,
        "--output_dir",
        str(out),
        "--do_train",
        "--max_steps",
        "2",
        "--save_strategy",
        "no",
        *MARGIN_FLAGS,
        *SMALL,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    model = HeadsForCausalLM.from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    prompt = "In the beginning God"
    assert tok.eos_token_id not in tok(prompt)["input_ids"]
    assert model.head.word_counts[tok.eos_token_id] > 0  # the training blocks hold </s> at every line end
    generator = transformers.pipeline("text-generation", model=model, tokenizer=tok)
    text = generator(prompt, max_new_tokens=4, do_sample=False, suppress_tokens=[0, 1, 2, 3])[0]["generated_text"]
    words = text[len(prompt) :].split()
    assert text.startswith(prompt + " ") and len(words) == 4 and set(words) <= set(tok.get_vocab()), text

    proc = run_clm(*data, "--output_dir", str(tmp_path / "eval"), "--do_eval", *MARGIN_FLAGS, *SMALL)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert 1.0 < json.loads((tmp_path / "eval" / "eval_results.json").read_text())["eval_perplexity"] < 1e6
