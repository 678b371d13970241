"""What a front door's hooks and route settings say about a request (protocol-neutral).

Every front door (the ASGI and aiohttp middlewares; the gRPC interceptor takes a plain user
name) reads the same values, so they live with the gate rather than in one front door:

* :class:`Identity` — who sent a request (``identify=`` hook); :func:`identity_names` turns it
  into the digest's user and groups.
* :class:`ResourceAttributes` — what resource a request acts on (``resolve=`` hook).
* :class:`WorkEstimate` — how many seats a request takes (``estimate=`` hook).
* :class:`RouteOptions` and :func:`route_options` — per-route settings: a work estimate,
  whether the route is long-running and its request deadline, attached to an endpoint or given
  per path; :func:`endpoint_options` reads an endpoint's mark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from apf_limiter._checks import check_timeout
from apf_limiter._digest import (
    ANONYMOUS_USER,
    AUTHENTICATED_GROUP,
    UNAUTHENTICATED_GROUP,
    check_estimate,
)

#: The endpoint attribute :func:`route_options` stores its :class:`RouteOptions` in.
ROUTE_OPTIONS_ATTRIBUTE: Final = "__apf_route_options__"
#: How many endpoints :func:`route_options` has marked in this process (one counter, in a
#: list so that importers share it): while it is 0 no route lookup can find anything, and a
#: front door skips the lookup altogether.
MARKED_ENDPOINTS: list[int] = [0]

_E = TypeVar("_E")
_ANONYMOUS_GROUPS: Final[tuple[str, ...]] = (UNAUTHENTICATED_GROUP,)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who sent a request, as an ``identify=`` hook returns it.

    The front door adds the group ``system:authenticated`` (as every Kubernetes authenticator
    does), so schemas written for authenticated users match. Return ``None`` from the hook for
    an anonymous request instead (``system:anonymous`` in ``system:unauthenticated``).

    Attributes:
        user: The user name (the ``ByUser`` distinguisher and ``User`` subjects).
        groups: The user's groups (``Group`` subjects).
    """

    user: str
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.user, str) or not self.user:
            raise ValueError(f"Identity.user must be a non-empty string, got {self.user!r}")
        if isinstance(self.groups, str) or not all(isinstance(g, str) for g in self.groups):
            raise TypeError(f"Identity.groups must be a tuple of strings, got {self.groups!r}")


def identity_names(identity: Identity | None) -> tuple[str, tuple[str, ...]]:
    """The digest's user and groups for ``identity`` (``None``: anonymous).

    Kubernetes' authenticators put every authenticated user in ``system:authenticated`` and an
    anonymous one (``system:anonymous``) in ``system:unauthenticated``: so does this.

    Args:
        identity: Who sent the request, or ``None``.

    Returns:
        The user name and the groups, as a tuple.
    """
    if identity is None:
        return ANONYMOUS_USER, _ANONYMOUS_GROUPS
    groups = identity.groups
    if type(groups) is not tuple:
        groups = tuple(groups)  # Identity checked the items; the digest keeps a tuple
    if AUTHENTICATED_GROUP not in groups:
        groups = (*groups, AUTHENTICATED_GROUP)
    return identity.user, groups


@dataclass(frozen=True, slots=True)
class ResourceAttributes:
    """The resource a request acts on, as a ``resolve=`` hook returns it.

    It makes the request a resource request, matched by ``resourceRules`` (and the
    ``ByNamespace`` distinguisher) instead of ``nonResourceRules``.

    Attributes:
        resource: The resource, e.g. ``reports`` (must be non-empty).
        api_group: The API group (``""`` is the core group).
        subresource: The subresource, e.g. ``export``.
        namespace: The namespace, e.g. a tenant; ``""`` means cluster-scoped.
        name: The object name; ``""`` for a collection.
        verb: The Kubernetes verb; ``None`` derives it from the HTTP method: GET and HEAD are
            ``get`` (``list`` without a name), POST ``create``, PUT ``update``, PATCH
            ``patch``, DELETE ``delete`` (``deletecollection`` without a name), a WebSocket
            ``watch``; any other method is its lower-case name.
    """

    resource: str
    api_group: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    verb: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.resource, str) or not self.resource:
            raise ValueError(
                f"ResourceAttributes.resource must be a non-empty string, got {self.resource!r}"
            )


@dataclass(frozen=True, slots=True)
class WorkEstimate:
    """How much of the server a request takes, in seats (Kubernetes' work estimate).

    The engine clamps both seat counts to the priority level's maxSeats.

    Attributes:
        seats: Seats held while the request executes (at least 1).
        final_seats: Seats for work the request causes later (e.g. notifications it fans
            out): the request holds the wider of ``seats`` and ``final_seats`` until
            ``additional_latency`` has passed after it finished.
        additional_latency: Seconds the request's seats stay held after it finished.
    """

    seats: int = 1
    final_seats: int = 0
    additional_latency: float = 0.0

    def __post_init__(self) -> None:
        check_estimate(self.seats, self.final_seats, self.additional_latency)


@dataclass(frozen=True, slots=True)
class RouteOptions:
    """Per-route settings: a work estimate, whether the route is long-running, its deadline.

    Attach them to an endpoint with :func:`route_options`, or give them per path with the
    middleware's ``paths=`` mapping.

    Attributes:
        seats: Seats the route's requests take; ``None`` means the default (1).
        final_seats: Seats for work caused after the response (see :class:`WorkEstimate`).
        additional_latency: Seconds the request's seats stay held after the response.
        long_running: Whether the route is long-running (server-sent events, long polls):
            its requests are admitted fairly, then release their seats once the response has
            started. Long-running requests have no request deadline.
        request_timeout: Seconds the route's requests may take from arrival (queue wait
            included) before they are cancelled; ``None`` keeps the middleware's setting (per
            priority level, else ``request_timeout``), ``math.inf`` means no deadline.
    """

    seats: int | None = None
    final_seats: int = 0
    additional_latency: float = 0.0
    long_running: bool = False
    request_timeout: float | None = None

    def __post_init__(self) -> None:
        check_estimate(self.seats, self.final_seats, self.additional_latency)
        if self.request_timeout is not None:
            check_timeout("request_timeout", self.request_timeout)

    @property
    def estimate(self) -> WorkEstimate | None:
        """The work estimate these options give, or ``None`` when they leave the default."""
        if self.seats is None and not self.additional_latency:
            return None  # final seats without an additional latency count for nothing
        return WorkEstimate(self.seats or 1, self.final_seats, self.additional_latency)


def endpoint_options(endpoint: object) -> RouteOptions | None:
    """The :class:`RouteOptions` an endpoint was marked with by :func:`route_options`, if any.

    Args:
        endpoint: A function, method or endpoint class.

    Returns:
        The options, or ``None`` when the endpoint is not marked.
    """
    options = getattr(endpoint, ROUTE_OPTIONS_ATTRIBUTE, None)
    return options if isinstance(options, RouteOptions) else None


def route_options(
    *,
    seats: int | None = None,
    final_seats: int = 0,
    additional_latency: float = 0.0,
    long_running: bool = False,
    request_timeout: float | None = None,
) -> Callable[[_E], _E]:
    """Mark an endpoint (a function or an endpoint class) with :class:`RouteOptions`.

    The ASGI middleware finds the endpoint by matching the request against the application's
    routes (Starlette and FastAPI routers, mounts included), the aiohttp middleware by the
    request's matched handler, so the decorator may sit above or below the framework's route
    decorator::

        @app.get("/reports/export")
        @route_options(seats=4)
        async def export() -> dict[str, str]: ...

        @route_options(long_running=True)
        async def events(request: Request) -> StreamingResponse: ...

        @route_options(request_timeout=300)  # a slow export: 5 minutes, not the default 60 s
        async def export_all(request: Request) -> Response: ...

    Args:
        seats: Seats the route's requests take (at least 1); ``None`` keeps the default.
        final_seats: Seats for work caused after the response (see :class:`WorkEstimate`).
        additional_latency: Seconds the request's seats stay held after the response.
        long_running: Whether the route releases its seats once the response has started.
        request_timeout: The route's request deadline in seconds (``math.inf``: none);
            ``None`` keeps the middleware's.

    Returns:
        A decorator that returns the endpoint itself, marked.

    Raises:
        ValueError: If a number is out of range.
    """
    options = RouteOptions(seats, final_seats, additional_latency, long_running, request_timeout)

    def mark(endpoint: _E) -> _E:
        target = getattr(endpoint, "__func__", endpoint)  # a bound method: mark its function
        try:
            setattr(target, ROUTE_OPTIONS_ATTRIBUTE, options)
        except (AttributeError, TypeError):
            raise TypeError(
                f"route_options() marks functions and classes; cannot mark {endpoint!r}"
            ) from None
        MARKED_ENDPOINTS[0] += 1
        return endpoint

    return mark
