"""The request gate: one request's life through the limiter, for every front door.

The ASGI middleware is built on it; a gRPC interceptor, an aiohttp middleware or a job runner
maps its protocol onto the same few calls::

    from apf_limiter import Limiter, RequestDigest, Rejected
    from apf_limiter.gate import Gate

    gate = Gate(Limiter())

    async def handle(request):
        try:
            ticket = gate.start(RequestDigest(verb="post", path=request.method))  # never waits
        except Rejected as rejected:
            return refuse(rejected.reason, rejected.retry_after)
        error = None
        try:
            if not ticket.admitted:
                await ticket.wait()  # cancel this task when the client leaves
            ticket.response_started()
            result = await run(request)
        except BaseException as exc:
            error = exc
        finally:
            expired = ticket.end(error)  # once, however the work ended
        if expired:
            return timed_out(ticket.reason)  # DEADLINE or BODY: the gate cancelled the work
        if error is not None:
            raise error
        return result

The values every front door shares live here too, so that no front door imports another:
the hooks' and routes' values (``Identity``, ``RouteOptions``, ``route_options``, ...), the
response headers (``ResponseHeaders``) and the texts of the answers (``REJECTION_DETAIL``, ...).

See ``docs/gate.md``.
"""

from apf_limiter.gate._answers import (
    BODY_RATE_DETAIL,
    CLIENT_CLOSED_REQUEST,
    DEADLINE_DETAIL,
    REJECTION_DETAIL,
    header_name,
    json_detail,
)
from apf_limiter.gate._gate import Gate
from apf_limiter.gate._long_running import EVERY_SCHEMA, LONG_RUNNING_RETRY_AFTER
from apf_limiter.gate._metadata import seconds_value, shadow_value
from apf_limiter.gate._options import (
    NO_HEADERS,
    ClientDeadlines,
    ResponseHeaders,
    SlowClients,
    header_timeout,
)
from apf_limiter.gate._ticket import BODY, DEADLINE, BodyClock, Ticket
from apf_limiter.gate._values import (
    MARKED_ENDPOINTS,
    ROUTE_OPTIONS_ATTRIBUTE,
    Identity,
    ResourceAttributes,
    RouteOptions,
    WorkEstimate,
    endpoint_options,
    identity_names,
    route_options,
)

__all__ = [
    "BODY",
    "BODY_RATE_DETAIL",
    "BodyClock",
    "CLIENT_CLOSED_REQUEST",
    "ClientDeadlines",
    "DEADLINE",
    "DEADLINE_DETAIL",
    "EVERY_SCHEMA",
    "Gate",
    "Identity",
    "LONG_RUNNING_RETRY_AFTER",
    "MARKED_ENDPOINTS",
    "NO_HEADERS",
    "REJECTION_DETAIL",
    "ROUTE_OPTIONS_ATTRIBUTE",
    "ResourceAttributes",
    "ResponseHeaders",
    "RouteOptions",
    "SlowClients",
    "Ticket",
    "WorkEstimate",
    "endpoint_options",
    "header_name",
    "header_timeout",
    "identity_names",
    "json_detail",
    "route_options",
    "seconds_value",
    "shadow_value",
]
