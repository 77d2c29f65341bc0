"""The continuous output layer (Bhat et al. 2019 §2; Kumar & Tsvetkov 2019): û = W_o h + b_o (H -> d), trained against
the frozen, L2-normalised pretrained embedding u = E[y] of the target word; the table E (V, d) is a buffer saved with
the weights.

Centring (`center_embeddings`, not in the papers): when the frequent target words share one direction (GloVe 6B-50d),
the angle-only losses learn that direction and the model stays at chance (docs/results/seq2seq_recipes); `frequency` /
`mean` subtract the count-weighted / plain mean unit row. Default `none`: the papers'.

Inference "logits" (*, V) are û·Eᵀ for vMF heads and s · cos(û, E_c) otherwise, so greedy search is nearest-neighbour
decoding. `output_vocabulary="targets"` restricts decoding (and the softmax losses' candidates) to the words seen as
training targets: with a shared source+target vocabulary the nearest neighbour would otherwise often be a
source-language word, or the random row of a word the table lacks. `projection_layer_norm` (a LayerNorm after the
projection) comes from the authors' released code (Sachin19/seq2seq-con).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from hf_heads.components import REGISTRIES, component_config, make_component, register
from hf_heads.heads.base import SERVED_AS_IT_IS, OutputHead
from hf_heads.heads.options import COMPONENT, HeadOptions, ReferenceBatch
from hf_heads.losses.continuous import nearest_neighbour_diagnostics
from hf_heads.losses.continuous_losses import ContinuousBatch
from hf_heads.losses.precision import autocast_off, compute_dtype
from hf_heads.losses.reduction import check_labels, reduce_rows, valid_rows
from hf_heads.validation import OptionError, check_choice, check_number

_DIAGNOSTIC_ROWS = 256  # positions of the last training batch kept for the table-2 diagnostics


def check_embedding_table(table: torch.Tensor, num_classes: int, dim: int | None) -> None:
    """Refuse a table with the wrong shape, non-finite values or all-zero rows (they cannot be normalised)."""
    if table.dim() != 2 or table.shape[0] != num_classes:
        raise ValueError(f"embedding table has shape {tuple(table.shape)}, expected ({num_classes}, d)")
    if dim is not None and table.shape[1] != dim:
        raise ValueError(f"embedding table has dimension {table.shape[1]}, but head.embedding_dim={dim}")
    bad = ~torch.isfinite(table).all(dim=1)
    if bool(bad.any()):
        raise ValueError(f"embedding table has NaN/inf in {int(bad.sum())} rows (first: row {int(bad.nonzero()[0])})")
    zero = table.norm(dim=1) == 0
    if bool(zero.any()):
        raise ValueError(f"embedding table has {int(zero.sum())} all-zero rows (first: row {int(zero.nonzero()[0])})")


CENTERINGS = ("none", "mean", "frequency")
OUTPUT_VOCABULARIES = ("all", "targets")
# embedding_name: a packaged table, a table trained on the training targets by the run scripts (gensim), or a file
TABLE_NAMES = ("glove-6B-50d", "word2vec-targets")
TABLE_SUFFIXES = (".npz", ".txt", ".vec")
MAX_LOGIT_SCALE = 100.0  # a learned scale is clamped here (as CLIP clamps its logit scale)


def _losses_with(attribute: str, loss) -> str:
    """ "loss='x' (loss='y')" or "loss in ('x', 'z') (loss='y')": the registered losses with a class attribute."""
    names = tuple(name for name, cls in REGISTRIES["continuous_loss"].items() if getattr(cls, attribute))
    which = f"loss={names[0]!r}" if len(names) == 1 else f"loss in {names}"
    return f"{which} (loss={loss.name!r})"


@dataclass
class ContinuousHeadOptions(HeadOptions):
    """Continuous output (Bhat et al. 2019; Kumar & Tsvetkov 2019): a linear map from the decoder state to a d-dim
    embedding, trained against a frozen unit table E (V, d); decoding ranks the vocabulary by û·Eᵀ (nearest
    neighbour)."""

    examples: ClassVar[dict[str, dict]] = {
        "continuous": {"loss": "vmf", "embedding_dim": 4, "tie_decoder_inputs": True},
    }
    contract_examples: ClassVar[dict[str, dict]] = {
        "continuous-vmf-regularised": {"loss": {"type": "vmf", "lambda1": 0.1, "lambda2": 0.9}, "embedding_dim": 4},
        "continuous-vmf-released-layer-norm": {
            "loss": {"type": "vmf", "form": "released"}, "embedding_dim": 4, "projection_layer_norm": True,
        },
        "continuous-cosine-softmax-mean-centred": {
            "loss": "cosine-softmax", "logit_scale": 5.0, "embedding_dim": 4, "center_embeddings": "mean",
        },
        "continuous-in-batch-learned-scale": {
            "loss": "in-batch-softmax", "learn_logit_scale": True, "embedding_dim": 4,
        },
    }  # fmt: skip

    loss: str | dict = field(
        default="vmf",
        metadata={
            "help": f"Continuous-output loss: {', '.join(REGISTRIES['continuous_loss'])}, or a type registered in "
            "your own module (hf_heads.losses.continuous_losses).",
            COMPONENT: "continuous_loss",
        },
    )
    embedding_dim: int | None = field(
        default=None, metadata={"help": "d of the embedding table (set when a table is attached)."}
    )
    embedding_name: str = field(
        default="glove-6B-50d",
        metadata={
            "help": "The target table: glove-6B-50d (packaged), word2vec-targets (trained by the run scripts on the "
            "training targets with gensim, d = word2vec_dim; extra `tables`), or a file: .npz with arrays "
            "`words` and `vectors`, or word2vec text (.txt / .vec). The model stores the table it trained against."
        },
    )
    word2vec_dim: int = field(
        default=300, metadata={"help": "embedding_name=word2vec-targets: d of the table trained on the targets."}
    )
    center_embeddings: str = field(
        default="none",
        metadata={
            "help": "Subtract the table's mean unit row before normalising (not in the papers): none, mean, or "
            "frequency (weighted by the training targets' counts; the setting that learns with GloVe 6B-50d)."
        },
    )
    tie_decoder_inputs: bool = field(
        default=False,
        metadata={"help": "Decoder inputs are E[token] through a linear map d -> H (the paper's tied setup)."},
    )
    logit_scale: float = field(
        default=10.0,
        metadata={
            "help": "s of the decoding logits s · cos(û, E_c) (beam search) for every loss but vMF; for "
            "cosine-softmax and in-batch-softmax also the training scale s = 1/τ (its start when learned)."
        },
    )
    learn_logit_scale: bool = field(
        default=False,
        metadata={"help": "cosine-softmax / in-batch-softmax: learn s (a parameter log s, clamped at 100)."},
    )
    output_vocabulary: str = field(
        default="all",
        metadata={
            "help": "Rows that decoding and the softmax losses consider: all, or targets (the words seen as "
            "training targets, stored with the model as `output_mask`; set by the run scripts)."
        },
    )
    projection_layer_norm: bool = field(
        default=False, metadata={"help": "A LayerNorm after the projection H -> d (the authors' released code)."}
    )

    # the older flat form: each loss parameter beside the loss's name, as its option (migrated on reading): {option:
    # (type, help)}, and the parameter each becomes with the value every older config stored
    flat_options: ClassVar[dict] = {
        "loss_margin": (float, "λ of the margin losses (same as --loss syn-margin-projection:margin=0.5)."),
        "num_negatives": (int, "margin-random: negatives per position (as --loss margin-random:num_negatives=5)."),
        "vmf_lambda1": (float, "vMF: + λ1‖û‖, NLLvMF_reg1 (same as --loss vmf:lambda1=0.1)."),
        "vmf_lambda2": (float, "vMF: − λ2 ûᵀu, NLLvMF_reg2; 1 = plain NLL (same as --loss vmf:lambda2=0.5)."),
        "vmf_form": (str, "vMF: nll or released, the authors' code (same as --loss vmf:form=released)."),
        "num_sampled": (int, "in-batch-softmax: K extra uniform negatives per batch (same as "
                        "--loss in-batch-softmax:num_sampled=K)."),
    }  # fmt: skip
    _FLAT_LOSS_PARAMETERS: ClassVar[dict] = {
        "loss_margin": ("margin", 0.5), "num_negatives": ("num_negatives", 5), "vmf_lambda1": ("lambda1", 0.0),
        "vmf_lambda2": ("lambda2", 1.0), "vmf_form": ("form", "nll"), "num_sampled": ("num_sampled", 0),
    }  # fmt: skip

    @classmethod
    def migrate(cls, head: dict) -> dict:
        """A head section of the older flat form (`loss_margin`, `vmf_lambda1`, ...) as the nested form; a flat option
        the loss has no parameter for is dropped at the value older configs stored and refused otherwise."""
        flat = {key: head[key] for key in cls._FLAT_LOSS_PARAMETERS if key in head}
        if not flat:
            return head
        head = {key: value for key, value in head.items() if key not in flat}
        loss = make_component(
            "continuous_loss", head.get("loss", cls.__dataclass_fields__["loss"].default), field="loss"
        )
        inner = head.get("loss") if isinstance(head.get("loss"), dict) else {}
        given = {}
        for key, value in flat.items():
            parameter, stored = cls._FLAT_LOSS_PARAMETERS[key]
            if parameter in loss.parameters():
                if parameter in inner and inner[parameter] != value:
                    twice = f"is given twice, as {key} and as loss.{parameter}={inner[parameter]!r}"
                    raise OptionError(key, value, twice)
                given[parameter] = value
            elif value != stored:
                having = [n for n, c in REGISTRIES["continuous_loss"].items() if parameter in c.__dataclass_fields__]
                which = f"loss={having[0]!r}" if len(having) == 1 else f"loss in {tuple(having)}"
                raise OptionError(key, value, f"is for {which} (loss={loss.name!r})")
        try:
            params = {**loss.parameters(), **given, "type": loss.name}
            head["loss"] = component_config(make_component("continuous_loss", params, field="loss"))
        except OptionError as err:  # named as it was given: loss_margin, vmf_form, ...
            names = [k for k, (parameter, _) in cls._FLAT_LOSS_PARAMETERS.items() if parameter == err.field]
            flat_name = next((k for k in names if k in flat), None)
            raise (OptionError(flat_name, err.value, err.allowed) if flat_name else err) from None
        return head

    def check(self) -> None:
        super().check()
        loss = self.component("loss")
        if self.embedding_name not in TABLE_NAMES and not self.embedding_name.endswith(TABLE_SUFFIXES):
            allowed = ", ".join(map(repr, TABLE_NAMES)) + " or a file ending in " + ", ".join(TABLE_SUFFIXES)
            raise OptionError("embedding_name", self.embedding_name, f"is not allowed; allowed: {allowed}")
        check_choice("output_vocabulary", self.output_vocabulary, OUTPUT_VOCABULARIES)
        check_number("word2vec_dim", self.word2vec_dim, minimum=2, integer=True)
        if self.learn_logit_scale and not loss.learns_scale:
            raise OptionError("learn_logit_scale", True, f"is for {_losses_with('learns_scale', loss)}")
        check_choice("center_embeddings", self.center_embeddings, CENTERINGS)
        check_number("logit_scale", self.logit_scale, exclusive_minimum=0)
        if not loss.cosine_scores and self.logit_scale != type(self).__dataclass_fields__["logit_scale"].default:
            raise OptionError("logit_scale", self.logit_scale, f"is for {_losses_with('cosine_scores', loss)}")
        if self.learn_logit_scale and self.logit_scale > MAX_LOGIT_SCALE:
            raise OptionError("logit_scale", self.logit_scale, f"must be <= {MAX_LOGIT_SCALE} when learned")
        if self.embedding_dim is not None:
            check_number("embedding_dim", self.embedding_dim, minimum=2, integer=True)

    def reference(self, batch: ReferenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """û = P h + p (then the LayerNorm with `projection_layer_norm`); E the table with unit rows, centred as
        `center_embeddings` says; each counted row's loss is the loss's own `reference` over û, the targets, E, the
        scale s and the output vocabulary; the inference logits s · cos(û, E_c) (û·E_c for vMF), −inf outside the
        vocabulary."""
        p = batch.params
        pred = batch.hidden @ p["proj.weight"].T + p["proj.bias"]  # (N, d)
        if self.projection_layer_norm:
            pred = F.layer_norm(pred, pred.shape[1:], p["proj_norm.weight"], p["proj_norm.bias"])
        table = F.normalize(batch.table.to(pred.dtype), dim=1)  # (V, d)
        if self.center_embeddings != "none":
            weights = None if self.center_embeddings == "mean" else batch.counts.to(pred.dtype) / batch.counts.sum()
            center = table.mean(0) if weights is None else weights @ table  # (d,)
            table = F.normalize(table - center, dim=1)
        scale = p["log_logit_scale"].exp().clamp(max=MAX_LOGIT_SCALE) if self.learn_logit_scale else self.logit_scale
        candidates = p.get("output_mask") if self.output_vocabulary == "targets" else None
        valid, loss = batch.valid, self.component("loss")
        losses = loss.reference(ContinuousBatch(pred[valid], batch.labels[valid], table, scale, candidates))
        scores = (F.normalize(pred, dim=1) * scale if loss.cosine_scores else pred) @ table.T  # (N, V)
        return losses, scores if candidates is None else scores.masked_fill(~candidates, float("-inf"))

    def describe(self) -> str:
        centred = "" if self.center_embeddings == "none" else f", {self.center_embeddings}-centred table"
        table = "" if self.embedding_name == "glove-6B-50d" else f", table {self.embedding_name}"
        vocab = ", target-side output vocabulary" if self.output_vocabulary == "targets" else ""
        return f"continuous {self.component('loss').describe()}{centred}{table}{vocab}"


@register("family")
class ContinuousHead(OutputHead):
    """Output layer predicting a d-dim embedding for each of the V words of the vocabulary (see module doc)."""

    family = "continuous"
    options_class = ContinuousHeadOptions

    paper = (
        "Bhat, Kumar & Tsvetkov, *A Margin-based Loss with Synthetic Negative Samples for Continuous-output Machine "
        "Translation*, WNGT 2019 (and Kumar & Tsvetkov, *Von Mises-Fisher Loss for Training Sequence to Sequence "
        "Models with Continuous Outputs*, ICLR 2019)"
    )
    tasks = ("seq2seq",)
    eval_loss_is_nll = False  # the eval loss is the training loss (vMF NLL of the embedding, or a margin)
    training_loss_is_eval_loss = True
    has_output_matrix = False  # its output is an embedding: nothing to tie or to copy from a checkpoint
    uses_embedding_table = True
    loss_in_nats = False
    logits_note = "the similarity of each vocabulary embedding to the predicted embedding (nearest-neighbour decoding)"

    def __init__(self, hidden_size: int, num_classes: int, options: ContinuousHeadOptions) -> None:
        super().__init__(hidden_size, num_classes, options)
        dim = self.options.embedding_dim
        if dim is None:
            raise ValueError("head.embedding_dim is not set: build the head with the table's dimension d")
        self.proj = nn.Linear(hidden_size, dim)
        self.register_buffer("embeddings", torch.zeros(num_classes, dim))  # (V, d), unit rows once set
        self.input_proj = nn.Linear(dim, hidden_size, bias=False) if self.options.tie_decoder_inputs else None
        # optional parts exist only when asked for, so checkpoints saved without them load unchanged
        if self.options.projection_layer_norm:
            self.proj_norm = nn.LayerNorm(dim)
        if self.options.learn_logit_scale:
            self.log_logit_scale = nn.Parameter(torch.tensor(math.log(self.options.logit_scale)))
        if self.options.output_vocabulary == "targets":
            self.register_buffer("output_mask", torch.ones(num_classes, dtype=torch.bool))  # (V,)
        nn.init.normal_(self.proj.weight, std=0.02)
        nn.init.zeros_(self.proj.bias)

    @property
    def num_classes(self) -> int:
        return self.embeddings.shape[0]

    def reset_parameters(self, init=nn.init) -> None:
        init.normal_(self.proj.weight, mean=0.0, std=0.02)
        init.zeros_(self.proj.bias)
        if self.input_proj is not None:
            init.normal_(self.input_proj.weight, mean=0.0, std=0.02)
        if self.options.projection_layer_norm:
            init.ones_(self.proj_norm.weight)
            init.zeros_(self.proj_norm.bias)
        if self.options.learn_logit_scale:
            init.constant_(self.log_logit_scale, math.log(self.options.logit_scale))

    def start_from(self, weight: torch.Tensor | None, bias: torch.Tensor | None) -> None:
        """Nothing to copy: a checkpoint's (V, H) output layer has no counterpart in an H -> d projection."""

    def set_word_counts(self, counts: torch.Tensor) -> None:
        raise ValueError("the continuous head uses no word counts (its targets are the embedding table's rows)")

    def loss_names(self, target: str = "word") -> tuple[str, str]:
        name = self.options.component("loss").title
        return name, f"{name}, the training loss; not a word NLL"

    @property
    def logit_scale(self) -> float | torch.Tensor:
        """s: the option, or exp(log s) clamped at 100 when learned (a 0-dim tensor)."""
        if self.options.learn_logit_scale:
            return self.log_logit_scale.to(compute_dtype(self.log_logit_scale)).exp().clamp(max=MAX_LOGIT_SCALE)
        return self.options.logit_scale

    def set_output_vocabulary(self, ids: torch.Tensor) -> None:
        """The output vocabulary: `ids` (M,) word ids or a (V,) bool mask, e.g. the distinct training labels; at least
        two."""
        if self.options.output_vocabulary != "targets":
            raise ValueError(
                f"head.output_vocabulary={self.options.output_vocabulary!r}: set output_vocabulary='targets' to "
                "restrict the output vocabulary"
            )
        ids = torch.as_tensor(ids)
        if ids.dtype == torch.bool:
            if ids.shape != (self.num_classes,):
                raise ValueError(
                    f"output vocabulary mask has shape {tuple(ids.shape)}, expected ({self.num_classes},)"
                )
            mask = ids
        else:
            ids = ids.long().reshape(-1)
            if bool(((ids < 0) | (ids >= self.num_classes)).any()):
                raise ValueError(f"output vocabulary ids must be in [0, {self.num_classes})")
            mask = torch.zeros(self.num_classes, dtype=torch.bool).index_fill_(0, ids.cpu(), True)
        if int(mask.sum()) < 2:
            raise ValueError(f"the output vocabulary has {int(mask.sum())} words, needs at least 2")
        with torch.no_grad():
            self.output_mask.copy_(mask.to(self.output_mask.device))

    def _candidates(self) -> torch.Tensor | None:
        return self.output_mask if self.options.output_vocabulary == "targets" else None

    def set_embedding_table(self, table: torch.Tensor, counts: torch.Tensor | None = None) -> None:
        """Attach the pretrained table (V, d): rows L2-normalised, centred as `center_embeddings` says and frozen.
        `counts` (V,): the training targets' counts, required by `frequency` and refused otherwise."""
        table = torch.as_tensor(table, dtype=torch.float32)
        check_embedding_table(table, self.num_classes, self.options.embedding_dim)
        table = F.normalize(table, dim=1)  # (V, d)
        how = self.options.center_embeddings
        if how == "frequency":
            if counts is None:
                raise ValueError(
                    "head.center_embeddings='frequency' weights the mean row by the training targets' counts: call "
                    "set_embedding_table(table, counts=...) with the (V,) counts (hf_heads.data.label_counts)"
                )
            counts = torch.as_tensor(counts, dtype=torch.float64)
            if counts.shape != (self.num_classes,) or not bool(torch.isfinite(counts).all()):
                raise ValueError(f"counts has shape {tuple(counts.shape)}, expected ({self.num_classes},) finite")
            if bool((counts < 0).any()) or float(counts.sum()) <= 0:
                raise ValueError("counts must be >= 0 with a positive sum")
            center = (counts / counts.sum()).float() @ table  # (d,)
        elif counts is not None:
            raise ValueError(f"counts are used only by head.center_embeddings='frequency' (this head has {how!r})")
        else:
            center = table.mean(0) if how == "mean" else None
        if center is not None:
            table = table - center
            check_embedding_table(table, self.num_classes, None)  # a row equal to the centre cannot be normalised
            table = F.normalize(table, dim=1)
        with torch.no_grad():
            self.embeddings.copy_(table.to(self.embeddings.device))

    def _table(self) -> torch.Tensor:
        key = self.embeddings._version
        if getattr(self, "_checked", None) != key:
            if bool((self.embeddings.norm(dim=1) == 0).any()):
                raise ValueError(
                    "the continuous head has no embedding table (all-zero rows): call "
                    "model.head.set_embedding_table(E) with the (V, d) pretrained vectors before training"
                )
            self._checked = key
        return self.embeddings

    @property
    def embeds_decoder_inputs(self) -> bool:
        return self.input_proj is not None

    def embed_inputs(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """Decoder input embeddings (B, T, H) = E[ids] W_in (tie_decoder_inputs)."""
        return self.input_proj(self._table()[input_ids])

    @autocast_off
    def predict(self, hidden: torch.Tensor) -> torch.Tensor:
        """û (*, d) in float32 (float64 for a float64 head): the projection runs in the head's dtype, autocast off."""
        out = self.proj(hidden.to(self.proj.weight.dtype))
        if self.options.projection_layer_norm:
            out = self.proj_norm(out)
        return out.to(compute_dtype(self.proj.weight))

    def training_loss(self, hidden, labels, counting):
        """Loss of hidden (*, H) against word ids (*); "mean" divides by `num_items_in_batch`, else by the valid
        positions."""
        table = self._table()
        flat_h, flat_y, valid = valid_rows(hidden, labels, counting.ignore_index)
        check_labels(flat_y, self.num_classes, counting.ignore_index)
        pred = self.predict(flat_h[valid])  # (n, d)
        ids = flat_y[valid]
        if self.training:
            self._last = (pred.detach()[:_DIAGNOSTIC_ROWS], ids[:_DIAGNOSTIC_ROWS])
        batch = ContinuousBatch(pred, ids, table, scale=self.logit_scale, candidates=self._candidates())
        losses = self.options.component("loss").row_losses(batch)  # (n,)
        losses = losses + 0.0 * pred.sum()  # (n,); keeps the graph when every position is ignored
        return reduce_rows(losses, valid, labels.shape, counting.reduction, counting.num_items_in_batch)

    def inference_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(*, V) decoding scores: û·Eᵀ (vMF) or s · cos(û, E); -inf outside the output vocabulary."""
        return self._scores(hidden).to(self.proj.weight.dtype)

    @autocast_off
    def _scores(self, hidden: torch.Tensor) -> torch.Tensor:
        pred = self.predict(hidden)  # (*, d) float32
        if self.options.component("loss").cosine_scores:
            pred = F.normalize(pred, dim=-1) * self.logit_scale
        scores = pred @ self._table().to(pred.dtype).T  # (*, V)
        candidates = self._candidates()
        return scores if candidates is None else scores.masked_fill(~candidates, float("-inf"))

    @torch.no_grad()
    def linear_form(self) -> tuple[torch.Tensor, torch.Tensor]:
        """vMF's û·Eᵀ with û = P h + p: W' = E P (V, H), b' = E p (V,), −inf outside the output vocabulary; float32.
        Refused for the cosine scores (they divide by ‖û‖) and with `projection_layer_norm`."""
        o = self.options
        why = None
        if o.component("loss").cosine_scores:
            why = f"its {o.component('loss').name} scores s·cos(û, E_c) divide by ‖û‖, which no linear layer does"
        elif o.projection_layer_norm:
            why = "projection_layer_norm normalises û = P h + p (a LayerNorm), which no linear layer does"
        if why is not None:
            raise ValueError(
                f"the continuous head's distribution is not a linear output layer's: {why}. Nearest exact choice: "
                f"none in the base architecture; {SERVED_AS_IT_IS}"
            )
        table = self._table().float()  # (V, d)
        weight = table @ self.proj.weight.float()  # (V, H)
        bias = table @ self.proj.bias.float()  # (V,)
        candidates = self._candidates()
        return weight, bias if candidates is None else bias.masked_fill(~candidates, float("-inf"))

    @torch.no_grad()
    def diagnostics(self) -> dict[str, float]:
        """Bhat et al.'s table 2 on the last training batch (nearest-neighbour accuracy@k and similarities) and mean
        ‖û‖."""
        last = getattr(self, "_last", None)
        if last is None or last[0].shape[0] == 0:
            return {}
        pred, ids = last
        out = {f"head/{k}": v for k, v in nearest_neighbour_diagnostics(pred, ids, self._table()).items()}
        out["head/pred_norm_mean"] = pred.norm(dim=-1).mean().item()
        if self.options.learn_logit_scale:
            out["head/logit_scale"] = float(self.logit_scale)
        return {k: v for k, v in out.items() if v == v}
