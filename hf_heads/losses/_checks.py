"""Argument checks shared by the losses: every error names the field, the value and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable


def check_choice(field: str, value, allowed: Iterable) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{field}={value!r} is not allowed; allowed: {', '.join(map(repr, allowed))}")


def check_number(
    field: str,
    value,
    *,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    integer: bool = False,
) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if integer and not is_int:
        raise ValueError(f"{field}={value!r} must be an integer")
    if not integer and not (is_int or isinstance(value, float)):
        raise ValueError(f"{field}={value!r} must be a number")
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{field}={value!r} must be finite")
    if minimum is not None and value < minimum:
        raise ValueError(f"{field}={value!r} must be >= {minimum}")
    if exclusive_minimum is not None and value <= exclusive_minimum:
        raise ValueError(f"{field}={value!r} must be > {exclusive_minimum}")
