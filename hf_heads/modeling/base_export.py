"""Export to the base architecture: `to_base(model)` is the transformers model of the backbone's own type
(`LlamaForCausalLM`, `BartForConditionalGeneration`, ...) with the trained backbone and an output layer whose logits
give the hf_heads model's inference distribution; `export_base` saves it with a model card, and no hf_heads code.

The output layer is the head's `linear_form()`: (W' (V, H), b' (V,) or None) with softmax(inference_logits(h)) =
softmax(transform(W' h + b')), `transform` the checkpoint's output transform, which the base architecture applies
itself. What folds (every other head is refused with its reason and the nearest exact choice):

| head | W' | b' |
|---|---|---|
| softmax (label smoothing, z-loss, class weights, confidence penalty: training only) | W | b |
| margin, context norm no-mod (eq. 13 without margin, g(i) = gain·‖h_i‖) | W_c × gain·f(c)/‖W_c‖ | b |
| sampled, a correction s + o(c) (eqs. 6, 8, 10, 12, 14, 16, 18, 20) | the margin family's | b + o / multiplier |
| continuous, vMF scores û·Eᵀ (û = P h + p) | E P | E p (−inf outside the output vocabulary) |

b' goes to the output layer's bias or `final_logits_bias`; an architecture with neither (GPT-2, Llama, T5) takes only a
b' the same for every class (dropped). A tied output layer stays tied when W' is the embedding matrix. A differing base
multiplier is folded into W' and b'. The body is the backbone's tensors (shared) under the base class's names. Every
export is checked on a probe input: log-probabilities equal within 1e-5 (float32; 3e-2 in half precision).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
)

from hf_heads.heads.base import SERVED_AS_IT_IS
from hf_heads.losses.vocab_parallel import whole_parameters
from hf_heads.modeling.bodies import backbone_of, final_projection
from hf_heads.modeling.inputs import embedding_size, input_embeddings
from hf_heads.modeling.parity import HALF_TOLERANCE, output_transform, probe_ids

AUTO_CLASSES = {
    "causal-lm": AutoModelForCausalLM,
    "seq2seq": AutoModelForSeq2SeqLM,
    "classification": AutoModelForSequenceClassification,
}
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}  # max |Δ log p| on the probe; half precision: HALF_TOLERANCE


def to_base(model, verify: bool = True) -> PreTrainedModel:
    """The base transformers model of an hf_heads model (module docstring), in eval mode, its body holding the
    backbone's tensors. `verify`: compare log-probabilities on a probe input. `ValueError` naming why for a model that
    does not fold."""
    return _BaseExport(model).build(verify)


def export_base(model, directory: str | Path, tokenizer=None, verify: bool = True) -> Path:
    """Save `to_base(model)` to `directory` with the generation config, the tokenizer (if given) and a model card
    naming the head; no hf_heads code. `verify`: load it back and compare. Returns the directory."""
    directory = Path(directory)
    saved = directory / "config.json"
    if saved.is_file() and json.loads(saved.read_text(encoding="utf-8")).get("model_type") == "hf_heads":
        raise ValueError(
            f"{directory} holds an hf_heads model, which the export would overwrite: export into another directory"
        )
    export = _BaseExport(model)
    base = export.build(verify)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{directory.name}.", dir=directory.parent) as tmp:
        staged = Path(tmp)  # written and checked here: a refused export leaves `directory` as it was
        base.save_pretrained(staged)
        if tokenizer is not None:
            tokenizer.save_pretrained(staged)
        (staged / "README.md").write_text(model_card(model, base, directory.name), encoding="utf-8")
        if verify:
            export.check_reloaded(base, staged, shown=directory)
        directory.mkdir(exist_ok=True)
        for path in staged.iterdir():
            if path.is_dir() and (directory / path.name).is_dir():
                shutil.rmtree(directory / path.name)
            os.replace(path, directory / path.name)
    return directory


def model_card(model, base: PreTrainedModel, name: str) -> str:
    """The exported directory's README.md: what the model is, which head trained it, how to load it."""
    head = model.head
    auto = AUTO_CLASSES[model.head_task].__name__
    section = json.dumps(dict(model.config.head), indent=2, sort_keys=True, default=str)
    source = getattr(model.config, "name_or_path", "") or ""
    front = ["---", "library_name: transformers", "tags:", "- hf_heads", "- hf_heads-base-export"]
    if source and not Path(source).exists():
        front.append(f"base_model: {source}")
    front.append("---")
    return "\n".join(
        [
            *front,
            "",
            f"# {name}",
            "",
            f"A `{type(base).__name__}` trained with the hf_heads **{head.family}** head "
            f"({head.options.describe()}; {head.paper}) and exported to its base architecture: a plain transformers "
            "model, with no hf_heads code.",
            "",
            "```python",
            f"from transformers import {auto}",
            "",
            f'model = {auto}.from_pretrained("{name}")  # no hf_heads, no trust_remote_code',
            "```",
            "",
            f"Its logits give the hf_heads model's inference distribution ({head.logits_note}): the same "
            + (
                "class log-probabilities (within 1e-5 in float32) and the same predicted labels. "
                if model.head_task == "classification"
                else "log-probabilities (within 1e-5 in float32) and the same greedy and beam-search tokens. "
            )
            + "The output layer "
            "is the head's folded into the base architecture's (`OutputHead.linear_form`); the training criterion is "
            "not part of it: given labels, this model computes the base class's plain cross-entropy.",
            "",
            "The head that trained it (`config.head` of the hf_heads model):",
            "",
            "```json",
            section,
            "```",
            "",
        ]
    )


class _BaseExport:
    """One export of an hf_heads model: its base config, class and output layer, built on demand."""

    def __init__(self, model) -> None:
        if model.head_task not in AUTO_CLASSES:
            raise ValueError(f"{type(model).__name__} has no base architecture to export to")
        self.model = model
        self.task = model.head_task
        self.auto = AUTO_CLASSES[self.task]

    # ------------------------------------------------------------------ the output layer

    def output_layer(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The head's (W' (V, H), b' (V,) or None) (`linear_form`), refused where the head does not fold."""
        head = self.model.head
        if head.embeds_decoder_inputs:
            raise ValueError(
                f"the {head.family} head embeds the decoder's inputs itself (tie_decoder_inputs: E[y] W_in), not with "
                "the backbone's embedding table that the base architecture's decoder reads. Nearest exact choice: "
                f"none in the base architecture; {SERVED_AS_IT_IS}"
            )
        with torch.no_grad(), whole_parameters(head):
            return head.linear_form()

    def base_config(self) -> PretrainedConfig:
        """The backbone's config (a copy), with a classifier's labels."""
        config = copy.deepcopy(self.model.config.backbone)
        if self.task == "classification":
            labels = {int(k): v for k, v in self.model.config.id2label.items()}
            config.id2label, config.label2id = labels, {v: k for k, v in labels.items()}
            config.problem_type = getattr(self.model.config, "problem_type", None)
        if hasattr(config, "auto_map"):
            del config.auto_map
        config.architectures = None
        return config

    def meta_base(self, config: PretrainedConfig) -> PreTrainedModel:
        """The base class of `config`, built on the meta device (no memory)."""
        with torch.device("meta"):
            base = self.auto.from_config(config, dtype=self.model.dtype)
        if not type(base).__module__.startswith("transformers."):
            raise ValueError(f"the base class {type(base).__name__} is not a transformers class: nothing to export to")
        return base

    def output_module(self, base: PreTrainedModel) -> str:
        """The name of the base model's output layer: its output embeddings, or a classifier's final projection."""
        if self.task == "classification":
            return final_projection(base)
        out = base.get_output_embeddings()
        name = next((n for n, module in base.named_modules() if module is out), None)
        if name is None or not isinstance(out, nn.Linear):
            raise ValueError(f"{type(base).__name__}'s output layer is {type(out).__name__}, not an nn.Linear")
        return name

    def transform(self, config: PretrainedConfig) -> dict:
        """The output transform the base architecture applies (sequence classifiers: none)."""
        if self.task == "classification":
            return {"logit_multiplier": 1.0, "logit_softcap": None}
        return output_transform(config)

    # ------------------------------------------------------------------ the base model

    @torch.no_grad()
    def build(self, verify: bool) -> PreTrainedModel:
        model = self.model
        weight, bias = self.output_layer()  # (V, H), (V,) or None
        config = self.base_config()
        base = self.meta_base(config)
        out_name = self.output_module(base)
        weight_name = f"{out_name}.weight"
        ties = base.get_expanded_tied_weights_keys(all_submodels=True)  # {target: source}
        head_options = model.head.options
        head_transform = {
            "logit_multiplier": getattr(head_options, "logit_multiplier", 1.0),
            "logit_softcap": getattr(head_options, "logit_softcap", None),
        }
        embeddings = model.get_input_embeddings().weight if self.task != "classification" else None
        tied = weight_name in ties
        keep_tie = (
            tied
            and (weight is embeddings or torch.equal(weight.to(embeddings.dtype), embeddings))
            and self.transform(config) == head_transform
        )
        if tied and not keep_tie and set(ties) == {weight_name}:
            config.tie_word_embeddings = False  # the flag ties the output layer alone: untie it
            base = self.meta_base(config)
        weight, bias = self.fold_transform(weight, bias, head_transform, self.transform(config))
        tensors = self.body_tensors(base)
        if keep_tie:
            tensors[weight_name] = embeddings
        else:
            tensors[weight_name] = nn.Parameter(weight.to(model.dtype))
        tensors.update(self.bias_tensors(base, out_name, bias))
        missing = sorted(name for name in _tensor_names(base) if name not in tensors)
        if missing:
            raise ValueError(
                f"{type(base).__name__} has tensors the hf_heads model does not hold ({', '.join(missing[:4])}"
                f"{', ...' if len(missing) > 4 else ''}): the base architecture computes its output with more than "
                "the backbone and one linear layer, so it cannot give this model's distribution. Nearest exact "
                f"choice: {SERVED_AS_IT_IS}"
            )
        _place(base, tensors)
        base.config.name_or_path = getattr(model.config, "name_or_path", "") or ""
        if getattr(model, "generation_config", None) is not None and base.can_generate():
            base.generation_config = GenerationConfig.from_dict(model.generation_config.to_dict())
        base.eval()
        if verify:
            self.check_same_distribution(base)
        return base

    def fold_transform(self, weight, bias, head: dict, base: dict):
        """(W', b') for the base architecture's output transform `base` where it differs from the head's: a different
        multiplier is folded into W' and b'; a different soft-cap is refused."""
        if head["logit_softcap"] != base["logit_softcap"]:
            raise ValueError(
                f"the base architecture caps its logits with logit_softcap={base['logit_softcap']!r} (its config), "
                f"the head with {head['logit_softcap']!r}: the base model would not give this model's distribution. "
                f"Nearest exact choice: {SERVED_AS_IT_IS}"
            )
        if head["logit_multiplier"] == base["logit_multiplier"]:
            return weight, bias
        ratio = head["logit_multiplier"] / base["logit_multiplier"]
        return weight * ratio, None if bias is None else bias * ratio

    def body_tensors(self, base: PreTrainedModel) -> dict[str, torch.Tensor]:
        """{base tensor name: the backbone's tensor} for every tensor of the base model's body: the body
        (`backbone_of`: the base model's own tensors) names each tensor as the backbone does."""
        backbone = self.model.backbone
        own = _tensors(backbone)
        # the backbone's names are the base model's own where the backbone is a whole task model (a classifier's stem)
        # or a pair of models (an encoder-decoder backbone); else the body's
        whole = not isinstance(backbone, PreTrainedModel) or self.model.config.classifier_stem is not None
        body = base if whole else backbone_of(base)
        names_of = {}  # id(tensor) -> every name of the base model holding it (tied tensors have several)
        for name, tensor in _tensors(base).items():
            names_of.setdefault(id(tensor), []).append(name)
        body_tensors = _tensors(body)
        unplaced = sorted(set(own) - set(body_tensors))
        if unplaced:
            raise ValueError(
                f"{type(base).__name__} has no place for the backbone's {', '.join(unplaced[:4])}"
                f"{', ...' if len(unplaced) > 4 else ''}: the hf_heads backbone is not {type(base).__name__}'s body "
                "(an adapter not merged: merge_and_unload() first; or a body the base class builds otherwise, as a "
                "BERT2BERT decoder built from a bare encoder, without the causal LM's prediction head). Nearest exact "
                f"choice: {SERVED_AS_IT_IS}"
            )
        tensors = {}
        for name, tensor in body_tensors.items():
            if name in own:
                for base_name in names_of[id(tensor)]:
                    tensors[base_name] = own[name]
        return tensors

    def bias_tensors(self, base: PreTrainedModel, out_name: str, bias: torch.Tensor | None) -> dict:
        """{name: tensor} of the base model's output bias set to b'; a b' the architecture has no place for is refused
        unless it is the same for every class (then dropped)."""
        dtype = self.model.dtype
        layer = base.get_submodule(out_name)
        names = _tensor_names(base)
        if getattr(layer, "bias", None) is not None:
            value = nn.Parameter(
                (torch.zeros(layer.out_features) if bias is None else bias).to(device=self._device(), dtype=dtype)
            )
            return {name: value for name, tensor in _tensors(base).items() if tensor is layer.bias}
        if "final_logits_bias" in names:  # BART, Marian, mBART, Pegasus: a (1, V) buffer beside the output layer
            row = torch.zeros(1, layer.out_features) if bias is None else bias.reshape(1, -1)
            return {"final_logits_bias": row.to(device=self._device(), dtype=dtype)}
        if bias is not None:
            finite = bool(torch.isfinite(bias).all())
            if not finite or not bool((bias == bias.reshape(-1)[0]).all()):
                spread = float(bias.max() - bias.min()) if finite else float("inf")
                raise ValueError(
                    f"{type(base).__name__}'s output layer has no bias, and this model's distribution needs one (the "
                    f"{self.model.head.family} head's b' differs between classes by up to {spread:.4g}): the base "
                    "architecture cannot hold it. Nearest exact choice: a head without a bias (head option "
                    f"bias=False, the architecture's own layer) trained so; for this model, {SERVED_AS_IT_IS}"
                )
        return {}

    def _device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    # ------------------------------------------------------------------ checks

    def probe(self) -> list[dict]:
        """Probe inputs (one batch; a classifier's rows one by one: a decoder classifier without a pad token takes a
        single row)."""
        model, device = self.model, self._device()
        if self.task == "causal-lm":
            ids = probe_ids(embedding_size(model.get_input_embeddings())).to(device)  # (2, 8)
            return [{"input_ids": ids, "attention_mask": torch.ones_like(ids)}]
        if self.task == "classification":
            size = embedding_size(input_embeddings(model.backbone))
            ids = probe_ids(size or model.config.backbone.get_text_config().vocab_size).to(device)  # (2, 8)
            return [{"input_ids": row[None], "attention_mask": torch.ones_like(row[None])} for row in ids]
        ids = probe_ids(embedding_size(input_embeddings(model.get_encoder()))).to(device)  # (2, 8)
        decoder_ids = probe_ids(embedding_size(model.get_input_embeddings()), seed=1, length=5).to(device)  # (2, 5)
        start = model.config.backbone_token_id("decoder_start_token_id")
        if start is not None:
            decoder_ids[:, 0] = start
        return [{"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": decoder_ids}]

    def check_same_distribution(self, base: PreTrainedModel) -> None:
        """The base model's log-probabilities on the probe equal the hf_heads model's (and a classifier reads the
        head's input), else `ValueError`."""
        model = self.model
        was_training = model.training
        model.eval()
        try:
            for inputs in self.probe():
                if self.task == "classification":
                    self._check_classifier_input(base, inputs)
                diff = self._difference(model(**inputs).logits, base(**inputs).logits)  # (B, T, V) or (B, C) each
                if not diff <= self._tolerance():
                    pooling = f" (pooling={model.pooling!r})" if self.task == "classification" else ""
                    raise ValueError(
                        f"the exported {type(base).__name__}'s log-probabilities differ from the hf_heads model's by "
                        f"up to {diff:.3g} nats on a probe input (tolerance {self._tolerance():g}): the base "
                        f"architecture does not compute this model's distribution from its backbone{pooling} and "
                        f"output layer, so the export is refused. Nearest exact choice: {SERVED_AS_IT_IS}"
                    )
        finally:
            model.train(was_training)

    def _check_classifier_input(self, base: PreTrainedModel, inputs: dict) -> None:
        """The base classifier's final projection reads the vector the head reads (the same pooling); a classifier
        that projects every position and pools the logits after (GPT-2, Llama) is left to the log-probabilities."""
        seen = {}
        projection = base.get_submodule(final_projection(base))
        hooks = [
            projection.register_forward_pre_hook(lambda module, args: seen.__setitem__("base", args[0])),
            self.model.head.register_forward_pre_hook(lambda module, args: seen.__setitem__("head", args[0])),
        ]
        try:
            self.model(**inputs)
            base(**inputs)
        finally:
            for hook in hooks:
                hook.remove()
        a, b = seen["head"].double(), seen["base"].double()
        tol = TOLERANCE.get(self.model.dtype, HALF_TOLERANCE)
        if a.shape == b.shape and not torch.allclose(a, b, rtol=tol, atol=tol):
            pooling = self.model.pooling
            raise ValueError(
                f"{type(base).__name__}'s classifier reads another vector than this model's head (pooling={pooling!r}"
                f"{' (the checkpoint classifier)' if pooling == 'stem' else ''}): the base class pools its own way. "
                f"Nearest exact choice: train with the pooling the base class uses (pooling='auto' on a backbone "
                f"with a pooler, or wrap its classifier with from_base); for this model, {SERVED_AS_IT_IS}"
            )

    def _tolerance(self) -> float:
        return TOLERANCE.get(self.model.dtype, HALF_TOLERANCE)

    @staticmethod
    def _difference(ours: torch.Tensor, theirs: torch.Tensor) -> float:
        """max |Δ log p| of two logits tensors (*, V) in float64; inf where their supports (finite entries) differ."""
        a = torch.log_softmax(ours.double(), dim=-1)
        b = torch.log_softmax(theirs.double(), dim=-1)
        if a.shape != b.shape or not bool((torch.isfinite(a) == torch.isfinite(b)).all()):
            return float("inf")
        finite = torch.isfinite(a)
        return float((a - b)[finite].abs().max()) if bool(finite.any()) else 0.0

    @torch.no_grad()
    def check_reloaded(self, base: PreTrainedModel, directory: Path, shown: Path | None = None) -> None:
        """The saved directory, loaded by transformers alone, gives the in-memory base model's logits; else
        `ValueError` naming the tensors it loads otherwise (and the directory as `shown`, where given)."""
        reloaded = self.auto.from_pretrained(directory, dtype=base.dtype).to(self._device()).eval()
        for inputs in self.probe():
            diff = self._difference(base(**inputs).logits, reloaded(**inputs).logits)
            if not diff <= self._tolerance():
                saved, loaded = base.state_dict(), reloaded.state_dict()
                changed = sorted(k for k in saved if k in loaded and not torch.equal(saved[k], loaded[k].to(saved[k])))
                raise ValueError(
                    f"{shown or directory} loads into a {type(reloaded).__name__} whose log-probabilities differ "
                    f"from the exported model's by up to {diff:.3g} nats: transformers loads "
                    f"{', '.join(changed[:4]) or '?'} otherwise than the exported model holds them (a table the "
                    "architecture recomputes when it loads instead of saving it?)"
                )


def _tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """{name: tensor} of every parameter and buffer, tied ones under each of their names."""
    return dict(module.named_parameters(remove_duplicate=False)) | dict(module.named_buffers(remove_duplicate=False))


def _tensor_names(module: nn.Module) -> set[str]:
    return set(_tensors(module))


def _place(base: PreTrainedModel, tensors: dict[str, torch.Tensor]) -> None:
    """Put each tensor in the base model under its name (parameters as parameters, buffers as buffers)."""
    for name, tensor in tensors.items():
        module_name, _, leaf = name.rpartition(".")
        module = base.get_submodule(module_name) if module_name else base
        if leaf in module._parameters:
            module._parameters[leaf] = tensor if isinstance(tensor, nn.Parameter) else nn.Parameter(tensor)
        else:
            module._buffers[leaf] = tensor
    for module in base.modules():
        module._is_hf_initialized = True
