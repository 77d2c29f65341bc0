"""`HeadsForSeq2SeqLM`: an encoder-decoder backbone with an hf_heads output layer.

Backbones: any `AutoModel` whose config is encoder-decoder (BART, T5, Marian, mBART, Pegasus, ...), and BERT2BERT-style
pairs (an `EncoderDecoderConfig`), warm-started with `from_encoder_decoder_pretrained` or wrapped from a transformers
`EncoderDecoderModel` checkpoint with `from_base`. The backbone only returns decoder states; the head owns the loss.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    EncoderDecoderConfig,
    EncoderDecoderModel,
    GenerationMixin,
    PreTrainedModel,
)
from transformers.modeling_outputs import Seq2SeqLMOutput, Seq2SeqModelOutput

from hf_heads.heads import family, head_dict, make_head
from hf_heads.modeling.base import (
    HeadsPreTrainedModel,
    fresh,
    output_layer,
    refuse_hf_heads_checkpoint,
    wraps_a_checkpoint,
)
from hf_heads.modeling.bodies import backbone_of, sharing
from hf_heads.modeling.compat import cache_kwargs, cache_of, take_cache
from hf_heads.modeling.configuration import HeadsConfig
from hf_heads.modeling.inputs import check_token_ids, embedding_size, head_classes, input_embeddings
from hf_heads.modeling.parity import check_same_distribution, output_transform, probe_ids, with_transform
from hf_heads.modeling.zero3 import new_backbone


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs (B, T) from labels (B, T): start token, then labels[:, :-1], -100 replaced by pad."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def cut_decoder(decoder: PreTrainedModel, name: str) -> PreTrainedModel:
    """`decoder` (a `*ForCausalLM`) with its module `name`, the final (V, H) projection, replaced by the identity (in
    place), and its weight ties into that projection dropped: it then returns the states the projection read."""
    parent_name, _, leaf = name.rpartition(".")
    try:
        parent = decoder.get_submodule(parent_name) if parent_name else decoder
        projection = getattr(parent, leaf)
    except AttributeError as err:
        raise ValueError(f"decoder_stem={name!r}: {type(decoder).__name__} has no module {name!r}") from err
    if not isinstance(projection, nn.Linear):
        raise ValueError(f"decoder_stem={name!r} is a {type(projection).__name__}, not the final nn.Linear")
    setattr(parent, leaf, nn.Identity())
    ties = decoder._tied_weights_keys or {}
    decoder._tied_weights_keys = {k: v for k, v in ties.items() if not (k == name or k.startswith(f"{name}."))}
    return decoder


class EncoderDecoderBackbone(nn.Module):
    """An encoder `AutoModel` and a decoder `AutoModel` (with cross-attention) called like a `BartModel`: returns the
    decoder's last hidden states as a `Seq2SeqModelOutput`. With `decoder_stem` the decoder is its
    `AutoModelForCausalLM` cut before its final projection (`cut_decoder`)."""

    def __init__(
        self,
        config: EncoderDecoderConfig,
        encoder: nn.Module | None = None,
        decoder: nn.Module | None = None,
        decoder_stem: str | None = None,
    ):
        super().__init__()
        if not (config.decoder.is_decoder and config.decoder.add_cross_attention):
            raise ValueError("backbone.decoder must have is_decoder=true and add_cross_attention=true")
        self.config = config
        self.decoder_stem = decoder_stem
        self.encoder = encoder if encoder is not None else new_backbone(config.encoder)
        if decoder is None:
            decoder = (
                fresh(new_backbone(config.decoder, AutoModelForCausalLM))
                if decoder_stem
                else new_backbone(config.decoder)
            )
        self.decoder = cut_decoder(decoder, decoder_stem) if decoder_stem else decoder

    def get_encoder(self, modality: str | None = None) -> nn.Module:
        return self.encoder

    def get_input_embeddings(self) -> nn.Module:
        return self.decoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.decoder.set_input_embeddings(value)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache=None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        cache = take_cache(kwargs)  # the decoder's (self- and cross-attention) cache, never the encoder's
        # as in transformers' EncoderDecoderModel: `decoder_*` kwargs go to the decoder, the rest to the encoder
        decoder_kwargs = {k[len("decoder_") :]: v for k, v in kwargs.items() if k.startswith("decoder_")}
        encoder_kwargs = {k: v for k, v in kwargs.items() if not k.startswith("decoder_")}
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                return_dict=True,
                **encoder_kwargs,
            )
        encoder_states = encoder_outputs[0]  # (B, S, H): a ModelOutput or a tuple
        out = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            inputs_embeds=decoder_inputs_embeds,
            encoder_hidden_states=encoder_states,
            encoder_attention_mask=attention_mask,
            use_cache=use_cache,
            return_dict=True,
            **cache_kwargs(cache),
            **decoder_kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=out.logits if self.decoder_stem else out.last_hidden_state,  # (B, T, H)
            **cache_kwargs(cache_of(out)),
            encoder_last_hidden_state=encoder_states,
        )


class HeadsForSeq2SeqLM(HeadsPreTrainedModel, GenerationMixin):
    """Encoder-decoder LM whose output layer is an hf_heads head.

    `labels` (B, T) are the target ids (not shifted; -100 ignored); `decoder_input_ids` are built from them when not
    given. The loss is the head's training criterion; `logits` are the inference logits (no margin; top-k truncated for
    sparse heads), so `generate()` decodes with the head's distribution (sparse heads: keep k >= num_beams)."""

    head_task = "seq2seq"

    def __init__(self, config: HeadsConfig, backbone: nn.Module | None = None) -> None:
        super().__init__(config)
        self._check_head_task(config)
        if not config.is_encoder_decoder:
            raise ValueError(
                f"backbone.model_type={config.backbone.model_type!r} is not an encoder-decoder; "
                "use HeadsForCausalLM for decoder-only backbones"
            )
        if backbone is None and isinstance(config.backbone, EncoderDecoderConfig):
            backbone = EncoderDecoderBackbone(config.backbone, decoder_stem=config.decoder_stem)
        self.backbone = self._wrap_backbone(config, backbone)
        self.head = make_head(config.hidden_size, config.vocab_size, config.head)
        self._declare_tied_head()
        self.post_init()
        self._fill_generation_tokens()

    def _fill_generation_tokens(self) -> None:
        """transformers reads generation defaults from the decoder's text config, where encoder-decoder configs (BART,
        ...) do not keep `decoder_start_token_id`: the generation config's unset ones are the backbone's own."""
        if self.generation_config is not None:
            for name in ("decoder_start_token_id", "pad_token_id", "eos_token_id"):
                if getattr(self.generation_config, name, None) is None:
                    setattr(self.generation_config, name, self.config.backbone_token_id(name))

    def _take_generation_config(self, lm: PreTrainedModel) -> None:
        super()._take_generation_config(lm)
        self._fill_generation_tokens()

    def _token(self, name: str) -> int:
        value = self.config.backbone_token_id(name)
        if value is None:
            raise ValueError(f"backbone.{name} is not set; set it in the backbone config")
        return value

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Decoder inputs of labels (B, T): shifted right, the decoder start token first, -100 replaced by padding
        (what data collators call)."""
        return shift_tokens_right(labels, self._token("pad_token_id"), self._token("decoder_start_token_id"))

    @classmethod
    @wraps_a_checkpoint
    def from_base(
        cls,
        name_or_path: str | PreTrainedModel,
        head: dict | None = None,
        verify: bool = True,
        calibrate: bool = True,
        **from_pretrained_kwargs,
    ) -> HeadsForSeq2SeqLM:
        """Wrap a pretrained `AutoModelForSeq2SeqLM` (a Hub id, a local directory or a loaded model, whose modules are
        then shared), the head started from its output layer (and `final_logits_bias`); a transformers
        `EncoderDecoderModel` checkpoint too (`HeadsConfig.decoder_stem`). The output transform (T5's d_model^-0.5)
        becomes `logit_multiplier`; `verify` compares the copied layer's logits with the checkpoint's
        (hf_heads.modeling.parity). A continuous head starts from its embedding table. `calibrate` as in
        `HeadsForCausalLM.from_base`."""
        refuse_hf_heads_checkpoint(name_or_path, cls.__name__, **from_pretrained_kwargs)
        if isinstance(name_or_path, PreTrainedModel):
            lm, name_or_path = name_or_path, name_or_path.config.name_or_path
        elif _is_encoder_decoder_pair(name_or_path, from_pretrained_kwargs):
            lm = EncoderDecoderModel.from_pretrained(name_or_path, **from_pretrained_kwargs)
        else:
            lm = AutoModelForSeq2SeqLM.from_pretrained(name_or_path, **from_pretrained_kwargs)
        if isinstance(lm, EncoderDecoderModel):
            return cls._from_encoder_decoder_model(lm, str(name_or_path), head, verify)._calibrated_later(calibrate)
        out = output_layer(lm, HeadsConfig(backbone=lm.config.to_dict()).hidden_size, name_or_path)
        head = head_dict(head)  # validated, defaults filled in
        matrix = family(head["family"]).head.has_output_matrix
        if matrix:
            head = head_dict(with_transform(head, output_transform(lm.config), str(name_or_path)))
        tied = out.weight is lm.get_input_embeddings().weight and matrix
        config = HeadsConfig(backbone=lm.config.to_dict(), head=head, tie_word_embeddings=tied)
        model = cls(config, backbone=backbone_of(lm))
        model._take_generation_config(lm)
        bias = getattr(lm, "final_logits_bias", None)
        bias = bias.reshape(-1) if bias is not None else getattr(out, "bias", None)
        model.head.start_from(None if tied else out.weight, bias)
        model.config.name_or_path = str(name_or_path)
        model = model.to(out.weight.dtype)
        if verify and matrix:
            model._verify_against(lm, str(name_or_path))
        return model._calibrated_later(calibrate)

    @classmethod
    def _from_encoder_decoder_model(
        cls, lm: EncoderDecoderModel, name: str, head: dict | None, verify: bool
    ) -> HeadsForSeq2SeqLM:
        """`from_base` of a transformers `EncoderDecoderModel`: its encoder and its decoder's causal LM (shared) cut
        before the final projection, the head from that projection."""
        if getattr(lm, "enc_to_dec_proj", None) is not None:
            proj = lm.enc_to_dec_proj
            raise ValueError(
                f"{name!r}: this EncoderDecoderModel projects its encoder's states ({proj.in_features} -> "
                f"{proj.out_features}, enc_to_dec_proj) before the decoder reads them, which hf_heads does not do: "
                "it wraps pairs whose decoder reads the encoder's states as they are (equal hidden sizes, or a "
                "decoder with cross_attention_hidden_size)"
            )
        decoder = lm.decoder
        hidden = HeadsConfig(backbone=lm.config.to_dict()).hidden_size
        out = output_layer(decoder, hidden, name)
        stem = next(n for n, module in decoder.named_modules() if module is out)
        head = head_dict(head)  # validated, defaults filled in
        matrix = family(head["family"]).head.has_output_matrix
        if matrix:
            head = head_dict(with_transform(head, output_transform(lm.config), name))
        tied = matrix and out.weight is decoder.get_input_embeddings().weight
        config = HeadsConfig(backbone=lm.config.to_dict(), head=head, tie_word_embeddings=tied, decoder_stem=stem)
        backbone = EncoderDecoderBackbone(
            config.backbone, encoder=lm.encoder, decoder=sharing(AutoModelForCausalLM, decoder), decoder_stem=stem
        )
        model = cls(config, backbone=backbone)
        model._take_generation_config(lm)
        model.head.start_from(None if tied else out.weight, out.bias)
        model.config.name_or_path = name
        model = model.to(out.weight.dtype)
        if verify and matrix:
            model._verify_against(lm, name)
        return model

    @torch.no_grad()
    def _verify_against(self, lm: PreTrainedModel, name: str) -> None:
        """The copied output layer on the decoder's states gives the checkpoint's logits (modeling.parity)."""
        device = lm.get_output_embeddings().weight.device
        ids = probe_ids(self.config.vocab_size).to(device)
        decoder_ids = probe_ids(self.config.vocab_size, seed=1, length=5).to(device)
        start = self.config.backbone_token_id("decoder_start_token_id")
        if start is not None:  # else the probe's own first id: the comparison needs no particular start
            decoder_ids[:, 0] = start
        was_training, lm_training = self.training, lm.training
        self.eval(), lm.eval()
        try:
            original = lm(input_ids=ids, decoder_input_ids=decoder_ids).logits  # (B, T, V)
            hidden = self.backbone(input_ids=ids, decoder_input_ids=decoder_ids).last_hidden_state
            wrapped = self.head.copied_logits(hidden)
        finally:
            self.train(was_training), lm.train(lm_training)
        check_same_distribution(original, wrapped, checkpoint=lm, name=name, what="log-probabilities")

    @classmethod
    def from_encoder_decoder_pretrained(
        cls,
        encoder_name_or_path: str,
        decoder_name_or_path: str | None = None,
        head: dict | None = None,
        *,
        decoder_start_token_id: int | None = None,
        eos_token_id: int | None = None,
        **kwargs,
    ) -> HeadsForSeq2SeqLM:
        """BERT2BERT warm start: encoder and decoder both from pretrained encoders (e.g. MiniLM); the decoder gets
        causal self-attention and new cross-attention layers, the head is tied to its input embeddings. Decoding starts
        with `decoder_start_token_id` and ends with `eos_token_id`: by default the decoder config's BOS / EOS, else its
        tokenizer's CLS / SEP (BERT configs carry neither)."""
        decoder_name_or_path = decoder_name_or_path or encoder_name_or_path
        encoder = AutoModel.from_pretrained(encoder_name_or_path, **kwargs)
        decoder = AutoModel.from_pretrained(decoder_name_or_path, is_decoder=True, add_cross_attention=True, **kwargs)
        dec = decoder.config
        start = decoder_start_token_id if decoder_start_token_id is not None else getattr(dec, "bos_token_id", None)
        end = eos_token_id if eos_token_id is not None else getattr(dec, "eos_token_id", None)
        if start is None or end is None:
            tok = AutoTokenizer.from_pretrained(decoder_name_or_path)
            start = (
                start
                if start is not None
                else (tok.cls_token_id if tok.cls_token_id is not None else tok.bos_token_id)
            )
            end = end if end is not None else (tok.sep_token_id if tok.sep_token_id is not None else tok.eos_token_id)
        for name, value in (
            ("decoder_start_token_id", start),
            ("eos_token_id", end),
            ("pad_token_id", dec.pad_token_id),
        ):
            if value is None:
                raise ValueError(f"{name} is unknown for {decoder_name_or_path!r}; pass {name}=...")
        backbone = EncoderDecoderConfig.from_encoder_decoder_configs(encoder.config, dec)
        backbone.decoder_start_token_id, backbone.eos_token_id, backbone.pad_token_id = start, end, dec.pad_token_id
        head = head_dict(head)  # validated, defaults filled in
        tie = family(head["family"]).head.has_output_matrix
        config = HeadsConfig(backbone=backbone, head=head, tie_word_embeddings=tie)
        model = cls(config, backbone=EncoderDecoderBackbone(backbone, encoder=encoder, decoder=decoder))
        ids = {"decoder_start_token_id": start, "eos_token_id": end, "pad_token_id": dec.pad_token_id}
        for name, value in ids.items():
            setattr(model.generation_config, name, value)  # generate() ends where training does (not the decoder's)
        model.config.name_or_path = str(encoder_name_or_path)
        return model

    def get_encoder(self, modality: str | None = None) -> nn.Module:
        return self.backbone.get_encoder()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs=None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """Args as in transformers' `*ForConditionalGeneration.forward`; the generation cache is taken as `cache` or
        `past_key_values`. Token ids and labels outside the vocabulary are refused with a `ValueError`."""
        kwargs.pop("return_dict", None)
        cache = take_cache(kwargs)
        check_token_ids(
            self,
            {
                "input_ids": (input_ids, embedding_size(input_embeddings(self.get_encoder()))),
                "decoder_input_ids": (decoder_input_ids, embedding_size(self.get_input_embeddings())),
            },
            labels,
            head_classes(self.head),
        )
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        if self.head.embeds_decoder_inputs and decoder_input_ids is not None:
            decoder_inputs_embeds = self.head.embed_inputs(decoder_input_ids)  # (B, T, H)
            decoder_input_ids = None
        outputs = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **cache_kwargs(cache),
            **kwargs,
        )
        hidden = outputs.last_hidden_state  # (B, T, H) decoder states
        loss, logits = self._head_forward(hidden, labels, num_items_in_batch, self._wants_logits(labels))  # (B, T, V)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **cache_kwargs(cache_of(outputs)),
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
        )


def _is_encoder_decoder_pair(name_or_path, from_pretrained_kwargs: dict) -> bool:
    """Whether a checkpoint's config is an `EncoderDecoderConfig` (a transformers `EncoderDecoderModel`, which
    `AutoModelForSeq2SeqLM` does not load)."""
    hub = {k: v for k, v in from_pretrained_kwargs.items() if k in ("revision", "token", "cache_dir")}
    try:
        return isinstance(AutoConfig.from_pretrained(name_or_path, **hub), EncoderDecoderConfig)
    except (OSError, ValueError):
        return False  # not a loadable config here: let the model loader report it
