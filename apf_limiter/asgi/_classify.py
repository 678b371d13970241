"""Classifying a request for the middleware: its digest, long-running flag and route deadline.

The hooks (``identify``, ``resolve``, ``estimate``, ``long_running``) run first; what they
leave open comes from the route settings (:mod:`apf_limiter.asgi._routes`). With the default
identity, anonymous requests are also watched for credentials that no authentication
middleware turned into a ``scope["user"]`` (:mod:`apf_limiter.asgi._mistakes`).
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any

from apf_limiter._digest import RequestDigest
from apf_limiter._warn_once import WarnOnce
from apf_limiter.asgi._identity import build_digest, default_identify
from apf_limiter.asgi._mistakes import (
    CHECK_ALL,
    CHECK_EVERY,
    ESTIMATE_HOOK,
    credentials,
    warn_anonymous,
)
from apf_limiter.asgi._routes import RouteLookup
from apf_limiter.asgi._types import (
    EstimateHook,
    IdentifyHook,
    LongRunningHook,
    ResolveHook,
    Scope,
)
from apf_limiter.gate import MARKED_ENDPOINTS, Identity, ResourceAttributes, WorkEstimate

#: A request's digest, whether it is long-running, its route's deadline (``None``: unset), and
#: where its work estimate came from (``None``: the default; a marked endpoint, a ``paths=``
#: pattern, or ``ESTIMATE_HOOK``), to name it should its seats be clamped.
Classified = tuple[RequestDigest, bool, float | None, object]


class ScopeClassifier:
    """Runs the hooks and the route lookup for each request.

    Args:
        identify: The ``identify`` hook (the default identity when none is given).
        resolve: The ``resolve`` hook, or ``None``.
        estimate: The ``estimate`` hook, or ``None``.
        long_running: The ``long_running`` hook, or ``None``.
        routes: The route settings.
        warn: Where to warn that credentialed requests come without ``scope["user"]``;
            ``None`` (an ``identify`` hook was given) does not watch for them.
    """

    __slots__ = (
        "_identify",
        "_default_identity",
        "_resolve",
        "_estimate",
        "_long_running",
        "_more_hooks",
        "_routes",
        "_warn",
        "_countdown",
        "_checked",
    )

    def __init__(
        self,
        identify: IdentifyHook,
        resolve: ResolveHook | None,
        estimate: EstimateHook | None,
        long_running: LongRunningHook | None,
        routes: RouteLookup,
        warn: WarnOnce | None = None,
    ) -> None:
        self._identify = identify
        # The default identity of a request without scope["user"] is anonymous: no call.
        self._default_identity = identify is default_identify
        self._warn = warn
        # Anonymous requests until the next check for credentials; 0: no more checks.
        self._countdown = 0 if warn is None else 1
        self._checked = 0
        self._resolve = resolve
        self._estimate = estimate
        self._long_running = long_running
        self._more_hooks = resolve is not None or estimate is not None or long_running is not None
        self._routes = routes

    def classify(self, scope: Scope) -> Classified | Coroutine[Any, Any, Classified]:
        """Digest, long-running flag and route deadline (or a coroutine, when a hook awaits).

        Synchronous while every hook answers synchronously (the default identity and no other
        hooks, the common case): a coroutine per request would cost more than the rest of it.
        """
        # Typed as object: the checks below give the useful error for a wrong return type.
        identity: Any = (
            None if self._default_identity and "user" not in scope else self._identify(scope)
        )
        # Test the common (synchronous) outcomes first: isawaitable() is comparatively slow.
        if identity is None:
            countdown = self._countdown
            if countdown:
                if countdown == 1:
                    self._watch_anonymous(scope)
                else:
                    self._countdown = countdown - 1
        elif type(identity) is not Identity:
            if inspect.isawaitable(identity):
                return self._classify_awaiting(scope, identity)
            _check_identity(identity)
        if self._more_hooks:
            return self._classify_awaiting(scope, identity)
        if not self._routes.patterns and not MARKED_ENDPOINTS[0]:
            # No route settings anywhere (yet): nothing to look up.
            return (
                build_digest(scope, identity, None, None),
                scope["type"] == "websocket",
                None,
                None,
            )
        return self._classified(scope, identity, None, None, None)

    def _watch_anonymous(self, scope: Scope) -> None:
        """An anonymous request, by the default identity: does it carry credentials?"""
        if "user" in scope:
            # An authentication middleware runs first (it sets a user, maybe unauthenticated,
            # on every request): nothing to watch for, from now on.
            self._countdown = 0
            return
        carried = credentials(scope)
        if carried is not None and self._warn is not None:
            self._countdown = 0
            warn_anonymous(self._warn, carried)
            return
        # Every request at first (a developer trying the app sees the warning at once), then a
        # sample: scanning the headers of every request of an app without authentication costs
        # up to ~1% of a hello-world request. A misplaced middleware makes every credentialed
        # request anonymous, so a sample finds it soon enough.
        self._checked = checked = self._checked + 1
        self._countdown = 1 if checked < CHECK_ALL else CHECK_EVERY

    async def _classify_awaiting(self, scope: Scope, identity: Any) -> Classified:
        """:meth:`classify` past the default: hooks that may return awaitables."""
        if inspect.isawaitable(identity):
            identity = await identity
            _check_identity(identity)
        resource: ResourceAttributes | None = None
        if self._resolve is not None:
            resolved: Any = self._resolve(scope)
            if inspect.isawaitable(resolved):
                resolved = await resolved
            if resolved is not None and not isinstance(resolved, ResourceAttributes):
                raise TypeError(
                    f"resolve() must return ResourceAttributes or None, got {resolved!r}"
                )
            resource = resolved
        estimate: WorkEstimate | None = None
        source: object = None
        if self._estimate is not None:
            estimated: Any = self._estimate(scope)
            if inspect.isawaitable(estimated):
                estimated = await estimated
            if isinstance(estimated, int) and not isinstance(estimated, bool):
                estimated = WorkEstimate(estimated)
            elif estimated is not None and not isinstance(estimated, WorkEstimate):
                raise TypeError(
                    f"estimate() must return a WorkEstimate, an int or None, got {estimated!r}"
                )
            estimate = estimated
            if estimated is not None:
                source = ESTIMATE_HOOK
        long_running: bool | None = None
        if self._long_running is not None:
            marked: Any = self._long_running(scope)
            if inspect.isawaitable(marked):
                marked = await marked
            if marked is not None and not isinstance(marked, bool):
                raise TypeError(f"long_running() must return a bool or None, got {marked!r}")
            long_running = marked
        return self._classified(scope, identity, resource, estimate, long_running, source)

    def _classified(
        self,
        scope: Scope,
        identity: Identity | None,
        resource: ResourceAttributes | None,
        estimate: WorkEstimate | None,
        long_running: bool | None,
        source: object = None,
    ) -> Classified:
        """Fill in what the hooks left open from the route settings, then build the digest."""
        timeout: float | None = None
        found = self._routes.lookup(scope)
        if found is not None:
            options, where = found
            if estimate is None:
                estimate = options.estimate
                if estimate is not None:
                    source = where
            if long_running is None and options.long_running:
                long_running = True
            timeout = options.request_timeout
        if long_running is None:
            long_running = scope["type"] == "websocket"
        return build_digest(scope, identity, resource, estimate), long_running, timeout, source


def _check_identity(identity: object) -> None:
    if identity is not None and not isinstance(identity, Identity):
        raise TypeError(f"identify() must return an Identity or None, got {identity!r}")
