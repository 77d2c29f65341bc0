"""The toy extensions of tests/extension/toy_components (a two-parameter margin, a word norm with a parameter
and a sampling method with one; a continuous-output loss in a seq2seq model built in the test; docs/contributing.md)
go the whole way a user's own component goes: trained by
run_clm.py from its flags alone, in a process of its own (`--head_modules` imports them, `--margin name:p=v,...`
sets their parameters), saved with the modules they came from recorded in the config, reloaded in the test's
process, which has never imported them (the recorded modules are imported on loading), and loaded with
`trust_remote_code=True` where neither hf_heads nor the package can be imported (the copies saved with the model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from export_check import export_job, load_without_hf_heads

from hf_heads import HeadsForCausalLM
from hf_heads.components import REGISTRIES
from hf_heads.data import load_lm_text

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = Path(__file__).parents[1] / "extension"
MODULES = ["toy_components.margins", "toy_components.word_norms", "toy_components.sampling"]
FLAGS = [
    "--head", "sampled", "--head_modules", *MODULES,
    "--margin", "toy-arc-cos:m1=0.2,m2=0.05", "--word_norm", "toy-log1p-unigram:scale=0.5",
    "--method", "toy-tempered-is:power=0.5", "--num_samples", "16", "--noise", "uniform",
]  # fmt: skip


@pytest.fixture
def extension_path(monkeypatch):
    """tests/extension on the path; the toy modules imported and registered for this test only."""
    before = {kind: dict(registry) for kind, registry in REGISTRIES.items()}
    monkeypatch.syspath_prepend(str(EXTENSION))
    yield
    for kind, registry in REGISTRIES.items():
        registry.clear()
        registry.update(before[kind])
    for name in [name for name in sys.modules if name.split(".")[0] == "toy_components"]:
        del sys.modules[name]


def _run_clm(*args: str) -> None:
    """`python run_scripts/run_clm.py *args` in a process of its own, with the user's package on its path."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(EXTENSION), str(ROOT)])}
    cmd = [sys.executable, str(ROOT / "run_scripts" / "run_clm.py"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_toy_components_train_from_flags_save_reload_and_load_without_hf_heads(extension_path, tmp_path):
    corpus = load_lm_text("bible-web")
    train, valid = tmp_path / "train.txt", tmp_path / "valid.txt"
    train.write_text("\n".join(corpus["train"]["text"][:200]) + "\n", encoding="utf-8")
    valid.write_text("\n".join(corpus["validation"]["text"][:40]) + "\n", encoding="utf-8")
    out, hub = tmp_path / "run", tmp_path / "hub"
    _run_clm(
        "--train_file", str(train), "--validation_file", str(valid), "--output_dir", str(out),
        "--hub_export_dir", str(hub), "--do_train", "--do_eval", "--max_steps", "3", "--save_strategy", "no",
        "--block_size", "32", "--per_device_train_batch_size", "4", "--report_to", "none", "--seed", "0", *FLAGS,
    )  # fmt: skip
    config = json.loads((out / "config.json").read_text())
    assert config["head"]["margin"] == {"type": "toy-arc-cos", "m1": 0.2, "m2": 0.05}
    assert config["head"]["word_norm"] == {"type": "toy-log1p-unigram", "scale": 0.5}
    assert config["head"]["method"] == {"type": "toy-tempered-is", "power": 0.5}
    assert config["components"] == dict(zip(["margin", "word_norm", "method"], MODULES, strict=True))
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["train_loss"] > 0 and 1.0 < summary["eval_perplexity"] < 1e6

    # this process has not imported the package: loading imports the recorded modules before reading the head
    assert not any(name.startswith("toy-") for registry in REGISTRIES.values() for name in registry)
    assert "toy_components" not in sys.modules
    model = HeadsForCausalLM.from_pretrained(out).eval()
    scorer = model.head.scorer()
    assert (scorer.margin.m1, scorer.margin.m2, scorer.word_norm.scale) == (0.2, 0.05, 0.5)
    assert model.head.options.sampler.power == 0.5

    # neither hf_heads nor toy_components importable: the copies saved with the model
    assert {"toy_components_margins.py", "toy_components_word_norms.py", "toy_components_sampling.py"} <= {
        p.name for p in hub.iterdir()
    }
    job = export_job(hub, "AutoModelForCausalLM", text="In the beginning God")
    (got,) = load_without_hf_heads([job], tmp_path / "export-check")
    with torch.no_grad():
        torch.testing.assert_close(got["output"], model(**got["inputs"]).logits)


def test_head_options_set_what_has_no_flag_and_errors_name_them():
    from hf_heads.training import HeadsTrainingArguments

    args = HeadsTrainingArguments(
        output_dir="o", report_to="none", head="margin",
        head_options=['margin={"type": "arc", "m": 0.1}', "context_norm=max-norm", "context_norm_momentum=0.5"],
    )  # fmt: skip
    head = args.head_config()
    assert head["margin"] == {"type": "arc", "m": 0.1} and head["context_norm"] == "max-norm"
    assert head["context_norm_momentum"] == 0.5  # a JSON value, a word otherwise
    with pytest.raises(ValueError, match="--head_options alpha is not an option of head family 'margin'"):
        HeadsTrainingArguments(
            output_dir="o", report_to="none", head="margin", head_options=["alpha=0.5"]
        ).head_config()
    with pytest.raises(ValueError, match="--head_options=.*must be written name=value"):
        HeadsTrainingArguments(output_dir="o", report_to="none", head="margin", head_options=["alpha"]).head_config()
    with pytest.raises(ValueError, match="--margin parameter m=-1 must be >= 0"):
        HeadsTrainingArguments(output_dir="o", report_to="none", head="margin", margin="arc:m=-1").head_config()
    with pytest.raises(ValueError, match="^--head_options margin parameter m=-1 must be >= 0$"):
        HeadsTrainingArguments(
            output_dir="o", report_to="none", head="margin", head_options=["margin=arc:m=-1"]
        ).head_config()
    with pytest.raises(ValueError, match="--margin parameter m1=0.2 is not a parameter of margin 'arc'; allowed: m"):
        HeadsTrainingArguments(output_dir="o", report_to="none", head="margin", margin="arc:m1=0.2").head_config()


def _toy_continuous_model():
    """A tiny seq2seq model with the toy continuous loss (`toy_components.continuous`, imported here)."""
    import importlib

    from conftest import tiny_enc_dec_config

    from hf_heads import HeadsConfig, HeadsForSeq2SeqLM

    importlib.import_module("toy_components.continuous")
    torch.manual_seed(0)
    head = {"family": "continuous", "loss": "toy-cosine-distance:weight=2", "embedding_dim": 8}
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart"), head=head))
    model.head.set_embedding_table(torch.randn(50, 8, generator=torch.Generator().manual_seed(1)))
    return model


def test_a_toy_continuous_loss_trains_saves_and_reloads(extension_path, tmp_path):
    """The toy continuous-output loss (a parameter of its own) in a seq2seq model: its loss is its definition, the
    config records it and its module, and a process that never imported it reloads the model."""
    from conftest import seq2seq_batch

    from hf_heads import HeadsForSeq2SeqLM

    model = _toy_continuous_model()
    x, mask, y = seq2seq_batch()
    seen = []  # û of the kept positions, as the head's projection gives it
    model.head.proj.register_forward_hook(lambda module, args, output: seen.append(output))
    out = model(input_ids=x, attention_mask=mask, labels=y)
    cosine = F.cosine_similarity(seen[0], model.head.embeddings[y[y != -100]], dim=-1)
    torch.testing.assert_close(out.loss, (2.0 * (1 - cosine)).mean())
    out.loss.backward()
    assert float(model.head.proj.weight.grad.abs().sum()) > 0

    model.save_pretrained(tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert config["head"]["loss"] == {"type": "toy-cosine-distance", "weight": 2.0}
    assert config["components"] == {"loss": "toy_components.continuous"}
    assert (tmp_path / "saved" / "toy_components_continuous.py").exists()
    del REGISTRIES["continuous_loss"]["toy-cosine-distance"], sys.modules["toy_components.continuous"]
    reloaded = HeadsForSeq2SeqLM.from_pretrained(tmp_path / "saved").eval()
    assert reloaded.head.options.component("loss").weight == 2.0
    inputs = {"input_ids": x, "attention_mask": mask, "decoder_input_ids": y.clamp_min(0)}
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, model.eval()(**inputs).logits)


@pytest.mark.slow
def test_a_toy_continuous_loss_loads_without_hf_heads(extension_path, tmp_path):
    """The copy of `toy_components.continuous` saved with the model serves `trust_remote_code` without hf_heads."""
    from conftest import seq2seq_batch

    model = _toy_continuous_model().eval()
    model.save_pretrained(tmp_path / "saved")
    x, mask, y = seq2seq_batch()
    inputs = {"input_ids": x, "attention_mask": mask, "decoder_input_ids": y.clamp_min(0)}
    (got,) = load_without_hf_heads([export_job(tmp_path / "saved", "AutoModelForSeq2SeqLM", inputs)], tmp_path / "x")
    with torch.no_grad():
        torch.testing.assert_close(got["output"], model(**got["inputs"]).logits)


def test_a_toy_chunk_kernel_runs_the_heads_chunks_saves_and_reloads(extension_path, tmp_path):
    """The toy chunk kernel (`toy_components.kernels`) named by a head's `chunk_kernel`: it computes the head's
    chunks (the eager kernel's loss), the config records it and its module, the model saves the module's copy, and a
    process that never imported it reloads the model."""
    import importlib

    from conftest import tiny_llama_config

    from hf_heads import HeadsConfig

    kernels = importlib.import_module("toy_components.kernels")
    kernels.CountingEager.chunks.clear()
    ids = torch.randint(4, 61, (2, 8), generator=torch.Generator().manual_seed(0))
    losses = []
    for kernel in ("toy-counting-eager", "eager"):
        torch.manual_seed(0)
        head = {"family": "softmax", "chunk_kernel": kernel, "chunk_size": 5}
        model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
        losses.append(model(input_ids=ids, labels=ids).loss)
        if kernel != "eager":
            losses[-1].backward()
            mine = model
    assert kernels.CountingEager.chunks == [5, 5, 4]  # 14 rows (2 × 7 shifted labels) in chunks of 5
    torch.testing.assert_close(losses[0], losses[1])

    mine.save_pretrained(tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert config["head"]["chunk_kernel"] == "toy-counting-eager"
    assert config["components"] == {"chunk_kernel": "toy_components.kernels"}
    assert (tmp_path / "saved" / "toy_components_kernels.py").exists()
    del REGISTRIES["kernel"]["toy-counting-eager"], sys.modules["toy_components.kernels"]
    reloaded = HeadsForCausalLM.from_pretrained(tmp_path / "saved").eval()
    assert "toy-counting-eager" in REGISTRIES["kernel"] and "toy_components.kernels" in sys.modules
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, mine.eval()(input_ids=ids).logits)


def test_a_refused_head_flag_says_how_to_give_what_was_meant(extension_path):
    """The run scripts' refusals point at the fix: an unknown component name at `--head_modules`, a component's
    parameter given as a flag of its own at the `name:p=v` form, a family's option without a flag (a family
    registered from a module, as `--head_modules` registers it) at `--head_options`."""
    import dataclasses
    import importlib

    from hf_heads.cli.errors import UsageError
    from hf_heads.cli.runs import RunArguments, parse_args
    from hf_heads.heads import FAMILIES, SoftmaxHead, SoftmaxHeadOptions
    from hf_heads.training import HeadsTrainingArguments
    from hf_heads.validation import OptionError

    def parse(*flags: str):
        return parse_args((RunArguments, HeadsTrainingArguments), ["--output_dir", "o", "--report_to", "none", *flags])

    args = HeadsTrainingArguments(output_dir="o", report_to="none", head="margin", margin="combined")
    with pytest.raises(OptionError, match=r"--margin='combined' is not allowed; allowed: .* --head_modules your"):
        args.head_config()
    importlib.import_module("toy_components.word_norms")
    norm, scale = "toy-log1p-unigram:scale=0.5", ["scale=8"]
    args = HeadsTrainingArguments(output_dir="o", report_to="none", head="margin", word_norm=norm, head_options=scale)
    with pytest.raises(OptionError, match=r"--word_norm=.*toy-log1p-unigram.* is not allowed with") as refused:
        args.head_config()
    assert "--head_modules" not in str(refused.value)  # registered, refused for another reason
    importlib.import_module("toy_components.margins")
    hint = r"\(--m1 is a parameter of margin 'toy-arc-cos': write it into that flag, --margin toy-arc-cos:m1=VALUE\)"
    with pytest.raises(UsageError, match=r"unknown arguments: --m1 1\.2 " + hint):
        parse("--head", "margin", "--margin", "toy-arc-cos", "--m1", "1.2")

    @dataclasses.dataclass
    class TempOptions(SoftmaxHeadOptions):
        temperature: float = dataclasses.field(default=1.0, metadata={"help": "Logits are divided by it."})

    class TempHead(SoftmaxHead):
        family = "toy-temp"
        options_class = TempOptions

    before = dict(FAMILIES)
    try:
        importlib.import_module("hf_heads.components").register("family")(TempHead)
        with pytest.raises(UsageError, match=r"--temperature is an option of head family 'toy-temp' without a flag "
                                             r"of its own: write --head_options temperature=VALUE"):  # fmt: skip
            parse("--head", "toy-temp", "--temperature", "0.5")
    finally:
        FAMILIES.clear()
        FAMILIES.update(before)
    with pytest.raises(UsageError, match=r"unknown arguments: --nothing 1 \(a component's parameter goes into its"):
        parse("--nothing", "1")
