"""The head-family registry. A family is its loss module (hf_heads.losses), its head module (options dataclass +
head class, hf_heads.heads.<family>) and one `register_family(...)` line at the bottom of the head module.

Everything that depends on the family reads this registry or asks the head: `make_head`, `HeadsConfig`
validation (`head_dict`), the run scripts' flags (generated from the options dataclasses), model cards (the
head's `paper` and descriptions), and the Hub export (which follows the imports of `hf_heads.heads`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from hf_heads.validation import OptionError, check_choice


@dataclass(frozen=True)
class HeadFamily:
    name: str
    options: type  # a HeadOptions dataclass
    head: type  # an OutputHead subclass


FAMILIES: dict[str, HeadFamily] = {}
DEFAULT_FAMILY = "softmax"  # the head of a config without a head section


class MissingOptionError(OptionError):
    """An option that is missing or that the family does not have: shown by name, without a value."""

    def __init__(self, field: str, value, allowed: str, name: str | None = None) -> None:
        super().__init__(field, value, allowed, name)
        self.args = (f"{self.name} {allowed}",)

    def renamed(self, name: str) -> MissingOptionError:
        return MissingOptionError(self.field, self.value, self.allowed, name)

    def __reduce__(self):
        return MissingOptionError, (self.field, self.value, self.allowed, self.name)


def register_family(name: str, options: type, head: type) -> None:
    """Register a family under `name` (the `family` key of a head section)."""
    if name in FAMILIES:
        raise ValueError(f"head family {name!r} is already registered")
    options.family = head.family = name
    head.options_class = options
    FAMILIES[name] = HeadFamily(name, options, head)


def family(name: str) -> HeadFamily:
    """The registered family `name` (an `OptionError` on field `family` lists the others)."""
    check_choice("family", name, FAMILIES)
    return FAMILIES[name]


def head_options(head: dict | None):
    """Parse a head section (`{"family": ..., **options}`) into its family's options object (validated on
    construction); errors name the option as `head.<field>`."""
    head = dict(head or {"family": DEFAULT_FAMILY})
    name = head.pop("family", None)
    if name is None:
        raise MissingOptionError("family", None, f"is missing; allowed: {', '.join(FAMILIES)}", "head.family")
    try:
        cls = family(name).options
    except OptionError as err:
        raise err.renamed("head.family") from None
    allowed = [f.name for f in fields(cls)]
    for key in head:
        if key not in allowed:
            text = f"is not an option of head family {name!r}; allowed: {', '.join(allowed)}"
            raise MissingOptionError(key, head[key], text, f"head.{key}")
    try:
        return cls(**head)
    except OptionError as err:
        raise err.renamed(f"head.{err.field}") from None


def head_dict(head: dict | None) -> dict:
    """The validated head section with every default filled in (what `config.json` stores)."""
    options = head_options(head)
    return {"family": options.family, **asdict(options)}


def make_head(hidden_size: int, num_classes: int, head: dict | None):
    """The head module of a head section: the registered family's head class."""
    options = head_options(head)
    return FAMILIES[options.family].head(hidden_size, num_classes, options)
