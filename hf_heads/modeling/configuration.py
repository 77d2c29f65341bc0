"""`HeadsConfig`: a backbone config (any `AutoConfig` model type) plus a validated head section.

What transformers' example scripts, its Trainer and generation read from a model's config (the special token ids,
`max_position_embeddings`, `vocab_size`, ...) is read through to the backbone's config (see `HeadsConfig`).
"""

from __future__ import annotations

import dataclasses

from transformers import AutoConfig, EncoderDecoderConfig, GenerationConfig, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec

from hf_heads.heads import head_dict
from hf_heads.heads.registry import component_modules, frozen_section, import_components, missing_component
from hf_heads.validation import OptionError, check_choice, check_number

POOLINGS = ("auto", "pooler", "first", "last", "mean")
# read through to the backbone's config besides every `*_token_id` (see HeadsConfig)
BACKBONE_ATTRIBUTES = ("max_position_embeddings",)


def reads_through(name: str) -> bool:
    """Whether `HeadsConfig.<name>` is the backbone config's attribute: a special token id (`pad_token_id`,
    `decoder_start_token_id`, `forced_bos_token_id`, ...) or one of `BACKBONE_ATTRIBUTES`."""
    return name in BACKBONE_ATTRIBUTES or (name.endswith("_token_id") and not name.startswith("_"))


def _sub_configs(backbone: PretrainedConfig) -> list[PretrainedConfig]:
    """The encoder and decoder configs of a two-part backbone (`EncoderDecoderConfig`); none for another backbone."""
    return [c for c in (getattr(backbone, "encoder", None), getattr(backbone, "decoder", None)) if c is not None]


def backbone_attribute(backbone: PretrainedConfig, name: str):
    """The value `HeadsConfig.<name>` reads through (see `HeadsConfig`); AttributeError where the backbone has none."""
    if hasattr(backbone, name):
        return getattr(backbone, name)
    if name.endswith("_token_id"):
        text = backbone.get_text_config(decoder=True)
        return getattr(text, name, None)
    values = [getattr(c, name) for c in _sub_configs(backbone) if getattr(c, name, None) is not None]
    if values:  # a length limit of an encoder and a decoder: the smaller one bounds both sides
        return min(values)
    raise AttributeError(f"the {backbone.model_type!r} backbone config has no {name!r}")


class HeadsConfig(PretrainedConfig):
    """Configuration of every hf_heads model.

    Args:
        backbone: the wrapped backbone's config (a `PretrainedConfig` or its dict, with `model_type`).
        head: the head section, `{"family": "softmax" | "margin" | "sampled" | "sparse" | "continuous", **options}`,
            validated here (a bad `config.json` is refused on load naming the field, the value and what is allowed) and
            read-only: a built model changes its head and this section together, with `model.set_head_options(...)`.
        tie_word_embeddings: share the head's weight with the backbone's input embeddings.
        pooling: sequence classification only: `pooler`, `first`, `last` (last non-pad token), `mean`, or `auto`
            (`pooler` when the backbone returns one, else `first` for encoders and `last` for decoders).
        classifier_dropout: sequence classification only: dropout before the head (default: the
            backbone's `classifier_dropout` or `hidden_dropout_prob`, else 0).
        classifier_stem: a fine-tuned classifier checkpoint's final (C, H) projection, replaced by the head.
        components: filled in here: `{head option: module}` for each component defined outside hf_heads, imported
            before the head section is read and saved next to the model's code.
        decoder_stem: an `EncoderDecoderModel` checkpoint's decoder's final (V, H) projection, replaced by the head
            (what the decoder computes before it, such as BERT's dense + LayerNorm, is kept).

    Read through to the backbone's config (no copy is kept): every special token id `*_token_id` (the backbone's, else
    its decoder's, else None), `max_position_embeddings` (for an `EncoderDecoderConfig` the smaller of its encoder's
    and decoder's; absent where the backbone has no limit), `vocab_size`, `hidden_size` and `is_encoder_decoder`.
    Setting one sets the backbone config's, which is what `save_pretrained` writes; a generation parameter the
    backbone's config class does not keep is refused, pointing to `model.generation_config` (None is a no-op)."""

    model_type = "hf_heads"
    sub_configs_defaults = {"backbone": SubConfigSpec(config_class=AutoConfig, model_type="gpt2")}

    backbone: PretrainedConfig | dict | None = None
    head: dict | None = None
    tie_word_embeddings: bool = False
    pooling: str = "auto"
    classifier_dropout: float | None = None
    classifier_stem: str | None = None
    decoder_stem: str | None = None
    components: dict | None = None

    def __getattr__(self, name: str):
        """The read-through attributes (see the class docstring); called only where normal lookup fails."""
        backbone = self.__dict__.get("backbone")
        if not reads_through(name) or not isinstance(backbone, PretrainedConfig):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return backbone_attribute(backbone, name)

    def __setattr__(self, key: str, value) -> None:
        if key == "head":  # read-only in place: changed whole, or by the model with its head
            value = frozen_section(value)
        backbone = self.__dict__.get("backbone")
        if not reads_through(key) or not isinstance(backbone, PretrainedConfig):
            super().__setattr__(key, value)
            return
        generation = key in GenerationConfig._get_default_generation_params()
        if generation and key not in {f.name for f in dataclasses.fields(backbone)}:
            if value is None:
                return  # nothing to keep: the backbone has none, and reading answers None
            raise ValueError(
                f"{key}={value!r}: {key} is a generation parameter, which transformers keeps in the model's "
                f"generation config, and the {backbone.model_type!r} backbone config does not save it; set "
                f"model.generation_config.{key} = {value!r} instead"
            )
        setattr(backbone, key, value)

    def _get_generation_parameters(self) -> dict:
        """Generation parameters set on this config itself (transformers refuses to save or generate with them);
        the backbone's own fields that read through (BART's `forced_eos_token_id`) are not among them."""
        own = {f.name for f in dataclasses.fields(self)}
        params = GenerationConfig._get_default_generation_params()
        return {
            k: v
            for k, v in self.__dict__.items()
            if k in params and k != "use_cache" and k not in own and v is not None
        }

    def __post_init__(self, **kwargs):
        import_components(self.components)  # the user's modules register their components before the head is read
        try:
            self.head = head_dict(self.head)
        except OptionError as err:
            hint = missing_component(err, self.components)
            if hint is None:
                raise
            raise ValueError(hint) from None
        self.components = component_modules(self.head) or None
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
        if self.decoder_stem is not None:
            if not isinstance(self.decoder_stem, str) or not self.decoder_stem:
                raise ValueError(f"decoder_stem={self.decoder_stem!r} must be a module name or null")
            if not isinstance(self.backbone, EncoderDecoderConfig):
                raise ValueError(
                    f"decoder_stem={self.decoder_stem!r} applies to an encoder-decoder pair (backbone.model_type "
                    f"'encoder-decoder'), not backbone.model_type={self.backbone.model_type!r}; allowed here: null"
                )

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
        """The (decoder's) vocabulary size of the backbone (read-only: the head's tensors have this size)."""
        return self.backbone.get_text_config(decoder=True).vocab_size

    @vocab_size.setter
    def vocab_size(self, value) -> None:
        raise ValueError(
            f"vocab_size={value!r}: the vocabulary size is the backbone's ({self.vocab_size}) and the head's "
            "(V, ...) tensors have that size, so it cannot be set here; to change it resize the base model before "
            "wrapping it (base.resize_token_embeddings(len(tokenizer)), then from_base(base))"
        )

    def backbone_token_id(self, name: str) -> int | None:
        """`pad_token_id`, `decoder_start_token_id`, ... of the backbone: its top level, else its nested decoder or
        text config (an `EncoderDecoderConfig`'s `decoder`, a composite model's `text_config`). A flat
        encoder-decoder config (BART, T5) is read at its top level only: transformers' decoder view of it
        (`get_text_config(decoder=True)`) renames its `decoder_*` fields, where an unset one would read as the class
        default (BART's `decoder_start_token_id` 2) instead of None."""
        value = getattr(self.backbone, name, None)
        if value is not None:
            return value
        text = self.backbone.get_text_config(decoder=True)
        nested = any(value is text for value in vars(self.backbone).values())  # a sub-config the backbone holds
        return getattr(text, name, None) if nested else None
