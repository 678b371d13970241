"""The debug endpoints the middleware serves with ``debug_endpoints=True``.

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

#: Requests below this path go to the debug endpoints when ``debug_endpoints=True``.
DEBUG_PATH: Final = "/debug/api_priority_and_fairness"


#: The options ``debug_endpoints=`` may pass to ``apf_limiter.observability.debug_app``.
DEBUG_OPTIONS: Final = frozenset({"top_flows", "hash_distinguishers"})


def is_debug_path(path: str) -> bool:
    """Whether a route path is :data:`DEBUG_PATH` or below it."""
    return path == DEBUG_PATH or path.startswith(DEBUG_PATH + "/")


def load_debug_app(
    limiter: Limiter, authorize: AuthorizeHook | None, options: bool | Mapping[str, Any]
) -> ASGIApp | None:
    """The debug endpoints of ``limiter``, guarded by ``authorize`` (``None`` when off).

    Args:
        limiter: The limiter the endpoints show.
        authorize: Whether a debug request may be served.
        options: ``debug_endpoints=``: ``False`` off, ``True`` on, or a mapping of
            ``apf_limiter.observability.debug_app``'s keyword options (``top_flows``,
            ``hash_distinguishers``): on, with them.

    Raises:
        ImportError: If :mod:`apf_limiter.observability` cannot be imported.
        TypeError: If ``options`` is neither a bool nor a mapping, or names an unknown option.
        ValueError: If an option's value is invalid.
    """
    if options is False:
        return None
    if options is True:
        keywords: dict[str, Any] = {}
    elif isinstance(options, Mapping):
        keywords = dict(options)
        unknown = sorted(set(keywords) - DEBUG_OPTIONS)
        if unknown:
            raise TypeError(
                f"debug_endpoints= got unknown options {unknown}; it takes {sorted(DEBUG_OPTIONS)}"
            )
    else:
        raise TypeError(
            "debug_endpoints must be True, False or a mapping of debug_app options, "
            f"not {type(options).__name__}"
        )
    try:
        endpoints = importlib.import_module("apf_limiter.observability")
    except ImportError as exc:
        raise ImportError(
            "APFMiddleware(debug_endpoints=True) needs apf_limiter.observability, "
            f"which could not be imported ({exc}); install a release that ships the debug "
            "endpoints or leave debug_endpoints off"
        ) from exc
    app: ASGIApp = endpoints.debug_app(limiter, authorize=authorize, **keywords)
    return app
