"""The request's ``receive``, timed for the gate's minimum body rate (``SlowClients``).

The gate times bytes over time (:class:`~apf_limiter.gate.BodyClock`); this maps ASGI onto
it: a wait for an ``http.request`` message is a wait for body data, its ``body`` the bytes
received, ``more_body=False`` (or any other message) the end of the body.
"""

from __future__ import annotations

from apf_limiter.asgi._types import Message, Receive, Scope
from apf_limiter.asgi._waiting import body_expected
from apf_limiter.gate import BodyClock, Ticket


class TimedReceive:
    """The application's ``receive`` of a tracked HTTP request.

    Whether the request has a body is looked up at the first call, so that a request whose
    body is never read (most ``GET`` requests) pays nothing for it.
    """

    __slots__ = ("ticket", "scope", "server_receive", "clock", "looked_up")

    def __init__(self, ticket: Ticket, scope: Scope, receive: Receive) -> None:
        self.ticket = ticket
        self.scope = scope
        self.server_receive = receive
        self.clock: BodyClock | None = None
        self.looked_up = False

    async def __call__(self) -> Message:
        """Receive the next message, against the deadline the minimum rate gives this wait."""
        clock = self.clock
        if clock is None:
            if self.looked_up:
                return await self.server_receive()
            self.looked_up = True
            if not body_expected(self.scope):
                return await self.server_receive()
            clock = self.clock = self.ticket.body_clock()
            if clock is None:
                return await self.server_receive()
        if clock.complete:
            return await self.server_receive()
        clock.waiting()
        try:
            message = await self.server_receive()
        except BaseException:
            clock.received(0, complete=False)
            raise
        clock.received(
            len(message.get("body") or b""),
            complete=message.get("type") != "http.request" or not message.get("more_body", False),
        )
        return message
