"""ASGI type aliases and the hook signatures of :class:`~apf_limiter.asgi.APFMiddleware`.

The ASGI aliases are structurally the same as Starlette's (``starlette.types``), so an
``APFMiddleware`` type-checks wherever Starlette expects a middleware, without importing it.
Every hook may be a plain function or a coroutine function.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeAlias

from apf_limiter._errors import Rejected
from apf_limiter.gate import Identity, ResourceAttributes, WorkEstimate

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]

#: ``identify(scope)``: who sent the request; ``None`` means anonymous.
IdentifyHook: TypeAlias = Callable[[Scope], Identity | Awaitable[Identity | None] | None]

#: ``resolve(scope)``: the resource a request acts on; ``None`` keeps it a non-resource one.
ResolveHook: TypeAlias = Callable[
    [Scope], ResourceAttributes | Awaitable[ResourceAttributes | None] | None
]

#: ``estimate(scope)``: seats, or a full estimate; ``None`` falls back to the route settings.
EstimateHook: TypeAlias = Callable[
    [Scope], WorkEstimate | int | Awaitable[WorkEstimate | int | None] | None
]

#: ``long_running(scope)``: whether seats go back at the response start; ``None`` falls back.
LongRunningHook: TypeAlias = Callable[[Scope], bool | Awaitable[bool | None] | None]

#: ``on_reject(scope, rejected)``: the ASGI app (e.g. a Starlette response) that answers.
RejectHook: TypeAlias = Callable[[Scope, Rejected], ASGIApp | Awaitable[ASGIApp]]

#: ``authorize(scope)``: whether a debug endpoint may be served (passed on to the debug app).
AuthorizeHook: TypeAlias = Callable[[Scope], Any]
