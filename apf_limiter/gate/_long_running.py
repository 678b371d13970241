"""The cap on open long-running requests per flow schema (``max_long_running=``).

A long-running request (a WebSocket, server-sent events, a long poll) gives its seats back once
its response starts, so a level's seats say nothing of how many are open: forty open event
streams hold no seat at all, yet each holds a connection, a task and memory. With
``max_long_running={"events": 100, "*": 1000}`` the gate counts the open long-running
requests of each flow schema itself, from their arrival (queued ones count) until their ticket
ends, whatever ends it; one more than the cap is refused with the reason
``long-running-limit`` before it reaches the engine. ``"*"`` is the cap of every flow schema
not named, each counted on its own. Kubernetes has no such cap for its watches. At a priority
level in shadow mode the cap refuses nothing, as nothing is refused there: the request runs
(and counts), and its would-be refusal is reported (``Limiter.would_refuse``) and told as its
shadow outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from apf_limiter._digest import RequestDigest
from apf_limiter._errors import Rejected
from apf_limiter.limiter import Limiter, ShadowOutcome

#: The key of ``max_long_running`` that caps every flow schema not named.
EVERY_SCHEMA: Final = "*"
#: The ``Retry-After`` of a ``long-running-limit`` rejection, in seconds: Kubernetes' minimum.
#: A stream frees its place when it ends, which no tracker of drops can foresee.
LONG_RUNNING_RETRY_AFTER: Final = 1


class LongRunningCaps:
    """Counts the open long-running requests of each flow schema against its cap.

    Args:
        caps: The cap by flow-schema name; ``"*"``: every schema not named (each on its own).
        limiter: The limiter that classifies requests and reports refusals.

    Raises:
        ValueError: If a cap is not a non-negative integer or a key not a non-empty string.
    """

    __slots__ = ("_caps", "_default", "_limiter", "_open")

    def __init__(self, caps: Mapping[str, int], limiter: Limiter) -> None:
        # Read as objects: the caller's mapping is unchecked, and a compiled build would
        # otherwise refuse a wrong type with its own TypeError before the check below.
        given: list[tuple[object, object]] = list(caps.items())
        checked: dict[str, int] = {}
        for name, cap in given:
            if not isinstance(name, str) or not name:
                raise ValueError(f"max_long_running keys must be flow-schema names, got {name!r}")
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
                raise ValueError(
                    f"max_long_running[{name!r}] must be a non-negative integer, got {cap!r}"
                )
            checked[name] = cap
        self._caps = {name: cap for name, cap in checked.items() if name != EVERY_SCHEMA}
        self._default: int | None = checked.get(EVERY_SCHEMA)
        self._limiter = limiter
        self._open: dict[str, int] = {}

    def enter(self, digest: RequestDigest) -> tuple[str, ShadowOutcome | None] | Rejected | None:
        """Count a long-running request in, or refuse it.

        Returns:
            The flow schema it is counted in (give it to :meth:`leave` when its call ends)
            with, at a shadow level over the cap, the would-be refusal (reported already);
            ``None`` when its schema has no cap (nothing counted); or the rejection (reported
            already) when its schema has as many open as its cap at an enforced level.

        Raises:
            LookupError: If no flow schema matches (as admission would raise).
        """
        schema, level = self._limiter.classify(digest)
        cap = self._caps.get(schema, self._default)
        if cap is None:
            return None
        count = self._open.get(schema, 0)
        would: ShadowOutcome | None = None
        if count >= cap:
            limiter = self._limiter
            would = limiter.would_refuse(
                schema, level, "long-running-limit", retry_after=LONG_RUNNING_RETRY_AFTER
            )
            if would is None:  # the level enforces
                return limiter.refuse(
                    schema, level, "long-running-limit", retry_after=LONG_RUNNING_RETRY_AFTER
                )
        self._open[schema] = count + 1
        return schema, would

    def leave(self, schema: str) -> None:
        """Count out a request :meth:`enter` counted in."""
        count = self._open[schema] - 1
        if count:
            self._open[schema] = count
        else:
            del self._open[schema]  # bounded by the schemas with open requests

    def open_requests(self, schema: str) -> int:
        """How many long-running requests of ``schema`` are open (counted in, not out)."""
        return self._open.get(schema, 0)
