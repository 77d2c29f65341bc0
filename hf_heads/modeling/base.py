"""Shared plumbing of the hf_heads model classes: backbone wrapping, head init, weight tying."""

from __future__ import annotations

import contextlib
import importlib

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers import initialization as init

from hf_heads.heads import family
from hf_heads.modeling.configuration import HeadsConfig


class HeadsPreTrainedModel(PreTrainedModel):
    """Base class: a backbone from `AutoModel` (never monkey-patched) plus an hf_heads head."""

    config_class = HeadsConfig
    base_model_prefix = "backbone"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, refusing a checkpoint that lacks part of the head: a missing head
        tensor (the continuous head's embedding table, the word counts, the output weights) would otherwise be
        left uninitialised."""
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        missing = sorted(k for k in info.get("missing_keys", ()) if k.startswith("head."))
        if missing:
            raise ValueError(
                f"the checkpoint {args[0] if args else kwargs.get('pretrained_model_name_or_path')!r} lacks "
                f"{', '.join(missing)}: refusing to load a head with uninitialised tensors"
            )
        return (model, info) if want_info else model

    head_task = ""  # the task of the model class, one of hf_heads.heads.base.TASKS

    def _init_weights(self, module: nn.Module) -> None:
        if module is getattr(self, "head", None):
            module.reset_parameters(init)

    def _wrap_backbone(self, config: HeadsConfig, backbone: PreTrainedModel | None) -> PreTrainedModel:
        if backbone is None:
            backbone = AutoModel.from_config(config.backbone)
        return backbone

    def _check_head_task(self, config: HeadsConfig) -> None:
        """Refuse a head family that does not serve this model's task (e.g. a continuous head outside seq2seq)."""
        name = config.head["family"]
        tasks = family(name).head.tasks
        if self.head_task not in tasks:
            models = {
                "causal-lm": "HeadsForCausalLM",
                "seq2seq": "HeadsForSeq2SeqLM",
                "classification": "HeadsForSequenceClassification",
            }
            allowed = ", ".join(models[t] for t in tasks)
            raise ValueError(f"head.family={name!r} is for {allowed}, not {type(self).__name__}")

    def _declare_tied_head(self) -> None:
        """Tie head.weight to the backbone's input embeddings when the config asks for it."""
        if not self.config.tie_word_embeddings:
            return
        if not self.head.has_output_matrix:
            raise ValueError(
                f"tie_word_embeddings=true does not apply to a {self.head.family} head (it has no (V, H) output "
                "matrix)" + ("; use head.tie_decoder_inputs" if self.head.uses_embedding_table else "")
            )
        emb = self.backbone.get_input_embeddings().weight
        name = next(n for n, p in self.backbone.named_parameters(remove_duplicate=False) if p is emb)
        self._tied_weights_keys = {"head.weight": f"backbone.{name}"}
        self.head.weight = emb

    _skip_logits = False  # set by `logits_skipped()`

    @contextlib.contextmanager
    def logits_skipped(self):
        """Within this context a forward pass given labels returns the loss and no logits, in eval mode too (the
        eval loss and perplexity never need the (B, T, V) logits; `HeadsTrainer` uses it for loss-only
        evaluation)."""
        previous, self._skip_logits = self._skip_logits, True
        try:
            yield self
        finally:
            self._skip_logits = previous

    def _wants_logits(self, labels) -> bool:
        return labels is None or not (self.training or self._skip_logits)

    def get_input_embeddings(self) -> nn.Module:
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.backbone.set_input_embeddings(value)

    def set_word_counts(self, counts: torch.Tensor) -> None:
        """Training counts (V,) for the heads that need them (unigram / log-unigram / log-rank / uniform)."""
        self.head.set_word_counts(counts)

    def save_pretrained(self, save_directory, is_main_process: bool = True, **kwargs):
        """`PreTrainedModel.save_pretrained` plus the model code and `auto_map` in `config.json`: every saved
        directory (Trainer checkpoints, a run's `output_dir`, `push_to_hub`) loads with
        `AutoModelFor….from_pretrained(dir)` after `import hf_heads`, and with `trust_remote_code=True` where
        hf_heads is not installed (see `hf_heads.modeling.export`)."""
        if not type(self).__module__.startswith("hf_heads."):  # exported code (transformers copies it) or a subclass
            return super().save_pretrained(save_directory, is_main_process=is_main_process, **kwargs)
        export = importlib.import_module("hf_heads.modeling.export")  # not needed by exported code
        save = super().save_pretrained
        return export.save_with_code(self, save_directory, save, is_main_process=is_main_process, **kwargs)

    def export_for_hub(self, directory, tokenizer=None, **save_kwargs):
        """Write weights, config with `auto_map`, the custom code and the tokenizer to `directory`, so
        that `AutoModelFor….from_pretrained(directory, trust_remote_code=True)` works without hf_heads
        (`save_pretrained` does the same, except the tokenizer; this one refuses a model whose code
        cannot be exported)."""
        export = importlib.import_module("hf_heads.modeling.export")  # not needed by exported code
        return export.export_for_hub(self, directory, tokenizer=tokenizer, **save_kwargs)

    def head_needs_counts(self) -> bool:
        return self.head.needs_counts


def refuse_hf_heads_checkpoint(name_or_path, cls_name: str, **from_pretrained_kwargs) -> None:
    """`from_base` wraps a base transformers checkpoint; an hf_heads model (a trained run's output_dir, or a
    loaded hf_heads model) already has its head: refuse it, saying how to load it, instead of failing deep inside
    (it has no `get_output_embeddings()`) or wrapping a head around a head."""
    if isinstance(name_or_path, PreTrainedModel):
        config = name_or_path.config
    else:
        from transformers import AutoConfig

        kwargs = {k: v for k, v in from_pretrained_kwargs.items() if k in ("revision", "token", "cache_dir")}
        try:
            config = AutoConfig.from_pretrained(name_or_path, **kwargs)
        except (OSError, ValueError):
            return  # not a loadable config here: let the model loader report it
    if getattr(config, "model_type", None) == HeadsConfig.model_type:
        family = (getattr(config, "head", None) or {}).get("family")
        raise ValueError(
            f"{getattr(name_or_path, 'name_or_path', name_or_path)!r} is already an hf_heads model ({family} head): "
            f"load it with {cls_name}.from_pretrained(...) (or AutoModelFor….from_pretrained after `import hf_heads`) "
            "to evaluate or train it further; from_base wraps a base transformers checkpoint"
        )
