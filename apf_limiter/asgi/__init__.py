"""The ASGI middleware: Kubernetes API Priority and Fairness for Starlette, FastAPI, any ASGI app.

::

    from apf_limiter.asgi import APFMiddleware, route_options

    app.add_middleware(APFMiddleware, config="apf.yaml")

    @app.get("/reports/export")
    @route_options(seats=4)
    async def export() -> dict[str, str]: ...

See ``docs/asgi.md`` for every option and hook.
"""

from apf_limiter.asgi._debug import DEBUG_PATH
from apf_limiter.asgi._identity import ScopeHeaders, build_digest, default_identify, route_path
from apf_limiter.asgi._middleware import APFMiddleware
from apf_limiter.asgi._options import (
    Identity,
    ResourceAttributes,
    RouteOptions,
    WorkEstimate,
    route_options,
)
from apf_limiter.asgi._responses import REJECTION_DETAIL, WEBSOCKET_TRY_AGAIN_LATER

__all__ = [
    "APFMiddleware",
    "DEBUG_PATH",
    "Identity",
    "REJECTION_DETAIL",
    "ResourceAttributes",
    "RouteOptions",
    "ScopeHeaders",
    "WEBSOCKET_TRY_AGAIN_LATER",
    "WorkEstimate",
    "build_digest",
    "default_identify",
    "route_options",
    "route_path",
]
