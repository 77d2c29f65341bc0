"""`HeadsForSequenceClassification`: any `AutoModel` encoder or decoder with an hf_heads head over the labels.

Every discrete family works over the C labels: `softmax`, `margin` (ArcFace / CosFace with `scale` are the
face-recognition setting these margins come from), `sparse` (sparse-softmax paper, eq. 5 over the top k of C logits)
and `sampled` (K < C shared samples).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from hf_heads.heads import make_head
from hf_heads.modeling.base import (
    HeadsPreTrainedModel,
    fresh,
    refuse_hf_heads_checkpoint,
    wraps_a_checkpoint,
)
from hf_heads.modeling.bodies import backbone_of, final_projection, sharing
from hf_heads.modeling.configuration import HeadsConfig
from hf_heads.modeling.inputs import check_token_ids, embedding_size, head_classes, input_embeddings
from hf_heads.modeling.parity import check_same_distribution, probe_ids

PROBLEM_TYPES = (None, "single_label_classification")  # what a head over C classes trains


def check_problem_type(problem: str | None, name: str) -> None:
    """Refuse a `problem_type` (named `name` in the message) other than single-label classification."""
    if problem not in PROBLEM_TYPES:
        raise ValueError(
            f"{name}={problem!r}: an hf_heads head trains one class per example (labels: a class id per example); "
            "allowed: None, 'single_label_classification' (multi-label and regression targets are not head families)"
        )


def labels_of_config(config: PretrainedConfig | None, num_labels: int | None, id2label: dict | None):
    """(num_labels, id2label, label2id, problem_type) for `from_base`: the explicit arguments, else those of `config=`
    (as `AutoModelForSequenceClassification.from_pretrained(name, config=config)` reads them)."""
    if config is None:
        return num_labels, id2label, None, None
    problem = getattr(config, "problem_type", None)
    check_problem_type(problem, "config.problem_type")
    if id2label is None and num_labels is None and config.id2label is not None:
        id2label = {int(k): v for k, v in config.id2label.items()}
        label2id = dict(config.label2id or {})
        if sorted(label2id.items()) != sorted({v: k for k, v in id2label.items()}.items()):
            label2id = None  # inconsistent with id2label: rebuilt from it
        return None, id2label, label2id, problem
    return num_labels, id2label, None, problem


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


def classifier_stem(classifier: PreTrainedModel, name: str) -> tuple[PreTrainedModel, nn.Linear]:
    """(the classifier with module `name` replaced by the identity, the replaced projection)."""
    parent_name, _, leaf = name.rpartition(".")
    parent = classifier.get_submodule(parent_name) if parent_name else classifier
    projection = getattr(parent, leaf)
    if not isinstance(projection, nn.Linear):
        raise ValueError(f"classifier_stem={name!r} is a {type(projection).__name__}, not the final nn.Linear")
    setattr(parent, leaf, nn.Identity())
    return classifier, projection


class HeadsForSequenceClassification(HeadsPreTrainedModel):
    """Sequence classifier: backbone -> pooled vector (B, H) -> dropout -> hf_heads head over `num_labels`.

    `logits` (B, C) are the head's inference logits (no margin; -inf outside the top k for sparse heads), `loss` its
    training criterion (eval mode: the NLL of the inference distribution). Token ids outside the embeddings and labels
    outside 0..num_labels-1 (other than -100) are refused with a `ValueError`."""

    head_task = "classification"

    def __init__(self, config: HeadsConfig, backbone: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        self._check_head_task(config)
        if config.num_labels < 2:
            raise ValueError(f"num_labels={config.num_labels} must be >= 2 (regression is not a head family)")
        check_problem_type(getattr(config, "problem_type", None), "problem_type")
        hidden_size = config.hidden_size
        if config.classifier_stem is not None:  # a fine-tuned classifier: its own pooling and dropout, then the head
            if backbone is None:
                backbone = fresh(AutoModelForSequenceClassification.from_config(config.backbone))
            backbone, projection = classifier_stem(backbone, config.classifier_stem)
            hidden_size = projection.in_features
            self.backbone, self.pooling, dropout = backbone, "stem", 0.0
        else:
            self.backbone = self._wrap_backbone(config, backbone)
            self.pooling = resolve_pooling(config, self.backbone)
            text = config.backbone.get_text_config()
            dropout = config.classifier_dropout
            if dropout is None:
                dropout = getattr(text, "classifier_dropout", None) or getattr(text, "hidden_dropout_prob", 0.0) or 0.0
        self.dropout = nn.Dropout(dropout)
        self.head = make_head(hidden_size, config.num_labels, config.head)
        self.post_init()

    @classmethod
    @wraps_a_checkpoint
    def from_base(
        cls,
        name_or_path: str | PreTrainedModel,
        *,
        num_labels: int | None = None,
        id2label: dict[int, str] | None = None,
        head: dict | None = None,
        pooling: str = "auto",
        classifier_dropout: float | None = None,
        keep_classifier: bool | None = None,
        verify: bool = True,
        calibrate: bool = True,
        **from_pretrained_kwargs,
    ) -> HeadsForSequenceClassification:
        """Wrap a pretrained model (a Hub id, a local directory or a loaded model, whose modules are then shared).

        - A fine-tuned sequence classifier (`keep_classifier=None` decides by its `architectures`): its labels and
          classifier are kept and its final projection becomes the head, so the model predicts what the checkpoint
          predicts (`verify`).
        - Any other checkpoint (or `keep_classifier=False`): its backbone plus a new head over the labels (`id2label`
          or `num_labels`); `pooling` and `classifier_dropout` as in `HeadsConfig`.

        `config=` is read as `AutoModelForSequenceClassification.from_pretrained` reads it; a `problem_type` other than
        single-label classification (of `config=`, given as an argument, or of the fine-tuned classifier) is refused
        (a head trains one class per example). `calibrate` as in
        `HeadsForCausalLM.from_base`."""
        refuse_hf_heads_checkpoint(name_or_path, cls.__name__, **from_pretrained_kwargs)
        check_problem_type(from_pretrained_kwargs.get("problem_type"), "problem_type")
        num_labels, id2label, label2id, problem_type = labels_of_config(
            from_pretrained_kwargs.get("config"), num_labels, id2label
        )
        loaded = isinstance(name_or_path, PreTrainedModel)
        hub = {k: v for k, v in from_pretrained_kwargs.items() if k in ("revision", "token", "cache_dir")}
        checkpoint_config = name_or_path.config if loaded else AutoConfig.from_pretrained(name_or_path, **hub)
        if keep_classifier is None:
            names = [type(name_or_path).__name__] if loaded else checkpoint_config.architectures or []
            keep_classifier = any(n.endswith("ForSequenceClassification") for n in names)
        name = str(name_or_path.config.name_or_path if loaded else name_or_path)
        if keep_classifier:
            kw = from_pretrained_kwargs
            model = cls._from_classifier(name_or_path, name, num_labels, id2label, head, verify, kw)
            return model._calibrated_later(calibrate)
        if id2label is None and num_labels is None:
            raise ValueError(
                "give id2label (preferred) or num_labels: the checkpoint is not a sequence classifier, so its head is "
                "new"
            )
        labels = dict(id2label) if id2label is not None else {i: f"LABEL_{i}" for i in range(num_labels)}
        if id2label is not None and num_labels is not None and num_labels != len(labels):
            raise ValueError(f"num_labels={num_labels} but id2label has {len(labels)} labels")
        backbone = backbone_of(name_or_path) if loaded else AutoModel.from_pretrained(name, **from_pretrained_kwargs)
        config = HeadsConfig(
            backbone=backbone.config.to_dict(),
            head=head,
            pooling=pooling,
            classifier_dropout=classifier_dropout,
            id2label=labels,
            label2id=label2id or {v: k for k, v in labels.items()},
            problem_type=problem_type,
        )
        model = cls(config, backbone=backbone)
        model.config.name_or_path = name
        return model

    @classmethod
    def _from_classifier(cls, source, name, num_labels, id2label, head, verify, kwargs):
        """`from_base` of a fine-tuned classifier: its final projection becomes the head."""
        if isinstance(source, PreTrainedModel):
            checkpoint = source
        else:
            checkpoint = AutoModelForSequenceClassification.from_pretrained(source, **kwargs)
        check_problem_type(checkpoint.config.problem_type, f"{name!r} is a classifier with config.problem_type")
        trained = {int(k): v for k, v in checkpoint.config.id2label.items()}
        if num_labels is not None and num_labels != len(trained):
            raise ValueError(
                f"num_labels={num_labels}, but {name!r} is a classifier over {len(trained)} labels; to train a new "
                "head over other labels pass keep_classifier=False"
            )
        if id2label is not None and {int(k): v for k, v in id2label.items()} != trained:
            raise ValueError(
                f"id2label={dict(id2label)!r} disagrees with the checkpoint's id2label={trained!r}; to train a new "
                "head over other labels pass keep_classifier=False"
            )
        stem_name = final_projection(checkpoint)
        probe = probe_ids(checkpoint.config.vocab_size).to(checkpoint.device)
        original = None
        if verify:
            was_training = checkpoint.training
            with torch.no_grad():
                original = checkpoint.eval()(input_ids=probe).logits  # (B, C)
            checkpoint.train(was_training)
        shared = sharing(AutoModelForSequenceClassification, checkpoint)  # the caller's model is left as it is
        projection = shared.get_submodule(stem_name)
        config = HeadsConfig(
            backbone=checkpoint.config.to_dict(),
            head=head,
            classifier_stem=stem_name,
            id2label=trained,
            label2id={v: k for k, v in trained.items()},
        )
        model = cls(config, backbone=shared)  # replaces the projection of `shared` by the identity
        model.head.start_from(projection.weight, projection.bias)
        model.config.name_or_path = name
        model = model.to(projection.weight.dtype)
        if verify:
            was_training = model.training
            with torch.no_grad():
                wrapped = model.head.copied_logits(model.eval().backbone(input_ids=probe).logits)
            model.train(was_training)
            check_same_distribution(original, wrapped, checkpoint=checkpoint, name=name, what="class probabilities")
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
        rows = embedding_size(input_embeddings(self.backbone))
        batch = (input_ids if input_ids is not None else inputs_embeds).shape[0]
        if labels is not None and tuple(labels.shape) == (batch, 1):  # (B, 1), as transformers' classifiers take it
            labels = labels.reshape(batch)
        if labels is not None and tuple(labels.shape) != (batch,):
            raise ValueError(
                f"labels has shape {tuple(labels.shape)}, expected ({batch},): one class id per example (multi-label "
                "and regression targets are not head families)"
            )
        check_token_ids(self, {"input_ids": (input_ids, rows)}, labels, head_classes(self.head), classifier=True)
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        outputs = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, return_dict=True, **kwargs
        )
        if self.pooling == "stem":
            pooled = outputs.logits  # (B, H): the checkpoint's classifier up to its final projection
        elif self.pooling == "pooler":
            pooled = outputs.pooler_output  # (B, H)
        else:
            hidden = outputs.last_hidden_state  # (B, T, H)
            mask = attention_mask
            if mask is None:  # the padding is where input_ids holds the config's pad id (as GPT-2's classifier)
                pad = self.config.backbone_token_id("pad_token_id")
                if pad is None and hidden.shape[0] > 1 and self.pooling != "first":
                    raise ValueError(
                        f"pooling={self.pooling!r} of a batch of {hidden.shape[0]} without attention_mask needs the "
                        "padding id, and the backbone config has no pad_token_id: pass attention_mask, or set "
                        "model.config.pad_token_id to the tokenizer's (as transformers' *ForSequenceClassification "
                        "refuses the same call)"
                    )
                mask = (
                    (input_ids != pad)
                    if (input_ids is not None and pad is not None)
                    else torch.ones(hidden.shape[:2], device=hidden.device)
                )
            pooled = pool(hidden, mask, self.pooling)
        pooled = self.dropout(pooled)
        loss, logits = self._head_forward(pooled, labels, num_items_in_batch, self._wants_logits(labels))  # (B, C)
        return SequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=getattr(outputs, "hidden_states", None),
            attentions=getattr(outputs, "attentions", None),
        )
