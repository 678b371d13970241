"""The shadow-mode response header: what enforcing would have done to a request.

At a priority level in shadow mode (``enforcement: Shadow``) every request runs at once, and
``Admission.shadow`` tells its would-be outcome. With ``shadow_header=`` the middleware puts
that outcome on the response start:

* ``wait=0.125`` — it would have waited that many seconds in a queue (``wait=0``: it would
  have run at once);
* ``rejected=queue-full; retry-after=3`` — it would have been rejected (the reason, and the
  ``Retry-After`` the 429 would have carried);
* ``pending; waited=0.1`` — its virtual twin still waits in its queue as the response starts
  (a response faster than the wait enforcing would have imposed): it would have waited at
  least that long (``waited``: seconds since its admission), and the outcome comes later, to
  observers. Under overload this is most of a flooding client's responses: enforced, they
  would still be queued when the real ones are done;
* ``dropped`` — its twin was dropped (``max_shadow_twins``) before the outcome was known.

The value is computed as the response starts, not at admission: the twin's outcome may be
decided in between. Requests at enforced levels get no header.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Final

from apf_limiter._clock import Clock
from apf_limiter.asgi._responses import seconds_value
from apf_limiter.asgi._types import Message, Send
from apf_limiter.limiter import Admission, ShadowOutcome

#: The messages that start a response (where the header goes).
STARTS: Final = frozenset(
    {"http.response.start", "websocket.accept", "websocket.http.response.start"}
)


def shadow_value(outcome: ShadowOutcome, waited: float | None = None) -> str:
    """The header value describing a would-be outcome.

    Args:
        outcome: What enforcing would have done (``Admission.shadow``).
        waited: Seconds since the request's admission, told with ``pending`` (the would-be
            wait is at least this long); ``None``: unknown.

    Returns:
        ``wait=<seconds>``, ``rejected=<reason>; retry-after=<seconds>``, ``pending`` (with
        ``; waited=<seconds>`` when ``waited`` is given) or ``dropped``.
    """
    reason = outcome.reject_reason
    if reason == "dropped":
        return "dropped"
    if reason is not None:
        if outcome.retry_after is None:
            return f"rejected={reason}"
        return f"rejected={reason}; retry-after={outcome.retry_after}"
    wait = outcome.queue_wait
    if not outcome.decided or wait is None:
        return "pending" if waited is None else "pending; waited=" + seconds_value(waited)
    return "wait=" + seconds_value(wait)


def shadow_pair(name: bytes | None, admission: Admission) -> tuple[bytes, bytes] | None:
    """The header pair for ``admission`` now; ``None`` at an enforced level, or without a name."""
    if name is None:
        return None
    outcome = admission.shadow
    if outcome is None:
        return None
    return (name, shadow_value(outcome).encode("ascii"))


def shadow_send(send: Send, admission: Admission, name: bytes, clock: Clock) -> Send:
    """Wrap the server's ``send`` to add the shadow header to the response start.

    Args:
        send: The server's ``send``.
        admission: The request's admission, at a shadow level (it ran at once: wrapped as it
            was admitted, which is when its twin arrived).
        name: The header name, lower-case ASCII.
        clock: The limiter's clock, for the ``waited`` of a pending outcome.

    Returns:
        A ``send`` that appends the header (the outcome as of that moment) to the message
        that starts the response, and passes every message on.
    """
    admitted = clock.now()

    def send_with_shadow(message: Message) -> Awaitable[None]:
        if message["type"] in STARTS:
            outcome = admission.shadow
            if outcome is not None:
                value = shadow_value(outcome, clock.now() - admitted)
                pair = (name, value.encode("ascii"))
                message = {**message, "headers": [*message.get("headers", ()), pair]}
        return send(message)

    return send_with_shadow
