"""The peers' hello-world apps: slowapi's two middlewares, as application factories.

Served by :mod:`benchmarks.peers` under uvicorn (``--factory benchmarks.peer_apps:<factory>``)
and driven in-process by it. The app is :mod:`benchmarks.bench_app`'s hello world; slowapi
guards it with an in-memory limit per client address (``APF_BENCH_SLOWAPI_LIMIT``, default
``1000000000/minute``) that a benchmark never reaches: the cost measured is that of checking
and counting, the work slowapi does for every request that it lets through.

* ``hello_slowapi`` — :class:`slowapi.middleware.SlowAPIMiddleware` (a ``BaseHTTPMiddleware``);
* ``hello_slowapi_asgi`` — :class:`slowapi.middleware.SlowAPIASGIMiddleware` (pure ASGI).

slowapi is imported when a factory is called: it is in the ``bench`` extra only.
"""

from __future__ import annotations

import os
from importlib import import_module
from importlib.util import find_spec

from apf_limiter.asgi._types import ASGIApp
from benchmarks.bench_app import _BenchRoutes, _hello_app

__all__ = ["DEFAULT_LIMIT", "hello_slowapi", "hello_slowapi_asgi", "slowapi_installed"]

#: Requests per client address that slowapi allows; far more than any benchmark sends.
DEFAULT_LIMIT = "1000000000/minute"


def slowapi_installed() -> bool:
    """Whether slowapi can be imported here."""
    return find_spec("slowapi") is not None


def _hello_slowapi(middleware_name: str) -> ASGIApp:
    # Imported by name: slowapi is optional, and the type checker need not know it.
    slowapi = import_module("slowapi")
    errors = import_module("slowapi.errors")
    middleware = import_module("slowapi.middleware")
    util = import_module("slowapi.util")
    limit = os.environ.get("APF_BENCH_SLOWAPI_LIMIT") or DEFAULT_LIMIT
    app = _hello_app()
    # slowapi's documented set-up: the limiter on the app's state, the middleware added to the
    # Starlette app (it reads the limiter from scope["app"], which Starlette sets).
    app.state.limiter = slowapi.Limiter(key_func=util.get_remote_address, default_limits=[limit])
    app.add_exception_handler(errors.RateLimitExceeded, slowapi._rate_limit_exceeded_handler)
    app.add_middleware(getattr(middleware, middleware_name))
    return _BenchRoutes(app, None)


def hello_slowapi() -> ASGIApp:
    """The hello-world app behind slowapi's ``SlowAPIMiddleware``, a limit never reached."""
    return _hello_slowapi("SlowAPIMiddleware")


def hello_slowapi_asgi() -> ASGIApp:
    """The hello-world app behind slowapi's ``SlowAPIASGIMiddleware``, a limit never reached."""
    return _hello_slowapi("SlowAPIASGIMiddleware")
