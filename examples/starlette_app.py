"""Starlette behind APFMiddleware, on the built-in default configuration.

Run it (from the repository root) and try it::

    uvicorn examples.starlette_app:app
    curl -i http://127.0.0.1:8000/              # x-apf-flow-schema: anonymous
    curl -i 'http://127.0.0.1:8000/slow?seconds=2'
    curl -i http://127.0.0.1:8000/healthz       # probes are exempt

With no configuration the middleware uses the built-in web-app default: health probes exempt,
anonymous traffic fair per client IP (``workload-low``), authenticated traffic fair per user
(``global-default``), 600 seats. See docs/defaults.md.
"""

from __future__ import annotations

import asyncio
import math

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from apf_limiter.asgi import APFMiddleware


async def home(request: Request) -> JSONResponse:
    apf = request.state.apf  # the admission: how this request was classified
    return JSONResponse(
        {
            "flow_schema": apf.flow_schema,
            "priority_level": apf.priority_level,
            "queue_wait": apf.queue_wait,
            "seats": apf.seats,
        }
    )


async def slow(request: Request) -> JSONResponse:
    try:
        seconds = float(request.query_params.get("seconds", "1"))
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= 10:
        return JSONResponse({"detail": "seconds must be a number from 0 to 10"}, status_code=400)
    await asyncio.sleep(seconds)
    return JSONResponse({"slept": seconds})


async def healthz(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


app = Starlette(
    routes=[
        Route("/", home),
        Route("/slow", slow),
        Route("/healthz", healthz),
    ]
)
app.add_middleware(APFMiddleware)
