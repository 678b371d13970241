"""FastAPI behind APFMiddleware: per-user fairness from bearer tokens, a heavy endpoint, SSE.

Run it (from the repository root) and try it::

    uvicorn examples.fastapi_app:app
    curl -i -H 'Authorization: Bearer alice-token' http://127.0.0.1:8000/reports
    curl -i -H 'Authorization: Bearer bob-token' http://127.0.0.1:8000/reports/export
    curl -N -H 'Authorization: Bearer bob-token' http://127.0.0.1:8000/events
    curl -i http://127.0.0.1:8000/reports      # anonymous: its own level, fair per client IP

* Starlette's ``AuthenticationMiddleware`` turns the bearer token into ``request.user``; the APF
  middleware reads it (and the token's scopes as groups), so each user is its own flow: one
  user flooding the API waits in its own queues while the others keep being served.
* ``/reports/export`` costs 4 seats (``route_options(seats=4)``).
* ``/events`` is a server-sent-events stream marked long-running: admitted fairly, it gives its
  seat back once the stream has started.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    BaseUser,
    SimpleUser,
)
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware, route_options

# token -> (user name, scopes). A real app verifies a JWT or asks its identity provider.
TOKENS: dict[str, tuple[str, list[str]]] = {
    "alice-token": ("alice", ["reports:read"]),
    "bob-token": ("bob", ["reports:read", "reports:export"]),
}


class BearerTokenBackend(AuthenticationBackend):
    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        scheme, _, token = conn.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token not in TOKENS:
            return None
        user, scopes = TOKENS[token]
        return AuthCredentials(scopes), SimpleUser(user)


def _queuing(queues: int, hand_size: int, length_limit: int) -> dict[str, Any]:
    return {
        "type": "Queue",
        "queuing": {"queues": queues, "handSize": hand_size, "queueLengthLimit": length_limit},
    }


def _everything(group: str) -> list[dict[str, Any]]:
    return [
        {
            "subjects": [{"kind": "Group", "group": {"name": group}}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }
    ]


CONFIG: dict[str, Any] = {
    "serverConcurrencyLimit": 40,
    "priorityLevels": [
        {
            # 30 of 40 seats (catch-all has 5 shares); maxSeats 5, so /reports/export fits.
            "name": "users",
            "limited": {
                "nominalConcurrencyShares": 30,
                "lendablePercent": 50,
                "limitResponse": _queuing(64, 6, 20),
            },
        },
        {
            # 5 seats, of which it keeps 3 however idle it is: a level whose lower limit
            # (nominal - lendable) is 0 admits nothing until borrowing gives it seats.
            "name": "anonymous",
            "limited": {
                "nominalConcurrencyShares": 5,
                "lendablePercent": 40,
                "limitResponse": _queuing(16, 4, 10),
            },
        },
    ],
    "flowSchemas": [
        {
            "name": "probes",
            "priorityLevelConfiguration": {"name": "exempt"},
            "matchingPrecedence": 2,
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
                }
            ],
        },
        {
            "name": "users",
            "priorityLevelConfiguration": {"name": "users"},
            "matchingPrecedence": 1000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": _everything("system:authenticated"),
        },
        {
            "name": "anonymous",
            "priorityLevelConfiguration": {"name": "anonymous"},
            "matchingPrecedence": 2000,
            "distinguisherMethod": {"type": "ByClientIP"},
            "rules": _everything("system:unauthenticated"),
        },
    ],
}

# Built here, at import time, so a configuration error stops the import with its field paths
# (Starlette would build APFMiddleware(config=...) only at startup: docs/asgi.md).
limiter = Limiter(CONFIG)
app = FastAPI()
# The last middleware added runs first: authentication, then APF, then the routes.
app.add_middleware(APFMiddleware, limiter=limiter)
app.add_middleware(AuthenticationMiddleware, backend=BearerTokenBackend())


def _admission(request: Request) -> dict[str, Any]:
    apf = request.state.apf
    return {
        "user": request.user.display_name if request.user.is_authenticated else None,
        "flow_schema": apf.flow_schema,
        "priority_level": apf.priority_level,
        "seats": apf.seats,
        "queue_wait": apf.queue_wait,
    }


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.get("/reports")
async def reports(request: Request) -> dict[str, Any]:
    await asyncio.sleep(0.05)
    return _admission(request)


@app.get("/reports/export")
@route_options(seats=4)
async def export(request: Request) -> dict[str, Any]:
    await asyncio.sleep(0.2)  # four seats' worth of work
    return _admission(request)


@app.get("/events")
@route_options(long_running=True)
async def events(request: Request, count: int = 5, interval: float = 1.0) -> StreamingResponse:
    async def stream() -> AsyncIterator[str]:
        for number in range(1, min(count, 100) + 1):
            yield f"id: {number}\ndata: tick {number}\n\n"
            await asyncio.sleep(min(interval, 10.0))

    return StreamingResponse(stream(), media_type="text/event-stream")
