import logging
import os
import runpy
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The Triton chunk kernel's tests run its program on CPU tensors, under Triton's interpreter: the mode is fixed when
# triton is first imported, so it is set before anything imports it.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import GPT2Config, LlamaConfig  # noqa: E402

# `make test` runs the suite on 2 pytest-xdist workers: one thread each (and in the scripts they start), so the
# two workers share the 2 cores instead of oversubscribing them. A plain `pytest` run keeps 2 threads.
THREADS = "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"
os.environ["OMP_NUM_THREADS"] = THREADS
torch.set_num_threads(min(int(THREADS), torch.get_num_threads()))


def tiny_gpt2_config(vocab_size: int = 61, **kw) -> GPT2Config:
    """The tests' tiny GPT-2 (every tiny backbone of the tests is built here); `kw` overrides any field."""
    fields = dict(n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=2, eos_token_id=3)
    return GPT2Config(vocab_size=vocab_size, **{**fields, **kw})


def tiny_llama_config(vocab_size: int = 61, **kw) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=vocab_size,
        max_position_embeddings=64,
        bos_token_id=2,
        eos_token_id=3,
        pad_token_id=1,
        tie_word_embeddings=kw.pop("tie_word_embeddings", False),
        **kw,
    )


@pytest.fixture(params=["gpt2", "llama"])
def tiny_base(request, tmp_path):
    """A saved tiny GPT-2 (tied embeddings) or Llama (untied) causal LM built from config."""
    from transformers import GPT2LMHeadModel, LlamaForCausalLM

    torch.manual_seed(0)
    model = GPT2LMHeadModel(tiny_gpt2_config()) if request.param == "gpt2" else LlamaForCausalLM(tiny_llama_config())
    path = tmp_path / request.param
    model.eval().save_pretrained(path)
    return str(path), model


# The longest end-to-end tests (seconds on the reference machine, one thread) go first, so that the two xdist
# workers start them early and the short tests fill in around them instead of one long test running alone at the end.
LONG_FIRST = (
    "test_run_classification_minilm_beats_majority_class",
    "test_cli_fuzz_one_line_error_and_exit_2",
    "test_run_translation_sparse_end_to_end_under_accelerate",
    "test_run_clm_margin_end_to_end",
    "test_smollm2_softmax_head_same_logits",
    "test_run_question_generation_minilm_bert2bert",
    "test_two_process_ddp_matches_one_process",
    "test_fsdp2_two_processes_match_one_process",
    "test_run_summarization_tiny_t5_head_tail",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.originalname, len(rank)))


# ---------------------------------------------------------------- run scripts without a new interpreter

SCRIPTS = Path(__file__).resolve().parents[1] / "run_scripts"


@pytest.fixture
def script_error(monkeypatch, capsys):
    """Run a script of run_scripts/ in this process, as `python run_scripts/<script> *args` would, and return its
    exit status and stderr. For the bad-input paths: they stop before training, and an interpreter start costs
    ~8 s of imports on the reference machine. An exception other than the scripts' own one-line exit (a
    traceback) propagates and fails the test. Each script keeps at least one real subprocess test."""

    def run(script: str, *args: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", [str(SCRIPTS / script), *map(str, args)])
        monkeypatch.syspath_prepend(str(SCRIPTS))
        monkeypatch.setattr(logging.root, "handlers", [])  # the script's basicConfig handler dies with the test
        monkeypatch.setattr(logging.root, "level", logging.root.level)
        with pytest.raises(SystemExit) as info:
            runpy.run_path(str(SCRIPTS / script), run_name="__main__")
        return info.value.code, capsys.readouterr().err

    return run


# ---------------------------------------------------------------- tiny backbones and batches shared by the model tests


def tiny_enc_dec_config(kind: str = "bart", vocab_size: int = 50, no_dropout: bool = False, **sizes):
    """A tiny encoder-decoder backbone config: `bart`, `t5`, `marian` or `bert2bert` (an EncoderDecoderConfig of two
    BERTs); `no_dropout` sets every dropout probability to 0 (train-mode losses then depend on the weights only);
    `sizes` replaces BART's / Marian's sizes (d_model, encoder_layers, decoder_ffn_dim, ...; init_std follows
    d_model ** -0.5 unless given)."""
    from transformers import BartConfig, BertConfig, EncoderDecoderConfig, MarianConfig, T5Config

    small = dict(vocab_size=vocab_size, pad_token_id=1, eos_token_id=3)
    layers = dict(
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        d_model=32,
        # BART / Marian's default init_std=0.02 is sized for d_model 1024; d_model ** -0.5 as the built-in backbones
        # (hf_heads.cli.backbones) use: with 0.02 the cross-attention starts too small to carry the source
        init_std=32**-0.5,
    )
    if sizes:
        if kind not in ("bart", "marian"):
            raise ValueError(f"sizes={sizes!r} are for kind 'bart' or 'marian', not {kind!r}")
        layers = {**layers, "init_std": sizes.get("d_model", layers["d_model"]) ** -0.5, **sizes}
    quiet = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0) if no_dropout else {}
    if kind == "bart":
        return BartConfig(
            **small, **layers, **quiet, bos_token_id=2, decoder_start_token_id=3, forced_eos_token_id=None
        )
    if kind == "marian":
        return MarianConfig(**small, **layers, **quiet, decoder_start_token_id=1)
    if kind == "t5":
        return T5Config(
            **small,
            d_model=32,
            d_kv=16,
            d_ff=64,
            num_layers=1,
            num_heads=2,
            decoder_start_token_id=1,
            **(dict(dropout_rate=0.0) if no_dropout else {}),
        )
    if kind != "bert2bert":
        raise ValueError(f"kind={kind!r}: bart, t5, marian or bert2bert")
    bert = _tiny_bert_kwargs(vocab_size, pad_token_id=1, no_dropout=no_dropout)
    cfg = EncoderDecoderConfig.from_encoder_decoder_configs(
        BertConfig(**bert), BertConfig(**bert, is_decoder=True, add_cross_attention=True)
    )
    cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id = 2, 1, 3
    return cfg


def _tiny_bert_kwargs(vocab_size: int, pad_token_id: int, no_dropout: bool) -> dict:
    quiet = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0) if no_dropout else {}
    return dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        pad_token_id=pad_token_id,
        max_position_embeddings=64,
        **quiet,
    )


def tiny_bert_config(vocab_size: int = 50, pad_token_id: int = 0, no_dropout: bool = False):
    from transformers import BertConfig

    return BertConfig(**_tiny_bert_kwargs(vocab_size, pad_token_id, no_dropout))


def seq2seq_batch(seed: int = 0, vocab_size: int = 50):
    """input_ids (3, 7), attention_mask (row 0 padded after 5 tokens), labels (3, 5) (row 1 ignored after 3)."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randint(4, vocab_size, (3, 7), generator=g), torch.randint(4, vocab_size, (3, 5), generator=g)
    mask = torch.ones_like(x)
    mask[0, 5:] = 0
    y[1, 3:] = -100
    return x, mask, y


def family_heads(
    task: str | None = None, *, variants: bool = False, discrete: bool = False, counts: bool = True
) -> dict[str, dict]:
    """{label: head section} of every registered head family, from the families' own `examples` (HeadOptions): each
    family's representative (labelled with its name), or with `variants` every example it gives; `task` ("causal-lm",
    "seq2seq", "classification") keeps the families that run it, `discrete` those with an output matrix, `counts`
    False the settings that need no word counts. The tests that run every family take their heads from here, so a
    family registered later is run by them too."""
    from hf_heads.heads import FAMILIES, head_options

    out = {}
    for name, entry in FAMILIES.items():
        if (task is not None and task not in entry.head.tasks) or (discrete and not entry.head.has_output_matrix):
            continue
        examples = list(entry.options.examples.items())[: None if variants else 1]
        heads = {label: {"family": name, **options} for label, options in examples}
        out.update({k: v for k, v in heads.items() if counts or not head_options(v).needs_counts})
    return out


# ----------------------------------------------------------------------------- calling the losses in tests


def chunked(
    hidden, weight, bias, target, *, top_k=None, label_smoothing=0.0, z_loss=0.0, class_weight=None,
    confidence_penalty=0.0, criterion=None, return_z_loss=False, return_predictions=False, return_target_rank=False,
    return_entropy=False, **rest,
):  # fmt: skip
    """`hf_heads.losses.fused_linear.chunked_loss` (the engine the chunk kernels serve) with the cross-entropy's
    options and what it returns written flat, as the kernel tests sweep them: `criterion` a sigmoid criterion's name
    ("bce", "mse"), else a `CrossEntropy` of the flat options; `return_*` the `returns` names."""
    from hf_heads.losses.fused_linear import chunked_loss
    from hf_heads.losses.parts import CrossEntropy, make_criterion

    if criterion in (None, "ce"):
        criterion = CrossEntropy(top_k=top_k, label_smoothing=label_smoothing, z_loss=z_loss,
                                 class_weight=class_weight, confidence_penalty=confidence_penalty)  # fmt: skip
    else:
        extra = dict(top_k=top_k, label_smoothing=label_smoothing, z_loss=z_loss, class_weight=class_weight)
        given = {k: v for k, v in extra.items() if v not in (None, 0.0)}
        if given:  # what the engine refused before the criterion was a type: a TypeError of the criterion's now
            raise TypeError(f"{sorted(given)} are options of cross-entropy, not of criterion {criterion!r}")
        criterion = make_criterion(criterion)
    returns = ("z_loss", "lse") * return_z_loss + ("predictions",) * return_predictions
    returns += ("rank",) * return_target_rank + ("entropy",) * return_entropy
    return chunked_loss(hidden, weight, bias, target, criterion=criterion, returns=returns, **rest)


def with_impl(loss):
    """A preset of hf_heads.losses called with the flat `chunk_size=` / `kernel=` / `loss_dtype=` of the tests,
    given to it as `impl=Impl(...)`."""
    import functools

    from hf_heads.losses.parts import Impl

    @functools.wraps(loss)
    def call(*args, chunk_size=None, kernel=None, loss_dtype=None, **kwargs):
        return loss(*args, impl=Impl(kernel, chunk_size, loss_dtype), **kwargs)

    return call
