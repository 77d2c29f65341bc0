"""Shared plumbing of the hf_heads model classes: backbone wrapping, head init, weight tying."""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import inspect
import os
from dataclasses import asdict

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers import initialization as init

from hf_heads.heads import CHECKPOINT_OPTIONS, family, head_dict, head_options
from hf_heads.heads.registry import component_modules, same_head
from hf_heads.modeling.configuration import HeadsConfig
from hf_heads.modeling.inputs import unwrapped_head
from hf_heads.modeling.zero3 import new_backbone
from hf_heads.validation import OptionError

DERIVED_OPTIONS = ("embedding_dim",)  # options a head takes from its data when unset (a continuous head's table)


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
        """`PreTrainedModel.from_pretrained`, refusing a checkpoint that lacks part of the head (it would be left
        uninitialised). `head=` loads the checkpoint with another head, every head tensor loading into it. A base
        transformers checkpoint is wrapped with `from_base` (a drop-in for its `AutoModelFor…`), with `head=` or the
        family default, which stands in until a trainer binds the head its arguments name (`bind_head`)."""
        name = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        if _is_base_checkpoint(name, kwargs):
            return cls._from_base_checkpoint(name, *args[1:], **kwargs)
        want_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        with torch.no_grad():  # model-level buffers no checkpoint holds (Falcon-H1's mup_vector): the loader marks
            for sub in model.modules():  # their model as initialised, so let each sub-model set them; init helpers
                stem = sub is model.backbone and getattr(model.config, "classifier_stem", None)  # its head is gone
                if isinstance(sub, PreTrainedModel) and sub is not model and not stem:  # skip every loaded tensor
                    sub._init_weights(sub)
        name = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        missing = sorted(k for k in info.get("missing_keys", ()) if k.startswith("head."))
        if missing:
            raise ValueError(
                f"the checkpoint {name!r} lacks {', '.join(missing)}: refusing to load a head with uninitialised "
                "tensors"
            )
        unused = sorted(k for k in info.get("unexpected_keys", ()) if k.startswith("head."))
        if unused and "head" in kwargs:  # another head than the checkpoint's: none of its trained tensors is dropped
            raise ValueError(
                f"the checkpoint {name!r} holds {', '.join(unused)}, which head={kwargs['head']} does not use: "
                "refusing to drop trained head tensors; choose a head with the same tensors"
            )
        return (model, info) if want_info else model

    @classmethod
    def _from_base_checkpoint(cls, name, *args, **kwargs):
        """`from_pretrained` of a base transformers checkpoint: `from_base` with `head=`, else the default head,
        unbound."""
        if args:
            raise TypeError(
                f"{cls.__name__}.from_pretrained({name!r}, ...) of a base checkpoint takes keyword arguments only "
                f"(config=..., revision=...), got {len(args)} more positional"
            )
        head = kwargs.pop("head", None)
        if kwargs.pop("from_tf", False):
            raise ValueError("from_tf=True: hf_heads wraps PyTorch / safetensors checkpoints only; allowed: False")
        kwargs.pop("output_loading_info", None)
        config = kwargs.get("config")
        if cls.head_task == "classification" and isinstance(config, PretrainedConfig):
            if "id2label" not in kwargs and "num_labels" not in kwargs:  # the labels of `config=` (num_labels=...)
                kwargs["id2label"] = {int(k): v for k, v in config.id2label.items()}
        return cls.from_base(name, head=head, **kwargs)

    @classmethod
    def from_config(cls, config, **kwargs):
        """A new model of a config, as `AutoModelFor….from_config(config)`: an hf_heads config, or a backbone config
        with the default head (unbound). `trust_remote_code` is ignored; other keywords go to
        `PreTrainedModel._from_config`."""
        kwargs.pop("trust_remote_code", None)
        if getattr(config, "model_type", None) == HeadsConfig.model_type:
            return cls._from_config(config, **kwargs)
        model = cls._from_config(cls._wrap_backbone_config(config), **kwargs)
        model.head_origin = "init"
        return model

    @classmethod
    def _wrap_backbone_config(cls, backbone) -> HeadsConfig:
        """The HeadsConfig of a backbone config with the default head (and, for classification, its labels)."""
        head = head_dict(None)
        if cls.head_task == "classification":
            labels = {int(k): v for k, v in backbone.id2label.items()}
            return HeadsConfig(
                backbone=backbone.to_dict(), head=head, id2label=labels, label2id={v: k for k, v in labels.items()}
            )
        tie = bool(getattr(backbone, "tie_word_embeddings", False)) and family(head["family"]).head.has_output_matrix
        return HeadsConfig(backbone=backbone.to_dict(), head=head, tie_word_embeddings=tie)

    head_task = ""  # the task of the model class, one of hf_heads.heads.base.TASKS
    # None: the head was given. "checkpoint" / "init": the family default stands in (started from a checkpoint's
    # output layer, or built new) until `bind_head` gives the head a trainer's arguments name. Not saved.
    head_origin: str | None = None

    def _init_weights(self, module: nn.Module) -> None:
        if module is getattr(self, "head", None):
            module.reset_parameters(init)

    def _wrap_backbone(self, config: HeadsConfig, backbone: PreTrainedModel | None) -> PreTrainedModel:
        if backbone is None:
            backbone = fresh(new_backbone(config.backbone))
        return backbone

    def _check_head_task(self, config: HeadsConfig) -> None:
        """Refuse a head family that does not serve this model's task; the config's head section is read-only from here
        on."""
        config.head = config.head
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
        # the embedding may itself be tied to another tensor of the backbone (Marian: encoder.embed_tokens ->
        # shared): tie the head to that source, which is the tensor the checkpoint holds
        backbone_ties = getattr(self.backbone, "get_expanded_tied_weights_keys", None)
        name = (backbone_ties(all_submodels=True) if backbone_ties else {}).get(name, name)
        self._tied_weights_keys = {"head.weight": f"backbone.{name}"}
        emb._is_hf_initialized = True  # the backbone's embedding: the head's weight init must not overwrite it
        self.head.weight = emb

    _skip_logits = False  # set by `logits_skipped()`
    _statistics: list | None = None  # set by `logits_skipped(statistics=True)` / `statistics_recorded`
    _statistics_options: dict = {}  # set by `statistics_recorded(normalized=..., chunk_size=...)`
    _loss_skipped = False  # set by `statistics_recorded(loss=False)`

    @contextlib.contextmanager
    def logits_skipped(self, statistics: bool = False):
        """Within this context a forward pass given labels returns the loss and no (B, T, V) logits, in eval mode too;
        with `statistics=True` it also records statistics as `statistics_recorded` does and yields their list."""
        previous, self._skip_logits = self._skip_logits, True
        try:
            with self.statistics_recorded(statistics) as recorded:
                yield recorded
        finally:
            self._skip_logits = previous

    @contextlib.contextmanager
    def statistics_recorded(
        self, enabled: bool = True, *, normalized: bool = True, loss: bool = True, chunk_size: int | None = None
    ):
        """Within this context each forward pass given labels appends the head's per-position statistics
        (`OutputHead.statistics`, plus `mask`) to the list the context yields. `normalized=False`: the label's
        unnormalised log-score; `loss=False`: no loss; `chunk_size`: rows per chunk (default: the memory budget)."""
        previous = self._statistics, self._statistics_options, self._loss_skipped
        self._statistics = [] if enabled else None
        self._statistics_options = dict(normalized=normalized, chunk_size=chunk_size)
        self._loss_skipped = enabled and not loss
        try:
            yield self._statistics
        finally:
            self._statistics, self._statistics_options, self._loss_skipped = previous

    def _record_statistics(self, hidden: torch.Tensor, labels: torch.Tensor | None) -> None:
        """Inside `statistics_recorded`: record the statistics of this forward's labelled positions."""
        if self._statistics is not None and labels is not None:
            _, stats = self.head(hidden, labels, statistics=True, compute_loss=False, **self._statistics_options)
            self._statistics.append(stats | {"mask": labels != -100})

    def _head_forward(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor | None,
        num_items_in_batch: int | torch.Tensor | None,
        return_logits: bool,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The head's (loss, logits) for this forward, statistics recorded inside `statistics_recorded`."""
        labels = None if labels is None else labels.to(hidden.device)
        if labels is not None and self.training:
            self.check_warm_start()
        out = self.head(
            hidden,
            labels,
            return_logits=return_logits,
            num_items_in_batch=num_items_in_batch,
            compute_loss=not self._loss_skipped,
        )
        self._record_statistics(hidden, labels)
        return out

    def generate(self, *args, **kwargs):
        """`GenerationMixin.generate`, first refusing a beam width the head's distribution cannot serve (a sparse head
        gives every token outside its top decode_k probability 0)."""
        self.check_generation(kwargs)
        return super().generate(*args, **kwargs)

    def check_generation(self, kwargs: dict) -> None:
        """The head's refusal of a `generate` call's beam width (`OutputHead.check_generation`)."""
        config = kwargs.get("generation_config") or self.generation_config
        num_beams = int(kwargs.get("num_beams") or getattr(config, "num_beams", None) or 1)
        unwrapped_head(self.head).check_generation(num_beams)

    def _wants_logits(self, labels) -> bool:
        return labels is None or not (self.training or self._skip_logits)

    def get_input_embeddings(self) -> nn.Module:
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.backbone.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Module | None:
        """The head, when it holds a (V, H) output matrix; None otherwise (continuous). accelerate's FSDP2 preparation
        reads it to put a tied embedding and its output layer in one FSDP group. It is no `nn.Linear`:
        `set_output_embeddings` refuses to replace it."""
        head = getattr(self, "head", None)
        return head if head is not None and unwrapped_head(head).has_output_matrix else None

    def set_output_embeddings(self, new_embeddings: nn.Module) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}.set_output_embeddings: the output layer is the {unwrapped_head(self.head).family} "
            "head, which owns the training criterion; replacing it with another module would drop it"
        )

    def resize_token_embeddings(self, *args, **kwargs):
        """Refused: the head's (V, ...) tensors would not follow the input embeddings, leaving vocabularies that
        disagree."""
        raise NotImplementedError(
            f"{type(self).__name__}.resize_token_embeddings is not supported: the {self.head.family} head's "
            "vocabulary-sized tensors would not be resized with the input embeddings; resize the base checkpoint "
            "before from_base"
        )

    def set_word_counts(self, counts: torch.Tensor) -> None:
        """Training counts (V,) for the heads that need them (unigram / log-unigram / log-rank / uniform)."""
        unwrapped_head(self.head).set_word_counts(counts)

    def save_pretrained(self, save_directory, is_main_process: bool = True, **kwargs):
        """`PreTrainedModel.save_pretrained` plus the model code and `auto_map` (hf_heads.modeling.export), so every
        saved directory also loads with `trust_remote_code=True` without hf_heads. A `config.head` replaced whole is
        refused."""
        self.check_config_is_the_heads()
        export = importlib.import_module("hf_heads.modeling.export") if __name__.startswith("hf_heads.") else None
        if export is None or not export.model_class(self).__module__.startswith("hf_heads."):
            # exported code (transformers copies it, without export.py) or a user's subclass
            return super().save_pretrained(save_directory, is_main_process=is_main_process, **kwargs)
        save = super().save_pretrained
        return export.save_with_code(self, save_directory, save, is_main_process=is_main_process, **kwargs)

    def export_for_hub(self, directory, tokenizer=None, **save_kwargs):
        """Write weights, config with `auto_map`, the custom code and the tokenizer to `directory`, so that
        `AutoModelFor….from_pretrained(directory, trust_remote_code=True)` works without hf_heads."""
        self.check_config_is_the_heads()
        export = importlib.import_module("hf_heads.modeling.export")  # not needed by exported code
        return export.export_for_hub(self, directory, tokenizer=tokenizer, **save_kwargs)

    def to_base(self, verify: bool = True) -> PreTrainedModel:
        """The base transformers model (`LlamaForCausalLM`, ...) with this model's backbone (shared) and an output
        layer giving this model's inference distribution; `ValueError` naming why where the head does not fold into it
        (hf_heads.modeling.base_export). `verify`: checked on a probe."""
        return importlib.import_module("hf_heads.modeling.base_export").to_base(self, verify=verify)

    def export_base(self, directory, tokenizer=None, verify: bool = True):
        """Save `to_base()` to `directory` with the tokenizer and a model card naming the head, and no hf_heads code.
        `verify`: also load it back and compare. Returns the directory (a `Path`)."""
        export = importlib.import_module("hf_heads.modeling.base_export")  # not needed by exported code
        return export.export_base(self, directory, tokenizer=tokenizer, verify=verify)

    def export_gguf(self, path, tokenizer=None, dtype: str = "f16", verify: bool = True):
        """Write `to_base()` of a Llama-family model as a GGUF file for llama.cpp (`dtype` "f16" or "f32") with the
        tokenizer's vocabulary (hf_heads.modeling.gguf_export). `verify`: read it back and compare. Returns the
        path."""
        export = importlib.import_module("hf_heads.modeling.gguf_export")  # not needed by exported code
        return export.export_gguf(self, path, tokenizer=tokenizer, dtype=dtype, verify=verify)

    def head_section(self) -> dict:
        """The head's options as a `config.head` section (nested components, defaults included)."""
        options = unwrapped_head(self.head).options  # also under a PEFT adapter on the head
        return head_dict({"family": options.family, **asdict(options)})

    def _write_head_config(self) -> None:
        """`config.head` (and `config.components`) from the head's options: how every change of the head ends."""
        section = self.head_section()
        self.config.head = section
        self.config.components = component_modules(section) or None

    def check_config_is_the_heads(self) -> None:
        """Refuse a `config.head` replaced whole since the head was built or last changed: a saved model would not be
        the one in memory."""
        config, head = dict(self.config.head), self.head_section()
        if config == head:
            return
        keys = sorted(k for k in {*config, *head} if config.get(k) != head.get(k))
        changed = ", ".join(f"{k}: head {head.get(k)!r}, config {config.get(k)!r}" for k in keys)
        raise ValueError(
            f"config.head was replaced, and the head in memory was not ({changed}): this model is not the one its "
            "config describes; change the head with model.set_head_options(...), which writes config.head with it"
        )

    def set_head_options(self, **changes) -> None:
        """Change the head's options, validated, and `config.head` with them, in one step:
        `set_head_options(decode_k=3)`. `family=` switches family (options at their defaults, the output transform
        kept, plus `changes`). The head's tensors are kept where family and shapes stay; otherwise a new head starts
        from this one's output layer and word counts, its warm start calibrated as `from_base`'s. A refused change
        raises before anything changes."""
        options = self._changed_options(changes)
        new = family(options.family).head(self.config.hidden_size, self.head.num_classes, options)
        if self._keeps_tensors(new):
            self.head.options = options  # the same tensors: the head keeps its trained ones
        elif self.head_origin is not None and not new.has_output_matrix:
            self._replace_head(new, start=False)  # for the default head: a head without a (V, H) layer is built new
        else:
            self._check_head_can_start(new)
            self._replace_head(new, start=self.head_origin != "init")
        self._write_head_config()

    def _changed_options(self, changes: dict):
        """The head options `set_head_options(**changes)` gives (validated; nothing changed yet)."""
        current = self.head_section()
        changes = dict(changes)
        name = changes.pop("family", current["family"])
        if name == current["family"]:
            section = {**current, **changes}
        else:
            try:
                allowed = set(family(name).options.__dataclass_fields__)
            except OptionError as err:
                raise err.renamed("head.family") from None
            kept = {k: current[k] for k in ("logit_multiplier", "logit_softcap") if k in current and k in allowed}
            section = {"family": name, **kept, **changes}
        options = head_options(section)  # an OptionError names head.<option>
        self._check_head_family(options.family)
        return options

    def _keeps_tensors(self, new) -> bool:
        """Whether a head `new` of the same class and tensor shapes as this model's: the head keeps its tensors."""
        return type(new) is type(self.head) and _tensor_shapes(new) == _tensor_shapes(self.head)

    def binding_replaces_parameters(self, section: dict) -> bool:
        """Whether `bind_head(section)` would put new parameter tensors in the model (a stand-in default head replaced
        by a head of another class or shape): an optimizer built over `model.parameters()` before would not hold
        them. Nothing changes; a refused section raises as `bind_head` would."""
        if self.head_origin is None:
            return False
        options = self._changed_options(head_dict(section))
        with torch.device("meta"):  # shapes only
            new = family(options.family).head(self.config.hidden_size, self.head.num_classes, options)
        return not self._keeps_tensors(new)

    def bind_head(self, section: dict, source: str = "the head flags") -> None:
        """Make the head `section` names this model's (what `HeadsTrainer` does with its head flags): a stand-in
        default head (`head_origin`) is replaced by it; a model with a head of its own must already have it, else both
        are named."""
        wanted = head_dict(section)
        if self.head_origin is not None:
            self.set_head_options(**wanted)
            self.head_origin = None
            return
        current = self.head_section()
        for name in DERIVED_OPTIONS:  # unset in the section: the model's own, taken from its data
            if wanted.get(name) is None and current.get(name) is not None and wanted["family"] == current["family"]:
                wanted[name] = current[name]
        if same_head(current, wanted):
            return
        keys = [k for k in sorted({*current, *wanted}) if k not in CHECKPOINT_OPTIONS]
        keys = [k for k in keys if current.get(k) != wanted.get(k)]
        differ = ", ".join(f"{k}: model {current.get(k)!r}, {source} {wanted.get(k)!r}" for k in keys)
        raise ValueError(
            f"{source} name another head than this model's own ({differ}); drop them to train the model's head, load "
            "the model with head={...} (from_pretrained(path, head=...): its head tensors must fit) or change it with "
            "model.set_head_options(...), or start from the base checkpoint"
        )

    def _check_head_family(self, name: str) -> None:
        tasks = family(name).head.tasks
        if self.head_task not in tasks:
            raise OptionError("family", name, f"is not a head for {type(self).__name__} (its tasks: {tasks})",
                              "head.family")  # fmt: skip

    def _check_head_can_start(self, new) -> None:
        """Refuse a new head that cannot take this one's output layer (a continuous head, or from one)."""
        if not (self.head.has_output_matrix and new.has_output_matrix):
            raise OptionError(
                "family",
                new.family,
                f"cannot start from this model's {self.head.family} head (no (V, H) output layer to carry over): "
                "build the model with this head instead (head=... of from_base / from_pretrained)",
                "head.family",
            )

    def _replace_head(self, new, start: bool) -> None:
        """Put `new` in the old head's place (device, dtype, tying), started from the old one's output layer when
        `start`."""
        old = self.head
        new = new.to(device=old.weight.device, dtype=old.weight.dtype)
        if not new.has_output_matrix and self.config.tie_word_embeddings:  # nothing left to tie (as from_base's)
            self.config.tie_word_embeddings = False
            self.__dict__.pop("_tied_weights_keys", None)  # the tie _declare_tied_head declared
        tied = bool(self.config.tie_word_embeddings)
        if start:
            new.start_from(None if tied else old.weight.detach(), None if old.bias is None else old.bias.detach())
            if old.has_word_counts:
                new.set_word_counts(old.word_counts)
        self.head = new
        if tied:
            self._declare_tied_head()

    def head_needs_counts(self) -> bool:
        return unwrapped_head(self.head).needs_counts

    def check_warm_start(self) -> None:
        """Refuse to train a head whose warm start is still to be calibrated: its first losses would be far above the
        checkpoint's. The error names the line that calibrates it."""
        head = unwrapped_head(self.head)
        if getattr(head, "warm_start_pending", False):
            raise ValueError(
                f"the {head.options.describe()} head started from the output layer of {self.config.name_or_path!r} "
                "is not calibrated yet (from_base had no word_counts), so training would start far from the "
                "checkpoint: "
                "add `hf_heads.training.prepare_head(model, train_dataset)` before training (HeadsTrainer does it "
                "itself: it counts the words and calibrates on the first training rows), or pass word_counts=... to "
                "from_base"
            )

    def _take_generation_config(self, lm: PreTrainedModel) -> None:
        """The wrapped checkpoint's generation defaults (its generation_config.json: end-of-sequence ids, beams,
        penalties, lengths), so that `generate()` decodes as the checkpoint's own class does; saved with the model."""
        if getattr(lm, "generation_config", None) is not None and self.generation_config is not None:
            self.generation_config = copy.deepcopy(lm.generation_config)

    def _calibrated_later(self, calibrate: bool):
        """`from_base(..., calibrate=False)`: train from the copied output layer as it is, nothing pending. Returns the
        model."""
        if not calibrate:
            self.head.warm_start_pending = False
        return self

    @torch.no_grad()
    def calibrate_warm_start(self, **inputs) -> dict[str, float]:
        """Calibrate the head's warm start (`OutputHead.calibrate_to`) to the copied output layer's distribution on up
        to 256 labelled positions of one batch of model inputs (word counts set first). Returns what was fitted."""
        captured = []

        def capture(module, args, kwargs):
            captured.append((args[0], args[1] if len(args) > 1 else kwargs.get("labels")))

        hook = self.head.register_forward_pre_hook(capture, with_kwargs=True)
        was_training = self.training
        self.eval()
        try:
            self(**inputs)
        finally:
            hook.remove()
            self.train(was_training)
        if not captured or captured[0][1] is None:
            raise ValueError(f"calibrate_warm_start needs labels among the inputs (got {sorted(inputs)})")
        hidden, labels = captured[0]
        hidden = hidden.reshape(-1, hidden.shape[-1])[labels.reshape(-1) != -100]  # (N, H) labelled positions
        if hidden.shape[0] == 0:  # a fit on no position would set the gain / bias shift to a bound or NaN
            raise ValueError(
                "calibrate_warm_start: every label of the batch is -100 (padding only), so there is no position to "
                "calibrate the warm start on; give rows with labelled tokens"
            )
        if hidden.shape[0] > 256:
            hidden = hidden[torch.linspace(0, hidden.shape[0] - 1, 256, device=hidden.device).long()]
        base = torch.log_softmax(self.head.copied_logits(hidden).float(), dim=-1)  # (N, V): the checkpoint's
        report = self.head.calibrate_to(hidden, base)
        self.head.warm_start_pending = False
        self._write_head_config()  # the fitted gain (an option of the head) into config.head
        return report

    def add_adapter(self, adapter_config, adapter_name: str | None = None) -> None:
        """transformers' `add_adapter` (PEFT) with PEFT's default `target_modules` of the backbone filled in when none
        are named (hf_heads.integrations.peft). LoRA on the head: `target_parameters=["head.weight"]`."""
        peft = importlib.import_module("hf_heads.integrations.peft")
        peft.add_adapter(self, adapter_config, adapter_name)


def wraps_a_checkpoint(from_base):
    """Decorator of a model class's `from_base`: the model it returns without a `head=` has the family default
    started from the checkpoint's output layer, unbound (`head_origin` "checkpoint": `bind_head` replaces it). The
    model is returned in evaluation mode, as transformers' `from_pretrained` returns one; from a loaded model given
    instead of a name, in that model's mode."""
    signature = inspect.signature(from_base)

    @functools.wraps(from_base)
    def wrapper(cls, *args, **kwargs):
        model = from_base(cls, *args, **kwargs)
        arguments = signature.bind(cls, *args, **kwargs).arguments
        if arguments.get("head") is None:
            model.head_origin = "checkpoint"
        source = arguments.get("name_or_path")
        return model.train(source.training if isinstance(source, PreTrainedModel) else False)

    return wrapper


def _tensor_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """{name: shape} of a module's parameters and buffers."""
    return {name: tuple(t.shape) for name, t in [*module.named_parameters(), *module.named_buffers()]}


# the `from_pretrained` arguments that say where a checkpoint's config is and how to read it
CONFIG_KWARGS = ("revision", "token", "cache_dir", "subfolder", "gguf_file", "local_files_only", "trust_remote_code")


def config_kwargs(from_pretrained_kwargs: dict) -> dict:
    """The `from_pretrained` arguments that `AutoConfig.from_pretrained` takes to find the same checkpoint's config."""
    return {k: v for k, v in from_pretrained_kwargs.items() if k in CONFIG_KWARGS}


def _is_base_checkpoint(name, kwargs: dict) -> bool:
    """Whether `from_pretrained(name, **kwargs)` names a base transformers checkpoint: by `config=` when given, else by
    the checkpoint's config."""
    config = kwargs.get("config")
    source = config if isinstance(config, str | os.PathLike) else name if config is None else None
    if isinstance(source, str | os.PathLike):
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(source, **config_kwargs(kwargs))
        except (OSError, ValueError, KeyError):
            return False
    return getattr(config, "model_type", HeadsConfig.model_type) != HeadsConfig.model_type


def fresh(model: nn.Module) -> nn.Module:
    """A module built from a config inside this model's `__init__`, its "already initialised" marks removed, so this
    model's `post_init` initialises it, non-persistent buffers included (e.g. Falcon-H1's `mup_vector`)."""
    for module in model.modules():
        module.__dict__.pop("_is_hf_initialized", None)
    return model


def output_layer(lm: PreTrainedModel, hidden_size: int, name) -> nn.Module:
    """`lm.get_output_embeddings()` when it is the (V, H) linear layer a head can start from; else a clear error
    (an architecture whose output layer is something else is refused, never wrapped wrong)."""
    out = lm.get_output_embeddings()
    weight = getattr(out, "weight", None)
    if not isinstance(out, nn.Linear) or weight is None or weight.shape[1] != hidden_size:
        shape = None if weight is None else tuple(weight.shape)
        raise ValueError(
            f"{name!r} ({type(lm).__name__}, model_type={lm.config.model_type!r}): its output layer is "
            f"{type(out).__name__} with weight {shape}, not a (vocab, {hidden_size}) nn.Linear applied to the "
            "backbone's final hidden states: hf_heads cannot start a head from it"
        )
    return out


def refuse_hf_heads_checkpoint(name_or_path, cls_name: str, **from_pretrained_kwargs) -> None:
    """`from_base` wraps a base transformers checkpoint; refuse an hf_heads model (it already has its head), saying how
    to load it, instead of failing deep inside or wrapping a head around a head."""
    if isinstance(name_or_path, PreTrainedModel):
        config = name_or_path.config
    else:
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(name_or_path, **config_kwargs(from_pretrained_kwargs))
        except (OSError, ValueError):
            return  # not a loadable config here: let the model loader report it
    if getattr(config, "model_type", None) == HeadsConfig.model_type:
        family = (getattr(config, "head", None) or {}).get("family")
        raise ValueError(
            f"{getattr(name_or_path, 'name_or_path', name_or_path)!r} is already an hf_heads model ({family} head): "
            f"load it with {cls_name}.from_pretrained(...) (or AutoModelFor….from_pretrained after `import hf_heads`) "
            "to evaluate or train it further; from_base wraps a base transformers checkpoint"
        )
