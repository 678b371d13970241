"""The ASGI middleware: Kubernetes API Priority and Fairness for Starlette, FastAPI, any ASGI app.

::

    from apf_limiter.asgi import APFMiddleware, route_options

    app.add_middleware(APFMiddleware, config="apf.yaml")

    @app.get("/reports/export")
    @route_options(seats=4)
    async def export() -> dict[str, str]: ...

Options come grouped: ``identity=IdentityHooks(...)``, ``headers=ResponseHeaders(...)``,
``slow_clients=SlowClients(...)``, ``body=BodyBuffer(...)``, ``debug=DebugEndpoints(...)``.
See ``docs/asgi.md`` for every option and hook; the middleware maps ASGI onto the request gate
(:mod:`apf_limiter.gate`, ``docs/gate.md``).
"""

from apf_limiter.asgi._debug import DEBUG_PATH
from apf_limiter.asgi._identity import ScopeHeaders, build_digest, default_identify, route_path
from apf_limiter.asgi._middleware import APFMiddleware
from apf_limiter.asgi._responses import WEBSOCKET_TRY_AGAIN_LATER
from apf_limiter.asgi._settings import BodyBuffer, DebugEndpoints, IdentityHooks
from apf_limiter.gate import (
    REJECTION_DETAIL,
    Identity,
    ResourceAttributes,
    ResponseHeaders,
    RouteOptions,
    SlowClients,
    WorkEstimate,
    route_options,
)

__all__ = [
    "APFMiddleware",
    "BodyBuffer",
    "DEBUG_PATH",
    "DebugEndpoints",
    "Identity",
    "IdentityHooks",
    "REJECTION_DETAIL",
    "ResourceAttributes",
    "ResponseHeaders",
    "RouteOptions",
    "ScopeHeaders",
    "SlowClients",
    "WEBSOCKET_TRY_AGAIN_LATER",
    "WorkEstimate",
    "build_digest",
    "default_identify",
    "route_options",
    "route_path",
]
