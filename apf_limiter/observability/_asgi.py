"""Minimal ASGI plumbing for the observability endpoints (no web framework needed)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from apf_limiter._warn_once import WarnOnce

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Authorize = Callable[[Scope], bool | Awaitable[bool]]
"""A hook deciding from the ASGI scope whether a request may see an endpoint."""


async def is_authorized(
    authorize: Authorize | None, scope: Scope, warn: WarnOnce | None = None
) -> bool:
    """Ask the hook (sync or async); no hook denies, and so does anything but ``True``.

    Args:
        authorize: The hook.
        scope: The request's scope.
        warn: Where to warn (once) that the hook returned something other than a bool.
    """
    if authorize is None:
        return False
    verdict = authorize(scope)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    if type(verdict) is not bool and warn is not None:
        # A user object, 1 or "yes" reads as "allowed" to its author, but only True allows.
        name = getattr(authorize, "__qualname__", type(authorize).__name__)
        warn(
            f"authorize-verdict:{name}:{type(verdict).__name__}",
            "the authorize hook %s returned %s, not a bool: the request is denied; return "
            "True to allow, False to deny",
            name,
            type(verdict).__name__,
        )
    return verdict is True


def query(scope: Scope) -> dict[str, str]:
    """The first value of each query parameter (as Go's ``URL.Query().Get``)."""
    raw = scope.get("query_string", b"").decode("latin-1")
    return {name: values[0] for name, values in parse_qs(raw, keep_blank_values=True).items()}


async def respond(
    scope: Scope,
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Send a complete response (headers only for ``HEAD``)."""
    headers = [
        (b"content-type", content_type.encode("latin-1")),
        (b"content-length", str(len(body)).encode("latin-1")),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if scope.get("method") == "HEAD":
        body = b""
    await send({"type": "http.response.body", "body": body})


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge startup and shutdown when the app is run on its own."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
