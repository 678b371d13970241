"""Checks of option values shared by the request gate and its front doors."""

from __future__ import annotations

import math


def check_timeout(name: str, value: object) -> None:
    """Refuse a value that cannot be a timeout (or a rate): a positive number, ``math.inf`` too.

    Args:
        name: The option's name, for the message.
        value: The value given.

    Raises:
        ValueError: If ``value`` is not a positive number.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


def check_bytes(name: str, value: object) -> None:
    """Refuse a value that cannot be a number of bytes: a non-negative integer.

    Raises:
        ValueError: If ``value`` is not a non-negative integer.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")


def deadline_seconds(name: str, timeout: float | None) -> float:
    """A deadline option as seconds, ``None`` (no deadline) as ``math.inf``.

    Raises:
        ValueError: If ``timeout`` is neither ``None`` nor a positive number.
    """
    if timeout is None:
        return math.inf
    check_timeout(name, timeout)
    return float(timeout)
