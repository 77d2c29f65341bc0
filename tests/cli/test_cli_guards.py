"""The run scripts' shared steps (hf_heads.cli) on small inputs, each against what the flag documents: which checkpoint
`--resume_from_checkpoint true` resumes, an output directory a run may continue in, the split limits, local files, the
seed, the translation direction, the seq2seq tokenisation (source prefix with head+tail truncation, target length,
end-of-sequence kept for a continuous head) and a built-in backbone's tied embeddings."""

import json
import logging
import re

import datasets
import pytest
import torch
import transformers
from datasets.exceptions import DatasetNotFoundError

from hf_heads.cli.errors import UsageError
from hf_heads.cli.resume import check_output_dir, resolve_checkpoint
from hf_heads.cli.runs import RunArguments, load_local_files, start_run, truncate_splits
from hf_heads.data import build_word_tokenizer, save_table
from hf_heads.heads import head_dict
from hf_heads.training import HeadsTrainingArguments

SOFTMAX = head_dict({"family": "softmax"})


def _checkpoint(path) -> None:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "hf_heads", "head": SOFTMAX}))


def test_resume_true_takes_the_checkpoint_of_the_latest_step(tmp_path):
    """Steps are numbers: checkpoint-10 is newer than checkpoint-9 (and than checkpoint-2)."""
    for step in (2, 9, 10):
        _checkpoint(tmp_path / f"checkpoint-{step}")
    assert resolve_checkpoint(str(tmp_path), True, SOFTMAX) == str(tmp_path / "checkpoint-10")
    assert resolve_checkpoint(str(tmp_path), "true", SOFTMAX) == str(tmp_path / "checkpoint-10")
    assert resolve_checkpoint(str(tmp_path), str(tmp_path / "checkpoint-9"), SOFTMAX) == str(tmp_path / "checkpoint-9")
    assert resolve_checkpoint(str(tmp_path), None, SOFTMAX) is None


def test_a_run_resumes_or_overwrites_only_when_asked(tmp_path):
    _checkpoint(tmp_path / "checkpoint-3")
    with pytest.raises(UsageError, match="--overwrite_output_dir"):
        check_output_dir(str(tmp_path), overwrite=False, resume=None)
    check_output_dir(str(tmp_path), overwrite=False, resume=True)  # continuing the run that wrote it
    check_output_dir(str(tmp_path), overwrite=False, resume=str(tmp_path / "checkpoint-3"))
    check_output_dir(str(tmp_path), overwrite=True, resume=None)
    check_output_dir(str(tmp_path / "new"), overwrite=False, resume=None)


def test_each_split_limit_applies_to_its_own_split():
    raw = datasets.DatasetDict(
        {k: datasets.Dataset.from_dict({"x": list(range(10))}) for k in ("train", "validation", "test")}
    )
    sizes = {k: len(v) for k, v in truncate_splits(raw, 7, 3, None).items()}
    assert sizes == {"train": 7, "validation": 3, "test": 10}
    sizes = {k: len(v) for k, v in truncate_splits(raw, None, 20, 2).items()}
    assert sizes == {"train": 10, "validation": 10, "test": 2}


def test_local_files_load_into_the_split_they_are_given_for(tmp_path):
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.csv").write_text(f"text,label\n{split} row,1\n")
    raw = load_local_files(*(str(tmp_path / f"{s}.csv") for s in ("train", "validation", "test")))
    assert {split: raw[split]["text"] for split in raw} == {s: [f"{s} row"] for s in ("train", "validation", "test")}
    with pytest.raises(UsageError, match="extension 'tsv'"):
        load_local_files(str(tmp_path / "train.tsv"), None)


@pytest.fixture
def script_logging(monkeypatch):
    """A run script's logging set-up undone after the test: start_run's basicConfig handler and level on the root
    logger, and transformers' verbosity."""
    monkeypatch.setattr(logging.root, "handlers", [])
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    verbosity = transformers.utils.logging.get_verbosity()
    yield
    transformers.utils.logging.set_verbosity(verbosity)


def test_start_run_seeds_with_the_runs_seed(tmp_path, script_logging):
    """The random state a run builds its model from is the one `--seed` gives."""
    model_args = type("ModelArguments", (), {"model_name_or_path": "tiny-gpt2"})()
    draws = []
    for seed in (7, 7, 8):
        args = HeadsTrainingArguments(output_dir=str(tmp_path / str(seed)), seed=seed, report_to="none")
        head, checkpoint = start_run(model_args, RunArguments(), args)
        draws.append(torch.rand(4))
    assert head == SOFTMAX and checkpoint is None
    transformers.set_seed(7)
    assert torch.equal(draws[0], torch.rand(4)) and torch.equal(draws[1], draws[0])
    assert not torch.equal(draws[2], draws[0])


def test_start_run_keeps_a_saved_models_head_and_takes_other_head_flags_only_with_change_head(
    tmp_path, script_logging
):
    """An hf_heads model reopened without head flags keeps its own head; head flags asking for another head are
    refused, unless `--change_head`, which continues it with the flags' head."""
    _checkpoint(tmp_path / "model")
    model_args = type("ModelArguments", (), {"model_name_or_path": str(tmp_path / "model")})()
    plain = HeadsTrainingArguments(output_dir=str(tmp_path / "plain"), report_to="none")
    sparse = HeadsTrainingArguments(output_dir=str(tmp_path / "sparse"), head="sparse", k=5, report_to="none")
    assert start_run(model_args, RunArguments(), plain) == (SOFTMAX, None)
    with pytest.raises(UsageError, match="but the head flags ask for .*pass --change_head"):
        start_run(model_args, RunArguments(), sparse)
    assert start_run(model_args, RunArguments(change_head=True), sparse) == (sparse.head_config(), None)


# ---------------------------------------------------------------- seq2seq (run_translation / _summarization / _qg)


def _task(rows: dict):
    from hf_heads.cli.seq2seq import Seq2SeqTask

    def load(name):
        return datasets.DatasetDict({k: datasets.Dataset.from_dict({"translation": v}) for k, v in rows.items()})

    return Seq2SeqTask("translation", "Translation", ("toy-es-en",), load, None, None, ("bleu",))


def test_a_bundled_corpus_translates_in_the_direction_of_its_name():
    from hf_heads.cli.seq2seq import DataArguments, load_pairs

    rows = {"train": [{"es": "el rey habló", "en": "the king spoke"}], "test": [{"es": "la luz", "en": "the light"}]}
    pairs = load_pairs(_task(rows), DataArguments(dataset_name="toy-es-en"))
    assert pairs["train"][0] == {"source": "el rey habló", "target": "the king spoke"}
    assert pairs["test"][0] == {"source": "la luz", "target": "the light"}
    flipped = load_pairs(_task(rows), DataArguments(dataset_name="toy-es-en", source_lang="en", target_lang="es"))
    assert flipped["train"][0] == {"source": "the king spoke", "target": "el rey habló"}


@pytest.mark.parametrize("flag", ["source_lang", "target_lang"])
def test_a_language_not_in_the_translation_column_names_its_flag_and_the_languages_there(flag):
    from hf_heads.cli.seq2seq import DataArguments, load_pairs

    rows = {"train": [{"es": "el rey habló", "en": "the king spoke"}]}
    data = DataArguments(dataset_name="toy-es-en", **{flag: "fr"})
    with pytest.raises(UsageError) as refused:
        load_pairs(_task(rows), data)
    assert str(refused.value) == f"--{flag}='fr': the `translation` column has languages ['en', 'es']"


def _pairs(sources: list[str], targets: list[str]) -> datasets.DatasetDict:
    split = datasets.Dataset.from_dict({"source": sources, "target": targets})
    return datasets.DatasetDict(train=split, validation=split)


def test_head_tail_sources_keep_the_prefix_and_targets_their_own_length():
    from hf_heads.cli.seq2seq import DataArguments, tokenize_splits

    source = " ".join(f"w{i}" for i in range(30))
    target = "a b c d e f g h"
    tok = build_word_tokenizer(["summarize :", source, target])
    data = DataArguments(source_prefix="summarize: ", head_tail=True, max_source_length=12, max_target_length=4)
    row = tokenize_splits(_pairs([source], [target]), tok, data, None)["train"][0]
    words = tok.convert_ids_to_tokens(row["input_ids"])
    assert len(words) == 12 and words[:2] == ["summarize", ":"] and words[-3:] == ["w28", "w29", "</s>"]
    assert tok.convert_ids_to_tokens(row["labels"]) == ["a", "b", "c", "</s>"]
    plain = tokenize_splits(_pairs([source], [target]), tok, DataArguments(source_prefix="summarize: "), None)
    assert tok.convert_ids_to_tokens(plain["train"][0]["input_ids"])[:3] == ["summarize", ":", "w0"]


def test_continuous_training_targets_keep_their_end_of_sequence(tmp_path):
    """Words outside the embedding table become <unk> in the training targets; </s> stays (the model learns to
    stop)."""
    from hf_heads.cli.seq2seq import DataArguments, tokenize_splits
    from hf_heads.data import embedding_table

    tok = build_word_tokenizer(["el rey habló", "the king spoke qwzxv"])
    table = save_table(tmp_path / "t.npz", ["the", "king", "spoke"], torch.randn(3, 4).numpy())
    _, covered = embedding_table(tok, str(table))
    pairs = _pairs(["el rey habló"], ["the qwzxv king spoke"])
    labels = tokenize_splits(pairs, tok, DataArguments(), covered)["train"][0]["labels"]
    assert tok.convert_ids_to_tokens(labels) == ["the", "<unk>", "king", "spoke", "</s>"]
    labels = tokenize_splits(pairs, tok, DataArguments(), covered)["validation"][0]["labels"]
    assert tok.convert_ids_to_tokens(labels) == ["the", "qwzxv", "king", "spoke", "</s>"]  # references unchanged


def test_tokenizing_the_splits_shows_a_progress_bar_naming_each_step(tmp_path, capsys):
    """Each split's tokenization, and a continuous head's mapping of the training targets it cannot predict to <unk>,
    shows a progress bar that says which step runs."""
    from hf_heads.cli.seq2seq import DataArguments, tokenize_splits
    from hf_heads.data import embedding_table

    tok = build_word_tokenizer(["el rey habló", "the king spoke qwzxv"])
    table = save_table(tmp_path / "t.npz", ["the", "king", "spoke"], torch.randn(3, 4).numpy())
    _, covered = embedding_table(tok, str(table))
    capsys.readouterr()
    tokenize_splits(_pairs(["el rey habló"], ["the qwzxv king spoke"]), tok, DataArguments(), covered)
    bars = {line.split(":")[0] for line in re.split(r"[\r\n]+", capsys.readouterr().err) if "%|" in line}
    assert bars == {"tokenize", "uncovered targets -> <unk>"}


def test_word_vocab_size_keeps_the_most_frequent_words_of_a_built_in_backbones_tokenizer():
    """--word_vocab_size counts the four special tokens and keeps the training text's most frequent words (sources and
    targets share one vocabulary); without it every word is kept."""
    from hf_heads.cli.seq2seq import ModelArguments, build_tokenizer

    raw = _pairs(["el rey habló", "el rey"], ["the king spoke", "the king the"])
    tok = build_tokenizer(ModelArguments(model_name_or_path="tiny-bart", word_vocab_size=7), raw)
    assert len(tok) == 7 and {"the", "el", "king"} <= set(tok.get_vocab())
    every = build_tokenizer(ModelArguments(model_name_or_path="tiny-bart"), raw)
    assert len(every) == 4 + 6


@pytest.mark.parametrize("name", ["tiny-bart", "tiny-marian"])
def test_built_in_encoder_decoder_backbones_have_a_decoder_as_wide_as_the_encoder(name):
    """tiny-bart / tiny-marian (d_model 128, 2+2 layers): the decoder has the encoder's layers, heads and FFN width."""
    from hf_heads.cli.backbones import tiny_backbone_config

    config = tiny_backbone_config(name, build_word_tokenizer(["the king spoke"]))
    encoder = (config.encoder_layers, config.encoder_attention_heads, config.encoder_ffn_dim)
    assert (config.decoder_layers, config.decoder_attention_heads, config.decoder_ffn_dim) == encoder == (2, 4, 256)


@pytest.mark.parametrize("tie", [True, False])
def test_tie_word_embeddings_ties_a_built_in_backbones_head(tie):
    from hf_heads.cli.seq2seq import ModelArguments, build_model

    tok = build_word_tokenizer(["the king spoke to the people"])
    model = build_model(ModelArguments(model_name_or_path="tiny-bart", tie_word_embeddings=tie), SOFTMAX, tok)
    assert (model.head.weight is model.backbone.get_input_embeddings().weight) == tie
    assert model.config.tie_word_embeddings == tie and model.head.weight.shape == (len(tok), 128)


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-bart", "tiny-marian", "tiny-t5", "tiny-bert"])
def test_each_setting_of_a_built_in_backbone_reaches_its_config(name):
    """Every setting a built-in backbone is declared with is a field of its architecture's config and holds the
    declared value (a misspelt key would be kept as an unused attribute and the model built with the default)."""
    from transformers import CONFIG_MAPPING

    from hf_heads.cli.backbones import TINY_BACKBONES, TINY_ENCODERS, TINY_SEQ2SEQ, tiny_backbone_config

    spec = dict({**TINY_BACKBONES, **TINY_SEQ2SEQ, **TINY_ENCODERS}[name])
    config = tiny_backbone_config(name, build_word_tokenizer(["the king spoke"]))
    defaults = CONFIG_MAPPING[spec.pop("model_type")]()
    for key, value in spec.items():
        assert hasattr(defaults, key), f"{name}: {key} is not a field of {type(defaults).__name__}"
        assert getattr(config, key) == value, (name, key)


@pytest.mark.parametrize("name", ["tiny-bart", "tiny-marian"])
def test_built_in_encoder_decoder_backbones_initialise_at_the_scale_of_d_model(name):
    """tiny-bart / tiny-marian start from weights of std d_model ** -0.5 (0.088 at d_model 128), not BART's 0.02 that
    leaves the cross-attention nearly off (docs/results/seq2seq_recipes/README.md)."""
    from hf_heads.cli.seq2seq import ModelArguments, build_model

    torch.manual_seed(0)
    model = build_model(ModelArguments(model_name_or_path=name), SOFTMAX, build_word_tokenizer(["the king spoke"]))
    layers = [p.flatten() for n, p in model.backbone.named_parameters() if ".layers." in n and p.dim() == 2]
    assert torch.cat(layers).std().item() == pytest.approx(model.backbone.config.d_model**-0.5, rel=0.05)


def test_built_in_causal_backbones_have_a_512_token_context():
    """tiny-gpt2 (make demo's and README's backbone) and tiny-llama hold 512 positions: the same texts and
    --block_size values fit whichever of the two a run uses."""
    from hf_heads import HeadsConfig, HeadsForCausalLM
    from hf_heads.cli.backbones import tiny_backbone_config

    tok = build_word_tokenizer(["the king spoke to the people"])
    for name in ("tiny-gpt2", "tiny-llama"):
        config = tiny_backbone_config(name, tok)
        assert config.max_position_embeddings == 512, name
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_backbone_config("tiny-gpt2", tok), head=SOFTMAX))
    assert model.backbone.wpe.num_embeddings == 512  # its table of learned positions


# ------------------------------------------------------------------------------------------- errors name the flags


def _error_line(monkeypatch, capsys, argv: list[str], fail) -> str:
    """The one line `main_wrapper` prints for `fail()` raising in a run started as `run_clm.py *argv`."""
    from hf_heads.cli.errors import main_wrapper

    monkeypatch.delenv("HF_HEADS_TRACEBACK", raising=False)
    monkeypatch.setattr("sys.argv", ["run_clm.py", *argv])
    with pytest.raises(SystemExit) as exited:
        main_wrapper(fail)
    assert exited.value.code == 2
    return capsys.readouterr().err.strip()


def _head_config(argv: list[str]):
    parser = transformers.HfArgumentParser(HeadsTrainingArguments)
    return lambda: parser.parse_args_into_dataclasses(["--output_dir", "out", *argv])[0].head_config()


def test_a_head_flag_a_family_lacks_is_answered_with_its_flags(monkeypatch, capsys):
    """The options a family has are listed as the flags that set them (`--loss_chunk_size`, not `chunk_size`);
    options that are no flag are left out."""
    argv = ["--head", "sparse", "--num_samples", "5"]
    line = _error_line(monkeypatch, capsys, argv, _head_config(argv))
    assert line.startswith("error: --num_samples is not an option of head family 'sparse'; flags: "), line
    listed = line.split("flags: ")[1].split(", ")
    assert {"--loss_chunk_size", "--head_label_smoothing", "--head_bias", "--k"} <= set(listed), listed
    assert all(name.startswith("--") for name in listed), listed
    argv = ["--head", "continuous", "--loss_chunk_size", "64"]
    line = _error_line(monkeypatch, capsys, argv, _head_config(argv))
    assert line.startswith("error: --loss_chunk_size is not an option of head family 'continuous'"), line
    assert "embedding_dim" not in line and "--logit_scale" in line, line  # embedding_dim: set from the table


def test_an_option_error_raised_later_names_the_flag_that_gave_it(monkeypatch, capsys):
    """An error named after the head section (`head.chunk_size`, raised when the model is built) names the flag
    when the run was given that flag, and keeps the option's name when the value came from elsewhere (a config)."""
    from hf_heads.validation import OptionError

    def fail():
        raise OptionError("chunk_size", 0, "must be >= 1 (chunk_size=0, label_smoothing=0.1)", "head.chunk_size")

    line = _error_line(monkeypatch, capsys, ["--loss_chunk_size", "0"], fail)
    assert line == "error: --loss_chunk_size=0 must be >= 1 (--loss_chunk_size=0, --head_label_smoothing=0.1)"
    line = _error_line(monkeypatch, capsys, ["--model_name_or_path", "out/run"], fail)
    assert line == "error: head.chunk_size=0 must be >= 1 (chunk_size=0, label_smoothing=0.1)"

    def too_many_samples():
        raise OptionError("head.num_samples", 50, "must be < the number of classes (10)")

    line = _error_line(monkeypatch, capsys, ["--head", "sampled", "--num_samples=50"], too_many_samples)
    assert line == "error: --num_samples=50 must be < the number of classes (10)"


def _seq2seq_error_line(monkeypatch, capsys, tmp_path, given: list[str]) -> str:
    """The error line of a seq2seq run on a train.csv with columns es and en, given the flags `given`."""
    from hf_heads.cli.seq2seq import main

    monkeypatch.setattr(logging.root, "handlers", [])  # start_run's basicConfig handler dies with the test
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    verbosity = transformers.utils.logging.get_verbosity()
    (tmp_path / "train.csv").write_text("es,en\nel rey,the king\n")
    argv = ["--output_dir", str(tmp_path / "out"), "--train_file", str(tmp_path / "train.csv"), *given]
    try:
        return _error_line(monkeypatch, capsys, argv, lambda: main(_task({}))).splitlines()[-1]  # after datasets' bars
    finally:
        transformers.utils.logging.set_verbosity(verbosity)


@pytest.mark.parametrize("given", [["--source_column", "es"], ["--target_column", "en"]])
def test_a_seq2seq_script_refuses_one_column_flag_without_the_other(monkeypatch, capsys, tmp_path, given):
    """A seq2seq run given --source_column without --target_column (or the reverse) stops before loading a model
    with one line that says the two flags go together."""
    line = _seq2seq_error_line(monkeypatch, capsys, tmp_path, given)
    assert line == "error: --source_column and --target_column go together: give both or neither"


@pytest.mark.parametrize(
    "given, error",
    [
        (["--source_column", "es", "--target_column", "de"], "--target_column='de'"),
        (["--source_column", "fr", "--target_column", "en"], "--source_column='fr'"),
    ],
    ids=["target", "source"],
)
def test_a_seq2seq_script_refuses_a_column_the_data_lacks_and_lists_the_columns(
    monkeypatch, capsys, tmp_path, given, error
):
    line = _seq2seq_error_line(monkeypatch, capsys, tmp_path, given)
    assert line == f"error: {error}: split 'train' has columns ['es', 'en']"


def _argument_classes() -> dict[str, type]:
    """Every argument dataclass the run scripts parse: the `*Arguments` classes of hf_heads.cli and of each script."""
    import dataclasses
    import importlib
    import importlib.util
    import pkgutil
    import sys
    from pathlib import Path

    import hf_heads.cli

    modules = [importlib.import_module(i.name) for i in pkgutil.walk_packages(hf_heads.cli.__path__, "hf_heads.cli.")]
    scripts = Path(__file__).resolve().parents[2] / "run_scripts"
    for path in sorted(scripts.glob("run_*.py")):
        spec = importlib.util.spec_from_file_location(f"_script_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
        modules.append(module)
    return {
        f"{module.__name__}.{name}": cls
        for module in modules
        for name, cls in vars(module).items()
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and name.endswith("Arguments")
    }


def test_every_run_script_argument_has_its_help():
    """`--help` explains every flag: each field of each argument class the scripts parse carries a help text."""
    import dataclasses

    classes = _argument_classes()
    assert {"hf_heads.cli.seq2seq.DataArguments", "hf_heads.cli.runs.RunArguments"} <= set(classes)
    missing = [f"{where}.{f.name}" for where, cls in classes.items() for f in dataclasses.fields(cls)
               if not f.metadata.get("help")]  # fmt: skip
    assert not missing, f"arguments without a help text: {missing}"


SEQ2SEQ_FLAGS = {  # flag: (help, default as --help shows it) of the seq2seq scripts' own arguments
    "model_name_or_path": (
        "Built-in encoder-decoder built from a config (tiny-bart, tiny-marian, tiny-t5; word-level tokenizer trained "
        "on the corpus), `minilm` (BERT2BERT warm-started from the packaged MiniLM), a local directory or a Hub id "
        "(BART, T5, Marian, ...).",
        "tiny-bart",
    ),
    "tokenizer_name": ("Tokenizer to use instead of the model's.", "None"),
    "word_vocab_size": ("Word-level vocabulary size of built-in backbones (default: every word).", "None"),
    "tie_word_embeddings": ("Built-in backbones: tie the head to the (shared) input embeddings.", "False"),
    "config_overrides": (
        "Built-in backbones: config values to change, `key=value,key=value` (as transformers' run_clm.py), e.g. "
        "`init_std=0.088,dropout=0.0` or `d_model=256,encoder_layers=3,decoder_layers=3`.",
        "None",
    ),
    "dataset_name": (
        "A bundled corpus (translation: bible-es-en, ding-de-en; summarization: bbc-news; question generation: faq; "
        "default: the script's first) or a Hub dataset id.",
        "None",
    ),
    "dataset_config_name": ("Hub dataset configuration.", "None"),
    "train_file": ("Local training file (.csv, .json, .jsonl).", "None"),
    "validation_file": ("Local validation file.", "None"),
    "test_file": ("Local test file (the predict block).", "None"),
    "source_column": ("Column of the input text.", "None"),
    "target_column": ("Column of the output text.", "None"),
    "source_lang": ("Translation: source key of `translation`.", "None"),
    "target_lang": ("Translation: target key of `translation`.", "None"),
    "source_prefix": ("Text put before every source (e.g. for T5).", ""),
    "max_source_length": ("Source tokens kept (truncation).", "128"),
    "max_target_length": ("Target tokens kept; also the generation length.", "64"),
    "head_tail": ("Truncate long sources to head+tail (first quarter + end) instead of the head only.", "False"),
    "max_train_samples": ("Truncate the training set.", "None"),
    "max_eval_samples": ("Truncate the validation set.", "None"),
    "max_predict_samples": ("Truncate the test set.", "None"),
    "overwrite_output_dir": ("Allow writing into an output_dir that already holds a run.", "False"),
    "change_head": (
        "Continue a trained hf_heads model (--model_name_or_path) with the head the head flags give instead of its "
        "own, e.g. a softmax model fine-tuned with --head sparse --k 5 (its head tensors must all load into the new "
        "head).",
        "False",
    ),
    "hub_export_dir": (
        "Offline stand-in for --push_to_hub: write exactly what would be pushed into this directory.",
        "None",
    ),
    "export_base_dir": (
        "Also write the trained model as its base architecture (e.g. LlamaForCausalLM) into this directory: the "
        "backbone and an output layer with the head's inference distribution, the tokenizer and a model card, no "
        "hf_heads code (model.export_base). A head that does not fold (sparse, max-norm, the σ-based sampled "
        "corrections, ...) or an output bias the architecture has no place for ends the run with the reason, after "
        "everything else is written.",
        "None",
    ),
}


def test_seq2seq_help_explains_each_flag_and_its_default(monkeypatch, capsys):
    """`run_translation.py --help` (and the other seq2seq scripts') shows each of the scripts' own flags with its
    help text and its default."""
    from hf_heads.cli.seq2seq import main

    monkeypatch.setenv("COLUMNS", "2000")  # one line per help text: argparse would break words at hyphens
    with pytest.raises(SystemExit) as exited:
        main(_task({}), ["--help"])
    assert exited.value.code == 0
    listing = " ".join(capsys.readouterr().out.split())
    wrong = [
        flag
        for flag, (text, default) in SEQ2SEQ_FLAGS.items()
        if not re.search(rf"--{flag}\b[^()]*? {re.escape(text)} \(default: {re.escape(default)}\)", listing)
    ]
    assert not wrong, wrong


def test_export_base_help_explains_its_arguments(monkeypatch, capsys):
    """`python -m hf_heads.cli.export_base --help`: the two directories in order, then each option with its help."""
    from hf_heads.cli.export_base import parse

    monkeypatch.setenv("COLUMNS", "2000")
    with pytest.raises(SystemExit) as exited:
        parse(["--help"])
    assert exited.value.code == 0
    listing = " ".join(capsys.readouterr().out.split())
    assert "[--no_verify] model output_dir" in listing, listing
    for entry in (
        "model directory of a saved hf_heads model",
        "output_dir directory to write the base-architecture model into",
        "--gguf FILE also write a GGUF file (Llama-family models) at this path",
        "--gguf_dtype {f16,f32} GGUF tensor type (default f16)",
        "--no_verify skip loading the outputs back to compare them",
    ):
        assert entry in listing, (entry, listing)


# ------------------------------------------------------------------------------------------- what a run cannot load


def test_a_hub_tokenizer_offline_is_one_line_naming_the_flag():
    """`--tokenizer_name` of a Hub id while offline: one error naming that flag, offering only a local directory (no
    built-in model is a tokenizer name)."""
    from hf_heads.cli.seq2seq import ModelArguments, load_tokenizer

    with pytest.raises(UsageError) as refused:
        load_tokenizer(ModelArguments(tokenizer_name="no-such/tokenizer"))
    assert str(refused.value) == (
        "--tokenizer_name='no-such/tokenizer' is not a local directory, and Hugging Face offline mode is on "
        "(HF_HUB_OFFLINE), so Hub ids load only from the local cache; offline, use a local directory"
    )


def test_a_misspelt_seq2seq_model_offline_is_one_line_offering_the_built_in_models():
    """`--model_name_or_path` that is neither a built-in model nor a local directory, while offline: one error naming
    the flag and the value, with the nearest built-in name and the built-in models that work offline."""
    from hf_heads.cli.seq2seq import ModelArguments, build_model

    tok = build_word_tokenizer(["the king spoke"])
    with pytest.raises(UsageError) as refused:
        build_model(ModelArguments(model_name_or_path="tiny-bartt"), SOFTMAX, tok)
    assert str(refused.value) == (
        "--model_name_or_path='tiny-bartt' is not a local directory (did you mean 'tiny-bart'?), and Hugging Face "
        "offline mode is on (HF_HUB_OFFLINE), so Hub ids load only from the local cache; offline, use a local "
        "directory or a built-in model: tiny-bart, tiny-marian, tiny-t5, minilm"
    )


@pytest.mark.parametrize(
    "offline, why",
    [
        (False, "the Hub could not be reached or has no such model"),
        (True, "Hugging Face offline mode is on (HF_HUB_OFFLINE), so Hub ids load only from the local cache"),
    ],
    ids=["online", "offline"],
)
def test_a_model_the_hub_cannot_give_says_whether_offline_mode_is_the_reason(monkeypatch, offline, why):
    from hf_heads.cli import errors

    monkeypatch.setattr(errors.constants, "HF_HUB_OFFLINE", offline)
    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(flag, "1" if offline else "0")
    with pytest.raises(UsageError) as refused:
        with errors.loading_model("--model_name_or_path", "tiny-bartt", ["tiny-bart", "tiny-marian"]):
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")
    assert str(refused.value) == (
        f"--model_name_or_path='tiny-bartt' is not a local directory (did you mean 'tiny-bart'?), and {why}; "
        "offline, use a local directory or a built-in model: tiny-bart, tiny-marian"
    )


@pytest.mark.parametrize(
    "error, offline, why",
    [
        (ConnectionError("timed out"), False, "the Hub could not be reached"),
        (
            ConnectionError("timed out"),
            True,
            "Hub datasets need a network (Hugging Face offline mode is on: HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)",
        ),
        (
            DatasetNotFoundError("Dataset 'bible-wbe' doesn't exist on the Hub\nor cannot be accessed."),
            False,
            "the Hub has no such dataset (Dataset 'bible-wbe' doesn't exist on the Hub)",
        ),
    ],
)
def test_a_dataset_the_hub_cannot_give_says_why_and_lists_the_built_in_corpora(monkeypatch, error, offline, why):
    from hf_heads.cli import errors

    def load_dataset(name, config_name):
        raise error

    monkeypatch.setattr(errors.datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(errors.constants, "HF_HUB_OFFLINE", offline)
    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(flag, "1" if offline else "0")
    with pytest.raises(UsageError) as refused:
        errors.load_hub_dataset("bible-wbe", None, ["bible-web", "bbc-news"])
    assert str(refused.value) == (
        f"--dataset_name='bible-wbe' is not a built-in corpus (did you mean 'bible-web'?), and {why}; built-in "
        "corpora: bible-web, bbc-news; or give local files (--train_file / --validation_file)"
    )


# ------------------------------------------------------------------------------------------- continuous heads' tables


def test_a_table_trained_on_the_targets_covers_the_target_words_and_is_reused_by_the_trained_model(tmp_path):
    """`--embedding_name word2vec-targets`: the table is trained on the training split's target side (source-only
    words stay uncovered) and saved in the run's output_dir; a run reopening that model reads the model's own table,
    so it needs no training split."""
    from hf_heads.cli.seq2seq import run_table

    tok = build_word_tokenizer(["el rey habló", "the king spoke"], add_eos=True)
    head = head_dict({"family": "continuous", "embedding_name": "word2vec-targets", "word2vec_dim": 8})
    split = datasets.Dataset.from_dict({"source": ["el rey habló"] * 3, "target": ["the king spoke"] * 3})
    train = datasets.DatasetDict(train=split)
    trained, table, covered = run_table(head, tok, train, str(tmp_path / "run"), "tiny-bart", 0)  # a new model
    assert sorted(tok.convert_ids_to_tokens(covered.nonzero().flatten().tolist())) == ["king", "spoke", "the"]
    assert trained["embedding_dim"] == 8 and table.shape == (len(tok), 8)
    assert (tmp_path / "run" / "target_word2vec.npz").is_file()
    evaluate = datasets.DatasetDict(validation=split)
    again, reread, covered_again = run_table(
        head, tok, evaluate, str(tmp_path / "evaluated"), str(tmp_path / "run"), 1
    )
    assert again == trained and torch.equal(reread, table) and torch.equal(covered_again, covered)
    assert not (tmp_path / "evaluated").exists()


# ------------------------------------------------------------------------------------------- more refusals of a run


def test_a_local_directory_that_is_no_model_is_one_line_with_transformers_reason(tmp_path):
    """`--model_name_or_path` of a directory holding a config but no weights: the flag, the directory and the first
    line of transformers' own error."""
    from conftest import tiny_enc_dec_config

    from hf_heads.cli.seq2seq import ModelArguments, build_model

    tiny_enc_dec_config().save_pretrained(tmp_path / "config_only")
    tok = build_word_tokenizer(["the king spoke"])
    with pytest.raises(UsageError) as refused:
        build_model(ModelArguments(model_name_or_path=str(tmp_path / "config_only")), SOFTMAX, tok)
    assert str(refused.value) == (
        f"--model_name_or_path={str(tmp_path / 'config_only')!r}: Error no file named model.safetensors, or "
        f"pytorch_model.bin, found in directory {tmp_path / 'config_only'}."
    )
    assert isinstance(refused.value.__cause__, OSError)


def test_a_missing_file_of_the_scripts_own_keeps_its_traceback_while_loading_a_model(tmp_path):
    from hf_heads.cli.errors import loading_model

    with pytest.raises(FileNotFoundError) as raised:
        with loading_model("--model_name_or_path", str(tmp_path), ["tiny-bart"]):
            (tmp_path / "missing.txt").read_text()
    assert raised.value.filename == str(tmp_path / "missing.txt")


def test_hf_heads_traceback_keeps_the_traceback_of_bad_input_and_of_a_hub_error(monkeypatch, capsys):
    """HF_HEADS_TRACEBACK=1: bad input and a model the Hub cannot give propagate as raised, no one-line report."""
    from hf_heads.cli.errors import main_wrapper

    monkeypatch.setenv("HF_HEADS_TRACEBACK", "1")
    bad = UsageError("--max_train_samples=-1 must be >= 0")

    def refuse():
        raise bad

    with pytest.raises(UsageError) as raised:
        main_wrapper(refuse)
    assert raised.value is bad
    with pytest.raises(OSError) as raised:
        main_wrapper(lambda: transformers.AutoConfig.from_pretrained("no-such-org/no-such-model"))
    assert str(raised.value).startswith("We couldn't connect to 'https://huggingface.co' to load the files")
    assert "error:" not in capsys.readouterr().err


def test_saved_head_is_none_for_a_directory_that_is_no_hf_heads_model_with_a_head(tmp_path):
    from hf_heads.cli.resume import saved_head

    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "headless").mkdir()
    (tmp_path / "headless" / "config.json").write_text(json.dumps({"model_type": "hf_heads", "head": None}))
    _checkpoint(tmp_path / "heads")
    assert saved_head(str(tmp_path / "llama")) is None
    assert saved_head(str(tmp_path / "headless")) is None
    assert saved_head(str(tmp_path / "heads")) == SOFTMAX


def test_a_single_json_argument_is_read_as_the_runs_config_file(tmp_path):
    from hf_heads.cli.runs import parse_args

    (tmp_path / "run.json").write_text(json.dumps({"output_dir": "o", "report_to": "none", "seed": 11}))
    run_args, args = parse_args((RunArguments, HeadsTrainingArguments), [str(tmp_path / "run.json")])
    assert isinstance(run_args, RunArguments) and (args.output_dir, args.seed) == ("o", 11)
    (tmp_path / "bad.json").write_text(json.dumps({"output_dir": "o", "report_to": "none", "sede": 11}))
    with pytest.raises(UsageError) as refused:
        parse_args((RunArguments, HeadsTrainingArguments), [str(tmp_path / "bad.json")])
    assert str(refused.value) == "Some keys are not used by the HfArgumentParser: ['sede']"


def test_evaluating_without_training_counts_the_training_splits_labels_for_a_head_that_needs_them():
    from conftest import tiny_llama_config

    from hf_heads import HeadsConfig, HeadsForCausalLM
    from hf_heads.cli.runs import ensure_word_counts
    from hf_heads.data.tokenization import label_counts

    head = {"family": "margin", "margin": "cos", "m": 0.1, "word_norm": "log-unigram"}
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config(), head=head))
    train = datasets.Dataset.from_dict({"labels": [[5, 5, 7, -100], [7, 9, 5, 3]]})
    assert not model.head.has_word_counts
    ensure_word_counts(model, train)
    assert model.head.has_word_counts
    expected = label_counts(train, 61)
    assert expected[5] == 3 and expected[7] == 2 and expected[9] == 1
    assert torch.equal(model.head.word_counts.to(expected), expected)


def test_local_translation_pairs_need_both_languages_named(tmp_path):
    """Local files have no corpus name to take the direction from: without --source_lang and --target_lang the
    run is refused."""
    from hf_heads.cli.seq2seq import DataArguments, load_pairs

    (tmp_path / "train.jsonl").write_text(json.dumps({"translation": {"es": "el rey", "en": "the king"}}) + "\n")
    with pytest.raises(UsageError) as refused:
        load_pairs(_task({}), DataArguments(train_file=str(tmp_path / "train.jsonl"), source_lang="es"))
    assert str(refused.value) == "give --source_lang and --target_lang (keys of the `translation` column)"
    pairs = load_pairs(_task({}), DataArguments(train_file=str(tmp_path / "train.jsonl"), source_lang="es",
                                                target_lang="en"))  # fmt: skip
    assert pairs["train"][0] == {"source": "el rey", "target": "the king"}


def test_translation_files_without_a_translation_column_ask_for_the_column_flags(tmp_path):
    from hf_heads.cli.seq2seq import DataArguments, load_pairs

    (tmp_path / "train.csv").write_text("es,en\nel rey,the king\n")
    data = DataArguments(train_file=str(tmp_path / "train.csv"), source_lang="es", target_lang="en")
    with pytest.raises(UsageError) as refused:
        load_pairs(_task({}), data)
    assert str(refused.value) == (
        "split 'train' has no `translation` column (columns: ['es', 'en']); give --source_column and --target_column"
    )


def test_a_table_trained_on_the_targets_of_a_new_model_needs_a_training_split(tmp_path):
    from hf_heads.cli.seq2seq import run_table

    tok = build_word_tokenizer(["the king spoke"], add_eos=True)
    head = head_dict({"family": "continuous", "embedding_name": "word2vec-targets", "word2vec_dim": 8})
    split = datasets.Dataset.from_dict({"source": ["el rey habló"], "target": ["the king spoke"]})
    with pytest.raises(UsageError) as refused:
        run_table(head, tok, datasets.DatasetDict(validation=split), str(tmp_path / "run"), "tiny-bart", 0)
    assert str(refused.value) == (
        "embedding_name='word2vec-targets' trains the table on the training targets: give a training set"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "override, error",
    [
        ("scale_embedding=yes", "--config_overrides: scale_embedding='yes' must be true or false"),
        ("dropout=high", "--config_overrides: dropout='high' must be a number"),
        ("d_model=wide", "--config_overrides: d_model='wide' must be a number"),
    ],
    ids=["bool", "float", "int"],
)
def test_config_overrides_refuse_a_value_of_the_wrong_type(override, error):
    from transformers import BartConfig

    from hf_heads.cli.seq2seq import _override_config

    config = BartConfig(d_model=128, dropout=0.1, scale_embedding=False)
    with pytest.raises(UsageError) as refused:
        _override_config(config, override)
    assert str(refused.value) == error
    assert (config.d_model, config.dropout, config.scale_embedding) == (128, 0.1, False)


def test_config_overrides_of_an_unset_field_keep_numbers_numbers():
    from transformers import BartConfig

    from hf_heads.cli.seq2seq import _override_config

    config = BartConfig()
    config.forced_bos_token_id = config.custom_scale = config.custom_marker = None
    _override_config(config, "forced_bos_token_id=-3,custom_scale=2.5,custom_marker=spoke")
    assert config.forced_bos_token_id == -3 and isinstance(config.forced_bos_token_id, int)
    assert config.custom_scale == 2.5 and isinstance(config.custom_scale, float)
    assert config.custom_marker == "spoke"


def test_config_overrides_are_refused_for_a_model_that_is_not_built_in(tmp_path):
    from hf_heads.cli.seq2seq import ModelArguments, build_model

    tok = build_word_tokenizer(["the king spoke"])
    args = ModelArguments(model_name_or_path=str(tmp_path / "bart"), config_overrides="d_model=64")
    with pytest.raises(UsageError) as refused:
        build_model(args, SOFTMAX, tok)
    assert str(refused.value) == (
        f"--config_overrides applies to the built-in backbones (tiny-bart, tiny-marian, tiny-t5), not "
        f"{str(tmp_path / 'bart')!r}"
    )


@pytest.mark.parametrize(
    "flag, error",
    [
        ("--do_eval", "error: --do_eval needs a validation split (--validation_file)"),
        ("--do_predict", "error: --do_predict needs a test split (--test_file)"),
    ],
    ids=["eval", "predict"],
)
def test_a_seq2seq_script_refuses_evaluating_a_split_the_data_lacks(monkeypatch, capsys, tmp_path, flag, error):
    given = ["--source_column", "es", "--target_column", "en", "--report_to", "none", flag]
    assert _seq2seq_error_line(monkeypatch, capsys, tmp_path, given) == error
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_new_continuous_head_centred_by_frequency_without_a_training_split_is_refused(
    monkeypatch, capsys, tmp_path, script_logging
):
    """Evaluating a new model whose continuous head centres its table by the training targets' frequencies, with no
    training split: one line naming the option and what to give."""
    from hf_heads.cli.seq2seq import main

    build_word_tokenizer(["el rey", "the king"], add_eos=True).save_pretrained(tmp_path / "tok")
    save_table(tmp_path / "table.npz", ["the", "king"], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    (tmp_path / "valid.csv").write_text("es,en\nel rey,the king\n")
    argv = [
        "--output_dir", str(tmp_path / "out"), "--validation_file", str(tmp_path / "valid.csv"), "--source_column",
        "es", "--target_column", "en", "--tokenizer_name", str(tmp_path / "tok"), "--head", "continuous",
        "--embedding_name", str(tmp_path / "table.npz"), "--center_embeddings", "frequency", "--do_eval",
        "--report_to", "none",
    ]  # fmt: skip
    line = _error_line(monkeypatch, capsys, argv, lambda: main(_task({}))).splitlines()[-1]
    assert line == (
        "error: head.center_embeddings='frequency' counts the training targets: give a training set: --do_train with "
        "--dataset_name or --train_file, or a trained hf_heads model"
    )


def test_a_trained_continuous_head_centred_by_frequency_evaluates_without_a_training_split(tmp_path, script_logging):
    """A trained hf_heads model keeps the counts its continuous head was centred with: evaluating it needs only a
    validation split."""
    from hf_heads.cli.seq2seq import main

    build_word_tokenizer(["el rey habló", "the king spoke"], add_eos=True).save_pretrained(tmp_path / "tok")
    save_table(tmp_path / "table.npz", ["the", "king"], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    (tmp_path / "train.csv").write_text("es,en\nel rey habló,the king spoke\nel rey,the king\n")
    (tmp_path / "valid.csv").write_text("es,en\nel rey,the king\n")
    columns = ["--source_column", "es", "--target_column", "en", "--report_to", "none"]
    train = [
        "--output_dir", str(tmp_path / "model"), "--train_file", str(tmp_path / "train.csv"), "--tokenizer_name",
        str(tmp_path / "tok"), "--head", "continuous", "--embedding_name", str(tmp_path / "table.npz"),
        "--center_embeddings", "frequency", "--do_train", "--max_steps", "1", *columns,
    ]  # fmt: skip
    evaluate = [
        "--output_dir", str(tmp_path / "eval"), "--model_name_or_path", str(tmp_path / "model"), "--validation_file",
        str(tmp_path / "valid.csv"), "--do_eval", *columns,
    ]  # fmt: skip
    main(_task({}), train)
    main(_task({}), evaluate)
    assert "eval_loss" in json.loads((tmp_path / "eval" / "eval_results.json").read_text())
