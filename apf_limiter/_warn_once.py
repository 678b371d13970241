"""Warnings about a user's likely mistake, logged once each, with what to do about it."""

from __future__ import annotations

import logging

logger = logging.getLogger("apf_limiter")


class WarnOnce:
    """Logs each warning once per key, for the object that owns it.

    A mistake made on every request (a hook returning the wrong type, a middleware in the
    wrong place) should be loud once, not flood the log. Keys name the mistake and its
    subject (a route, a level, a hook), never a client's value, so the set stays small.
    """

    __slots__ = ("_said",)

    def __init__(self) -> None:
        self._said: set[str] = set()

    def said(self, key: str) -> bool:
        """Whether ``key`` was warned about already (a cheap check before building a message)."""
        return key in self._said

    def __call__(self, key: str, message: str, *args: object) -> bool:
        """Log ``message % args`` at WARNING unless ``key`` was warned about; whether it was new."""
        if key in self._said:
            return False
        self._said.add(key)
        logger.warning(message, *args, extra={"apf_warning": key})
        return True
