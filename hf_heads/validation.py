"""Argument checks shared by every layer (losses, heads, config, training arguments, metrics, run scripts): every
error is an `OptionError` that names the field, the value and what is allowed.

The ground floor of hf_heads: this module imports nothing from hf_heads, so any module may import it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["OptionError", "check_choice", "check_number"]


class OptionError(ValueError):
    """An invalid option: `field` (the option), `value` (what was given), `allowed` (a phrase such as
    "must be >= 0" or "is not allowed; allowed: 'a', 'b'") and `name`, how the field is shown (default: the
    field itself). The message is `f"{name}={value!r} {allowed}"`, e.g. "m=-1 must be >= 0"."""

    def __init__(self, field: str, value, allowed: str, name: str | None = None) -> None:
        self.field, self.value, self.allowed = field, value, allowed
        self.name = field if name is None else name
        super().__init__(f"{self.name}={value!r} {allowed}")

    def renamed(self, name: str, allowed: str | None = None) -> OptionError:
        """The same error shown under another name (e.g. "head.m" in a config, "--m" on a command line), its `allowed`
        phrase replaced where given."""
        return OptionError(self.field, self.value, self.allowed if allowed is None else allowed, name)

    def __reduce__(self):  # picklable (data loader workers, multiprocessing) despite the extra arguments
        return OptionError, (self.field, self.value, self.allowed, self.name)


def check_choice(field: str, value, allowed: Iterable) -> None:
    """Raise `OptionError` unless `value` is one of `allowed` (the message lists them)."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise OptionError(field, value, f"is not allowed; allowed: {', '.join(map(repr, allowed))}")


def check_number(
    field: str,
    value,
    *,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    integer: bool = False,
) -> None:
    """Raise `OptionError` unless `value` is a finite number (an `int` when `integer`; a bool is neither) that is
    `>= minimum` and `> exclusive_minimum` where these are given."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if integer and not is_int:
        raise OptionError(field, value, "must be an integer")
    if not integer and not (is_int or isinstance(value, float)):
        raise OptionError(field, value, "must be a number")
    if value != value or value in (float("inf"), float("-inf")):
        raise OptionError(field, value, "must be finite")
    if minimum is not None and value < minimum:
        raise OptionError(field, value, f"must be >= {minimum}")
    if exclusive_minimum is not None and value <= exclusive_minimum:
        raise OptionError(field, value, f"must be > {exclusive_minimum}")
