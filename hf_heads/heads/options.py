"""`HeadOptions`: the base of every family's options dataclass (a head section of `HeadsConfig` without its `family`
key). An options object validates itself on construction and is read-only once built (it changes through
`model.set_head_options(...)` or `dataclasses.replace`), so an invalid one never exists: `__post_init__` coerces what a
JSON or command-line round trip changes (an integral float for an `int` field) and refuses a value of the wrong type,
then `check()` raises `OptionError` carrying the field, the value and what is allowed. Every field carries help text in
its metadata: the run scripts' flags are generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch

from hf_heads.components import coerce, component_config, make_component
from hf_heads.losses.reduction import IGNORE_INDEX

# metadata key of an options field whose value names a registered component: its kind (hf_heads.components, e.g.
# "margin", "kernel"); a field whose default is None may be None (no component: e.g. the automatic chunk kernel)
COMPONENT = "registry"

# Options that `from_base` sets from the checkpoint (its output transform, the calibrated gain) rather than the user:
# not command-line flags, and not compared when a run is resumed or reopened with the head the user asked for.
CHECKPOINT_OPTIONS = ("warm_start_gain", "logit_multiplier", "logit_softcap")


@dataclass(frozen=True)
class ReferenceBatch:
    """The dense inputs of a family's naive reference (`HeadOptions.reference`), float64 in the contract suite."""

    hidden: torch.Tensor  # (N, H) every row
    labels: torch.Tensor  # (N,) class ids, `ignore_index` on the rows that do not count
    params: dict[str, torch.Tensor]  # the head's parameters and buffers by name (`named_parameters`, `named_buffers`)
    training: bool  # the training criterion (True) or the evaluation loss
    counts: torch.Tensor | None = None  # (V,) the word counts given to `set_word_counts` (or `set_embedding_table`)
    table: torch.Tensor | None = None  # (V, d) the embedding table given to `set_embedding_table`, as given
    running: torch.Tensor | None = None  # () the running statistic of a batch-dependent context norm (evaluation)
    ignore_index: int = IGNORE_INDEX

    @property
    def valid(self) -> torch.Tensor:
        """(N,) bool: the rows that count."""
        return self.labels != self.ignore_index


@dataclass
class HeadOptions:
    """Base of the options dataclasses. Subclasses add fields (with `metadata={"help": ...}`) and extend `check`."""

    family: ClassVar[str] = ""  # set when its head class registers (`register("family")`)
    needs_counts: ClassVar[bool] = False  # whether training word counts are required (see `counts_reason`)
    # older option names `migrate` still reads (flags too): {name: (type, help)}
    flat_options: ClassVar[dict[str, tuple[type, str]]] = {}
    # {label: head section without `family`}: small settings the test suite runs every task and integration with
    # (tests/conftest.py `family_heads`); the first, labelled with the family's name, is its representative
    examples: ClassVar[dict[str, dict]] = {}
    # {label: head section without `family`}: more settings the contract suite holds to `reference` beside `examples`
    contract_examples: ClassVar[dict[str, dict]] = {}

    def __post_init__(self) -> None:
        for f in fields(self):
            kind = f.metadata.get(COMPONENT)
            value = getattr(self, f.name)
            if isinstance(kind, str) and value is None and f.default is None:
                pass  # an optional component not chosen
            elif isinstance(kind, str):  # a component: its config value, its name or {"type": ..., **parameters}
                value = component_config(make_component(kind, value, field=f.name))
            else:
                value = coerce(type(self), f.name, value)
            setattr(self, f.name, value)
        self.check()
        self.__dict__["_built"] = True  # from now on a change goes through `__setattr__`'s validation

    @classmethod
    def migrate(cls, head: dict) -> dict:
        """A head section (without `family`) of an older form, as this version writes it (default: as it is); the
        family's `flat_options` are the older keys it accepts."""
        return head

    def __setattr__(self, name: str, value) -> None:
        """Read-only once built: changing the options alone would leave the model unlike its config;
        `model.set_head_options(name=value)` changes both in one step."""
        if self.__dict__.get("_built"):
            raise AttributeError(
                f"head options are read-only ({type(self).__name__}.{name}): change them on the model with "
                f"model.set_head_options({name}=...), which validates the change and updates the head and config.head "
                "together (or build a new options object with dataclasses.replace)"
            )
        super().__setattr__(name, value)

    def component(self, option: str):
        """The component object an option names (None for an optional one not chosen), built once."""
        cache = self.__dict__.setdefault("_components", {})
        if option not in cache:
            kind = next(f.metadata[COMPONENT] for f in fields(self) if f.name == option)
            value = getattr(self, option)
            cache[option] = None if value is None else make_component(kind, value, field=option)
        return cache[option]

    def check(self) -> None:
        """Raise `OptionError` for an invalid value or combination (subclasses call `super().check()` first)."""

    def reference(self, batch: ReferenceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(the loss (n,) of each counted row, training or evaluation as `batch.training` says; the inference logits
        (N, V)), computed naively on the dense logits from the family's equations: what the contract suite compares
        the head with. A row's loss may draw from torch's global generator as the head's does (the suite seeds both
        alike)."""
        raise NotImplementedError

    @property
    def loss_depends_on_batch(self) -> bool:
        """Whether a row's training loss depends on its batch (max-norm's g): a split batch then trains differently."""
        return False

    def counts_reason(self) -> str:
        """The option that needs word counts, as `name=value` (for error messages)."""
        return ""

    def initial_bias(self, num_classes: int) -> float:
        """Value every output bias starts from when a head is built from scratch."""
        return 0.0

    def describe(self) -> str:
        """A short label of the head (results tables)."""
        return self.family
