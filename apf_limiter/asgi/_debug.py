"""The debug endpoints the middleware serves with ``debug_endpoints=True``.

They live in :mod:`apf_limiter.observability`, imported only when asked for. Their
``DebugApp`` warns (once, at construction) when there is no ``authorize`` hook, as it then
denies every request.
"""

from __future__ import annotations

import importlib
from typing import Final

from apf_limiter.asgi._types import ASGIApp, AuthorizeHook
from apf_limiter.limiter import Limiter

#: Requests below this path go to the debug endpoints when ``debug_endpoints=True``.
DEBUG_PATH: Final = "/debug/api_priority_and_fairness"


def is_debug_path(path: str) -> bool:
    """Whether a route path is :data:`DEBUG_PATH` or below it."""
    return path == DEBUG_PATH or path.startswith(DEBUG_PATH + "/")


def load_debug_app(limiter: Limiter, authorize: AuthorizeHook | None) -> ASGIApp:
    """The debug endpoints of ``limiter``, guarded by ``authorize``.

    Raises:
        ImportError: If :mod:`apf_limiter.observability` cannot be imported.
    """
    try:
        endpoints = importlib.import_module("apf_limiter.observability")
    except ImportError as exc:
        raise ImportError(
            "APFMiddleware(debug_endpoints=True) needs apf_limiter.observability, "
            f"which could not be imported ({exc}); install a release that ships the debug "
            "endpoints or leave debug_endpoints off"
        ) from exc
    app: ASGIApp = endpoints.debug_app(limiter, authorize=authorize)
    return app
