"""The head-family registry: a family is an options dataclass and a head class that names its family and its options
class, registered with `register("family")`:

    @register("family")
    class TemperatureHead(SoftmaxHead):
        family = "temperature"
        options_class = TemperatureHeadOptions

`make_head`, `HeadsConfig` validation, the run scripts' flags, model cards and the Hub export all read this registry.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import asdict, dataclass, fields

from hf_heads.components import KIND_HOOKS, check_free
from hf_heads.heads.options import CHECKPOINT_OPTIONS, COMPONENT, HeadOptions
from hf_heads.validation import OptionError, check_choice


@dataclass(frozen=True)
class HeadFamily:
    name: str
    options: type  # a HeadOptions dataclass
    head: type  # an OutputHead subclass


FAMILIES: dict[str, HeadFamily] = {}
DEFAULT_FAMILY = "softmax"  # the head of a config without a head section
# set in a component's module where a saved directory carries a copy of it: the module's name where it was written
COPIED_FROM = "__hf_heads_component_module__"
_FLAT = not __name__.startswith("hf_heads.")  # this module is the flat copy saved with a model (trust_remote_code)


class MissingOptionError(OptionError):
    """An option that is missing or that the family does not have: shown by name, without a value."""

    def __init__(self, field: str, value, allowed: str, name: str | None = None) -> None:
        super().__init__(field, value, allowed, name)
        self.args = (f"{self.name} {allowed}",)

    def renamed(self, name: str, allowed: str | None = None) -> MissingOptionError:
        return MissingOptionError(self.field, self.value, self.allowed if allowed is None else allowed, name)

    def __reduce__(self):
        return MissingOptionError, (self.field, self.value, self.allowed, self.name)


def register_head(head: type) -> type:
    """`register("family")`: register the head class `head` as the family `head.family` with `head.options_class`, both
    set in the class itself (a subclass family inheriting its parent's would register the parent again)."""
    name, options = head.__dict__.get("family"), head.__dict__.get("options_class")
    if not (isinstance(name, str) and name and isinstance(options, type) and issubclass(options, HeadOptions)):
        raise TypeError(
            f'register("family") takes a head class that sets its own `family` (the name, a non-empty string) and '
            f"`options_class` (a HeadOptions dataclass) in its body; {head.__qualname__} has family={name!r}, "
            f"options_class={options!r}"
        )
    register_family(name, options, head)
    return head


KIND_HOOKS["family"] = register_head


def register_family(name: str, options: type, head: type) -> None:
    """Register a family under `name`; a reloaded module's class replaces its former self, another class is refused."""
    check_free({k: v.head for k, v in FAMILIES.items()}, name, head, "head family")
    if "family" in {f.name for f in fields(options)}:
        raise TypeError(f"head family {name!r}: {options.__name__} has an option named 'family', the head section's "
                        "key for the family: rename the option")  # fmt: skip
    if options.reference is HeadOptions.reference:
        raise ValueError(
            f"head family {name!r}: {options.__name__} defines no `reference` (HeadOptions.reference: the naive "
            "dense loss and logits the contract suite compares the head with)"
        )
    if "examples" not in options.__dict__:  # not its parent family's
        options.examples = {name: {}}
    elif next(iter(options.examples), None) != name:
        raise ValueError(f"head family {name!r}: its first example is labelled with its name, got {options.examples}")
    if "contract_examples" not in options.__dict__:
        options.contract_examples = {}
    options.family = head.family = name
    head.options_class = options
    FAMILIES[name] = HeadFamily(name, options, head)


def family(name: str) -> HeadFamily:
    """The registered family `name` (an `OptionError` on field `family` lists the others)."""
    check_choice("family", name, FAMILIES)
    return FAMILIES[name]


def head_options(head: dict | None):
    """Parse a head section into its family's options object; errors name the option as `head.<field>`."""
    head = dict(head or {"family": DEFAULT_FAMILY})
    name = head.pop("family", None)
    if name is None:
        raise MissingOptionError("family", None, f"is missing; allowed: {', '.join(FAMILIES)}", "head.family")
    try:
        cls = family(name).options
    except OptionError as err:
        raise err.renamed("head.family") from None
    try:
        head = cls.migrate(head)
    except OptionError as err:
        raise err.renamed(f"head.{err.name}") from None
    allowed = [f.name for f in fields(cls)]
    for key in head:
        if key not in allowed:
            text = f"is not an option of head family {name!r}; allowed: {', '.join(allowed)}"
            raise MissingOptionError(key, head[key], text, f"head.{key}")
    try:
        return cls(**head)
    except OptionError as err:
        raise err.renamed(f"head.{err.name}") from None


def head_dict(head: dict | None) -> dict:
    """The validated head section with every default filled in (what `config.json` stores)."""
    options = head_options(head)
    return {"family": options.family, **asdict(options)}


def same_head(a: dict | None, b: dict | None) -> bool:
    """Whether two head sections (as `head_dict` writes them) ask for the same head, ignoring the options `from_base`
    sets from the checkpoint (`CHECKPOINT_OPTIONS`): they are not a user's choice."""

    def strip(head):
        return None if head is None else {k: v for k, v in head.items() if k not in CHECKPOINT_OPTIONS}

    return strip(a) == strip(b)


READ_ONLY = (
    "config.head is read-only: model.set_head_options(...) changes the head and config.head together (a config no "
    "model uses yet: give head={...} when building it, or assign config.head a new section)"
)


class FrozenSection(dict):
    """A head section that refuses changes in place (`config.head`): the head and its config change together, through
    `model.set_head_options`. Compares and serialises as the dict it is; a copy is a plain dict."""

    def _refuse(self, *args, **kwargs):
        raise TypeError(READ_ONLY)

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return frozen_section, (thawed(self),)

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __copy__(self):
        return thawed(self)  # a copy is the caller's to change: a plain dict

    def __deepcopy__(self, memo):
        return thawed(self)


class FrozenList(list):
    """A list inside a `FrozenSection` (class weights), read-only likewise."""

    def _refuse(self, *args, **kwargs):
        raise TypeError(READ_ONLY)

    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = clear = extend = insert = pop = remove = _refuse
    reverse = sort = _refuse

    def __reduce__(self):
        return frozen_section, (thawed(self),)

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __copy__(self):
        return thawed(self)

    def __deepcopy__(self, memo):
        return thawed(self)


def frozen_section(value):
    """`value` (a head section, or anything in one) with every dict and list in it read-only."""
    if isinstance(value, dict):
        return value if isinstance(value, FrozenSection) else FrozenSection({k: frozen_section(v) for k, v in
                                                                            value.items()})  # fmt: skip
    if isinstance(value, list | tuple) and not isinstance(value, FrozenList):
        return FrozenList(frozen_section(v) for v in value)
    return value


def thawed(value):
    """A plain, mutable copy of a frozen section (or of anything in one)."""
    if isinstance(value, dict):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thawed(v) for v in value]
    return value


def make_head(hidden_size: int, num_classes: int, head: dict | None):
    """The head module of a head section: the registered family's head class."""
    options = head_options(head)
    return FAMILIES[options.family].head(hidden_size, num_classes, options)


def _defining_module(cls: type) -> str | None:
    """The module a component class comes from, None where it is hf_heads' own (installed, or the flat copy saved
    with a model); the name it had where it was written for a copy saved with a model."""
    copied = getattr(sys.modules.get(cls.__module__), COPIED_FROM, None)
    if copied is not None:
        return copied
    name = cls.__module__
    ours = name == "hf_heads" or name.startswith("hf_heads.") or name.rsplit(".", 1)[-1].startswith("hf_heads_")
    return None if ours else name


def component_modules(head: dict | None) -> dict[str, str]:
    """{option: module} for each component of a head section defined outside hf_heads (the family, and every option
    naming a registered component): a config records it, so loading imports those modules and saving copies them."""
    options = head_options(head)
    found: dict[str, type] = {"family": FAMILIES[options.family].head}
    for f in fields(options):
        registry, value = f.metadata.get(COMPONENT), getattr(options, f.name)
        if registry is not None and value is not None:
            found[f.name] = type(options.component(f.name))
    modules = {option: _defining_module(cls) for option, cls in found.items()}
    return {option: module for option, module in modules.items() if module is not None}


def import_components(components: dict | None) -> None:
    """Import the modules a config records for its components before the head section is resolved; one that does not
    import is a `ValueError` naming the option and the module (`__main__` is left to the caller)."""
    if components is None:
        return
    if not isinstance(components, dict) or not all(isinstance(v, str) for v in components.values()):
        raise OptionError("components", components, "must be a dict {head option: module name}")
    if _FLAT:
        return
    for option, module in components.items():
        if module == "__main__" or module in sys.modules:
            continue
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(
                f"head.{option}: this config's {option} comes from module {module!r}, which does not import here "
                f"({err}); install it or put it on the Python path, or load the saved directory with "
                "trust_remote_code=True, which uses the copy of it saved with the model"
            ) from err


def missing_component(err: OptionError, components: dict | None) -> str | None:
    """Why a head option names an unknown component, where the config records it from a script (`__main__`)."""
    option = err.name.removeprefix("head.") if err.name else err.field
    if (components or {}).get(option) != "__main__":
        return None
    return (
        f"{err}; this config's {option} was defined in a script (__main__) when it was saved: run the code that "
        "registers it before loading, or move it into a module (a saved model then carries a copy of it)"
    )
