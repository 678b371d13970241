"""The debug endpoints the middleware serves with ``debug=DebugEndpoints(...)``.

They live in :mod:`apf_limiter.observability`, imported only when asked for. Their
``DebugApp`` warns (once, at construction) when there is no ``authorize`` hook, as it then
denies every request.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Final

from apf_limiter.asgi._types import ASGIApp, AuthorizeHook
from apf_limiter.limiter import Limiter

#: Requests below this path go to the debug endpoints when they are served.
DEBUG_PATH: Final = "/debug/api_priority_and_fairness"


#: The options ``DebugEndpoints`` (or ``debug_endpoints=``) may pass to
#: ``apf_limiter.observability.debug_app``.
DEBUG_OPTIONS: Final = frozenset({"top_flows", "hash_distinguishers"})


def is_debug_path(path: str) -> bool:
    """Whether a route path is :data:`DEBUG_PATH` or below it."""
    return path == DEBUG_PATH or path.startswith(DEBUG_PATH + "/")


def load_debug_app(
    limiter: Limiter, authorize: AuthorizeHook | None, options: Mapping[str, Any]
) -> ASGIApp:
    """The debug endpoints of ``limiter``, guarded by ``authorize``.

    Args:
        limiter: The limiter the endpoints show.
        authorize: Whether a debug request may be served.
        options: ``apf_limiter.observability.debug_app``'s keyword options (``top_flows``,
            ``hash_distinguishers``), from :class:`~apf_limiter.asgi.DebugEndpoints`.

    Raises:
        ImportError: If :mod:`apf_limiter.observability` cannot be imported.
        ValueError: If an option's value is invalid.
    """
    keywords = dict(options)
    try:
        endpoints = importlib.import_module("apf_limiter.observability")
    except ImportError as exc:
        raise ImportError(
            "APFMiddleware(debug=DebugEndpoints(...)) needs apf_limiter.observability, "
            f"which could not be imported ({exc}); install a release that ships the debug "
            "endpoints or leave debug off"
        ) from exc
    app: ASGIApp = endpoints.debug_app(limiter, authorize=authorize, **keywords)
    return app
