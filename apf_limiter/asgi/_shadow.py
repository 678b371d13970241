"""The shadow-mode response header: what enforcing would have done to a request.

At a priority level in shadow mode (``enforcement: Shadow``) every request runs at once, and
the gate's ticket tells its would-be outcome (``Ticket.shadow``, the text of
:func:`apf_limiter.gate.shadow_value`: ``wait=0.125``, ``rejected=queue-full; retry-after=3``,
``pending; waited=0.1`` or ``dropped``). With ``ResponseHeaders(shadow=...)`` the middleware
puts it on the response start: read then, not at admission, since the twin's outcome may be
decided in between. Requests at enforced levels get no header.
"""

from __future__ import annotations

from collections.abc import Awaitable

from apf_limiter._clock import Clock
from apf_limiter.asgi._responses import STARTS
from apf_limiter.asgi._types import Message, Send
from apf_limiter.gate import Ticket


def shadow_pair(name: bytes | None, ticket: Ticket) -> tuple[bytes, bytes] | None:
    """The header pair for ``ticket`` now; ``None`` at an enforced level, or without a name."""
    if name is None:
        return None
    value = ticket.shadow
    if value is None:
        return None
    return (name, value.encode("ascii"))


def shadow_send(send: Send, ticket: Ticket, name: bytes, clock: Clock) -> Send:
    """Wrap the server's ``send`` to add the shadow header to the response start.

    Args:
        send: The server's ``send``.
        ticket: The request's ticket, at a shadow level (it ran at once: wrapped as it was
            admitted, which is when its twin arrived).
        name: The header name, lower-case ASCII.
        clock: The limiter's clock, for the ``waited`` of a pending outcome.

    Returns:
        A ``send`` that appends the header (the outcome as of that moment) to the message
        that starts the response, and passes every message on.
    """
    admitted = clock.now()

    def send_with_shadow(message: Message) -> Awaitable[None]:
        if message["type"] in STARTS:
            value = ticket.shadow_after(clock.now() - admitted)
            if value is not None:
                pair = (name, value.encode("ascii"))
                message = {**message, "headers": [*message.get("headers", ()), pair]}
        return send(message)

    return send_with_shadow
