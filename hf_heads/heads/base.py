"""`OutputHead`: the template every head family fills in (hf_heads.heads.softmax, sparse, margin, sampled, continuous).
`forward`, `loss` and `logits` live here once; a family overrides a few hooks: `training_loss`, `eval_loss` (with
`eval_loss_is_nll`), `inference_logits`, `linear_form`, `diagnostics` (with `eval_sum_names` and
`support_is_truncated`), `start_from` / `copied_logits` / `needs_calibration` / `calibrate_to` (the start from a
checkpoint's output layer), `reset_parameters`, and the class attributes the models and cards read: `paper`, `tasks`,
`has_output_matrix` (a (V, H) weight that can be tied to the input embeddings), `uses_embedding_table`.

`counting` is a `RowCounting` (hf_heads.losses.reduction): `num_items_in_batch`, `ignore_index` and `reduction`, as
in `F.cross_entropy` and the Trainer; a loss function takes them as `**counting.kwargs()`.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from hf_heads.heads.registry import head_options
from hf_heads.losses.chunks import map_chunks, rows_per_chunk

# the built-in chunk kernels register on import; a head's `chunk_kernel` option names one (the code saved with a model
# has no package __init__ that would import them: these lines carry them)
from hf_heads.losses.kernels import EagerKernel  # noqa: F401
from hf_heads.losses.parts import check_chunking
from hf_heads.losses.reduction import IGNORE_INDEX, RowCounting
from hf_heads.losses.triton_kernel import TritonKernel  # noqa: F401
from hf_heads.losses.vocab_parallel import whole_parameters

TASKS = ("causal-lm", "seq2seq", "classification")
# the exact choice left where a head's distribution does not fold into a base architecture (`linear_form`)
SERVED_AS_IT_IS = (
    "the hf_heads model itself serves it exactly (save_pretrained / export_for_hub: it loads with "
    "trust_remote_code=True where hf_heads is not installed)"
)


class OutputHead(nn.Module):
    """Base class of every head: `head(hidden, labels)` -> (loss or None, logits or None)."""

    family: ClassVar[str] = ""  # each family's head class sets its own (`register("family")`)
    options_class: ClassVar[type] = type(None)  # likewise
    paper: ClassVar[str] = ""  # citation shown in model cards
    tasks: ClassVar[tuple[str, ...]] = TASKS
    eval_loss_is_nll: ClassVar[bool] = True
    has_output_matrix: ClassVar[bool] = True
    uses_embedding_table: ClassVar[bool] = False
    logits_note: ClassVar[str] = "the model scores"  # what the inference logits are (model cards)
    loss_in_nats: ClassVar[bool] = True  # whether the losses are log-likelihoods (plots' unit)
    has_unnormalized_scores: ClassVar[bool] = False  # whether `unnormalized_log_scores` exists (sampled heads)
    support_is_truncated: ClassVar[bool] = False
    eval_sum_names: ClassVar[tuple[str, ...]] = ()
    eval_sums: torch.Tensor | None = None  # (len(eval_sum_names) + 1,): the sums, then the counted rows
    # True from `start_from` of a head that `needs_calibration` until `calibrate_to` ran: the models refuse to train it
    warm_start_pending: bool = False

    def __init__(self, hidden_size: int, num_classes: int, options=None) -> None:
        """`options`: the family's options object, its head section as a dict, or None for the defaults."""
        super().__init__()
        if not self.family:
            raise TypeError(f"{type(self).__name__} is a base class: build heads with hf_heads.heads.make_head(...)")
        if options is None or isinstance(options, dict):
            section = {"family": self.family, **(options or {})}
            if section["family"] != self.family:
                raise ValueError(
                    f"head.family={section['family']!r}, but {type(self).__name__} is the "
                    f"{self.family!r} family: build other families with hf_heads.heads.make_head"
                )
            options = head_options(section)
        if type(options) is not self.options_class:
            raise TypeError(f"{type(self).__name__} takes {self.options_class.__name__}, not {type(options).__name__}")
        self.options = options

    # ------------------------------------------------------------------ hooks

    def training_loss(self, hidden: torch.Tensor, labels: torch.Tensor, counting: RowCounting) -> torch.Tensor:
        """The training criterion of hidden (*, H) against labels (*), rows counted as `counting` says."""
        raise NotImplementedError

    def eval_loss(self, hidden: torch.Tensor, labels: torch.Tensor, counting: RowCounting) -> torch.Tensor:
        """The evaluation loss; default: the training criterion. With `eval_loss_is_nll`, exp(eval_loss) is a
        perplexity."""
        return self.training_loss(hidden, labels, counting)

    def inference_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (*, V) of hidden (*, H) whose softmax is the model's p(c | x); never with a training margin."""
        raise NotImplementedError

    def linear_form(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(W' (V, H), b' (V,) or None) with softmax(inference_logits(h)) = softmax(transform(W' h + b')) for every h,
        `transform` the checkpoint's output transform: what `to_base` writes as the base model's output layer. A head
        whose distribution no linear layer gives raises `ValueError` naming why and the nearest exact choice (the
        default)."""
        raise ValueError(
            f"the {self.family} head's inference distribution is not the softmax of a linear layer (it defines no "
            f"linear_form): the base architecture cannot hold it; {SERVED_AS_IT_IS}"
        )

    def record_eval_sums(self, enabled: bool = True) -> None:
        """From now on every evaluation pass adds its `eval_sum_names` sums and counted rows to `eval_sums`, on the
        device."""
        names = self.eval_sum_names
        self.eval_sums = None
        if enabled and names:
            device = next((p.device for p in self.parameters()), torch.device("cpu"))
            self.eval_sums = torch.zeros(len(names) + 1, dtype=torch.float64, device=device)

    def take_eval_sums(self) -> torch.Tensor | None:
        """The sums of the evaluation passes since the last call (then zeroed), or None when not recorded."""
        if self.eval_sums is None:
            return None
        sums, self.eval_sums = self.eval_sums, torch.zeros_like(self.eval_sums)
        return sums

    @torch.no_grad()
    def diagnostics(self) -> dict[str, float]:
        """Statistics logged next to the loss ({name: value}); default: none."""
        return {}

    def unnormalized_log_scores(self, hidden: torch.Tensor) -> torch.Tensor:
        """(*, V) log-scores before renormalisation, for self-normalised heads (the sampling paper's table 4
        rescoring)."""
        raise ValueError(
            f"the {self.family} head has no unnormalised scores: its logits are not trained to be self-normalised"
        )

    def copied_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits of the checkpoint's output layer as `start_from` copied it, with its output transform: what
        `from_base` compares with the checkpoint's own logits. Default: the inference logits."""
        return self.inference_logits(hidden)

    def start_from(self, weight: torch.Tensor | None, bias: torch.Tensor | None) -> None:
        """Copy a checkpoint's output layer: weight (V, H) (None when tied: the head shares it already) and bias (V,)
        or None."""
        raise ValueError(f"a {self.family} head cannot start from a checkpoint's output layer")

    def reset_parameters(self, init=nn.init) -> None:
        """Initialise the head's parameters (`init`: torch.nn.init or transformers.initialization)."""

    @property
    def needs_calibration(self) -> bool:
        """Whether `start_from` leaves the distribution unlike the checkpoint's, so `from_base` calls
        `calibrate_to`."""
        return False

    @torch.no_grad()
    def calibrate_to(self, hidden: torch.Tensor, base_log_probs: torch.Tensor) -> dict[str, float]:
        """Move the head towards a checkpoint's distribution: hidden (N, H) the probe positions' final hidden states,
        base_log_probs (N, V) the checkpoint's log-probabilities there. Returns what was fitted; default: nothing to
        do."""
        return {}

    def loss_names(self, target: str = "word") -> tuple[str, str]:
        """(training loss, evaluation loss) as shown in plots and cards; `target`: what a label is (word, class)."""
        return "training criterion", f"{self.family} head's eval loss"

    def check_scorable(self) -> None:
        """Refuse (ValueError) to score texts while a score would depend on something other than the text."""

    def check_generation(self, num_beams: int) -> None:
        """Refuse (`OptionError` on field `num_beams`) a beam width that the head's distribution cannot serve."""

    @property
    def num_classes(self) -> int:
        """V: the number of output classes (vocabulary size or number of labels)."""
        raise NotImplementedError

    @property
    def training_loss_is_eval_loss(self) -> bool:
        """Whether the training criterion is the evaluation loss itself (up to dropout); else the trainer logs the NLL
        of training batches beside the training loss, where the eval loss is an NLL. Default: False."""
        return False

    @property
    def training_loss_is_nll(self) -> bool:
        """Whether the per-token training loss is −log q(label) for a distribution q, so exp(−loss) is a probability
        (TRL's DFT)."""
        return self.loss_in_nats

    @property
    def embeds_decoder_inputs(self) -> bool:
        """Whether the head builds the decoder's input embeddings (`embed_inputs`) instead of the backbone."""
        return False

    def embed_inputs(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """Decoder input embeddings of input_ids (*) when `embeds_decoder_inputs`; other heads refuse."""
        raise ValueError(f"a {self.family} head does not embed decoder inputs")

    @property
    def needs_counts(self) -> bool:
        """Whether the head's options need training word counts (`set_word_counts`)."""
        return self.options.needs_counts

    def set_word_counts(self, counts: torch.Tensor) -> None:
        """Store the (V,) training word counts (norm scalings, noise distributions); heads that use none refuse."""
        raise ValueError(f"the {self.family} head uses no word counts")

    # ------------------------------------------------------------------ the template

    def loss(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        *,
        num_items_in_batch: int | torch.Tensor | None = None,
        ignore_index: int = IGNORE_INDEX,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """Loss of hidden (*, H) against labels (*): the training criterion in train mode, else the evaluation loss."""
        counting = RowCounting(num_items_in_batch, ignore_index, reduction)
        if self.training:
            return self.training_loss(hidden, labels, counting)
        return self.eval_loss(hidden, labels, counting)

    @staticmethod
    def loss_counting(
        num_items_in_batch: int | torch.Tensor | None = None, ignore_index: int = IGNORE_INDEX, reduction: str = "mean"
    ) -> RowCounting:
        """The `RowCounting` a family's hooks take (module docstring), with `loss`'s defaults."""
        return RowCounting(num_items_in_batch, ignore_index, reduction)

    def loss_and_token_statistics(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        *,
        num_items_in_batch: int | torch.Tensor | None = None,
        ignore_index: int = IGNORE_INDEX,
        reduction: str = "mean",
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(`loss(hidden, labels, ...)`, {"entropy", "is_top1"}): per label (0 / False where ignored) the entropy of
        the inference distribution and whether the label is its argmax (ties to the lowest index), without gradient.
        From `statistics`, or from the loss pass where it scores the inference distribution (then a bf16 head's top-1
        hits can differ where rounding makes ties)."""
        loss = self.loss(
            hidden, labels, num_items_in_batch=num_items_in_batch, ignore_index=ignore_index, reduction=reduction
        )
        # a second pass without a loss: a second loss would update the running statistics (max-norm) twice per step
        stats = self.statistics(hidden.detach(), labels, ignore_index=ignore_index)
        is_top1 = (stats["rank"] == 0) & (labels.to(stats["rank"].device) != ignore_index)
        return loss, {"entropy": stats["entropy"], "is_top1": is_top1}

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Inference logits (*, V) in the head's dtype, never with a training margin (a vocabulary-sharded W read
        whole)."""
        with whole_parameters(self):
            return self.inference_logits(hidden)

    @torch.no_grad()
    def statistics(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor,
        *,
        ignore_index: int = IGNORE_INDEX,
        normalized: bool = True,
        chunk_size: int | None = None,
    ) -> dict:
        """Per-position statistics of the inference distribution p = softmax(logits) against labels (*), 0 where the
        label is `ignore_index`: `log_prob` log p(label), `entropy` −Σ p log p, and `rank`: the classes more probable
        than the label plus those as probable with a lower index (argmax's tie rule; ties are common in bf16), V where
        p(label) = 0. `normalized=False`: the unnormalised log-score. Without gradient, in chunks of `chunk_size` rows
        (None: the head's own `chunk_size` or `memory_budget` where its options have them, else the default rows),
        never the (N, V) logits; float64 for a float64 head, else float32."""
        with whole_parameters(self):  # a vocabulary-sharded W gathered once, not per chunk
            return self._statistics(hidden, labels, ignore_index, normalized, chunk_size)

    def _statistics(self, hidden, labels, ignore_index: int, normalized: bool, chunk_size: int | None) -> dict:
        h = hidden.reshape(-1, hidden.shape[-1])  # (N, H)
        y = labels.reshape(-1).to(h.device)  # (N,)
        rows = torch.nonzero(y != ignore_index).squeeze(1)  # (M,) the positions that count

        def chunk(h_c: torch.Tensor, y_c: torch.Tensor) -> torch.Tensor:  # (n, 3): log p(label), entropy, rank
            scores = self.logits(h_c) if normalized else self.unnormalized_log_scores(h_c)  # (n, V)
            scores = scores if scores.dtype == torch.float64 else scores.float()
            log_p = torch.log_softmax(scores, dim=-1)  # (n, V)
            target = log_p.gather(1, y_c[:, None])  # (n, 1)
            cols = torch.arange(log_p.shape[-1], device=log_p.device)  # (V,)
            ahead = (log_p > target) | ((log_p == target) & (cols < y_c[:, None]))  # (n, V): before the label
            rank = torch.where(target.squeeze(1) > -torch.inf, ahead.sum(-1), log_p.shape[-1])
            label = target if normalized else scores.gather(1, y_c[:, None])  # (n, 1)
            entropy = torch.special.entr(log_p.exp()).sum(-1)  # (n,)
            return torch.stack([label.squeeze(1), entropy, rank.to(log_p.dtype)], dim=1)

        own = getattr(self.options, "chunk_size", None)
        budget = check_chunking(own, getattr(self.options, "memory_budget", None))  # bytes of a chunk's (rows, V)
        step = chunk_size or own or rows_per_chunk(rows.numel(), self.num_classes, budget)
        per_row = map_chunks(chunk, (h[rows], y[rows]), (), step)  # (M, 3)
        out = {}
        for k, name in enumerate(("log_prob", "entropy", "rank")):
            dtype = torch.long if name == "rank" else per_row.dtype
            value = torch.zeros(y.shape, dtype=dtype, device=h.device)
            value[rows] = per_row[:, k].to(dtype)
            out[name] = value.reshape(labels.shape)
        return out

    def forward(
        self,
        hidden: torch.Tensor,
        labels: torch.Tensor | None = None,
        *,
        return_logits: bool | None = None,
        normalized: bool = True,
        statistics: bool = False,
        token_statistics: bool = False,
        compute_loss: bool = True,
        chunk_size: int | None = None,
        **loss_kwargs,
    ) -> tuple[torch.Tensor | None, torch.Tensor | dict[str, torch.Tensor] | None]:
        """(loss or None, logits or None); logits are skipped while training with labels unless `return_logits`.
        With `statistics=True` the second element is `statistics(hidden, labels)`; otherwise `normalized=False`
        gives `unnormalized_log_scores`. `compute_loss=False` skips the loss; `token_statistics=True`: (loss,
        `loss_and_token_statistics`). The models call the head through this method, so module hooks (FSDP, PEFT)
        run."""
        if token_statistics:
            if labels is None:
                raise ValueError("token_statistics=True needs labels")
            return self.loss_and_token_statistics(hidden, labels, **loss_kwargs)
        loss = None if labels is None or not compute_loss else self.loss(hidden, labels, **loss_kwargs)
        if statistics:
            if labels is None:
                raise ValueError("statistics=True needs labels")
            ignore = self.loss_counting(**loss_kwargs).ignore_index  # as given, or `loss`'s default
            return loss, self.statistics(
                hidden, labels, ignore_index=ignore, normalized=normalized, chunk_size=chunk_size
            )
        if return_logits is None:
            return_logits = labels is None or not self.training
        if not return_logits:
            return loss, None
        with whole_parameters(self):
            return loss, (self.logits(hidden) if normalized else self.unnormalized_log_scores(hidden))
