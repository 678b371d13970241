"""What the middleware sends: the APF response headers and the rejection response.

A rejected HTTP request gets ``429 Too Many Requests`` with ``Retry-After`` (the level's
dropped-requests tracker, via :attr:`Rejected.retry_after`) and the JSON body
``{"detail": "Too many requests, please try again later."}``. A rejected WebSocket gets the same
429 where the server supports the ASGI WebSocket denial-response extension, else it is closed
before accept with code 1013 (try again later). An ``on_reject`` hook replaces the response.

A request whose deadline passed before its response started gets ``504 Gateway Timeout`` (as
Kubernetes' timeout filter answers), one whose body came in too slowly ``408 Request
Timeout`` (as Kestrel and nginx answer); both close an HTTP/1 connection, whose request body
was not read to its end. The texts and statuses are the gate's (:mod:`apf_limiter.gate`),
shared with the aiohttp front door.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Generator
from typing import Any, Final

from apf_limiter._errors import Rejected
from apf_limiter.asgi._types import Message, Receive, RejectHook, Scope, Send
from apf_limiter.gate import (
    BODY_RATE_DETAIL,
    CLIENT_CLOSED_REQUEST,
    DEADLINE_DETAIL,
    REJECTION_DETAIL,
    Ticket,
    header_name,
    json_detail,
    seconds_value,
)

#: The WebSocket close code of a rejection when no denial response is possible.
WEBSOCKET_TRY_AGAIN_LATER: Final = 1013

_BODY: Final = json_detail(REJECTION_DETAIL)
_DENIAL_EXTENSION: Final = "websocket.http.response"
#: The messages that start a response (where the APF headers go).
STARTS: Final = frozenset(
    {"http.response.start", "websocket.accept", "websocket.http.response.start"}
)


class HeaderNames:
    """The names of the two APF response headers, encoded once; either may be off.

    Args:
        flow_schema: Name of the header carrying the flow schema, or ``None`` for none.
        priority_level: Name of the header carrying the priority level, or ``None``.
    """

    __slots__ = ("flow_schema", "priority_level", "cache")

    def __init__(self, flow_schema: str | None, priority_level: str | None) -> None:
        self.flow_schema = header_name(flow_schema)
        self.priority_level = header_name(priority_level)
        # (schema, level) -> pairs; bounded by the configurations' schemas times levels.
        # Read directly by the middleware's hot path, then :meth:`headers` on a miss.
        self.cache: dict[tuple[str, str], list[tuple[bytes, bytes]]] = {}

    @property
    def enabled(self) -> bool:
        """Whether at least one header is sent."""
        return self.flow_schema is not None or self.priority_level is not None

    def headers(self, flow_schema: str, priority_level: str) -> list[tuple[bytes, bytes]]:
        """The header pairs naming a request's flow schema and priority level (do not mutate)."""
        key = (flow_schema, priority_level)
        pairs = self.cache.get(key)
        if pairs is None:
            if len(self.cache) >= 4096:  # names come from configurations, but stay bounded
                self.cache.clear()
            pairs = self.cache[key] = self._encode(flow_schema, priority_level)
        return pairs

    def _encode(self, flow_schema: str, priority_level: str) -> list[tuple[bytes, bytes]]:
        pairs = []
        if self.flow_schema is not None:
            pairs.append((self.flow_schema, flow_schema.encode("latin-1")))
        if self.priority_level is not None:
            pairs.append((self.priority_level, priority_level.encode("latin-1")))
        return pairs


def with_headers(message: Message, extra: list[tuple[bytes, bytes]]) -> Message:
    """A copy of a response-start message with ``extra`` headers appended.

    Args:
        message: An ``http.response.start``, ``websocket.accept`` or denial-start message.
        extra: Header pairs to append.

    Returns:
        A new message (the application's message is left as it was).
    """
    return {**message, "headers": [*message.get("headers", ()), *extra]}


def rate_limit_pairs(fields: tuple[str, str]) -> list[tuple[bytes, bytes]]:
    """The ``RateLimit-Policy`` and ``RateLimit`` header pairs of ``Gate.rate_limit``'s values."""
    policy, current = fields
    return [
        (b"ratelimit-policy", policy.encode("ascii")),
        (b"ratelimit", current.encode("ascii")),
    ]


def queue_wait_pair(name: bytes, ticket: Ticket) -> tuple[bytes, bytes]:
    """The queue-wait header pair of an admitted request (``ResponseHeaders.queue_wait``)."""
    return (name, seconds_value(ticket.queue_wait).encode("ascii"))


async def send_client_gone(scope: Scope, send: Send, headers: list[tuple[bytes, bytes]]) -> None:
    """Answer an HTTP request whose client left while it was queued (the app never ran).

    The server drops the response (the connection is gone), but middleware outside this one
    sees the request end with a status rather than with no response at all (Starlette's
    ``BaseHTTPMiddleware`` raises "No response returned." then). A WebSocket gets nothing.

    Args:
        scope: The request's scope.
        send: The server's ``send``.
        headers: The APF headers to add to the response.
    """
    if scope["type"] != "http":
        return
    try:
        await send(
            {
                "type": "http.response.start",
                "status": CLIENT_CLOSED_REQUEST,
                "headers": [(b"content-length", b"0"), *headers],
            }
        )
        await send({"type": "http.response.body", "body": b""})
    except Exception:
        # ASGI 2.4 has a server raise an OSError on a closed connection; others raise what
        # they like. The client is gone: this answer was only for the middleware outside.
        pass


async def send_rejection(
    scope: Scope,
    receive: Receive,
    send: Send,
    rejected: Rejected,
    headers: list[tuple[bytes, bytes]],
    on_reject: RejectHook | None,
) -> None:
    """Answer a rejected request.

    Args:
        scope: The request's scope.
        receive: The request's ``receive`` (replaying anything read while it waited).
        send: The server's ``send``.
        rejected: Why the request was rejected.
        headers: The APF headers to add to the response.
        on_reject: The hook that builds a custom response, or ``None``.
    """
    websocket = scope["type"] == "websocket"
    if websocket:
        # The server's first message is websocket.connect; take it before answering.
        await receive()
        if _DENIAL_EXTENSION not in (scope.get("extensions") or {}):
            await send({"type": "websocket.close", "code": WEBSOCKET_TRY_AGAIN_LATER, "reason": ""})
            return
    retry_after = (b"retry-after", str(rejected.retry_after).encode("ascii"))
    if on_reject is not None:
        app = on_reject(scope, rejected)
        if inspect.isawaitable(app):
            app = await app

        async def send_with_headers(message: Message) -> None:
            if message["type"] in STARTS:
                present = {name.lower() for name, _ in message.get("headers", ())}
                extra = [pair for pair in (retry_after, *headers) if pair[0] not in present]
                message = with_headers(message, extra)
            await send(message)

        await app(scope, receive, send_with_headers)
        return
    prefix = "websocket." if websocket else ""
    await send(
        {
            "type": prefix + "http.response.start",
            "status": rejected.status,  # 429, or the level's rejectionStatus
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(_BODY)).encode("ascii")),
                retry_after,
                *headers,
            ],
        }
    )
    await send({"type": prefix + "http.response.body", "body": _BODY})


class _Done:
    """An awaitable that is already complete."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]


#: What the middleware's ``send`` returns for a message it drops (its request expired).
DROPPED: Final = _Done()


_EXPIRED_BODIES: Final = {504: json_detail(DEADLINE_DETAIL), 408: json_detail(BODY_RATE_DETAIL)}


async def send_expired(
    scope: Scope, send: Send, status: int, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer a request that expired before its response started: 504 or 408.

    A WebSocket not accepted yet gets the 504 as its denial response where the server offers
    one, else its handshake is refused (``websocket.close``, which servers answer 403).

    Args:
        scope: The request's scope.
        send: The server's ``send``.
        status: 504 (the request deadline passed) or 408 (the body came in too slowly).
        headers: The APF headers to add to the response.
    """
    body = _EXPIRED_BODIES[status]
    pairs = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
        *headers,
    ]
    prefix = ""
    if scope["type"] == "websocket":
        if _DENIAL_EXTENSION not in (scope.get("extensions") or {}):
            with contextlib.suppress(Exception):  # the client may be gone
                close = {"type": "websocket.close", "code": WEBSOCKET_TRY_AGAIN_LATER, "reason": ""}
                await send(close)
            return
        prefix = "websocket."
    elif str(scope.get("http_version", "1.1")).startswith("1"):
        pairs.append((b"connection", b"close"))  # the rest of the body was never read
    try:
        await send({"type": prefix + "http.response.start", "status": status, "headers": pairs})
        await send({"type": prefix + "http.response.body", "body": body})
    except Exception:
        pass  # the client may be gone (a server raises what it likes then): nothing to do
