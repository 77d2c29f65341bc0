"""TRL's SFTTrainer trains an hf_heads causal LM with the head's own criterion (hf_heads.training.trl,
hf_heads.modeling.fused): the trainer's loss and gradients equal `model(**batch).loss` in training mode for every
discrete family; SFT options that would train on the inference logits are refused, never run as plain CE."""

import pytest
import torch
from conftest import family_heads, tiny_llama_config
from datasets import Dataset

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.data.tokenization import build_word_tokenizer
from hf_heads.validation import OptionError

trl = pytest.importorskip("trl")
from hf_heads.training.trl import HeadsSFTTrainer  # noqa: E402

V = 61
FAMILIES = family_heads("causal-lm", discrete=True, variants=True, counts=False)


@pytest.fixture(scope="module")
def tokenizer():
    return build_word_tokenizer([" ".join(f"w{i}" for i in range(V - 4))], add_eos=False)  # 4 specials + 57 words


def _data(n=8, length=10):
    g = torch.Generator().manual_seed(1)
    return Dataset.from_dict({"input_ids": torch.randint(4, V, (n, length), generator=g).tolist()})


def _model(head):
    torch.manual_seed(0)
    return HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config(V).to_dict(), head=head))


def _args(tmp_path, **kw):
    return trl.SFTConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=2,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        eos_token="</s>",
        pad_token="<pad>",
        **kw,
    )


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_sft_trainer_trains_the_heads_own_criterion(tmp_path, tokenizer, family):
    model = _model(FAMILIES[family])
    trainer = trl.SFTTrainer(model=model, args=_args(tmp_path), train_dataset=_data(), processing_class=tokenizer)
    assert type(model).forward is HeadsForCausalLM.forward and "forward" not in vars(model)  # TRL's head not installed
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    model.train()
    torch.manual_seed(5)  # the sampled heads draw their K samples from the global generator
    trainer_loss = trainer.compute_loss(model, dict(batch))
    trainer_loss.backward()
    trainer_grads = _grads(model)
    model.zero_grad()
    torch.manual_seed(5)
    model_loss = model(**batch).loss
    model_loss.backward()
    torch.testing.assert_close(trainer_loss, model_loss)
    for name, grad in _grads(model).items():
        torch.testing.assert_close(trainer_grads[name], grad, msg=name)
    # what TRL logs: entropy and accuracy of the inference distribution (no margin, sampled corrected)
    stats = trainer._metrics["train"]
    assert 0 < stats["entropy"][-1] < torch.log(torch.tensor(float(V))).item() + 1e-4


def test_sft_eval_loss_is_the_heads_eval_loss(tmp_path, tokenizer):
    model = _model(FAMILIES["margin"])
    data = _data(n=4)
    trainer = trl.SFTTrainer(
        model=model, args=_args(tmp_path), train_dataset=data, eval_dataset=data, processing_class=tokenizer
    )
    batch = trainer.data_collator([trainer.eval_dataset[i] for i in range(4)])
    eval_loss = trainer.evaluate()["eval_loss"]
    model.eval()
    with torch.no_grad():
        assert eval_loss == pytest.approx(model(**batch).loss.item(), rel=1e-5)  # no margin at evaluation


def test_sft_options_that_need_full_logits_are_refused(tmp_path, tokenizer):
    model = _model(FAMILIES["margin"])
    args = _args(tmp_path, label_smoothing_factor=0.1)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=_data(), processing_class=tokenizer)
    with pytest.raises(ValueError, match="label_smoothing_factor > 0 .* not with the margin head's criterion"):
        trainer.train()
    with pytest.raises(ValueError, match="label_smoothing_factor"):
        HeadsSFTTrainer(model=_model(FAMILIES["margin"]), args=args, train_dataset=_data(), processing_class=tokenizer)
    with pytest.raises(ValueError, match="compute_loss_func"):
        HeadsSFTTrainer(
            model=_model(FAMILIES["margin"]),
            args=_args(tmp_path),
            train_dataset=_data(),
            processing_class=tokenizer,
            compute_loss_func=lambda outputs, labels, num_items_in_batch=None: outputs.logits.sum(),
        )


def test_heads_sft_trainer_checks_dft_and_fills_peft_targets(tmp_path, tokenizer):
    peft = pytest.importorskip("peft")
    with pytest.raises(OptionError, match="loss_type='dft' is not allowed .* allowed: 'nll'"):
        HeadsSFTTrainer(
            model=_model(FAMILIES["sampled"]),
            args=_args(tmp_path, loss_type="dft"),
            train_dataset=_data(),
            processing_class=tokenizer,
        )
    trainer = HeadsSFTTrainer(  # DFT on a margin head: exp(−ℓ) is the margin softmax's probability
        model=_model(FAMILIES["margin"]),
        args=_args(tmp_path, loss_type="dft", logging_steps=1),
        train_dataset=_data(),
        processing_class=tokenizer,
        peft_config=peft.LoraConfig(task_type="CAUSAL_LM", r=4),  # no target_modules: the backbone's (Llama) default
    )
    adapted = sorted({n.split(".")[-1] for n, m in trainer.model.named_modules() if hasattr(m, "lora_A")})
    assert adapted == ["q_proj", "v_proj"]
    trainer.train()
    assert "head/weight_norm_mean" in trainer.state.log_history[0]  # HeadsTrainer's diagnostics


def test_heads_sft_trainer_counts_the_words_the_model_is_trained_to_predict(tmp_path, tokenizer):
    """A head whose norm scaling needs word counts gets those of the tokens the SFT loss trains on, before the first
    step: the completions (and their </s>) of a prompt-completion dataset, not the prompts, which are never
    predicted."""
    head = {"family": "margin", "margin": "cos", "m": 0.1, "word_norm": "unigram"}
    data = Dataset.from_dict({"prompt": ["w1 w2 w3", "w1 w4"] * 4, "completion": [" w10 w11", " w12"] * 4})
    trainer = HeadsSFTTrainer(model=_model(head), args=_args(tmp_path), train_dataset=data, processing_class=tokenizer)
    trainer.train()
    predicted = [i for text in data["completion"] for i in tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]]
    counts = trainer.model.head.word_counts
    assert torch.equal(counts, torch.bincount(torch.tensor(predicted), minlength=V).to(counts.dtype))
    assert counts[tokenizer.convert_tokens_to_ids(["w1", "w2", "w3", "w4"])].sum() == 0


def test_heads_sft_trainer_refuses_dft_naming_the_heads_setting_and_a_model_without_a_head(tmp_path, tokenizer):
    """DFT on a face-recognition margin head with a z-loss (its loss is no −log q): refused with the head as its
    options describe it (the scale shown as s=...), the model left as it was; a transformers model (no head) is
    refused as such."""
    from transformers import LlamaForCausalLM

    model = _model({"family": "margin", "margin": "cos", "m": 0.1, "scale": 8.0, "z_loss": 0.1})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(OptionError) as refused:
        HeadsSFTTrainer(model=model, args=_args(tmp_path, loss_type="dft"), train_dataset=_data(),
                        processing_class=tokenizer)  # fmt: skip
    assert str(refused.value) == (
        "loss_type='dft' is not allowed with this head (margin cos m=0.1 s=8.0); allowed: 'nll'. DFT weights each "
        "token's loss ℓ by exp(−ℓ), a probability only when ℓ is −log of a softmax (softmax, margin, sparse, sampled "
        "CE full / MCS / NCE)"
    )
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert model.config.head["scale"] == 8.0
    with pytest.raises(TypeError) as refused:
        HeadsSFTTrainer(model=LlamaForCausalLM(tiny_llama_config(V)), args=_args(tmp_path), train_dataset=_data(),
                        processing_class=tokenizer)  # fmt: skip
    assert str(refused.value) == "HeadsSFTTrainer trains hf_heads models (HeadsForCausalLM), not LlamaForCausalLM"
