"""Faults and bad input: corrupt or incomplete checkpoints, tokenizer / vocabulary mismatch, interrupted
training resumed for every head family, and a fuzz test over the run scripts' command-line flags."""

import json
from pathlib import Path

import pytest
import torch
from conftest import tiny_enc_dec_config, tiny_llama_config
from datasets import Dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM
from hf_heads.data import minilm_path
from hf_heads.training import HeadsSeq2SeqTrainer, HeadsSeq2SeqTrainingArguments


def _drop_tensor(directory: Path, key: str) -> None:
    tensors = load_file(directory / "model.safetensors")
    del tensors[key]
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})


def test_checkpoint_missing_word_counts_or_embedding_table_is_refused(tmp_path):
    model = HeadsForCausalLM(
        HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "margin", "word_norm": "unigram"})
    )
    model.set_word_counts(torch.arange(61.0))
    model.save_pretrained(tmp_path / "lm")
    _drop_tensor(tmp_path / "lm", "head.word_counts")
    with pytest.raises(ValueError, match="lacks head.word_counts: refusing to load"):
        HeadsForCausalLM.from_pretrained(tmp_path / "lm")
    head = {"family": "continuous", "embedding_dim": 8}
    s2s = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart"), head=head))
    s2s.head.set_embedding_table(torch.randn(50, 8))
    s2s.save_pretrained(tmp_path / "s2s")
    _drop_tensor(tmp_path / "s2s", "head.embeddings")
    with pytest.raises(ValueError, match="lacks head.embeddings"):
        HeadsForSeq2SeqLM.from_pretrained(tmp_path / "s2s")


def test_corrupt_or_hand_edited_config_is_refused(tmp_path):
    from transformers import AutoConfig

    HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "sparse", "k": 5}).save_pretrained(tmp_path)
    text = (tmp_path / "config.json").read_text()
    (tmp_path / "config.json").write_text(text[: len(text) // 2])  # truncated file
    with pytest.raises(OSError, match="not a valid JSON file"):
        AutoConfig.from_pretrained(tmp_path)
    raw = json.loads(text)
    for edit, message in (
        ({"k": 0}, "head.k=0"),
        ({"family": "sparsemax"}, "head.family='sparsemax'"),
        ({"topk": 3}, "head.topk is not an option"),
    ):
        (tmp_path / "config.json").write_text(json.dumps({**raw, "head": {**raw["head"], **edit}}))
        with pytest.raises(ValueError, match=message):
            AutoConfig.from_pretrained(tmp_path)


def test_tokenizer_larger_than_the_model_vocabulary_is_refused(tmp_path, script_error):
    """In this process (conftest's `script_error`): the refusal comes before any training."""
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart"), head={"family": "softmax"}))
    model.save_pretrained(tmp_path / "model")
    code, stderr = script_error(
        "run_translation.py", "--output_dir", tmp_path / "o", "--model_name_or_path", tmp_path / "model",
        "--tokenizer_name", minilm_path(), "--do_eval", "--max_eval_samples", "4", "--report_to", "none",
    )  # fmt: skip
    assert code == 2, stderr[-3000:]
    assert "error: the tokenizer has 30522 tokens but the model embeds only 50" in stderr
    assert "Traceback" not in stderr


def _seq2seq_data(n=24):
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(4, 50, (n, 7), generator=g).tolist(), torch.randint(4, 50, (n, 5), generator=g).tolist()
    return Dataset.from_dict({"input_ids": src, "attention_mask": [[1] * 7] * n, "labels": tgt})


def _seq2seq_trainer(out, head):
    torch.manual_seed(0)
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart"), head=head))
    if head["family"] == "continuous":
        model.head.set_embedding_table(torch.randn(50, 8, generator=torch.Generator().manual_seed(2)))
    args = HeadsSeq2SeqTrainingArguments(
        output_dir=str(out),
        max_steps=6,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        logging_steps=1,
        save_steps=3,
        report_to="none",
        seed=0,
        use_cpu=True,
        disable_tqdm=True,
    )
    return HeadsSeq2SeqTrainer(model=model, args=args, train_dataset=_seq2seq_data())


@pytest.mark.parametrize(
    "head",
    [
        {"family": "softmax", "label_smoothing": 0.1},
        {"family": "sparse", "k": 5},
        {"family": "continuous", "loss": "margin-random", "embedding_dim": 8},
        {"family": "continuous", "loss": "vmf", "embedding_dim": 8, "tie_decoder_inputs": True},
    ],
    ids=["softmax", "sparse", "continuous-random", "continuous-vmf"],
)
def test_interrupted_seq2seq_training_resumes_to_the_same_losses(tmp_path, head):
    """The margin and sampled families are checked the same way on a causal LM in test_run_clm.py; margin-random
    draws its negatives from torch's generator, whose state the checkpoint carries."""
    full = _seq2seq_trainer(tmp_path / "run", head)
    full.train()
    losses = [e["loss"] for e in full.state.log_history if "loss" in e]
    resumed = _seq2seq_trainer(tmp_path / "run", head)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-3"))
    again = [e["loss"] for e in resumed.state.log_history if "loss" in e]
    torch.testing.assert_close(torch.tensor(again[3:]), torch.tensor(losses[3:]), rtol=1e-5, atol=1e-6)


# flags with values that must be refused, per script; plus junk for any typed flag
BAD_FLAGS = {
    "common": [
        ("--head", "softmaxx"),
        ("--k", "0"),
        ("--k", "many"),
        ("--m", "-1"),
        ("--margin", "big"),
        ("--num_samples", "-3"),
        ("--criterion", "hinge"),
        ("--noise", "zipf"),
        ("--noise_smoothing", "0"),
        ("--head_label_smoothing", "1.5"),
        ("--loss_chunk_size", "0"),
        ("--learning_rate", "fast"),
        ("--max_steps", "1.5"),
        ("--no_such_flag", "1"),
    ],
    "run_clm.py": [("--block_size", "x"), ("--text_column", "body")],
    "run_translation.py": [
        ("--loss", "l2"),
        ("--loss_margin", "-0.1"),
        ("--source_lang", "xx"),
        ("--max_source_length", "many"),
    ],
    "run_classification.py": [("--pooling", "max"), ("--label_column", "topic"), ("--classifier_dropout", "2")],
}
SCRIPTS = ["run_clm.py", "run_translation.py", "run_classification.py"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_cli_fuzz_one_line_error_and_exit_2(tmp_path_factory, script_error, data):
    """In this process (see conftest's `script_error`); test_run_clm / test_run_tasks run the scripts for real."""
    script = data.draw(st.sampled_from(SCRIPTS))
    flag, value = data.draw(st.sampled_from(BAD_FLAGS["common"] + BAD_FLAGS[script]))
    out = tmp_path_factory.mktemp("fuzz") / "o"
    base = {
        "run_clm.py": ["--dataset_name", "bible-web"],
        "run_translation.py": ["--dataset_name", "bible-es-en"],
        "run_classification.py": ["--dataset_name", "bbc-news", "--model_name_or_path", "tiny-bert"],
    }[script]
    args = ["--output_dir", out, "--do_train", "--max_steps", "1", "--max_train_samples", "8", "--report_to", "none"]
    code, stderr = script_error(script, *args, *base, flag, value)
    assert code == 2, (script, flag, value, stderr[-2000:])
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, (script, flag, value, stderr[-2000:])
