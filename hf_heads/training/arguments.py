"""`HeadsTrainingArguments`: `TrainingArguments` plus the head section as flags, and nothing else
(e.g. `--head margin --margin arc --m 0.001 --word_norm log-unigram --context_norm max-norm`,
`--head sampled --criterion bce --method nce --num_samples 8192 --noise log-uniform`, `--head sparse --k 20`)."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import re
import typing
from dataclasses import dataclass, field

from transformers import Seq2SeqTrainingArguments, TrainingArguments

from hf_heads.components import REGISTRIES, component_config, make_component, parse_value
from hf_heads.heads import CHECKPOINT_OPTIONS, FAMILIES, head_dict
from hf_heads.heads.registry import COMPONENT, DEFAULT_FAMILY
from hf_heads.validation import OptionError, check_number

logger = logging.getLogger(__name__)
DEFAULT_LOGGING_STEPS = 500  # TrainingArguments' default, kept when the run length is not given in steps

# Flags keep the option names, except where a TrainingArguments flag would be ambiguous; options that hf_heads
# sets itself (from a checkpoint or an embedding table) are not flags.
RENAMED_FLAGS = {
    "family": "head",
    "bias": "head_bias",
    "chunk_size": "loss_chunk_size",
    "memory_budget": "loss_memory_budget",
    "label_smoothing": "head_label_smoothing",
}
NOT_FLAGS = (*CHECKPOINT_OPTIONS, "embedding_dim")
# what the head flags must never shadow: every field of the training arguments they are mixed into (and the two
# that HeadsTrainingArguments adds, below)
TRAINER_FLAGS = frozenset(
    {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)} | {"logging_steps", "eval_accuracy_top_k"}
)


def option_flag(option: str) -> str:
    """The flag (without `--`) of a head option: its name or RENAMED_FLAGS' name, `head_<name>` where that is a field
    of the training arguments (`--seed` stays the Trainer's)."""
    flag = RENAMED_FLAGS.get(option, option)
    return f"head_{flag}" if flag in TRAINER_FLAGS else flag


def _option_flags() -> dict[str, tuple[str, type, str]]:
    """{flag: (option, type, help)} over every registered family's options (each option once)."""
    out = {}
    for entry in FAMILIES.values():
        for option, (kind, help_text) in entry.options.flat_options.items():  # older option names, still flags
            out.setdefault(option_flag(option), (option, kind, help_text))
        hints = typing.get_type_hints(entry.options)
        for f in dataclasses.fields(entry.options):
            flag = option_flag(f.name)
            if f.name in NOT_FLAGS or flag in out:
                continue
            kind = next(
                t for t in (bool, int, float, str) if t in (typing.get_args(hints[f.name]) or (hints[f.name],))
            )
            out[flag] = (f.name, kind, f.metadata.get("help", ""))
    return out


FLAG_TO_OPTION = {flag: option for flag, (option, _, _) in _option_flags().items()}


def _head_flags_class() -> type:
    """The dataclass of head flags: `--head <family>` and one flag per option, default None (the family's)."""
    fields = [
        (
            "head",
            str,
            dataclasses.field(default=DEFAULT_FAMILY, metadata={"help": f"Head family: {', '.join(FAMILIES)}."}),
        ),
        (
            "head_modules",
            list[str] | None,
            dataclasses.field(
                default=None,
                metadata={
                    "help": "Modules to import before the head flags are read: your own components (a family, a "
                    "margin or a chunk kernel registered in them), e.g. --head_modules my_pkg.margins --margin mine."
                },
            ),
        ),
    ]
    fields.append(
        (
            "head_options",
            list[str] | None,
            dataclasses.field(
                default=None,
                metadata={
                    "help": "Head options that have no flag of their own, as name=value (a JSON value or a word), "
                    "e.g. those of a family registered in a --head_modules module: --head_options alpha=0.5 "
                    "schedule=cosine."
                },
            ),
        )
    )
    for flag, (_, kind, help_text) in _option_flags().items():
        fields.append((flag, kind | None, dataclasses.field(default=None, metadata={"help": help_text})))
    return dataclasses.make_dataclass("_GeneratedHeadFlags", fields)


class HeadFlags(_head_flags_class()):
    """Head options as command-line flags; `head_config()` turns them into a validated head section."""

    def __post_init__(self) -> None:
        self.import_head_modules()  # a module that does not import is an error when the arguments are parsed
        if hasattr(super(), "__post_init__"):
            super().__post_init__()

    def import_head_modules(self) -> None:
        """Import the `--head_modules` (their components register themselves); `ValueError` names one that fails."""
        for module in self.head_modules or ():
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise ValueError(f"--head_modules {module}: the module does not import ({err})") from err

    def head_flags_given(self) -> bool:
        """Whether any head flag was set (a non-default `--head` included)."""
        flags = any(getattr(self, flag) is not None for flag in FLAG_TO_OPTION)
        return self.head != DEFAULT_FAMILY or flags or bool(self.head_options)

    def head_config(self) -> dict:
        """The validated head section; a flag the family does not have is an error naming the flag, never ignored."""
        self.import_head_modules()
        section: dict = {"family": self.head}
        for flag, option in FLAG_TO_OPTION.items():
            value = getattr(self, flag)
            if value is not None:
                section[option] = value
        for item in self.head_options or ():
            name, eq, text = item.partition("=")
            if not eq or not name.strip():
                raise OptionError("--head_options", item, "must be written name=value")
            option, value = name.strip(), parse_value(text)
            if option in section:  # the same value two ways is that value; two values are refused, naming both
                if _same_value(option, section[option], value):
                    continue
                flag = "--head" if option == "family" else f"--{option_flag(option)}"
                allowed = f"sets {option}, which {flag} {section[option]} sets already"
                raise OptionError("--head_options", item, allowed)
            section[option] = value
        try:
            return head_dict(section)
        except OptionError as err:
            option, _, parameter = err.name.removeprefix("head.").partition(".")
            given = {item.partition("=")[0].strip() for item in self.head_options or ()}

            def shown(name: str) -> str:  # how the run was given an option: a flag, or --head_options name
                return f"--head_options {name}" if name in given else f"--{option_flag(name)}"

            flag = shown(option) + (f" parameter {parameter}" if parameter else "")
            allowed = err.allowed
            for other in section:  # another option the message names ("cannot be combined with k=3"): as given
                if other != option:
                    allowed = re.sub(rf"(?<![\w.-]){re.escape(other)}=", lambda _, o=other: f"{shown(o)}=", allowed)
            if not parameter and err.allowed.startswith("is not allowed") and _unregistered(option, err.value):
                allowed = f"{allowed}; {OWN_COMPONENTS}"
            raise err.renamed(flag, allowed) from None


def _same_value(option: str, a, b) -> bool:
    """Whether a flag's value and an `--head_options` value of `option` are the same (a component by its config)."""
    kind = _component_options().get(option)
    if kind is not None:
        try:
            return component_config(make_component(kind, a, field=option)) == component_config(
                make_component(kind, b, field=option)
            )
        except OptionError:
            return False
    return type(a) is type(b) and a == b or (isinstance(a, float) and isinstance(b, int) and a == b)


OWN_COMPONENTS = "a component or family of your own is registered in your module: add --head_modules your.module"


def _component_options() -> dict[str, str]:
    """{head option: the component kind it names} over every registered family."""
    return {
        f.name: f.metadata[COMPONENT]
        for entry in FAMILIES.values()
        for f in dataclasses.fields(entry.options)
        if f.metadata.get(COMPONENT)
    }


def _unregistered(option: str, value) -> bool:
    """Whether `value` of a head option that names a registered component (or `family`) names none: it may be the
    user's own, registered in a module not imported (a registered one refused for another reason is not)."""
    kinds = _component_options()
    if option != "family" and option not in kinds:
        return False
    names = FAMILIES if option == "family" else REGISTRIES[kinds[option]]
    name = value.get("type") if isinstance(value, dict) else str(value).partition(":")[0]
    return name not in names


def unknown_flags_hint(unknown: list[str]) -> str:
    """What to write instead of arguments no parser took: a component's parameter in its flag (`--margin
    combined:m1=1.2`), a family option without a flag in `--head_options name=value`."""
    hints = []
    for arg in unknown:
        name = arg[2:].partition("=")[0] if arg.startswith("--") else None
        if not name:
            continue
        components = [
            (option, cname)
            for option, kind in _component_options().items()
            for cname, cls in REGISTRIES[kind].items()
            if name in {f.name for f in dataclasses.fields(cls)}
        ]
        families = [f for f, entry in FAMILIES.items() if name in {o.name for o in dataclasses.fields(entry.options)}]
        if components:
            option, cname = components[0]
            hints.append(
                f"--{name} is a parameter of {option} {cname!r}: write it into that flag, "
                f"--{option_flag(option)} {cname}:{name}=VALUE"
            )
        elif families:
            hints.append(
                f"--{name} is an option of head family {families[0]!r} without a flag of its own: write "
                f"--head_options {name}=VALUE"
            )
    if hints:
        return "; ".join(hints)
    return (
        "a component's parameter goes into its flag (--margin name:p=1), an option without a flag into --head_options "
        f"name=value; {OWN_COMPONENTS}"
    )


@dataclass
class _RunDefaults:
    """Defaults that fit the run: a logging interval from `max_steps` and a warning for `--fp16` on a CPU."""

    logging_steps: float | None = field(
        default=None,
        metadata={
            "help": "Log every X update steps (an integer, or a float in [0, 1): a ratio of the total steps). "
            f"Default: max_steps // 20 (at least 1) when --max_steps is given, else {DEFAULT_LOGGING_STEPS}; "
            "--eval_steps, when not given, follows it (as in transformers)."
        },
    )

    eval_accuracy_top_k: list[int] | None = field(
        default=None,
        metadata={
            "help": "Also report teacher-forced token / label accuracy@k (eval_accuracy@k) for these k (e.g. 1 5), "
            "computed in chunks from the hidden states: no (B, T, V) logits, with or without compute_metrics; and "
            "train_accuracy@k from the training passes (softmax, sparse and margin heads)."
        },
    )

    def __post_init__(self):
        for k in self.eval_accuracy_top_k or ():
            check_number("eval_accuracy_top_k", k, minimum=1, integer=True)
        if self.logging_steps is None:  # not given: a loss curve with ~20 points, even for a short run
            self.logging_steps = max(1, self.max_steps // 20) if self.max_steps > 0 else DEFAULT_LOGGING_STEPS
        super().__post_init__()
        # accelerate (which the Trainer relies on for autocast) turns fp16 autocast on for GPUs / NPUs / ... only:
        # on a CPU `--fp16` trains in float32 with no message; bf16 autocast works on a CPU.
        if self.fp16 and self.device.type == "cpu":
            logger.warning(
                "--fp16 on a CPU: the Trainer does not use fp16 autocast on CPU, so this run trains "
                "in float32; use --bf16 for mixed precision on a CPU"
            )


@dataclass
class HeadsTrainingArguments(HeadFlags, _RunDefaults, TrainingArguments):
    """`TrainingArguments` + head flags (`logging_steps` defaulting to max_steps // 20); `HeadsTrainer` binds the head
    the flags name to its model (`HeadsPreTrainedModel.bind_head`)."""


@dataclass
class HeadsSeq2SeqTrainingArguments(HeadFlags, _RunDefaults, Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` + head flags (and `logging_steps` defaulting to max_steps // 20)."""
