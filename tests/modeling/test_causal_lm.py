"""HeadsForCausalLM: wrapping a checkpoint, generate, the margin at inference, accumulation, config and counts errors
(save / load and the export without hf_heads of every family: tests/heads/test_contract.py)."""

import json
import logging

import pytest
import torch
from transformers import AutoConfig

from hf_heads import HeadsConfig, HeadsForCausalLM


def _batch(vocab=61, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (3, 9), generator=g)


def test_softmax_head_reproduces_base_model(tiny_base):
    path, base = tiny_base
    model = HeadsForCausalLM.from_base(path, head={"family": "softmax"}).eval()
    x = _batch()
    torch.testing.assert_close(model(x).logits, base(x).logits, rtol=0, atol=1e-6)
    torch.testing.assert_close(model(x, labels=x).loss, base(x, labels=x).loss, rtol=1e-6, atol=1e-6)
    assert model.config.tie_word_embeddings == base.config.tie_word_embeddings
    greedy = dict(max_new_tokens=6, do_sample=False)
    assert torch.equal(model.generate(x[:1, :3], **greedy), base.generate(x[:1, :3], **greedy))


def test_generate_greedy_sample_beam(tiny_base):
    path, _ = tiny_base
    model = HeadsForCausalLM.from_base(path, head={"family": "margin", "margin": "cos", "m": 0.2}).eval()
    prompt = _batch()[:2, :4]
    assert model.generate(prompt, max_new_tokens=5, do_sample=False).shape == (2, 9)
    torch.manual_seed(0)
    assert model.generate(prompt, max_new_tokens=5, do_sample=True, top_k=5).shape == (2, 9)
    beams = model.generate(prompt, max_new_tokens=5, num_beams=3, num_return_sequences=2, do_sample=False)
    assert beams.shape == (4, 9)


def test_margin_not_applied_at_inference(tiny_base):
    path, _ = tiny_base
    plain = HeadsForCausalLM.from_base(path, head={"family": "softmax"}).eval()
    cos = HeadsForCausalLM.from_base(path, head={"family": "margin", "margin": "cos", "m": 0.5}).eval()
    x = _batch()
    torch.testing.assert_close(cos(x).logits, plain(x).logits, rtol=1e-5, atol=1e-5)
    # eval-mode loss is the NLL of the inference distribution: no margin
    torch.testing.assert_close(cos(x, labels=x).loss, plain(x, labels=x).loss, rtol=1e-5, atol=1e-5)
    nll = torch.nn.functional.cross_entropy(cos(x).logits[:, :-1].reshape(-1, 61), x[:, 1:].reshape(-1))
    torch.testing.assert_close(cos(x, labels=x).loss, nll, rtol=1e-5, atol=1e-5)
    cos.train(), plain.train()
    for model in (cos, plain):
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    assert cos(x, labels=x).loss > plain(x, labels=x).loss  # the margin is in the training loss only


def test_gradient_accumulation_exact(tiny_base):
    path, _ = tiny_base
    torch.manual_seed(0)
    model = HeadsForCausalLM.from_base(path, head={"family": "margin", "margin": "arc", "m": 0.2})
    model.train()
    for module in model.modules():  # dropout off: compare gradients exactly
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    x = _batch()
    labels = x.clone()
    labels[0, 5:] = -100
    n_items = int((labels[:, 1:] != -100).sum())
    model.zero_grad()
    model(x, labels=labels).loss.backward()
    full = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for rows in (slice(0, 1), slice(1, 3)):
        model(x[rows], labels=labels[rows], num_items_in_batch=n_items).loss.backward()
    for a, c in zip(full, [p.grad for p in model.parameters()], strict=False):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_config_validation_at_construction_and_load(tmp_path):
    with pytest.raises(ValueError, match="head.margin='big'"):
        HeadsConfig(backbone={"model_type": "gpt2"}, head={"family": "margin", "margin": "big"})
    with pytest.raises(ValueError, match="head.family='sampledd'"):
        HeadsConfig(backbone={"model_type": "gpt2"}, head={"family": "sampledd"})
    with pytest.raises(ValueError, match="head.mm is not an option of head family 'margin'"):
        HeadsConfig(backbone={"model_type": "gpt2"}, head={"family": "margin", "mm": 1})
    with pytest.raises(ValueError, match="head.m=2.5 must be an integer"):
        HeadsConfig(backbone={"model_type": "gpt2"}, head={"family": "margin", "margin": "lsm", "m": 2.5})
    cfg = HeadsConfig(
        backbone={"model_type": "gpt2", "n_embd": 32}, head={"family": "margin", "margin": "lsm", "m": 2}
    )
    cfg.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).head == cfg.head
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["head"]["word_norm"] = "sqrt"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="head.word_norm='sqrt'"):
        AutoConfig.from_pretrained(tmp_path)


def test_counts_required_and_checked(tiny_base, caplog):
    path, _ = tiny_base
    head = {"family": "margin", "word_norm": "unigram"}
    x = _batch()
    with caplog.at_level(logging.WARNING, logger="hf_heads.modeling.causal_lm"):
        uncalibrated = HeadsForCausalLM.from_base(path, head=head)
    assert [r.getMessage() for r in caplog.records if r.name == "hf_heads.modeling.causal_lm"] == [
        f"head {uncalibrated.config.head} needs word counts: the warm start is calibrated later, by HeadsTrainer (or "
        "hf_heads.training.prepare_head) on the training data; pass word_counts= to from_base to calibrate it now"
    ]
    with pytest.raises(ValueError, match=r"(?s)is not calibrated yet .*prepare_head\(model, train_dataset\)"):
        uncalibrated.train()(x, labels=x)  # the warm start needs data: training refused, not guessed
    with pytest.raises(ValueError, match="needs word counts"):
        uncalibrated.eval()(x, labels=x)  # its inference distribution needs the counts too
    model = HeadsForCausalLM.from_base(path, head=head, calibrate=False)  # no warm start asked for: counts still are
    with pytest.raises(ValueError, match="needs word counts"):
        model.train()(x, labels=x)
    with pytest.raises(ValueError, match=r"word_counts has shape \(5,\), expected \(61,\)"):
        model.set_word_counts(torch.ones(5))
    for bad in (torch.full((61,), -1.0), torch.full((61,), float("nan")), torch.full((61,), float("inf"))):
        with pytest.raises(ValueError, match="word_counts must be finite and >= 0"):
            model.set_word_counts(bad)
    with pytest.raises(ValueError, match=r"labels holds token id 99, but the head.s vocabulary has 61 ids"):
        HeadsForCausalLM.from_base(path)(x, labels=torch.full_like(x, 99))


def test_word_counts_stay_exact_in_a_bf16_model(tiny_base, tmp_path):
    """Counts above 256 are not exact in bf16 (12345 would be 12352), and norms, ranks and noise read them: the
    buffer stays float32 through .to(bf16), a bf16 save and from_pretrained(dtype=bf16), following the device."""
    path, _ = tiny_base
    counts = torch.arange(61, dtype=torch.float64) * 1000 + 12345
    head = {"family": "margin", "margin": "arc", "m": 0.001, "word_norm": "log-unigram"}
    model = HeadsForCausalLM.from_base(path, head=head, word_counts=counts).to(torch.bfloat16)
    assert model.head.weight.dtype == torch.bfloat16 and model.head.word_counts.dtype == torch.float32
    assert torch.equal(model.head.word_counts, counts.float())
    model.save_pretrained(tmp_path / "bf16")
    x = _batch()
    for dtype in (torch.bfloat16, torch.float32):
        loaded = HeadsForCausalLM.from_pretrained(tmp_path / "bf16", dtype=dtype)
        assert torch.equal(loaded.head.word_counts, counts.float()) and loaded.head.weight.dtype == dtype
        assert torch.isfinite(loaded.train()(x, labels=x).loss)


def test_from_base_of_an_hf_heads_model_is_refused_saying_how_to_load_it(tmp_path):
    """from_base wraps a base checkpoint: an hf_heads model (loaded, in a directory or its `subfolder`, or a Hub id
    found in the `cache_dir` given, as from_pretrained would find it) is refused, naming its head and how to load it,
    instead of a head wrapped around its head."""
    from conftest import tiny_llama_config

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "sparse", "k": 5}))
    commit, repo = "0" * 40, tmp_path / "hub" / "models--someone--tiny-heads"  # the Hub cache's layout
    model.save_pretrained(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    message = (
        "is already an hf_heads model (sparse head): load it with HeadsForCausalLM.from_pretrained(...) (or "
        "AutoModelFor….from_pretrained after `import hf_heads`) to evaluate or train it further; from_base wraps a "
        "base transformers checkpoint"
    )
    hub_id = ("someone/tiny-heads", {"cache_dir": str(tmp_path / "hub")})
    model.save_pretrained(tmp_path / "repo" / "heads")
    in_subfolder = (str(tmp_path / "repo"), {"subfolder": "heads"})
    for source, kwargs in ((model, {}), (str(repo / "snapshots" / commit), {}), hub_id, in_subfolder):
        with pytest.raises(ValueError) as refused:
            HeadsForCausalLM.from_base(source, **kwargs)
        assert str(refused.value).endswith(message), (source, str(refused.value))


def test_from_pretrained_naming_neither_a_checkpoint_nor_a_config_fails_as_a_transformers_model_does():
    """`from_pretrained(None)` (no `config=` either) raises the error a transformers model class raises for it."""
    from transformers import LlamaForCausalLM

    with pytest.raises(OSError) as expected:
        LlamaForCausalLM.from_pretrained(None)
    with pytest.raises(OSError) as refused:
        HeadsForCausalLM.from_pretrained(None)
    assert str(refused.value) == str(expected.value)


# The export check lives in tests/export_check.py (run over every family by tests/heads/test_contract.py); this script
# is kept only for test_sampled_head.py, which still imports it: remove both together.


@pytest.mark.parametrize(
    "head",
    [
        {"family": "margin", "margin": "arc", "m": 0.2},
        {"family": "sampled", "criterion": "ce", "method": "is", "num_samples": 8, "noise": "uniform"},
    ],
)
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(head):
    from conftest import tiny_llama_config

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head)).train()
    ids = torch.randint(4, 61, (2, 8), generator=torch.Generator().manual_seed(0))
    results = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.zero_grad()
        torch.manual_seed(1)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    assert model.backbone.is_gradient_checkpointing
    torch.testing.assert_close(results[1][0], results[0][0])
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, msg=name)


def test_a_model_takes_flash_attention_sdpa_and_flex_attention_as_its_backbones_do():
    """An unknown attention implementation is refused listing the ones the model takes (flash attention among them),
    and flash_attention_2 is refused only where its package or a GPU is missing, never as unsupported by the model."""
    from conftest import tiny_llama_config

    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict()))
    with pytest.raises(ValueError) as unknown:
        model.set_attn_implementation("nonesuch")
    for name in ("flash_attention_2", "sdpa", "flex_attention"):
        assert f'"attn_implementation={name}"' in str(unknown.value), name
    try:
        model.set_attn_implementation("flash_attention_2")
    except (ImportError, ValueError) as missing:
        assert "does not support Flash Attention" not in str(missing)


def test_fused_lm_head_gives_the_per_token_quantities_of_the_logits():
    """`fused_lm_head=True` (TRL's SFTTrainer protocol): per position the log-probability, entropy and top-1 hit of the
    model's own logits at the shifted label, 0 (False) where the label is ignored; the loss is −Σ log-probs divided by
    `num_items_in_batch` when given, else by the number of labelled positions."""
    from conftest import tiny_llama_config

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"})).eval()
    x = _batch()
    labels = x.clone()
    labels[0, 5:] = -100
    labels[2, :3] = -100
    with torch.no_grad():
        log_p = torch.log_softmax(model(x).logits.double(), dim=-1)  # (B, T, V)
        out = model(x, labels=labels, fused_lm_head=True)
        given = model(x, labels=labels, fused_lm_head=True, num_items_in_batch=40)
    target = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)  # (B, T): position t predicts token t+1
    mask = target != -100
    expected = log_p.gather(-1, target.clamp_min(0)[..., None]).squeeze(-1).where(mask, 0.0)
    entropy = -(log_p.exp() * log_p).sum(-1).where(mask, 0.0)
    assert torch.equal(out.label_mask, mask)
    torch.testing.assert_close(out.log_probs.double(), expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.entropy.double(), entropy, rtol=0, atol=1e-5)
    assert torch.equal(out.is_top1, (log_p.argmax(-1) == target) & mask)
    torch.testing.assert_close(out.loss.double(), -expected.sum() / mask.sum(), rtol=1e-6, atol=0)
    torch.testing.assert_close(given.loss.double(), -expected.sum() / 40, rtol=1e-6, atol=0)


def test_a_forward_installed_by_accelerates_hooks_runs():
    """accelerate's hooks (what `device_map=` dispatch and CPU offload install) replace `model.forward` with a
    `functools.partial`: it is installed and runs, with the model's logits; removing the hook restores the forward.
    Only the forward of TRL's fused LM head is declined."""
    from accelerate.hooks import ModelHook, add_hook_to_module, remove_hook_from_module
    from conftest import tiny_llama_config

    class Counting(ModelHook):
        calls = 0

        def pre_forward(self, module, *args, **kwargs):
            self.calls += 1
            return args, kwargs

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"})).eval()
    x = _batch()
    with torch.no_grad():
        expected = model(x).logits
        hook = Counting()
        add_hook_to_module(model, hook)
        assert "forward" in vars(model)
        torch.testing.assert_close(model(x).logits, expected, rtol=0, atol=0)
        assert hook.calls == 1
        remove_hook_from_module(model)
        torch.testing.assert_close(model(x).logits, expected, rtol=0, atol=0)
        assert hook.calls == 1


@pytest.mark.parametrize(
    "head, mode, second_pass",
    [
        ({"family": "softmax", "label_smoothing": 0.1, "z_loss": 1e-3}, "train", False),
        ({"family": "softmax"}, "eval", False),
        ({"family": "margin", "margin": "arc", "m": 0.2, "context_norm": "max-norm"}, "eval", False),
        ({"family": "margin", "margin": "arc", "m": 0.2}, "train", True),
        ({"family": "sparse", "k": 5}, "train", True),
    ],
)
def test_fused_lm_head_takes_entropy_and_top1_from_the_loss_pass_where_it_scores_the_inference_distribution(
    head, mode, second_pass, monkeypatch
):
    """TRL's `entropy` and `is_top1` (`mean_token_accuracy`) describe the inference distribution. A softmax head (any
    training option: label smoothing and z-loss change the loss, not the distribution) and a margin head in eval mode
    score it in the loss pass and take both from there, with no second pass over W (`statistics` is not called); a
    margin head in training (its pass has the margin) and a sparse head (eq. 5 keeps the target beside the top k)
    make the second pass. Either way the values are those of the inference logits, and the loss's gradient is that of
    the plain per-token loss (the entropy has none)."""
    from conftest import tiny_llama_config

    from hf_heads.heads.base import OutputHead

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
    model.train(mode == "train")
    if head.get("context_norm") == "max-norm":
        model.head.context_norm_running.fill_(2.0)
    x = _batch()
    labels = x.clone()
    labels[1, 4:] = -100
    calls = []
    second = OutputHead.statistics
    monkeypatch.setattr(OutputHead, "statistics", lambda *a, **k: calls.append(1) or second(*a, **k))
    with torch.no_grad():
        logits = model.head.logits(model.backbone(x).last_hidden_state[:, :-1]).double()  # (B, T-1, V)
    out = model(x, labels=labels, fused_lm_head=True)
    assert bool(calls) == second_pass
    target = labels[:, 1:]
    mask = target != -100
    log_p = torch.log_softmax(logits, dim=-1)
    entropy = torch.special.entr(log_p.exp()).sum(-1).where(mask, 0.0)
    torch.testing.assert_close(out.entropy[:, :-1].double(), entropy, rtol=0, atol=1e-5)
    assert torch.equal(out.is_top1[:, :-1], (logits.argmax(-1) == target) & mask)
    assert not out.is_top1[:, -1].any() and not out.entropy[:, -1].any()  # the last position predicts nothing
    assert not out.entropy.requires_grad and not out.is_top1.requires_grad
    if mode == "train":
        params = [model.head.weight, model.backbone.embed_tokens.weight]
        grads = torch.autograd.grad(out.loss, params)
        plain = model(x, labels=labels).loss
        torch.testing.assert_close(out.loss, plain, rtol=1e-6, atol=0)
        for grad, expected in zip(grads, torch.autograd.grad(plain, params), strict=True):
            torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-7)


def test_the_same_pass_top1_of_a_tie_goes_to_the_lowest_index_and_its_unused_entropy_costs_no_backward_term(
    monkeypatch,
):
    """With logits tied between classes 0 and 1, a label 1 is no top-1 hit (argmax picks 0) in the loss pass's
    statistics too; and as the statistics' entropy is not differentiated, the recomputing backward is given no entropy
    weights (None: the kernels add no entropy terms to d z)."""
    from hf_heads.heads import make_head
    from hf_heads.losses import fused_linear

    head = make_head(2, 3, {"family": "softmax", "bias": False}).train()
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))
    hidden = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    labels = torch.tensor([1, 0, 2])
    weights = []
    run = fused_linear._run
    monkeypatch.setattr(fused_linear, "_run", lambda *a, **k: weights.append(k.get("ent_weight")) or run(*a, **k))
    loss, stats = head(hidden, labels, reduction="none", token_statistics=True)
    assert stats["is_top1"].tolist() == [False, True, True]
    loss.sum().backward()
    assert len(weights) == 2 and weights[1] is None  # the forward, then the backward's recompute
    assert hidden.grad is not None and hidden.grad.abs().sum() > 0


def test_a_generation_cache_given_under_two_names_is_refused():
    """A cache under `cache` and another under `past_key_values`: one of them would be ignored, so the call is
    refused; the same cache under both names is one cache."""
    from conftest import tiny_llama_config
    from transformers import DynamicCache

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict())).eval()
    x = _batch()[:1, :4]
    with pytest.raises(ValueError, match="a generation cache was given twice"):
        model(x, cache=DynamicCache(config=model.config), past_key_values=DynamicCache(config=model.config))
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        alone = model(x, use_cache=True).logits
        both = model(x, use_cache=True, cache=cache, past_key_values=cache).logits
    torch.testing.assert_close(both, alone)


@pytest.mark.parametrize("fused_lm_head", [False, True])
def test_a_training_forward_moves_the_running_max_norm_once(fused_lm_head):
    """One training forward, plain or `fused_lm_head=True` (TRL's SFTTrainer), is one step of a max-norm head's
    running ‖h‖: running ← running + μ · (max ‖h‖ over the labelled positions − running)."""
    from conftest import tiny_llama_config

    head = {"family": "margin", "margin": "arc", "m": 0.1, "context_norm": "max-norm", "context_norm_momentum": 0.5}
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head)).train()
    model.head.context_norm_running.fill_(1.0)  # as after earlier steps
    x = _batch()
    with torch.no_grad():
        batch_max = float(model.backbone(x).last_hidden_state[:, :-1].norm(dim=-1).max())  # the last predicts nothing
    model(x, labels=x, fused_lm_head=fused_lm_head)
    assert float(model.head.context_norm_running) == pytest.approx(1.0 + 0.5 * (batch_max - 1.0), rel=1e-5)


def test_from_pretrained_of_a_base_checkpoint_takes_keyword_arguments_only(tmp_path):
    from conftest import tiny_gpt2_config
    from transformers import GPT2LMHeadModel

    GPT2LMHeadModel(tiny_gpt2_config()).save_pretrained(tmp_path / "gpt2")
    name = str(tmp_path / "gpt2")
    with pytest.raises(TypeError) as refused:
        HeadsForCausalLM.from_pretrained(name, {"family": "sparse", "k": 5})
    assert str(refused.value) == (
        f"HeadsForCausalLM.from_pretrained({name!r}, ...) of a base checkpoint takes keyword arguments only "
        "(config=..., revision=...), got 1 more positional"
    )


def test_from_pretrained_of_a_missing_directory_fails_as_a_transformers_model_does(tmp_path):
    from transformers import LlamaForCausalLM

    with pytest.raises(OSError) as expected:
        LlamaForCausalLM.from_pretrained(str(tmp_path / "missing"))
    with pytest.raises(OSError) as refused:
        HeadsForCausalLM.from_pretrained(str(tmp_path / "missing"))
    assert str(refused.value) == str(expected.value)


def test_from_config_of_an_hf_heads_config_builds_its_head_and_of_a_backbone_config_the_default_head():
    from conftest import tiny_llama_config

    config = HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "sparse", "k": 5})
    model = HeadsForCausalLM.from_config(config, trust_remote_code=True)
    assert type(model) is HeadsForCausalLM and model.head.family == "sparse" and model.head.options.k == 5
    assert model.config.head == config.head and model.config.backbone.hidden_size == 32
    assert model.head_origin is None  # its own head: bound
    plain = HeadsForCausalLM.from_config(tiny_llama_config())
    assert plain.head.family == "softmax" and plain.head_origin == "init"


def test_set_input_embeddings_replaces_the_backbones_table():
    from conftest import tiny_llama_config

    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"}))
    table = torch.nn.Embedding(61, 32)
    model.set_input_embeddings(table)
    assert model.get_input_embeddings() is table and model.backbone.get_input_embeddings() is table
    x = _batch()
    assert torch.equal(model.backbone.embed_tokens(x), table(x))


class _OwnLM(HeadsForCausalLM):
    """A user's subclass: its code is the user's, so it is saved as a plain transformers model is."""


def test_a_users_subclass_is_saved_without_the_exported_code(tmp_path):
    from conftest import tiny_llama_config

    torch.manual_seed(0)
    model = _OwnLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "sparse", "k": 5})).eval()
    model.save_pretrained(tmp_path / "own")
    saved = json.loads((tmp_path / "own" / "config.json").read_text())
    assert "auto_map" not in saved and saved["architectures"] == ["_OwnLM"]
    assert not list((tmp_path / "own").glob("*.py"))
    again = _OwnLM.from_pretrained(tmp_path / "own").eval()
    x = _batch()
    torch.testing.assert_close(again(x).logits, model(x).logits, rtol=0, atol=0)


def test_fused_lm_head_without_labels_is_refused():
    from conftest import tiny_llama_config

    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"}))
    with pytest.raises(ValueError) as refused:
        model(_batch(), fused_lm_head=True)
    assert str(refused.value) == "fused_lm_head=True needs labels (or shift_labels): it returns per-token losses"


def test_a_backbone_without_a_generation_cache_generates_the_tokens_of_its_own_class():
    """openai-gpt takes no cache: every step reads the whole sequence, as `OpenAIGPTLMHeadModel.generate` does."""
    from arch_matrix import build

    lm = build("openai-gpt", "causal_lm")
    model = HeadsForCausalLM.from_base(lm, head={"family": "softmax"}, calibrate=False).eval()
    prompt = _batch()[:1, :4]
    greedy = dict(max_new_tokens=3, do_sample=False, pad_token_id=0)
    ours = model.generate(prompt, **greedy)
    assert ours.shape == (1, 7) and torch.equal(ours, lm.generate(prompt, **greedy))


def test_generate_through_a_stateful_class_that_does_not_hold_body_and_output_layer_as_children_is_refused():
    """A reformer backbone's `ReformerModelWithLMHead` keeps its output layer inside `lm_head.decoder`."""
    from transformers import ReformerConfig

    backbone = ReformerConfig(
        vocab_size=61, hidden_size=32, num_attention_heads=2, attention_head_size=16, feed_forward_size=64,
        axial_pos_embds=False, max_position_embeddings=64, is_decoder=True, attn_layers=["local", "local"],
        local_attn_chunk_length=8, pad_token_id=0, eos_token_id=3,
    )  # fmt: skip
    model = HeadsForCausalLM(HeadsConfig(backbone=backbone.to_dict(), head={"family": "softmax"})).eval()
    with pytest.raises(NotImplementedError) as refused:
        model.generate(_batch()[:1, :3], max_new_tokens=2, do_sample=False)
    assert str(refused.value) == (
        "generate() with a 'reformer' backbone: ReformerModelWithLMHead does not hold its body and output layer as "
        "two direct children, so hf_heads cannot generate through it"
    )


def test_from_base_refuses_a_checkpoint_whose_logits_rule_out_a_token_its_output_layer_gives():
    """A checkpoint that masks a token after its output layer (-inf there): the supports differ, the difference is
    infinite and the wrap is refused."""
    from conftest import tiny_llama_config
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    lm = LlamaForCausalLM(tiny_llama_config()).eval()

    def mask_token(module, inputs, output):
        output[..., 5] = float("-inf")
        return output

    lm.lm_head.register_forward_hook(mask_token)
    with pytest.raises(ValueError) as refused:
        HeadsForCausalLM.from_base(lm, head={"family": "softmax"}, calibrate=False)
    assert str(refused.value) == (
        "from_base('<LlamaForCausalLM in memory>'): the wrapped model's log-probabilities differ from the "
        "checkpoint's by up to inf nats on a probe input (tolerance 0.0001): hf_heads does not reproduce how "
        "LlamaForCausalLM (model_type='llama') computes its logits, so it refuses to return a different model. "
        "Known output transforms: see the table of hf_heads.modeling.parity"
    )


def test_export_for_hub_of_a_users_subclass_is_refused_naming_the_classes_it_exports(tmp_path):
    """The exported code defines hf_heads' own classes only: a subclass would load as another class without it."""
    from conftest import tiny_llama_config

    model = _OwnLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"}))
    with pytest.raises(ValueError) as refused:
        model.export_for_hub(tmp_path / "export")
    assert str(refused.value) == (
        "cannot export the code of _OwnLM: model class '_OwnLM' is not one of HeadsForCausalLM, HeadsForSeq2SeqLM, "
        "HeadsForSequenceClassification"
    )
    assert not (tmp_path / "export" / "config.json").exists()
