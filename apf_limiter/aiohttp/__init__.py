"""The aiohttp front door: Kubernetes API Priority and Fairness for ``aiohttp.web`` applications.

::

    from aiohttp import web
    from apf_limiter.aiohttp import setup

    app = web.Application()
    setup(app, config="apf.yaml")  # after authentication middlewares

Rejected requests get 429 with ``Retry-After``; responses carry the APF headers; requests get
a deadline (504); a client that leaves while its request is queued frees its place. Handlers
marked with :func:`~apf_limiter.gate.route_options` (seats, long-running, deadline) are
honoured, and WebSockets are long-running. Needs the ``aiohttp`` extra. See
``docs/aiohttp.md``; the middleware maps aiohttp onto the request gate
(:mod:`apf_limiter.gate`).
"""

from apf_limiter.aiohttp._middleware import (
    AiohttpMiddleware,
    IdentifyHook,
    LongRunningHook,
    RejectHook,
    setup,
)
from apf_limiter.aiohttp._waiting import DISCONNECT_POLL

__all__ = [
    "AiohttpMiddleware",
    "DISCONNECT_POLL",
    "IdentifyHook",
    "LongRunningHook",
    "RejectHook",
    "setup",
]
