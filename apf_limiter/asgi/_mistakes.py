"""Wiring mistakes the middleware can see in its requests, each warned about once.

* **Authentication outside of APF's reach.** Requests carry credentials (an ``Authorization``
  header) but the scope has no ``user``, and the default identity is in use:
  the authentication middleware runs after APF (or there is none that sets ``scope["user"]``),
  so every request is classified as anonymous. Checked only for anonymous requests (the first
  :data:`CHECK_ALL`, then one in :data:`CHECK_EVERY`), and only until it was warned about or
  a request came with ``scope["user"]`` (the authentication middleware runs first after all:
  it sets the user on every request).
* **Seats clamped.** A route asks for more seats than its priority level's maxSeats allows
  (the engine clamps them); warned once per route and level.
"""

from __future__ import annotations

from typing import Final

from apf_limiter._digest import RequestDigest
from apf_limiter._warn_once import WarnOnce
from apf_limiter.asgi._identity import route_path
from apf_limiter.asgi._types import Scope
from apf_limiter.limiter import Admission

#: Anonymous requests checked for credentials one by one, before sampling starts.
CHECK_ALL: Final = 256
#: Then one anonymous request in this many is checked.
CHECK_EVERY: Final = 32

#: The source of an estimate given by the ``estimate=`` hook (others are endpoints, patterns).
ESTIMATE_HOOK: Final = "the estimate= hook"


def credentials(scope: Scope) -> str | None:
    """The credentials a request carries, described, or ``None``.

    Args:
        scope: An ``http`` or ``websocket`` scope (ASGI header names are lower-case).

    Returns:
        ``"an Authorization header"``, else ``None``. A session cookie is not taken for
        credentials: apps with anonymous sessions (a cart, a CSRF token, flash messages:
        Starlette's ``SessionMiddleware`` sets its cookie for every visitor) send one on
        every request, logged in or not, and the warning would be wrong for all of them.
    """
    for name, _ in scope.get("headers") or ():
        if name == b"authorization":
            return "an Authorization header"
    return None


def warn_anonymous(warn: WarnOnce, carried: str) -> None:
    """Warn that credentialed requests reach the middleware without ``scope["user"]``."""
    warn(
        "anonymous-with-credentials",
        "APFMiddleware saw a request with %s but no scope['user']: every request is "
        "classified as anonymous (system:anonymous), so flow schemas for users and groups, "
        "and per-user fairness, never apply. APFMiddleware is probably outside the "
        "authentication middleware (it runs first, before any user is set): with "
        "app.add_middleware(), the middleware added LAST runs FIRST, so add APFMiddleware "
        "before AuthenticationMiddleware (in "
        "Starlette(middleware=[...]) list AuthenticationMiddleware first). If your "
        "authentication does not set scope['user'] (FastAPI dependencies, your own lookup), "
        "pass APFMiddleware an identify= hook (which may return None: anonymous); see "
        "docs/asgi.md#identity",
        carried,
    )


def seats_clamped(digest: RequestDigest, admission: Admission) -> bool:
    """Whether the engine clamped the seats (or final seats) the request asked for."""
    asked = digest.seats
    if asked is not None and asked > admission.seats:
        return True
    # Final seats count only with an additional latency (else the engine zeroes them).
    return digest.additional_latency > 0 and digest.final_seats > admission.final_seats


def warn_clamped(
    warn: WarnOnce, scope: Scope, source: object, digest: RequestDigest, admission: Admission
) -> None:
    """Warn, once per route and level, that a request's seats were clamped to the maxSeats.

    Args:
        warn: The middleware's warnings.
        scope: The request's scope (its method and path, as an example).
        source: Where the estimate came from: a marked endpoint, a ``paths=`` pattern, or
            :data:`ESTIMATE_HOOK`.
        digest: The request digest (the seats asked for).
        admission: The started admission (the seats given).
    """
    level = admission.priority_level
    # Endpoints by identity: naming them costs more, and is needed only for the message.
    subject = source if isinstance(source, str) else id(source)
    key = f"seats-clamped:{subject}:{level}"
    if warn.said(key):
        return
    asked = _seats(digest.seats or 1)
    got = _seats(admission.seats)
    max_seats = admission.seats
    if digest.additional_latency > 0 and digest.final_seats:
        asked += f" and {_seats(digest.final_seats, 'final seat')}"
        got += f" and {_seats(admission.final_seats, 'final seat')} (held correspondingly longer)"
        if digest.seats is not None and digest.seats <= admission.seats:
            max_seats = admission.final_seats  # only the final seats were clamped
    method = scope.get("method", "WEBSOCKET") if scope["type"] == "http" else "WEBSOCKET"
    warn(
        key,
        "%s asks for %s, but priority level %r allows one request at most %d (its maxSeats): "
        "its requests (e.g. %s %s) get %s. Ask for fewer seats, or give the level a larger "
        "nominal concurrency limit (nominalConcurrencyShares) or a smaller handSize; "
        "`apf-limiter show` prints each level's maxSeats",
        describe(source),
        asked,
        level,
        max_seats,
        method,
        route_path(scope),
        got,
    )


def _seats(count: int, noun: str = "seat") -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def describe(source: object) -> str:
    """Name where an estimate came from, for a warning."""
    if source == ESTIMATE_HOOK:  # equality: a compiled caller may hold another copy
        return ESTIMATE_HOOK
    if isinstance(source, str):
        return f"paths[{source!r}]"
    module = getattr(source, "__module__", None)
    name = getattr(source, "__qualname__", None) or getattr(source, "__name__", None)
    if name is None:
        return f"the route_options() of endpoint {source!r}"
    return f"the route_options() of endpoint {f'{module}.{name}' if module else name}"
