"""Finding a request's :class:`~apf_limiter.asgi.RouteOptions`.

Two sources, in this order:

1. The endpoint the application will route the request to, marked with
   :func:`~apf_limiter.asgi.route_options`. The middleware runs before the router, so it
   matches the request against the application's routes itself (Starlette and FastAPI routers,
   mounts and hosts included): ``scope["app"]``, which Starlette sets when the middleware is
   added with ``add_middleware``, else the application the middleware wraps (found through the
   ``app`` attributes of any middleware in between). While no endpoint in the process is
   marked, nothing is looked up; an application with no marked endpoint pays one cached check.
2. The middleware's ``paths=`` mapping, whose keys are ``nonResourceURLs`` patterns
   (``/reports`` covers ``/reports`` and everything below it, ``/reports/*`` only what is
   below, ``*`` every path); the longest matching pattern wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from apf_limiter.asgi._identity import route_path
from apf_limiter.asgi._types import Scope
from apf_limiter.engine._rules import non_resource_url_matches
from apf_limiter.gate import RouteOptions, endpoint_options

_MAX_DEPTH: Final = 16  # mounts inside mounts; deeper nesting is not followed


class RouteLookup:
    """Finds the :class:`RouteOptions` of requests: marked endpoints first, then path patterns.

    Args:
        paths: ``nonResourceURLs`` patterns to options, or ``None``.
        app: The application the middleware wraps: its routes are used when the scope does
            not name the application (``APFMiddleware(app)`` rather than ``add_middleware``).

    Raises:
        ValueError: If a pattern is not ``*`` and does not start with ``/``.
        TypeError: If a value is not a :class:`RouteOptions`.
    """

    __slots__ = ("_paths", "_apps", "_wrapped", "patterns")

    def __init__(self, paths: Mapping[str, RouteOptions] | None = None, app: object = None) -> None:
        self._wrapped = _routed_app(app)
        items = list((paths or {}).items())
        for pattern, options in items:
            if pattern != "*" and not pattern.startswith("/"):
                raise ValueError(f"paths: pattern {pattern!r} must be '*' or start with '/'")
            if not isinstance(options, RouteOptions):
                raise TypeError(f"paths[{pattern!r}] must be a RouteOptions, got {options!r}")
        # Longest first, so the most specific pattern wins; "*" (length 1) comes last.
        items.sort(key=lambda item: (item[0] == "*", -len(item[0])))
        self._paths: tuple[tuple[str, RouteOptions], ...] = tuple(items)
        #: Whether there are path patterns: with none, and no endpoint marked in the process
        #: (``MARKED_ENDPOINTS``), no lookup can find anything, and the middleware makes none.
        self.patterns = bool(items)
        # id(app) -> (app, number of routes when scanned, whether any endpoint is marked).
        self._apps: dict[int, tuple[object, int, bool]] = {}

    def lookup(self, scope: Scope) -> tuple[RouteOptions, object] | None:
        """The options of the request of ``scope`` and where they come from, or ``None``.

        Args:
            scope: An ``http`` or ``websocket`` scope.

        Returns:
            ``None`` when nothing sets any options; else the options of the marked endpoint
            and the endpoint, or those of the longest matching path pattern and the pattern.
        """
        found = self._from_endpoint(scope)
        if found is None and self._paths:
            path = route_path(scope)
            for pattern, candidate in self._paths:
                if non_resource_url_matches(pattern, path):
                    return candidate, pattern
        return found

    def _from_endpoint(self, scope: Scope) -> tuple[RouteOptions, object] | None:
        app = scope.get("app") or self._wrapped
        if app is None:
            return None
        routes = getattr(app, "routes", None)
        if not routes:
            return None
        known = self._apps.get(id(app))
        if known is None or known[0] is not app or known[1] != len(routes):
            marked = _any_marked(routes, 0)
            if len(self._apps) > 64:  # apps come and go only in tests; keep this bounded
                self._apps.clear()
            self._apps[id(app)] = (app, len(routes), marked)
        elif not known[2]:
            return None
        endpoint = _match_endpoint(routes, scope, 0)
        options = endpoint_options(endpoint)
        return None if options is None else (options, endpoint)


def _routed_app(app: object) -> object:
    """The first application with routes down a chain of wrapping middleware, or ``None``."""
    for _ in range(_MAX_DEPTH):
        if app is None or getattr(app, "routes", None) is not None:
            return app
        app = getattr(app, "app", None)
    return None


def _children(route: Any) -> Sequence[Any] | None:
    """The routes below ``route``: a Mount's or Router's, or a FastAPI included router's."""
    # Recent FastAPI keeps an included APIRouter as one route whose candidates carry the
    # include prefix; their matches() apply it.
    candidates = getattr(route, "effective_candidates", None)
    if callable(candidates):
        found: Sequence[Any] = candidates()
        return found
    children: Sequence[Any] | None = getattr(route, "routes", None)
    return children


def _any_marked(routes: Sequence[Any], depth: int) -> bool:
    for route in routes:
        if endpoint_options(getattr(route, "endpoint", None)) is not None:
            return True
        children = _children(route)
        if children and depth < _MAX_DEPTH and _any_marked(children, depth + 1):
            return True
    return False


def _match_endpoint(routes: Sequence[Any], scope: Scope, depth: int) -> object:
    """The endpoint of the first route that fully matches, as Starlette's router picks it."""
    for route in routes:
        matches = getattr(route, "matches", None)
        if matches is None:
            continue
        try:
            match, child_scope = matches(scope)
        except Exception:  # a foreign route object; the router will deal with it
            continue
        if getattr(match, "name", None) != "FULL":
            continue
        endpoint = getattr(route, "endpoint", None)
        if endpoint is not None:
            return endpoint
        children = _children(route)
        if children and depth < _MAX_DEPTH:
            return _match_endpoint(children, {**scope, **child_scope}, depth + 1)
        return None
    return None
