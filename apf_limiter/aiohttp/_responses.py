"""What the aiohttp middleware answers itself: 429, 504, 408 and 499, and the APF headers.

The texts are the gate's (:mod:`apf_limiter.gate`), which the ASGI middleware sends too, so
that both front doors answer alike: a rejection is ``429 Too Many Requests`` with
``Retry-After`` and the JSON body ``{"detail": "Too many requests, please try again
later."}``; a request whose deadline passed before its response started gets ``504``
(Kubernetes' timeout filter), and a request whose client left while it was queued ``499``
(nginx's "client closed request", which only the access log sees). aiohttp takes header
values as ``str``: the names are checked once here.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from apf_limiter._errors import Rejected
from apf_limiter.gate import (
    CLIENT_CLOSED_REQUEST,
    DEADLINE_DETAIL,
    REJECTION_DETAIL,
    Gate,
    ResponseHeaders,
    Ticket,
    header_name,
    json_detail,
    seconds_value,
)

_REJECTION_BODY: Final = json_detail(REJECTION_DETAIL)
_DEADLINE_BODY: Final = json_detail(DEADLINE_DETAIL)


def _name(name: str | None) -> str | None:
    encoded = header_name(name)  # checked as the ASGI middleware checks it
    return None if encoded is None else encoded.decode("ascii")


class Headers:
    """The APF response headers of one middleware, as ``str`` names (each may be off).

    Args:
        shown: Which headers to add, and their names.
        gate: The gate computing the RateLimit fields (``shown.rate_limit``).

    Raises:
        ValueError: If a name cannot be a header name.
    """

    __slots__ = ("flow_schema", "priority_level", "shadow", "queue_wait", "rate_limit")

    def __init__(self, shown: ResponseHeaders, gate: Gate | None = None) -> None:
        self.flow_schema = _name(shown.flow_schema)
        self.priority_level = _name(shown.priority_level)
        self.shadow = _name(shown.shadow)
        self.queue_wait = _name(shown.queue_wait)
        self.rate_limit = gate if shown.rate_limit is True else None

    def rate_limited(
        self,
        response: web.StreamResponse,
        priority_level: str,
        flow_schema: str,
        distinguisher: str,
        reset: int | None = None,
    ) -> None:
        """Set the RateLimit fields (when on), unless the response set them."""
        if self.rate_limit is None:
            return
        fields = self.rate_limit.rate_limit(priority_level, flow_schema, distinguisher, reset)
        if fields is not None:
            response.headers.setdefault("RateLimit-Policy", fields[0])
            response.headers.setdefault("RateLimit", fields[1])

    def names(self, response: web.StreamResponse, flow_schema: str, priority_level: str) -> None:
        """Set the flow-schema and priority-level headers, unless the response set them."""
        headers = response.headers
        if self.flow_schema is not None:
            headers.setdefault(self.flow_schema, flow_schema)
        if self.priority_level is not None:
            headers.setdefault(self.priority_level, priority_level)

    def admitted(self, response: web.StreamResponse, ticket: Ticket) -> None:
        """Set every header of an admitted request's response, as the response starts.

        The shadow outcome is read now, not at admission: the would-be twin's outcome may
        have been decided in between.
        """
        self.names(response, ticket.flow_schema, ticket.priority_level)
        if self.rate_limit is not None:
            self.rated(response, ticket)
        if self.queue_wait is not None:
            response.headers[self.queue_wait] = seconds_value(ticket.queue_wait)
        if self.shadow is not None:
            shadow = ticket.shadow
            if shadow is not None:
                response.headers[self.shadow] = shadow

    def rated(self, response: web.StreamResponse, ticket: Ticket) -> None:
        """Set an admitted request's RateLimit fields, as they are now."""
        self.rate_limited(
            response, ticket.priority_level, ticket.flow_schema, ticket.admission.distinguisher
        )

    def refused(self, response: web.StreamResponse, rejected: Rejected) -> None:
        """Set every header of a rejection's response (``Retry-After`` is the caller's)."""
        self.names(response, rejected.flow_schema, rejected.priority_level)
        self.rate_limited(
            response,
            rejected.priority_level,
            rejected.flow_schema,
            rejected.distinguisher,
            rejected.retry_after,
        )


def rejection(rejected: Rejected, headers: Headers) -> web.Response:
    """The rejection (429, or the level's ``rejectionStatus``), with Retry-After and headers."""
    response = web.Response(
        status=rejected.status,
        body=_REJECTION_BODY,
        content_type="application/json",
        headers={"Retry-After": str(rejected.retry_after)},
    )
    headers.refused(response, rejected)
    return response


def expired(ticket: Ticket, headers: Headers) -> web.Response:
    """The 504 answering a request whose deadline passed before its response started.

    The connection closes: the rest of a request body was never read.
    """
    response = web.Response(status=504, body=_DEADLINE_BODY, content_type="application/json")
    response.force_close()
    headers.names(response, ticket.flow_schema, ticket.priority_level)
    return response


def client_gone(ticket: Ticket, headers: Headers) -> web.Response:
    """The 499 of a request whose client left while it was queued (only the log sees it)."""
    response = web.Response(status=CLIENT_CLOSED_REQUEST)
    response.force_close()
    headers.names(response, ticket.flow_schema, ticket.priority_level)
    return response
