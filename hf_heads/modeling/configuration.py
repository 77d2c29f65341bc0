"""`HeadsConfig`: a backbone config (any `AutoConfig` model type) plus a validated head section."""

from __future__ import annotations

from transformers import AutoConfig, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec

from hf_heads.heads.options import head_dict


class HeadsConfig(PretrainedConfig):
    """Configuration of every hf_heads model.

    Args:
        backbone: the wrapped backbone's config (a `PretrainedConfig` or its dict, with `model_type`).
        head: the head section, `{"family": "softmax" | "margin", **options}` (see
            `hf_heads.heads.options`). Validated here, so a bad `config.json` is refused on load with a
            `ValueError` that names the field, the value and what is allowed.
        tie_word_embeddings: share the head's weight with the backbone's input embeddings.
    """

    model_type = "hf_heads"
    sub_configs_defaults = {"backbone": SubConfigSpec(config_class=AutoConfig, model_type="gpt2")}

    backbone: PretrainedConfig | dict | None = None
    head: dict | None = None
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs):
        self.head = head_dict(self.head)
        super().__post_init__(**kwargs)

    def get_text_config(self, decoder=None, encoder=None) -> PretrainedConfig:
        """The backbone's text config (generation reads cache sizes and layer types from it)."""
        return self.backbone.get_text_config(decoder=decoder, encoder=encoder)

    @property
    def hidden_size(self) -> int:
        return self.backbone.get_text_config(decoder=True).hidden_size

    @property
    def vocab_size(self) -> int:
        return self.backbone.get_text_config(decoder=True).vocab_size
