"""`HeadsForCausalLM`: any decoder from `AutoModel` (GPT-2, Llama, ...) with an hf_heads output layer."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from hf_heads.heads import make_head
from hf_heads.modeling.base import (
    HeadsPreTrainedModel,
    output_layer,
    refuse_hf_heads_checkpoint,
    wraps_a_checkpoint,
)
from hf_heads.modeling.bodies import backbone_of
from hf_heads.modeling.compat import cache_kwargs, cache_of, take_cache, takes_cache
from hf_heads.modeling.configuration import HeadsConfig
from hf_heads.modeling.fused import TokenLossOutput, is_trl_fused_forward, token_loss_output, trl_full_logits_refusal
from hf_heads.modeling.inputs import check_token_ids, embedding_size, head_classes, unwrapped_head
from hf_heads.modeling.parity import (
    check_same_distribution,
    output_transform,
    probe_ids,
    stateful_generation,
    with_transform,
)

logger = logging.getLogger(__name__)


class HeadLogits(nn.Module):
    """A head's inference logits (no margin; top-k truncated for sparse heads; the checkpoint's transform applied) in
    the place of a `*ForCausalLM`'s output layer: hidden states (B, T, H) -> logits (B, T, V)."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    @property
    def weight(self) -> torch.Tensor:  # read by output layers' callers for the dtype of the hidden states
        return self.head.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden, return_logits=True)[1]  # (B, T, V)


# `generate` settings that sample the model's own distribution, whatever its generation config recommends (a
# temperature, a nucleus, penalties, suppressed tokens): the warm start's probe
WHOLE_DISTRIBUTION = dict(
    do_sample=True,
    top_k=0,
    top_p=1.0,
    temperature=1.0,
    min_p=None,
    typical_p=1.0,
    epsilon_cutoff=0.0,
    eta_cutoff=0.0,
    repetition_penalty=1.0,
    encoder_repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    suppress_tokens=None,
    begin_suppress_tokens=None,
    sequence_bias=None,
    bad_words_ids=None,
)


class HeadsForCausalLM(HeadsPreTrainedModel, GenerationMixin):
    """Causal LM whose output layer is an hf_heads head.

    `labels` are shifted inside (as in transformers' `*ForCausalLM`); the loss is the head's training criterion (margin
    applied), computed in chunks without the (N, V) logits. `logits` are the inference logits (no margin) and are
    skipped while training with labels."""

    head_task = "causal-lm"
    _trl_fused_head = False  # set when TRL's SFTTrainer tried to install its own LM head (see __setattr__)

    def __setattr__(self, name: str, value) -> None:
        """TRL's `SFTTrainer` replaces `model.forward` with a plain cross-entropy LM head, which would train plain CE
        instead of this head's criterion: that replacement is not installed, and this model answers TRL's
        `fused_lm_head=True` calls itself (`token_loss_output`). Any other assignment is left as it is."""
        if name == "forward" and is_trl_fused_forward(value):
            object.__setattr__(self, "_trl_fused_head", True)
            family = unwrapped_head(self.head).family
            logger.info("TRL's fused LM head not installed: the %s head answers fused_lm_head calls", family)
            return
        super().__setattr__(name, value)

    def __init__(self, config: HeadsConfig, backbone: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        self._check_head_task(config)
        self.backbone = self._wrap_backbone(config, backbone)
        self.head = make_head(config.hidden_size, config.vocab_size, config.head)
        self._declare_tied_head()
        self.post_init()

    @classmethod
    @wraps_a_checkpoint
    def from_base(
        cls,
        name_or_path: str | PreTrainedModel,
        head: dict | None = None,
        word_counts: torch.Tensor | None = None,
        calibration_ids: torch.LongTensor | None = None,
        calibrate: bool = True,
        verify: bool = True,
        **from_pretrained_kwargs,
    ) -> HeadsForCausalLM:
        """Wrap a pretrained causal LM (a Hub id, a local directory or a loaded `*ForCausalLM`, whose modules are then
        shared): its backbone, and the head started from its output layer, keeping its weight tying;
        `from_pretrained_kwargs` go to `AutoModelForCausalLM.from_pretrained` (e.g. `gguf_file=`, `dtype=`).

        Heads whose distribution copying the output layer cannot keep (norm-scaled margins, sampled criteria) are
        calibrated (`MarginHead.calibrate_to`) on `calibration_ids` (B, T), or by default 4 sequences of 32 tokens the
        checkpoint samples itself (seeded; the global RNG untouched). Those needing word counts are calibrated only
        with `word_counts`, else left `warm_start_pending` for `HeadsTrainer`. `calibrate=False` keeps the copied
        output layer as it is.

        The checkpoint's output transform becomes `logit_multiplier` / `logit_softcap`; `verify` compares the copied
        layer's logits with the checkpoint's on a probe, refusing an architecture hf_heads does not reproduce
        (hf_heads.modeling.parity)."""
        refuse_hf_heads_checkpoint(name_or_path, cls.__name__, **from_pretrained_kwargs)
        if isinstance(name_or_path, PreTrainedModel):
            lm, name_or_path = name_or_path, name_or_path.config.name_or_path
        else:
            lm = AutoModelForCausalLM.from_pretrained(name_or_path, **from_pretrained_kwargs)
        backbone_config = HeadsConfig(backbone=lm.config.to_dict())
        out = output_layer(lm, backbone_config.hidden_size, name_or_path)
        tied = (
            bool(getattr(lm.config, "tie_word_embeddings", False)) and out.weight is lm.get_input_embeddings().weight
        )
        head = with_transform(head, output_transform(lm.config), str(name_or_path))
        config = HeadsConfig(backbone=lm.config.to_dict(), head=head, tie_word_embeddings=tied)
        model = cls(config, backbone=backbone_of(lm))
        model._take_generation_config(lm)
        model.head.start_from(None if tied else out.weight, getattr(out, "bias", None))
        if word_counts is not None:
            model.set_word_counts(word_counts)
        model.config.name_or_path = str(name_or_path)
        model = model.to(out.weight.dtype)
        if verify:
            model._verify_against(lm, str(name_or_path))
        if calibrate:
            model._calibrate_from(lm, calibration_ids)
        else:  # the copied output layer, as asked
            model.head.warm_start_pending = False
        return model

    @torch.no_grad()
    def _verify_against(self, lm: PreTrainedModel, name: str) -> None:
        """The copied output layer on the backbone's states gives the checkpoint's logits (modeling.parity)."""
        ids = probe_ids(self.config.vocab_size).to(lm.get_output_embeddings().weight.device)
        was_training, lm_training = self.training, lm.training
        self.eval(), lm.eval()
        try:
            original = lm(input_ids=ids).logits  # (B, T, V)
            wrapped = self.head.copied_logits(self.backbone(input_ids=ids).last_hidden_state)
        finally:
            self.train(was_training), lm.train(lm_training)
        check_same_distribution(original, wrapped, checkpoint=lm, name=name, what="log-probabilities")

    def generate(self, *args, **kwargs):
        """`GenerationMixin.generate`. A backbone whose own `*ForCausalLM` generates through a recurrent-state cache
        (mamba, rwkv, xlstm, ...) generates through that class (`recurrent_generator`)."""
        if stateful_generation(self.config.backbone):
            self.check_generation(kwargs)
            return self.recurrent_generator().generate(*args, **kwargs)
        if not takes_cache(self.backbone):  # no cache to keep (openai-gpt): every step reads the whole sequence, as
            kwargs["use_cache"] = False  # the backbone's own class does (a cache would cut the input to new tokens)
        return super().generate(*args, **kwargs)

    def recurrent_generator(self) -> PreTrainedModel:
        """The backbone's own `*ForCausalLM` (its cache classes, `prepare_inputs_for_generation`, the update of its
        state between steps) built around this model's backbone (shared, not copied), with its output layer replaced
        by this head's inference logits: what `generate()` runs for a recurrent-state backbone."""
        lm_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(self.config.backbone)]
        with torch.device("meta"):
            lm = lm_class(self.config.backbone)
        output = lm.get_output_embeddings()
        slots = {name: module for name, module in lm.named_children() if module is lm.base_model or module is output}
        if len(slots) != 2:
            raise NotImplementedError(
                f"generate() with a {self.config.backbone.model_type!r} backbone: {lm_class.__name__} does not hold "
                "its body and output layer as two direct children, so hf_heads cannot generate through it"
            )
        for name, module in slots.items():
            setattr(lm, name, self.backbone if module is lm.base_model else HeadLogits(self.head))
        left = [n for n, t in [*lm.named_parameters(), *lm.named_buffers()] if t.is_meta]
        if left:
            raise NotImplementedError(
                f"generate() through {lm_class.__name__}: it has tensors of its own ({left[:3]})"
            )
        lm.generation_config = self.generation_config
        return lm.train(self.training)

    @torch.no_grad()
    def _calibrate_from(self, lm: PreTrainedModel, calibration_ids: torch.LongTensor | None) -> None:
        head = self.head
        if not head.needs_calibration:
            return  # softmax, sparse and plain margin heads start as the checkpoint's output layer exactly
        if self.head_needs_counts():
            if not head.has_word_counts:
                logger.warning(
                    "head %s needs word counts: the warm start is calibrated later, by HeadsTrainer (or "
                    "hf_heads.training.prepare_head) on the training data; pass word_counts= to from_base to "
                    "calibrate it now",
                    self.config.head,
                )
                return
        was_training = lm.training
        lm.eval()
        if calibration_ids is None:
            start = next((t for t in (lm.config.bos_token_id, lm.config.eos_token_id) if isinstance(t, int)), 0)
            device = lm.get_output_embeddings().weight.device
            with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
                torch.manual_seed(0)
                calibration_ids = lm.generate(
                    torch.full((4, 1), start, device=device),
                    max_new_tokens=31,
                    min_new_tokens=31,
                    pad_token_id=(start + 1) % self.config.vocab_size,  # never padded
                    **WHOLE_DISTRIBUTION,
                )  # (4, 32)
        base = torch.log_softmax(lm(input_ids=calibration_ids).logits.float(), dim=-1)  # (B, T, V)
        hidden = self.backbone(input_ids=calibration_ids).last_hidden_state  # (B, T, H)
        report = head.calibrate_to(hidden, base)
        self._write_head_config()  # the fitted gain (an option of the head) into config.head
        lm.train(was_training)
        logger.info("warm start calibrated on %d probe positions: %s", calibration_ids.numel(), report)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        num_items_in_batch: int | torch.Tensor | None = None,
        fused_lm_head: bool = False,
        **kwargs,
    ) -> CausalLMOutputWithPast | TokenLossOutput:
        """Args as in transformers' `*ForCausalLM.forward`; `num_items_in_batch` makes gradient accumulation exact.
        `fused_lm_head=True` (TRL's protocol, hf_heads.training.trl) returns a `TokenLossOutput` instead of logits;
        `shift_labels=` (a keyword, so the Trainer's label names stay `labels`) are labels already shifted, as TRL
        passes them under context parallelism. Token ids and labels outside the vocabulary are refused with a
        `ValueError`."""
        kwargs.pop("return_dict", None)
        cache = take_cache(kwargs)
        shift_labels = kwargs.pop("shift_labels", None)
        rows = embedding_size(self.get_input_embeddings())
        check_token_ids(
            self,
            {"input_ids": (input_ids, rows)},
            labels if shift_labels is None else shift_labels,
            head_classes(self.head),
        )
        wants_loss = fused_lm_head or labels is not None or shift_labels is not None
        if self._trl_fused_head and self.training and torch.is_grad_enabled() and not wants_loss:
            raise ValueError(trl_full_logits_refusal(unwrapped_head(self.head).family))
        outputs = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **cache_kwargs(cache),
            **kwargs,
        )
        hidden = outputs.last_hidden_state  # (B, T, H)
        if shift_labels is None and labels is not None:
            shift_labels = F.pad(labels, (0, 1), value=-100)[:, 1:]  # (B, T): position t predicts token t+1
        if fused_lm_head:
            return token_loss_output(self.head, hidden, shift_labels, num_items_in_batch)
        loss = None
        if shift_labels is not None:
            loss, _ = self._head_forward(hidden, shift_labels, num_items_in_batch, return_logits=False)
        logits = None
        if self._wants_logits(shift_labels):
            keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
            _, logits = self.head(hidden[:, keep, :], return_logits=True)  # (B, T', V)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            **cache_kwargs(cache_of(outputs)),
            hidden_states=getattr(outputs, "hidden_states", None),
            attentions=getattr(outputs, "attentions", None),
        )
