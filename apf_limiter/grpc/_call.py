"""From a gRPC call to a :class:`~apf_limiter.RequestDigest`, and the metadata it is answered with.

A call is a non-resource request: its path is the method's full name
(``/package.Service/Method``), its verb ``post`` (every gRPC call is an HTTP/2 ``POST`` on the
wire, so flow schemas written for HTTP match it too), its client the host of
``context.peer()`` (for ``ByClientIP``), its user and groups what the ``identify`` hook says
(anonymous without one), and its invocation metadata the headers ``ByHeader`` reads (text
values only, looked up only if a flow schema asks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeAlias

import grpc

from apf_limiter._digest import (
    ANONYMOUS_USER,
    AUTHENTICATED_GROUP,
    UNAUTHENTICATED_GROUP,
    RequestDigest,
    fill_digest,
)
from apf_limiter._errors import Rejected
from apf_limiter.gate import Ticket, seconds_value

#: What the ``identify`` hook returns: a user name, a user name with its groups, or ``None``
#: for an anonymous call.
Identity: TypeAlias = "str | tuple[str, Sequence[str]] | None"
#: ``identify(context) -> Identity``: who makes the call (e.g. from ``authorization``).
IdentifyHook: TypeAlias = "Callable[[grpc.aio.ServicerContext[Any, Any]], Identity]"

#: The trailing-metadata key gRPC's retry policy honours: milliseconds before a retry.
RETRY_PUSHBACK_KEY: Final = "grpc-retry-pushback-ms"
#: The trailing-metadata key naming the call's flow schema.
FLOW_SCHEMA_KEY: Final = "x-apf-flow-schema"
#: The trailing-metadata key naming the call's priority level.
PRIORITY_LEVEL_KEY: Final = "x-apf-priority-level"
#: The trailing-metadata key of a rejection's reason (``queue-full``, ``time-out``, ...).
REASON_KEY: Final = "x-apf-reason"
#: The trailing-metadata key of an admitted call's seconds in a queue.
QUEUE_WAIT_KEY: Final = "x-apf-queue-wait"
#: The trailing-metadata key of what enforcing would have done, at a level in shadow mode.
SHADOW_KEY: Final = "x-apf-shadow"

_VERB: Final = "post"
_ANONYMOUS: Final[tuple[str, ...]] = (UNAUTHENTICATED_GROUP,)


class CallMetadata(Mapping[str, str]):
    """A call's invocation metadata as a name-to-value mapping, read only when looked up.

    Binary (``-bin``) values are left out; the first of repeated keys wins.
    """

    __slots__ = ("_context", "_pairs")

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._context = context
        self._pairs: dict[str, str] | None = None

    def _read(self) -> dict[str, str]:
        pairs = self._pairs
        if pairs is None:
            pairs = {}
            for key, value in self._context.invocation_metadata() or ():
                if isinstance(value, str):
                    pairs.setdefault(key, value)
            self._pairs = pairs
        return pairs

    def __getitem__(self, key: str) -> str:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def peer_host(peer: str) -> str:
    """The client's address in ``context.peer()`` (``ipv4:10.0.0.7:5123`` -> ``10.0.0.7``).

    Args:
        peer: The peer as gRPC names it: ``ipv4:host:port``, ``ipv6:[host]:port`` or
            ``unix:path`` (kept whole: there is no address).

    Returns:
        The host, or ``peer`` itself when it names none.
    """
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")] if "]" in rest else rest
    return peer


def call_digest(
    context: grpc.aio.ServicerContext[Any, Any], method: str, identify: IdentifyHook | None
) -> RequestDigest:
    """The digest of one call to ``method`` (its full name, ``/package.Service/Method``)."""
    user, groups = ANONYMOUS_USER, _ANONYMOUS
    if identify is not None:
        identity = identify(context)
        if identity is not None:
            user, groups = _identity(identity)
    return fill_digest(
        RequestDigest, user, groups, _VERB, method, "", "", "", "", "",
        peer_host(context.peer()), CallMetadata(context), None, 0, 0.0,
    )  # fmt: skip


def _identity(identity: str | tuple[str, Sequence[str]]) -> tuple[str, tuple[str, ...]]:
    if isinstance(identity, str):
        named: tuple[str, Sequence[str]] = (identity, ())
    else:
        named = identity
    user, given = named
    if not isinstance(user, str) or not user:
        raise ValueError(f"identify must return a non-empty user name, got {user!r}")
    groups = tuple(given)
    if not all(isinstance(group, str) for group in groups):
        raise ValueError(f"identify must return groups as strings, got {given!r}")
    # Kubernetes puts every authenticated user in this group: rules on it match here too.
    return user, groups if AUTHENTICATED_GROUP in groups else (*groups, AUTHENTICATED_GROUP)


def rejection_metadata(rejected: Rejected) -> tuple[tuple[str, str], ...]:
    """The trailing metadata of a refused call: the pushback, the reason and the APF names."""
    return (
        (RETRY_PUSHBACK_KEY, str(rejected.retry_after * 1000)),
        (REASON_KEY, rejected.reason),
        (FLOW_SCHEMA_KEY, rejected.flow_schema),
        (PRIORITY_LEVEL_KEY, rejected.priority_level),
    )


def add_names(context: grpc.aio.ServicerContext[Any, Any], ticket: Ticket) -> None:
    """Add the APF names, the queue wait and any shadow outcome to the trailing metadata."""
    ours = [
        (FLOW_SCHEMA_KEY, ticket.flow_schema),
        (PRIORITY_LEVEL_KEY, ticket.priority_level),
        (QUEUE_WAIT_KEY, seconds_value(ticket.queue_wait)),
    ]
    shadow = ticket.shadow
    if shadow is not None:
        ours.append((SHADOW_KEY, shadow))
    theirs = context.trailing_metadata()  # the handler's own, kept
    context.set_trailing_metadata((*theirs, *ours) if theirs else tuple(ours))
