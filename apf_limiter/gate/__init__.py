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

See ``docs/gate.md``.
"""

from apf_limiter.gate._gate import Gate
from apf_limiter.gate._long_running import EVERY_SCHEMA, LONG_RUNNING_RETRY_AFTER
from apf_limiter.gate._metadata import seconds_value, shadow_value
from apf_limiter.gate._options import ClientDeadlines, SlowClients, header_timeout
from apf_limiter.gate._ticket import BODY, DEADLINE, BodyClock, Ticket

__all__ = [
    "BODY",
    "BodyClock",
    "ClientDeadlines",
    "DEADLINE",
    "EVERY_SCHEMA",
    "Gate",
    "LONG_RUNNING_RETRY_AFTER",
    "SlowClients",
    "Ticket",
    "header_timeout",
    "seconds_value",
    "shadow_value",
]
