"""The records of requests with a deadline or a minimum body rate (see ``_deadline``).

:class:`Expiry` is one request's record: how to cancel its work, whether (and why) it expired,
whether its response started. :class:`BodyClock` times its body for the minimum data rate.
The shared timer and the schedule are in :mod:`apf_limiter.asgi._deadline`.
"""

from __future__ import annotations

from asyncio import CancelledError
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol

from apf_limiter.asgi._types import Message, Receive, Scope
from apf_limiter.limiter import Admission

if TYPE_CHECKING:
    import asyncio

    import trio

#: Why a request expired: its request deadline passed (answered 504).
DEADLINE: Final = "deadline"
#: Why a request expired: its body came in slower than the minimum rate (answered 408).
BODY: Final = "body"


class Tracker(Protocol):
    """What the records need of the schedule that tracks them."""

    #: The records with the default timeout, in deadline order (the same deque for good).
    fifo: deque[Expiry]

    def now(self) -> float:
        """The current time on the limiter's clock."""

    def body_clock(self, expiry: Expiry) -> BodyClock | None:
        """A clock for the request's body, when the minimum rate applies to it."""

    def body_wait(self, clock: BodyClock) -> None:
        """A wait for body data begins."""


class Expiry:
    """One tracked request: how to cancel it, and whether (and why) it expired.

    Attributes:
        started: The application started the response (then expiring aborts it).
        reason: ``None``, or :data:`DEADLINE` or :data:`BODY` once expired.
        body: The clock of the body when the minimum rate applies to it, else ``None``.
    """

    __slots__ = (
        "tracker",
        "admission",
        "scope",
        "task",
        "cancel_scope",
        "arrival",
        "deadline",
        "live",
        "started",
        "reason",
        "body",
        "server_receive",
        "source",
    )

    def __init__(
        self,
        tracker: Tracker,
        admission: Admission,
        scope: Scope,
        task: asyncio.Task[Any] | None,
        arrival: float,
        deadline: float,
        receive: Receive,
    ) -> None:
        self.tracker = tracker
        self.admission = admission
        self.scope = scope
        self.task = task
        self.cancel_scope: trio.CancelScope | None = None
        self.arrival = arrival
        self.deadline = deadline
        self.live = True  # tracked: the timer may still expire it
        self.started = False
        self.reason: str | None = None
        self.body: BodyClock | None = None
        self.server_receive = receive
        self.source: Receive | None = None  # what receive() awaits, decided at its first call

    async def receive(self) -> Message:
        """The request's ``receive``: timed for the minimum rate if it has a body.

        Whether it has one is looked up at the first call, so that a request whose body is
        never read (most ``GET`` requests) pays nothing for it.
        """
        source = self.source
        if source is None:
            source = self.source = self.tracker.body_clock(self) or self.server_receive
        return await source()

    def disarm(self) -> None:
        """Stop tracking (the request is being answered otherwise); :meth:`finish` still due."""
        if self.live:
            self.live = False
            fifo = self.tracker.fifo
            while fifo and not fifo[0].live:
                fifo.popleft()

    def finish(self, error: BaseException | None) -> bool:
        """End the tracking, once, as the guarded work ends (returned, or raised ``error``).

        Returns:
            Whether the request is to be answered as expired: it expired, and ``error`` is
            ``None`` or the cancellation that expiring caused (anything else propagates).
        """
        if self.live:
            self.live = False
            # Drop the finished records at the head of the FIFO: requests mostly end in the
            # order they came, so it stays about as long as the requests in flight.
            fifo = self.tracker.fifo
            while fifo and not fifo[0].live:
                fifo.popleft()
        cancel_scope = self.cancel_scope
        if cancel_scope is not None:  # trio: the scope swallows the cancellation it caused
            self.cancel_scope = None
            if error is None:
                cancel_scope.__exit__(None, None, None)
            elif not cancel_scope.__exit__(type(error), error, error.__traceback__):
                return False
            return self.reason is not None
        if self.reason is None:
            return False
        task = self.task
        self.task = None
        remaining = task.uncancel() if task is not None else 0
        # Another cancellation (the server's) came too: that one wins.
        return error is None or (isinstance(error, CancelledError) and remaining == 0)


class BodyClock:
    """The server's ``receive`` of a request with a body, timed for the minimum data rate.

    Attributes:
        received: Body bytes received so far (while queued too).
    """

    __slots__ = (
        "tracker",
        "expiry",
        "receive",
        "active",
        "received",
        "since",
        "flying",
        "complete",
        "in_heap",
    )

    def __init__(self, tracker: Tracker, expiry: Expiry, receive: Receive) -> None:
        self.tracker = tracker
        self.expiry = expiry
        self.receive = receive
        self.active = 0.0  # seconds spent waiting for body data before the wait in flight
        self.received = 0
        self.since = 0.0  # when the wait in flight began
        self.flying = False  # a wait for body data is in flight
        self.complete = False  # the last body message came: only a disconnect can follow
        self.in_heap = False  # the heap holds this clock's check (one at a time)

    async def __call__(self) -> Message:
        """Receive the next message, against the deadline the minimum rate gives this wait."""
        if self.complete:
            return await self.receive()
        tracker = self.tracker
        tracker.body_wait(self)
        try:
            message = await self.receive()
        finally:
            self.flying = False
            self.active += tracker.now() - self.since
        self.received += len(message.get("body") or b"")
        if message.get("type") != "http.request" or not message.get("more_body", False):
            self.complete = True
        return message
