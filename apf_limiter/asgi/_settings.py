"""The middleware's option values: hooks, response headers, body buffering, debug endpoints.

:class:`APFMiddleware` takes about ten parameters; each group of related settings is one
value (:class:`~apf_limiter.gate.SlowClients` and :class:`~apf_limiter.gate.ResponseHeaders`
come from the gate, shared with the other front doors). The
keyword arguments of earlier releases (``identify=``, ``flow_schema_header=``,
``request_timeout=``, ...) are still accepted and folded into these values by
:func:`fold_legacy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from apf_limiter._checks import check_bytes
from apf_limiter.asgi._debug import DEBUG_OPTIONS
from apf_limiter.asgi._types import (
    AuthorizeHook,
    EstimateHook,
    IdentifyHook,
    LongRunningHook,
    ResolveHook,
)
from apf_limiter.gate import NO_HEADERS, ResponseHeaders, SlowClients


@dataclass(frozen=True, slots=True)
class IdentityHooks:
    """How the middleware learns who sent a request and what it costs.

    Attributes:
        identify: ``identify(scope) -> Identity | None``: who sent the request. ``None``: the
            user of Starlette's ``AuthenticationMiddleware`` (``scope["user"]``, the scopes
            of ``scope["auth"]`` as groups), else anonymous.
        resolve: ``resolve(scope) -> ResourceAttributes | None``: turns a request into a
            resource request (e.g. a tenant from the path as namespace).
        estimate: ``estimate(scope) -> WorkEstimate | int | None``: seats of a request;
            ``None`` falls back to the route settings, then 1 seat.
        long_running: ``long_running(scope) -> bool | None``: whether a request gives its
            seats back once its response has started; ``None`` falls back to the route
            settings (WebSockets always are, unless the hook says ``False``).

    Each hook may return an awaitable.
    """

    identify: IdentifyHook | None = None
    resolve: ResolveHook | None = None
    estimate: EstimateHook | None = None
    long_running: LongRunningHook | None = None


@dataclass(frozen=True, slots=True)
class BodyBuffer:
    """Request body kept while requests wait in a queue (watching for disconnects).

    Attributes:
        max: Bytes kept per queued request (to be replayed to the application), each
            message counting 256 bytes more: the watcher reads only below this, so it keeps
            at most this plus one message; then disconnects are no longer watched. 0 watches
            nothing.
        total: Bytes kept by all queued requests together: while they reach it, no queued
            request reads (nor watches for a disconnect).

    Raises:
        ValueError: If either is not a non-negative integer.
    """

    max: int = 65536
    total: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        check_bytes("max_body_buffer", self.max)
        check_bytes("max_total_body_buffer", self.total)


@dataclass(frozen=True, slots=True)
class DebugEndpoints:
    """Serve the debug endpoints under ``/debug/api_priority_and_fairness/`` (no admission).

    Attributes:
        authorize: ``authorize(scope)``: whether a debug request may be served; ``None``
            denies every request (with a warning).
        top_flows: Flows shown per level in the top-flows dump and the dashboard (``None``:
            ``debug_app``'s default).
        hash_distinguishers: Show distinguishers as short stable hashes (``True``, or a key
            of your own), in the request and top-flows dumps and the dashboard.
    """

    authorize: AuthorizeHook | None = None
    top_flows: int | None = None
    hash_distinguishers: bool | bytes = False

    def options(self) -> dict[str, Any]:
        """The keyword options these endpoints pass to ``debug_app`` (the defaults left out)."""
        options: dict[str, Any] = {}
        if self.top_flows is not None:
            options["top_flows"] = self.top_flows
        if self.hash_distinguishers is not False:
            options["hash_distinguishers"] = self.hash_distinguishers
        return options


# Keyword arguments of earlier releases: name -> (group, field).
_LEGACY: Final = {
    "identify": ("identity", "identify"),
    "resolve": ("identity", "resolve"),
    "estimate": ("identity", "estimate"),
    "long_running": ("identity", "long_running"),
    "flow_schema_header": ("headers", "flow_schema"),
    "priority_level_header": ("headers", "priority_level"),
    "shadow_header": ("headers", "shadow"),
    "queue_wait_header": ("headers", "queue_wait"),
    "request_timeout": ("slow_clients", "request_timeout"),
    "request_timeout_by_level": ("slow_clients", "by_level"),
    "min_body_rate": ("slow_clients", "min_body_rate"),
    "body_rate_grace": ("slow_clients", "grace"),
    "max_body_buffer": ("body", "max"),
    "max_total_body_buffer": ("body", "total"),
    "authorize": ("debug", "authorize"),
}


def fold_legacy(groups: dict[str, Any], legacy: Mapping[str, object]) -> None:
    """Fold the keyword arguments of earlier releases into the option values in ``groups``.

    ``response_headers=False`` turns both APF headers off; ``debug_endpoints=True`` serves
    the debug endpoints.

    Raises:
        TypeError: On an unknown keyword argument.
    """
    fields: dict[str, dict[str, object]] = {}
    for name, value in legacy.items():
        if name == "response_headers":
            continue  # below: it wins over the header names
        if name == "debug_endpoints":
            if value and groups["debug"] is None:
                groups["debug"] = DebugEndpoints()
            elif not value:
                groups["debug"] = None
            if isinstance(value, Mapping) and value:
                # debug_endpoints={"top_flows": 5, ...}: on, with debug_app's options.
                unknown = sorted(set(value) - DEBUG_OPTIONS)
                if unknown:
                    raise TypeError(
                        f"debug_endpoints= got unknown options {unknown}; "
                        f"it takes {sorted(DEBUG_OPTIONS)}"
                    )
                fields.setdefault("debug", {}).update(value)
            elif value is not True and value is not False and not isinstance(value, Mapping):
                raise TypeError(
                    "debug_endpoints must be True, False or a mapping of debug_app options, "
                    f"not {type(value).__name__}"
                )
            continue
        where = _LEGACY.get(name)
        if where is None:
            raise TypeError(f"APFMiddleware() got an unexpected keyword argument {name!r}")
        group, field = where
        fields.setdefault(group, {})[field] = value
    if not legacy.get("response_headers", True):
        fields.setdefault("headers", {}).update(flow_schema=None, priority_level=None)
    defaults: dict[str, Any] = {
        "identity": IdentityHooks(),
        "headers": ResponseHeaders(),
        "slow_clients": SlowClients(),
        "body": BodyBuffer(),
        "debug": DebugEndpoints(),
    }
    for group, changes in fields.items():
        if group == "debug" and groups["debug"] is None:
            continue  # authorize= without debug_endpoints=True: no endpoints
        current = groups[group]
        if group == "headers" and current is None:
            current = NO_HEADERS
        groups[group] = replace(current if current is not None else defaults[group], **changes)
