"""`HeadsTrainer` / `HeadsSeq2SeqTrainer`: the transformers trainers plus what hf_heads heads need (docs/training.md):
the head the arguments' flags name (`bind_arguments_head`); word counts and a pending warm start's calibration from the
training set before the first step (`prepare_head`); head diagnostics in the logs; `eval_perplexity` for language
models (the eval loss is the NLL of the inference distribution); `train_criterion`, and `train_nll` where the training
criterion is not that NLL, comparable with `eval_loss`; `train_accuracy` from the loss's own pass.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math

import torch
from transformers import Seq2SeqTrainer, Trainer

from hf_heads.data import label_counts
from hf_heads.heads import family
from hf_heads.modeling.inputs import model_head
from hf_heads.modeling.zero3 import gathered
from hf_heads.training.tables import attach_table, continuous_table, table_data, table_source, target_sentences

logger = logging.getLogger(__name__)


LANGUAGE_MODEL_TASKS = ("causal-lm", "seq2seq")
MAX_EXP_ARG = 700.0  # math.exp overflows float64 past ~709.78


def is_language_model(model) -> bool:
    """Whether exp(eval NLL) is a perplexity: a causal or seq2seq language model, hf_heads' or transformers'."""
    task = getattr(model, "head_task", None)
    if task:
        return task in LANGUAGE_MODEL_TASKS
    from transformers.models.auto import modeling_auto

    names = {
        *modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values(),
        *modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.values(),
    }
    return type(model).__name__ in names


def logs_train_nll(head) -> bool:
    """Whether `train_nll` is logged: the eval loss is an NLL and the training criterion something else. Not for sparse
    heads (the NLL would be infinite) nor continuous ones (their training loss is their eval loss)."""
    return head.eval_loss_is_nll and not head.training_loss_is_eval_loss and not head.support_is_truncated


def safe_exp(x: float) -> float:
    """exp(min(x, 700)): e.g. the perplexity of a mean NLL, finite (about 1e304 at most) however large x is."""
    return math.exp(min(x, MAX_EXP_ARG))


def perplexity(loss: float) -> float:
    """exp(loss) of a mean NLL in nats, capped at exp(700) (float64 overflows past ~709.78); infinite for an infinite
    NLL."""
    return math.inf if loss == math.inf else safe_exp(loss)


def _base_model(model):
    """A PEFT model's base model; any other model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def bind_arguments_head(model, arguments, tokenizer=None, train_dataset=None, optimizer=None) -> None:
    """Give `model` (or a PEFT model's base) the head `arguments`' flags name (`HeadsPreTrainedModel.bind_head`). A
    model that is no hf_heads model is refused (the flags would go unused). A continuous head that replaces the default
    one gets its embedding table over `tokenizer`'s vocabulary (hf_heads.training.tables). An `optimizer` built before
    (the Trainer's `optimizers=`) is refused where the head would get new parameters: it would not hold them, and the
    new head would never train; so is a model with PEFT adapters (the new head would train whole, outside them)."""
    if model is None or not getattr(arguments, "head_flags_given", lambda: False)():
        return
    inner = _base_model(model)
    if not hasattr(inner, "bind_head"):
        raise TypeError(
            f"the head flags of the training arguments name a head, but the model is a {type(inner).__name__}, not an "
            "hf_heads model: build it with HeadsForCausalLM / HeadsForSeq2SeqLM / HeadsForSequenceClassification "
            "(from_pretrained of the same checkpoint), or drop the head flags"
        )
    section, table, data = arguments.head_config(), None, None
    if inner.head_origin is not None and family(section["family"]).head.uses_embedding_table:
        section, table = _flags_table(section, inner, arguments, tokenizer, train_dataset)
        data = table_data(section, inner.head.num_classes, train_dataset)  # refused here: the model still unchanged
    adapters = model is not inner or getattr(inner, "_hf_peft_config_loaded", False)
    replaces = (adapters or optimizer is not None) and inner.binding_replaces_parameters(section)
    if adapters and replaces:
        raise ValueError(
            f"the training arguments' head flags replace the {inner.head.family} head of a model with PEFT adapters "
            f"by a {section['family']} head with new parameters: they would train whole, outside the adapters (and an "
            "adapter on the old head would be lost); bind the head before adding the adapters: "
            "model.bind_head(training_args.head_config()), then get_peft_model / add_adapter (HeadsSFTTrainer's "
            "peft_config= does it in that order)"
        )
    if optimizer is not None and replaces:
        raise ValueError(
            f"the training arguments' head flags replace the model's {inner.head.family} head by a "
            f"{section['family']} head with new parameters, which the optimizer given in optimizers= (built before) "
            "does not hold: they would never train; give the Trainer optimizer_cls_and_kwargs=(torch.optim.AdamW, "
            "{...}) instead (it builds the optimizer after the head), or bind the head first "
            "(model.bind_head(training_args.head_config())) and build the optimizer after"
        )
    inner.bind_head(section, "the training arguments' head flags")
    if table is not None:
        attach_table(inner, table, train_dataset, data=data)


def _flags_table(section: dict, model, arguments, tokenizer, train_dataset) -> tuple[dict, torch.Tensor]:
    """(the section with `embedding_dim`, the table (V, d)) of a continuous head named by flags
    (`continuous_table`)."""
    if tokenizer is None or not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise ValueError(
            "the continuous head the head flags name predicts rows of an embedding table over the tokenizer's "
            "vocabulary: give the trainer the tokenizer (processing_class=tokenizer, as transformers' example scripts "
            "do)"
        )

    def sentences():
        return None if train_dataset is None else target_sentences(tokenizer, train_dataset["labels"])

    source = table_source(section, sentences, arguments.output_dir, arguments.seed)
    section, table, covered = continuous_table(section, tokenizer, source, num_classes=model.head.num_classes)
    logger.info(
        "continuous head: %d of %d tokens of the vocabulary are in %s", int(covered.sum()), len(covered), source
    )
    return section, table


CALIBRATION_EXAMPLES = 8  # training examples the warm start is calibrated on (at most 256 labelled positions of them)


def prepare_head(model, train_dataset, data_collator=None, *, counts_column: str = "labels", prepare_inputs=None):
    """What a head needs before its first step (`HeadsTrainer.train()`): word counts of `train_dataset[counts_column]`,
    then the calibration of a pending warm start on the first `CALIBRATION_EXAMPLES` examples collated by
    `data_collator` (the global random state is kept). `prepare_inputs` moves a batch to the model's device."""
    head = model_head(model)
    if head is None:
        return
    if model.head_needs_counts() and not head.has_word_counts:
        if train_dataset is None:
            raise ValueError("this head needs word counts: give a train_dataset or call model.set_word_counts(...)")
        model.set_word_counts(label_counts(train_dataset, head.num_classes, column=counts_column))
    if not getattr(head, "warm_start_pending", False):
        return
    if train_dataset is None:
        raise ValueError(
            f"the {head.options.describe()} head's warm start is calibrated on training examples: give a train_dataset"
        )
    from transformers import default_data_collator

    examples = [train_dataset[i] for i in range(min(CALIBRATION_EXAMPLES, len(train_dataset)))]
    with torch.random.fork_rng(devices=[]):
        batch = (data_collator or default_data_collator)(examples)
    if prepare_inputs is None:
        device = next(model.parameters()).device
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    else:
        batch = prepare_inputs(batch)
    report = model.calibrate_warm_start(**batch)
    logger.info("warm start calibrated on the first %d training examples: %s", len(examples), report)


@contextlib.contextmanager
def _gathered(model, head):
    """The head's parameters gathered while `diagnostics()` runs outside the forward (a collective: every rank calls
    `log()`): FSDP2 through the FSDP module that owns them, DeepSpeed ZeRO-3 through `GatheredParameters`."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch build without distributed
        FSDPModule = ()  # noqa: N806
    owner = head if isinstance(head, FSDPModule) else model if isinstance(model, FSDPModule) else None
    if owner is None:
        with gathered(head.parameters(recurse=False)):
            yield
        return
    owner.unshard()
    try:
        yield
    finally:
        owner.reshard()


def _refuse_compute_loss_func(model, arguments) -> None:
    """Refuse a Trainer's `compute_loss_func` for an hf_heads model (or head flags): the Trainer calls the model
    without labels and the function on its inference logits, so the training loss would not be the head's."""
    head = model_head(_base_model(model))
    flags = getattr(arguments, "head_flags_given", lambda: False)()
    if head is None and not flags:
        return
    name = arguments.head_config()["family"] if flags else head.family
    raise ValueError(
        f"compute_loss_func: the Trainer would call the model without labels and the function on the {name} head's "
        f"inference logits, so the training loss would not be the {name} head's criterion (nor keep its training "
        "options); hf_heads models compute their training loss themselves: leave compute_loss_func unset (the head's "
        "options give label smoothing, z-loss, class weights and a confidence penalty)"
    )


class _HeadsTrainerMixin:
    counts_column = "labels"  # the training-set column the word counts are read from
    _train_nll_due = True  # record the NLL in the next training step (the first of a logging window)
    _train_nll_sums: torch.Tensor | None = None  # (2,): summed NLL and labelled positions of that step

    def __init__(self, *args, **kwargs):
        given = inspect.signature(super().__init__).bind_partial(*args, **kwargs).arguments
        model, arguments = given.get("model"), given.get("args")
        smoothing = getattr(arguments, "label_smoothing_factor", 0.0)
        if smoothing:  # refused before the model takes the flags' head (or is moved): a refusal changes nothing
            raise ValueError(
                f"--label_smoothing_factor={smoothing} smooths logits that hf_heads heads do not return in training; "
                "use the head's own option (--head sparse --head_label_smoothing 0.1)"
            )
        self._compute_loss_func_given = given.get("compute_loss_func")  # the Trainer sets its own after model_init
        if self._compute_loss_func_given is not None:
            _refuse_compute_loss_func(model, arguments)
        optimizer = (given.get("optimizers") or (None, None))[0]
        # `Trainer.__init__` calls `call_model_init` before it sets these: the head is bound with what was given
        self._given = {"processing_class": given.get("processing_class"), "train_dataset": given.get("train_dataset")}
        bind_arguments_head(model, arguments, *self._given.values(), optimizer)
        super().__init__(*args, **kwargs)

    def call_model_init(self, trial=None):
        """The Trainer's `model_init` call, its model then given the arguments' head (`bind_arguments_head`); the
        model `Trainer.train` builds anew is prepared for training there, as `train` prepares a model given to it."""
        model = super().call_model_init(trial)
        if getattr(self, "compute_loss_func", self._compute_loss_func_given) is not None:
            _refuse_compute_loss_func(model, self.args)
        processing_class, train_dataset = (getattr(self, name, given) for name, given in self._given.items())
        bind_arguments_head(model, self.args, processing_class, train_dataset)
        if getattr(self, "is_in_train", False):
            if self.place_model_on_device:  # where `Trainer.train` puts it next: calibration runs on that device
                model = model.to(self.args.device)
            self._start_training(model)
        return model

    def _start_training(self, model) -> None:
        """Before the first training step: the head's word counts and warm start (`_prepare_head`), and the training
        passes' accuracy recorded."""
        self._prepare_head(model)
        head = model_head(model)
        if hasattr(head, "record_accuracy"):  # `train_accuracy` (@k) from the training passes themselves
            head.record_accuracy(top_k=getattr(self.args, "eval_accuracy_top_k", None) or ())

    def _prepare_head(self, model) -> None:
        """`prepare_head` of `model` (unwrapped) with the examples as the training loop sees them (unused columns
        removed, its collator)."""
        head = model_head(model)
        if head is None:
            return
        if model.head_needs_counts() and not head.has_word_counts:
            if self.train_dataset is None:
                raise ValueError(
                    "this head needs word counts: give a train_dataset or call model.set_word_counts(...)"
                )
            model.set_word_counts(label_counts(self.train_dataset, head.num_classes, column=self.counts_column))
        dataset = self.train_dataset
        if getattr(head, "warm_start_pending", False) and hasattr(dataset, "column_names"):
            # a datasets.Dataset: its first examples with the columns the model's forward takes
            dataset = self._remove_unused_columns(dataset.select(range(min(CALIBRATION_EXAMPLES, len(dataset)))))
        prepare_head(
            model, dataset, self.data_collator, counts_column=self.counts_column, prepare_inputs=self._prepare_inputs
        )

    def train(self, *args, **kwargs):
        if self.model_init is None:  # with one, `Trainer.train` builds the model anew: `call_model_init` prepares it
            self._start_training(self.accelerator.unwrap_model(self.model))
        try:
            return super().train(*args, **kwargs)
        finally:
            head = model_head(self.accelerator.unwrap_model(self.model))
            if hasattr(head, "record_accuracy"):
                head.record_accuracy(False)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """Loss-only evaluation never builds the (B, T, V) logits: the head computes the eval loss in chunks. With
        `eval_accuracy_top_k` the head's statistics are recorded in the same forward."""
        inner = self.accelerator.unwrap_model(model)
        ks = getattr(self.args, "eval_accuracy_top_k", None)
        if not hasattr(inner, "logits_skipped") or "labels" not in inputs:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        context = inner.logits_skipped if prediction_loss_only else inner.statistics_recorded
        with context(bool(ks)) as recorded:
            out = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        for stats in recorded or ():
            hits = torch.stack([((stats["rank"] < k) & stats["mask"]).sum() for k in ks])  # (len(ks),)
            total = stats["mask"].sum()
            self._accuracy_counts = self._accuracy_counts + torch.cat([hits, total[None]]).double()
        return out

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None, **kwargs):
        """The Trainer's loop, plus `{prefix}_accuracy@k` and the head's `eval_sum_names`, summed over every
        process."""
        ks = getattr(self.args, "eval_accuracy_top_k", None) or []
        self._accuracy_counts = torch.zeros(len(ks) + 1, dtype=torch.float64, device=self.args.device)
        head = model_head(self.accelerator.unwrap_model(self.model))
        names = getattr(head, "eval_sum_names", ())
        if names:
            head.record_eval_sums()
        try:
            output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, **kwargs)
            sums = head.take_eval_sums() if names else None
        finally:
            if names:
                head.record_eval_sums(False)
        prefix = kwargs.get("metric_key_prefix", "eval")
        if ks:
            counts = self.accelerator.reduce(self._accuracy_counts, reduction="sum").tolist()
            for k, hits in zip(ks, counts[:-1], strict=True):
                output.metrics[f"{prefix}_accuracy@{k}"] = hits / max(counts[-1], 1.0)
        if sums is not None:
            *values, counted = self.accelerator.reduce(sums, reduction="sum").tolist()
            for name, value in zip(names, values, strict=True):
                output.metrics[f"{prefix}_{name}"] = value / max(counted, 1.0)
        return output

    def training_step(self, model, inputs, *args, **kwargs):
        """The Trainer's step; the first of each logging window also records the statistics `log` reports as
        `train_nll`."""
        inner = self.accelerator.unwrap_model(model)
        head = model_head(inner)
        if not self._train_nll_due or head is None or not hasattr(inner, "statistics_recorded"):
            return super().training_step(model, inputs, *args, **kwargs)
        if not logs_train_nll(head):
            return super().training_step(model, inputs, *args, **kwargs)
        self._train_nll_due = False
        with inner.statistics_recorded() as recorded:
            loss = super().training_step(model, inputs, *args, **kwargs)
        sums = torch.zeros(2, dtype=torch.float64, device=self.args.device)
        for stats in recorded:
            mask = stats["mask"]
            nll = -torch.where(mask, stats["log_prob"].double(), 0.0).sum()
            sums = sums + torch.stack([nll, mask.sum().double()]).to(sums.device)
        self._train_nll_sums = sums
        return loss

    def _training_logs(self, model, head, logs: dict) -> dict:
        """What the training loss is, next to `loss` (see the module docstring)."""
        extra = {"train_criterion": head.loss_names("word" if is_language_model(model) else "class")[0]}
        sums = head.take_accuracy() if hasattr(head, "take_accuracy") else None
        if sums is not None:  # every process counted: the sum is collective, as train_nll's
            *correct, counted = self.accelerator.reduce(sums, reduction="sum").tolist()
            if counted:
                extra["train_accuracy"] = round(correct[0] / counted, 4)
                for k, hits in zip(head.accuracy_top_k, correct[1:], strict=True):
                    extra[f"train_accuracy@{k}"] = round(hits / counted, 4)
        if self._train_nll_sums is not None:
            nll, count = self.accelerator.reduce(self._train_nll_sums, reduction="sum").tolist()
            if count:
                extra["train_nll"] = round(nll / count, 4)
            self._train_nll_sums = None
        self._train_nll_due = True
        ordered = {}
        for key, value in logs.items():
            ordered[key] = value
            if key == "loss":
                ordered.update(extra)
        return ordered

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        """The Trainer's `log`, plus the head's diagnostics, `train_criterion` and `train_nll` next to a training
        `loss`, and `{prefix}perplexity` for a language model whose eval loss is an NLL."""
        model = self.accelerator.unwrap_model(self.model)
        head = model_head(model)
        if head is not None and "loss" in logs:
            with _gathered(model, head):
                logs.update({key: round(value, 4) for key, value in head.diagnostics().items()})
            ordered = self._training_logs(model, head, logs)
            logs.clear()
            logs.update(ordered)
        is_nll = is_language_model(model) and (head is None or head.eval_loss_is_nll)
        for key in [k for k in logs if is_nll and k.endswith("eval_loss")]:
            prefix = key[: -len("loss")]
            logs[f"{prefix}perplexity"] = perplexity(logs[key])
        super().log(logs, *args, **kwargs)


class HeadsTrainer(_HeadsTrainerMixin, Trainer):
    """`Trainer` for hf_heads models (see the module docstring)."""


class HeadsSeq2SeqTrainer(_HeadsTrainerMixin, Seq2SeqTrainer):
    """`Seq2SeqTrainer` for hf_heads models (see the module docstring)."""
