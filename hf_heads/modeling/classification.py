"""`HeadsForSequenceClassification`: any `AutoModel` encoder or decoder with an hf_heads head over the labels.

Every discrete family works over the C labels: `softmax`, `margin` (ArcFace / CosFace with `scale`
are the face-recognition setting these margins come from), `sparse` (sparse-softmax paper, eq. 5 over
the top k of C logits; its table 1) and `sampled` (K < C shared samples; for very many classes).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from hf_heads.heads import make_head
from hf_heads.modeling.base import HeadsPreTrainedModel, refuse_hf_heads_checkpoint
from hf_heads.modeling.configuration import HeadsConfig


def resolve_pooling(config: HeadsConfig, backbone: PreTrainedModel) -> str:
    """The pooling `auto` stands for: the backbone's pooler if it has one, else first token for encoders
    (model types with a masked-LM head) and last non-pad token for decoders."""
    has_pooler = getattr(backbone, "pooler", None) is not None
    if config.pooling == "pooler" and not has_pooler:
        raise ValueError(
            f"pooling='pooler' but the {config.backbone.model_type!r} backbone has no pooler; "
            "allowed here: 'first', 'last', 'mean', 'auto'"
        )
    if config.pooling != "auto":
        return config.pooling
    if has_pooler:
        return "pooler"
    return "first" if config.backbone.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else "last"


def pool(hidden: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """(B, T, H) hidden states and (B, T) 0/1 mask -> (B, H) by `first`, `last` (last position whose mask
    is 1, so left and right padding both work) or `mean` (over mask == 1)."""
    if how == "first":
        return hidden[:, 0]
    mask = mask.to(hidden.device)
    if how == "last":
        last = mask.shape[1] - 1 - mask.flip(1).long().argmax(dim=1)  # (B,)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    weights = mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)


class HeadsForSequenceClassification(HeadsPreTrainedModel):
    """Sequence classifier: backbone -> pooled vector (B, H) -> dropout -> hf_heads head over `num_labels`.

    `config.id2label` / `label2id` are kept as in transformers; `logits` (B, C) are the head's inference
    logits (no margin; -inf outside the top k for sparse heads), `loss` its training criterion (eval
    mode: the NLL of the inference distribution, eq. 5 for sparse heads).
    """

    head_task = "classification"

    def __init__(self, config: HeadsConfig, backbone: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        self._check_head_task(config)
        if config.num_labels < 2:
            raise ValueError(f"num_labels={config.num_labels} must be >= 2 (regression is not a head family)")
        self.backbone = self._wrap_backbone(config, backbone)
        self.pooling = resolve_pooling(config, self.backbone)
        text = config.backbone.get_text_config()
        dropout = config.classifier_dropout
        if dropout is None:
            dropout = getattr(text, "classifier_dropout", None) or getattr(text, "hidden_dropout_prob", 0.0) or 0.0
        self.dropout = nn.Dropout(dropout)
        self.head = make_head(config.hidden_size, config.num_labels, config.head)
        self.post_init()

    @classmethod
    def from_base(
        cls,
        name_or_path: str,
        *,
        num_labels: int | None = None,
        id2label: dict[int, str] | None = None,
        head: dict | None = None,
        pooling: str = "auto",
        classifier_dropout: float | None = None,
        **from_pretrained_kwargs,
    ) -> HeadsForSequenceClassification:
        """Pretrained backbone (`AutoModel.from_pretrained(name_or_path)`) plus a new head over the labels
        (give `id2label` or `num_labels`)."""
        if id2label is None and num_labels is None:
            raise ValueError("give id2label (preferred) or num_labels")
        labels = dict(id2label) if id2label is not None else {i: f"LABEL_{i}" for i in range(num_labels)}
        refuse_hf_heads_checkpoint(name_or_path, cls.__name__, **from_pretrained_kwargs)
        backbone = AutoModel.from_pretrained(name_or_path, **from_pretrained_kwargs)
        config = HeadsConfig(
            backbone=backbone.config.to_dict(),
            head=head,
            pooling=pooling,
            classifier_dropout=classifier_dropout,
            id2label=labels,
            label2id={v: k for k, v in labels.items()},
        )
        model = cls(config, backbone=backbone)
        model.config.name_or_path = str(name_or_path)
        return model

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        kwargs.pop("return_dict", None)
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        outputs = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, return_dict=True, **kwargs
        )
        if self.pooling == "pooler":
            pooled = outputs.pooler_output  # (B, H)
        else:
            hidden = outputs.last_hidden_state  # (B, T, H)
            mask = attention_mask
            if mask is None:
                pad = self.config.backbone_token_id("pad_token_id")
                mask = (
                    (input_ids != pad) if (input_ids is not None and pad is not None) else torch.ones(hidden.shape[:2])
                )
            pooled = pool(hidden, mask, self.pooling)
        pooled = self.dropout(pooled)
        labels = None if labels is None else labels.to(pooled.device)
        loss, logits = self.head(
            pooled, labels, return_logits=self._wants_logits(labels), num_items_in_batch=num_items_in_batch
        )  # logits (B, C)
        return SequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=getattr(outputs, "hidden_states", None),
            attentions=getattr(outputs, "attentions", None),
        )
