"""The request's ``receive``, timed for the gate's minimum body rate (``SlowClients``).

The gate times bytes over time (:class:`~apf_limiter.gate.BodyClock`); this maps ASGI onto
it: a wait for an ``http.request`` message is a wait for body data, its ``body`` the bytes
received, ``more_body=False`` (or any other message) the end of the body.
"""

from __future__ import annotations

from apf_limiter.asgi._types import Message, Receive, Scope
from apf_limiter.asgi._waiting import body_expected
from apf_limiter.gate import Ticket


async def timed_receive(ticket: Ticket, scope: Scope, receive: Receive) -> Message:
    """Receive the next message, against the deadline the minimum rate gives this wait.

    The middleware hands the application ``functools.partial(timed_receive, ticket, scope,
    receive)``: no object of its own per request. Whether the request has a body is looked
    up at each call until its clock exists, so that a request whose body is never read (most
    ``GET`` requests) pays nothing for it.
    """
    clock = ticket.body
    if clock is None:
        if not body_expected(scope):
            return await receive()
        clock = ticket.body_clock()
        if clock is None:
            return await receive()
    if clock.complete:
        return await receive()
    clock.waiting()
    try:
        message = await receive()
    except BaseException:
        clock.received(0, complete=False)
        raise
    clock.received(
        len(message.get("body") or b""),
        complete=message.get("type") != "http.request" or not message.get("more_body", False),
    )
    return message
