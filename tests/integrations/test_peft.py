"""PEFT on hf_heads models (hf_heads.integrations.peft): the backbone's default LoRA targets for every task, LoRA on
the head's (V, H) weight trained inside the chunked losses (no (N, V) tensor), adapters and `modules_to_save=["head"]`
saved, reloaded and generating the same tokens."""

import re

import pytest
import torch
import transformers
from conftest import (
    family_heads,
    seq2seq_batch,
    tiny_bert_config,
    tiny_enc_dec_config,
    tiny_gpt2_config,
    tiny_llama_config,
)
from packaging.version import Version
from torch.utils._python_dispatch import TorchDispatchMode
from transformers.integrations import peft as transformers_peft

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification
from hf_heads.integrations.peft import backbone_target_modules, with_backbone_targets

peft = pytest.importorskip("peft")

V = 200
FAMILIES = family_heads("causal-lm", discrete=True, variants=True)  # word norms: the margin's variant


def _causal(head, seed=0):
    torch.manual_seed(seed)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config(V).to_dict(), head=head))
    if model.head_needs_counts():
        model.set_word_counts(torch.arange(V, 0, -1, dtype=torch.float64))
    return model


def _adapted(model) -> list[str]:
    return sorted({name.split(".")[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")})


@pytest.mark.parametrize(
    "task, build, expected",
    [
        ("CAUSAL_LM", lambda: _causal({"family": "softmax"}), ["q_proj", "v_proj"]),
        (
            "SEQ_2_SEQ_LM",
            lambda: HeadsForSeq2SeqLM(HeadsConfig(backbone=tiny_enc_dec_config("bart"), head={"family": "softmax"})),
            ["q_proj", "v_proj"],
        ),
        (
            "SEQ_CLS",
            lambda: HeadsForSequenceClassification(
                HeadsConfig(backbone=tiny_bert_config(), head={"family": "softmax"}, num_labels=3)
            ),
            ["query", "value"],
        ),
    ],
)
def test_default_lora_config_targets_the_backbones_default_modules(task, build, expected):
    native = build()
    native.add_adapter(peft.LoraConfig(task_type=task))  # transformers' own PEFT integration fills the targets
    assert _adapted(native) == expected
    # peft.get_peft_model keys its defaults by model_type ("hf_heads"): fill them with with_backbone_targets.
    # PEFT 0.21's PeftModelForSeq2SeqLM fails on transformers 5.23 for every seq2seq model (it reads the removed
    # GenerationMixin._prepare_encoder_decoder_kwargs_for_generation), so the seq2seq model is wrapped task-free.
    peft_task = None if task == "SEQ_2_SEQ_LM" else task
    with pytest.raises(ValueError, match="target_modules"):
        peft.get_peft_model(build(), peft.LoraConfig(task_type=peft_task))
    model = build()
    model = peft.get_peft_model(model, with_backbone_targets(peft.LoraConfig(task_type=peft_task), model))
    assert _adapted(model) == expected
    assert not any("head" in name for name, p in model.named_parameters() if "lora_" in name)


def test_backbone_without_a_peft_default_is_refused_by_name():

    config = tiny_gpt2_config(V, n_layer=1)
    config.model_type = "not-in-peft"
    model = HeadsForCausalLM(HeadsConfig(backbone=config.to_dict() | {"model_type": "gpt2"}))
    model.config.backbone = {"model_type": "not-in-peft"}
    message = (
        "PEFT has no default LoRA target_modules for the backbone model_type='not-in-peft': give "
        "LoraConfig(target_modules=[...]) (module names inside model.backbone)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        backbone_target_modules(model)


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor any operation returns."""

    largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def _lora_on_head(model):
    config = peft.LoraConfig(
        task_type="CAUSAL_LM", r=4, target_parameters=["head.weight"], init_lora_weights=False, lora_alpha=8
    )
    return peft.get_peft_model(model, with_backbone_targets(config, model))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_lora_on_the_head_trains_inside_the_chunked_loss(tmp_path, family):
    head = dict(FAMILIES[family], chunk_size=8)  # chunks of 8 rows: an (N, V) tensor would stand out
    model = _lora_on_head(_causal(head))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, V, (4, 16), generator=g)  # N = 64 rows: N·V = 12800 > V·H = 6400 > N·(MLP 64) = 4096
    model.train()
    with _LargestTensor() as probe:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    assert probe.largest < ids.numel() * V, f"a tensor of {probe.largest} elements (N·V = {ids.numel() * V})"
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    head_lora = [n for n in grads if n.startswith("base_model.model.head.lora_")]
    assert len(head_lora) == 2 and all(grads[n].abs().sum() > 0 for n in head_lora)
    assert model.base_model.model.head.base_layer.weight.grad is None  # W frozen, B·A trained

    # inference sees W + (α/r)·B·A: the same logits as the merged model
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        merged = _lora_on_head(_causal(head))
        merged.load_state_dict(model.state_dict())
        merged = merged.merge_and_unload()
        torch.testing.assert_close(logits, merged(input_ids=ids).logits)
    assert not torch.allclose(logits, _causal(head).eval()(input_ids=ids).logits)  # the adapter changed them

    # adapter save -> reload on a fresh base -> identical logits and greedy tokens
    model.save_pretrained(tmp_path / "adapter")
    reloaded = peft.PeftModel.from_pretrained(_causal(head), tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, logits)
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=1)
    torch.testing.assert_close(
        model.generate(input_ids=ids[:1, :5], **kwargs), reloaded.generate(input_ids=ids[:1, :5], **kwargs)
    )


def test_lora_on_the_head_trains_under_heads_trainer_and_head_flags_after_peft_are_refused(tmp_path):
    """HeadsTrainer reads a PEFT-wrapped head through its wrapper: LoRA on the head trains B and A, W stays as it
    was. Head flags that would replace the head of a model that already has adapters are refused (the new head would
    train whole, outside them): the head is bound first, then the adapters added."""
    from datasets import Dataset
    from transformers import default_data_collator

    from hf_heads import HeadsTrainer, HeadsTrainingArguments

    ids = torch.randint(3, V, (8, 12), generator=torch.Generator().manual_seed(0)).tolist()
    data = Dataset.from_dict({"input_ids": ids, "labels": ids})
    common = dict(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, report_to="none")
    common |= dict(use_cpu=True, save_strategy="no", disable_tqdm=True, learning_rate=1e-2)
    margin = {"head": "margin", "margin": "arc", "m": 0.001}
    model = _lora_on_head(_causal({"family": "margin", "margin": "arc", "m": 0.001}))
    head = model.base_model.model.head
    weight, b = head.base_layer.weight.detach().clone(), head.lora_B.default.weight.detach().clone()
    args = HeadsTrainingArguments(**common, **margin)
    HeadsTrainer(model=model, args=args, train_dataset=data, data_collator=default_data_collator).train()
    assert not torch.equal(b, head.lora_B.default.weight) and torch.equal(weight, head.base_layer.weight)

    stand_in = _causal({"family": "softmax"})
    stand_in.head_origin = "checkpoint"  # the default head of from_pretrained(base), which head flags replace
    wrapped = peft.get_peft_model(stand_in, with_backbone_targets(peft.LoraConfig(task_type="CAUSAL_LM"), stand_in))
    with pytest.raises(
        ValueError,
        match=r"^the training arguments' head flags replace the softmax head of a model "
        r"with PEFT adapters by a margin head .*model\.bind_head\(training_args\.head_config\(\)\)",
    ):
        HeadsTrainer(model=wrapped, args=args, train_dataset=data, data_collator=default_data_collator)
    assert stand_in.head.family == "softmax" and not stand_in.head.weight.requires_grad


def test_scoring_a_model_with_lora_on_the_head_gives_the_merged_models_scores():
    """sentence_log_probs reads the head through PEFT's wrapper: the scores of W + (α/r)·B·A are those of the merged
    model."""
    from hf_heads.data.tokenization import build_word_tokenizer
    from hf_heads.scoring import sentence_log_probs

    tokenizer = build_word_tokenizer([" ".join(f"w{i}" for i in range(V - 4))], add_eos=False)
    texts = ["w1 w2 w3", "w4 w5", "w6"]
    model = _lora_on_head(_causal({"family": "softmax"})).eval()
    scores = sentence_log_probs(model, tokenizer, texts)
    merged = model.merge_and_unload().eval()
    torch.testing.assert_close(scores, sentence_log_probs(merged, tokenizer, texts))
    assert not torch.equal(scores, sentence_log_probs(_causal({"family": "softmax"}).eval(), tokenizer, texts))


@pytest.mark.parametrize("family", ["softmax", "margin"])
def test_lora_on_the_backbone_leaves_the_head_frozen_and_skips_its_weight_product(family, monkeypatch):
    """With LoRA on the backbone only, PEFT freezes the head: its chunked loss gets no (V, H) accumulator and runs no
    weight product, and the adapters' gradients are those of the same model whose head weight wants a gradient."""
    from hf_heads.losses import kernels

    seen, linear_grads = [], kernels._linear_grads

    def spy(grad_z, h, w, grads, *args):
        seen.append(grads.w is None)
        return linear_grads(grad_z, h, w, grads, *args)

    monkeypatch.setattr(kernels, "_linear_grads", spy)
    ids = torch.randint(4, V, (4, 16), generator=torch.Generator().manual_seed(0))
    grads = []
    for head_trains in (False, True):
        model = _causal(dict(FAMILIES[family], chunk_size=8))
        model = peft.get_peft_model(model, with_backbone_targets(peft.LoraConfig(task_type="CAUSAL_LM", r=4), model))
        head_weight = model.base_model.model.head.weight
        assert not head_weight.requires_grad
        head_weight.requires_grad_(head_trains)
        seen.clear()
        model(input_ids=ids, labels=ids).loss.backward()
        assert seen and all(seen) != head_trains, seen  # no accumulator exactly when the head is frozen
        grads.append({n: p.grad for n, p in model.named_parameters() if "lora_" in n})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], msg=name)


def test_modules_to_save_head_saves_and_reloads_the_head(tmp_path):
    model = _causal(FAMILIES["margin"])
    config = with_backbone_targets(peft.LoraConfig(task_type="CAUSAL_LM", r=4, modules_to_save=["head"]), model)
    model = peft.get_peft_model(model, config)
    ids = torch.randint(4, V, (2, 8), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    model.eval()
    model.save_pretrained(tmp_path)
    reloaded = peft.PeftModel.from_pretrained(_causal(FAMILIES["margin"]), tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, model(input_ids=ids).logits)
        assert not torch.allclose(
            reloaded(input_ids=ids).logits, _causal(FAMILIES["margin"]).eval()(input_ids=ids).logits
        )


def test_lora_on_a_head_without_an_output_weight_is_refused():
    model = HeadsForSeq2SeqLM(
        HeadsConfig(
            backbone=tiny_enc_dec_config("bart"), head={"family": "continuous", "loss": "vmf", "embedding_dim": 8}
        )
    )
    config = peft.LoraConfig(target_parameters=["head.weight"])
    message = (
        "target_parameters=['head.weight']: a continuous head has no (V, H) output weight to adapt; use "
        "modules_to_save=['head'] to train the whole head"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        with_backbone_targets(config, model)
    model.head.set_embedding_table(torch.randn(50, 8))
    x, mask, y = seq2seq_batch()
    adapted = peft.get_peft_model(model, with_backbone_targets(peft.LoraConfig(), model))
    assert torch.isfinite(adapted(input_ids=x, attention_mask=mask, labels=y).loss)


def test_lora_on_the_head_alone_adapts_no_backbone_module():
    """`target_parameters=["head.weight"]` without `target_modules`: the head's weight is the only thing adapted (the
    backbone's default targets are filled in only when the config names no target at all)."""
    config = peft.LoraConfig(task_type="CAUSAL_LM", r=4, target_parameters=["head.weight"])
    model = _causal(FAMILIES["softmax"])
    adapted = peft.get_peft_model(model, with_backbone_targets(config, model))
    trained = [name for name, p in adapted.named_parameters() if p.requires_grad]
    assert trained and all(".head.lora_" in name for name in trained), trained
    native = _causal(FAMILIES["softmax"])
    native.add_adapter(peft.LoraConfig(task_type="CAUSAL_LM", r=4, target_parameters=["head.weight"]))
    assert _adapted(native) == ["head"]


def test_generate_with_lora_on_the_head_keeps_the_heads_beam_refusal():
    """A sparse head whose weight PEFT wrapped (`target_parameters=["head.weight"]`) still refuses, by name, a beam
    wider than its top k in `generate`, and generates within it."""
    from hf_heads.validation import OptionError

    model = _lora_on_head(_causal({"family": "sparse", "k": 4})).eval()
    ids = torch.randint(4, V, (1, 5), generator=torch.Generator().manual_seed(0))
    with pytest.raises(OptionError, match=r"num_beams=5 must be <= decode_k=4"):
        model.generate(input_ids=ids, max_new_tokens=2, num_beams=5, pad_token_id=1)
    assert model.generate(input_ids=ids, max_new_tokens=2, num_beams=4, pad_token_id=1).shape == (1, 7)


def test_add_adapter_activates_each_new_adapter_and_refuses_a_taken_name():
    """`model.add_adapter` as transformers': the adapter becomes the active one and is marked loaded (a taken name is
    then refused before anything changes), a second name adds a second adapter."""
    model = _causal({"family": "softmax"})
    model.add_adapter(peft.LoraConfig(task_type="CAUSAL_LM", r=2))
    assert _active(model) == {"default"} and list(model.peft_config) == ["default"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="an adapter named 'default' already exists"):
        model.add_adapter(peft.LoraConfig(task_type="CAUSAL_LM", r=4))
    assert before.keys() == model.state_dict().keys()
    model.add_adapter(peft.LoraConfig(task_type="CAUSAL_LM", r=2), adapter_name="second")
    assert _active(model) == {"second"} and list(model.peft_config) == ["default", "second"]


def test_add_adapter_refuses_a_config_that_is_not_a_peft_config_naming_its_type():
    model = _causal({"family": "softmax"})
    with pytest.raises(TypeError) as err:
        model.add_adapter({"r": 2, "task_type": "CAUSAL_LM"})
    assert str(err.value) == "adapter_config should be an instance of peft.PeftConfig, got dict"
    assert not _active(model)


def _active(model) -> set[str]:
    """The adapters PEFT's layers run (what transformers' `active_adapters()` reads where its PEFT gate allows)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return {name for m in model.modules() if isinstance(m, BaseTunerLayer) for name in m.active_adapters}


def test_an_adapter_config_without_target_parameters_gets_the_backbones_default_targets():
    """PEFT configs other than LoRA (LoHa here) have no `target_parameters`: they take the default targets too."""
    model = _causal({"family": "softmax"})
    assert not hasattr(peft.LoHaConfig(), "target_parameters")
    model.add_adapter(peft.LoHaConfig(task_type="CAUSAL_LM", r=2))
    adapted = sorted({name.split(".")[-1] for name, module in model.named_modules() if hasattr(module, "hada_w1_a")})
    assert adapted == ["q_proj", "v_proj"]


def test_an_added_adapter_saved_alone_reloads_with_its_base_model(tmp_path):
    """`model.add_adapter` records where the model was loaded from: the adapter folder `save_pretrained` writes names
    its base model, so `AutoPeftModelForCausalLM.from_pretrained(folder)` rebuilds base + adapter from it alone."""
    _causal({"family": "softmax"}).save_pretrained(tmp_path / "base")
    model = HeadsForCausalLM.from_pretrained(tmp_path / "base")
    model.add_adapter(peft.LoraConfig(task_type="CAUSAL_LM", r=2, init_lora_weights=False))
    assert model.peft_config["default"].base_model_name_or_path == str(tmp_path / "base")
    needed = getattr(transformers_peft, "MIN_PEFT_VERSION", "0")  # transformers 5.24 saves adapters with PEFT >= 0.22
    if Version(peft.__version__) < Version(needed):
        pytest.skip(
            f"transformers {transformers.__version__} saves adapters with PEFT >= {needed}, not {peft.__version__}"
        )
    model.eval().save_pretrained(tmp_path / "adapter")
    reloaded = peft.AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter").eval()
    ids = torch.randint(4, V, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, model(input_ids=ids).logits)
        base = HeadsForCausalLM.from_pretrained(tmp_path / "base").eval()
        assert not torch.allclose(reloaded(input_ids=ids).logits, base(input_ids=ids).logits)  # the adapter is on
