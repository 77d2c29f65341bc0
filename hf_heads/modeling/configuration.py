"""`HeadsConfig`: a backbone config (any `AutoConfig` model type) plus a validated head section."""

from __future__ import annotations

from transformers import AutoConfig, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec

from hf_heads.heads import head_dict
from hf_heads.validation import check_choice, check_number

POOLINGS = ("auto", "pooler", "first", "last", "mean")


class HeadsConfig(PretrainedConfig):
    """Configuration of every hf_heads model.

    Args:
        backbone: the wrapped backbone's config (a `PretrainedConfig` or its dict, with `model_type`).
        head: the head section, `{"family": "softmax" | "margin" | "sampled" | "sparse" | "continuous", **options}`
            (the options dataclass of each family: `hf_heads.heads.<family>`). Validated here, so a bad
            `config.json` is refused on load with a `ValueError` that names the field, the value and what is
            allowed.
        tie_word_embeddings: share the head's weight with the backbone's input embeddings.
        pooling: sequence classification only: how a sequence becomes one vector. `pooler` (the backbone's
            pooled output, BERT-style), `first` (first token), `last` (last non-pad token, for decoder-only
            backbones), `mean` (mean over non-pad tokens), or `auto`: `pooler` when the backbone returns
            one, else `first` for encoders and `last` for decoders.
        classifier_dropout: sequence classification only: dropout before the head (default: the
            backbone's `classifier_dropout` or `hidden_dropout_prob`, else 0).
        classifier_stem: sequence classification of a fine-tuned classifier checkpoint only: the module name of its
            final (C, H) projection. The backbone is then the checkpoint's `AutoModelForSequenceClassification` (its
            own pooling, pooler, dense+tanh, context pooler, dropout, ...) with that projection replaced by the
            identity, and the head takes its place (`HeadsForSequenceClassification.from_base`).
    """

    model_type = "hf_heads"
    sub_configs_defaults = {"backbone": SubConfigSpec(config_class=AutoConfig, model_type="gpt2")}

    backbone: PretrainedConfig | dict | None = None
    head: dict | None = None
    tie_word_embeddings: bool = False
    pooling: str = "auto"
    classifier_dropout: float | None = None
    classifier_stem: str | None = None

    def __post_init__(self, **kwargs):
        self.head = head_dict(self.head)
        check_choice("pooling", self.pooling, POOLINGS)
        if self.classifier_dropout is not None:
            check_number("classifier_dropout", self.classifier_dropout, minimum=0)
            if self.classifier_dropout >= 1:
                raise ValueError(f"classifier_dropout={self.classifier_dropout!r} must be < 1")
        if self.classifier_stem is not None:
            if not isinstance(self.classifier_stem, str) or not self.classifier_stem:
                raise ValueError(f"classifier_stem={self.classifier_stem!r} must be a module name or null")
            if self.pooling != "auto":
                raise ValueError(
                    f"pooling={self.pooling!r} does not apply with classifier_stem={self.classifier_stem!r} (the "
                    "checkpoint's classifier pools); allowed: 'auto'"
                )
        super().__post_init__(**kwargs)
        self.is_encoder_decoder = bool(getattr(self.backbone, "is_encoder_decoder", False))

    def get_text_config(self, decoder=None, encoder=None) -> PretrainedConfig:
        """The backbone's text config (generation reads cache sizes and layer types from it)."""
        return self.backbone.get_text_config(decoder=decoder, encoder=encoder)

    @property
    def hidden_size(self) -> int:
        """The width of the final hidden states the head reads: the backbone's `hidden_size`, or OPT's
        `word_embed_proj_dim` (its decoder ends with a projection to it, as in OPT-350m)."""
        text = self.backbone.get_text_config(decoder=True)
        return getattr(text, "word_embed_proj_dim", None) or text.hidden_size

    @property
    def vocab_size(self) -> int:
        """The (decoder's) vocabulary size of the backbone."""
        return self.backbone.get_text_config(decoder=True).vocab_size

    def backbone_token_id(self, name: str) -> int | None:
        """`pad_token_id`, `decoder_start_token_id`, ... of the backbone (its top level, else its decoder)."""
        value = getattr(self.backbone, name, None)
        return value if value is not None else getattr(self.backbone.get_text_config(decoder=True), name, None)
