"""The demo's server side: a slow endpoint behind APF or behind a plain semaphore.

Both variants serve ``GET /work`` (sleeps ``service_time``, then answers ``ok``) and
``GET /healthz``. The APF variant runs one queuing priority level of ``capacity`` seats, fair
per user, the user being the bearer token; the baseline holds an ``asyncio.Semaphore`` of the
same ``capacity`` around the application — what services use today.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from apf_limiter.asgi import Identity, IdentityHooks
from apf_limiter.asgi._middleware import APFMiddleware
from apf_limiter.asgi._types import ASGIApp, Receive, Scope, Send

Mode = Literal["semaphore", "apf"]

_EVERYTHING: list[dict[str, Any]] = [
    {
        "subjects": [{"kind": "Group", "group": {"name": "*"}}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    }
]


def demo_config(capacity: int, *, queue_length_limit: int = 4) -> dict[str, Any]:
    """The demo's APF configuration: one level ``demo`` of ``capacity`` seats, fair per user.

    Args:
        capacity: Seats of the level (its nominal limit; nothing is lent or borrowed).
        queue_length_limit: Requests one queue holds before new ones get 429.

    Returns:
        The configuration mapping.
    """
    return {
        "serverConcurrencyLimit": capacity,
        "requestWaitLimit": 15,
        "priorityLevels": [
            {
                "name": "demo",
                "limited": {
                    # Against catch-all's 5 shares this gives the level all ``capacity`` seats.
                    "nominalConcurrencyShares": 10000,
                    "lendablePercent": 0,
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {
                            "queues": 64,
                            "handSize": 6,
                            "queueLengthLimit": queue_length_limit,
                        },
                    },
                },
            }
        ],
        "flowSchemas": [
            {
                "name": "clients",
                "priorityLevelConfiguration": {"name": "demo"},
                "matchingPrecedence": 1000,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": _EVERYTHING,
            }
        ],
    }


def bearer_identity(scope: Scope) -> Identity | None:
    """An ``identify`` hook: the bearer token is the user name (a demo, not authentication)."""
    for name, value in scope["headers"]:
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            token = value[7:].decode("latin-1").strip()
            return Identity(token) if token else None
    return None


class SemaphoreMiddleware:
    """The baseline: at most ``capacity`` requests run; the others wait in one FIFO line.

    Args:
        app: The ASGI application.
        capacity: Requests allowed to run at once.
    """

    def __init__(self, app: ASGIApp, *, capacity: int) -> None:
        self.app = app
        self._semaphore = asyncio.Semaphore(capacity)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the application holding one slot of the semaphore (``http`` scopes)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        async with self._semaphore:
            await self.app(scope, receive, send)


def _endpoint(service_time: float) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/work":
            await asyncio.sleep(service_time)
        status, body = (200, b"ok") if scope["path"] in ("/work", "/healthz") else (404, b"")
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain"),
                    (b"content-length", b"%d" % len(body)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app


def create_app(mode: Mode, *, capacity: int, service_time: float) -> ASGIApp:
    """The demo application in one of its two set-ups.

    Args:
        mode: ``"semaphore"`` (the baseline) or ``"apf"``.
        capacity: Requests that may run at once.
        service_time: Seconds ``/work`` takes.

    Returns:
        The ASGI application.
    """
    endpoint = _endpoint(service_time)
    if mode == "semaphore":
        return SemaphoreMiddleware(endpoint, capacity=capacity)
    return APFMiddleware(
        endpoint, config=demo_config(capacity), identity=IdentityHooks(identify=bearer_identity)
    )
