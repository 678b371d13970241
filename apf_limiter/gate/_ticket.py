"""One request's ticket through the gate, and the clock of its body (see ``_gate``).

:class:`Ticket` is what :meth:`Gate.start` returns: the request's admission, its place among
the open long-running requests, and its record in the deadline schedule (how to cancel its
work, whether and why it expired, whether its response started). :class:`BodyClock` times its
body for the minimum data rate, in bytes over time: the front door says when it waits for body
data and how many bytes came. The shared timer and the schedule are in
:mod:`apf_limiter.gate._deadline`.
"""

from __future__ import annotations

from asyncio import CancelledError
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol

from apf_limiter.gate._metadata import shadow_value
from apf_limiter.limiter import Admission, ShadowOutcome

if TYPE_CHECKING:
    import asyncio

    import trio

#: Why a request expired: its request deadline passed (HTTP answers 504).
DEADLINE: Final = "deadline"
#: Why a request expired: its body came in slower than the minimum rate (HTTP answers 408).
BODY: Final = "body"


class Schedule(Protocol):
    """What the body clocks need of the deadline schedule."""

    #: The tickets with the default timeout, in deadline order (the same deque for good).
    fifo: deque[Ticket]

    def now(self) -> float:
        """The current time on the limiter's clock."""

    def body_clock(self, ticket: Ticket) -> BodyClock | None:
        """A clock for the request's body, when the minimum rate applies."""

    def body_wait(self, clock: BodyClock) -> None:
        """A wait for body data begins."""


class Tracker(Schedule, Protocol):
    """What the tickets need of the gate that tracks them."""

    def leave(self, schema: str) -> None:
        """Count a long-running request out of its flow schema's cap."""


class Ticket:
    """One request through the gate, from :meth:`Gate.start` to :meth:`end`.

    A front door calls, in this order: :meth:`wait` if :attr:`admitted` is false (cancelling
    the waiting task, or :meth:`abandon`, gives up the place: the ticket then holds nothing);
    :meth:`response_started` as the response (or stream) starts; :meth:`release` as the
    response completes (optional: :meth:`end` releases too); and :meth:`end` exactly once, in
    a ``finally``, however the work ended.

    Attributes:
        admission: The request's admission in the limiter.
        admitted: The request held its seats at :meth:`Gate.start` (no wait needed).
        flow_schema: The flow schema it matched (response metadata).
        priority_level: Its priority level (response metadata).
        long_running: Its seats go back, and its deadline ends, as its response starts.
        started: The response started (expiring then aborts it rather than answering).
        reason: ``None``, or :data:`DEADLINE` or :data:`BODY` once expired.
        tracked: The deadline schedule may still expire it.
        released: Its seats went back already (:meth:`release`; a front door that calls
            ``admission.release()`` itself, on its hot path, sets it too): :meth:`end` then
            skips the release, which would change nothing.
        arrival: When it arrived, on the limiter's clock.
        deadline: When its request deadline passes (``math.inf``: never).
    """

    __slots__ = (
        "tracker",
        "admission",
        "admitted",
        "flow_schema",
        "priority_level",
        "long_running",
        "counted",
        "task",
        "cancel_scope",
        "arrival",
        "deadline",
        "tracked",
        "started",
        "reason",
        "body",
        "would_refuse",
        "released",
    )

    def __init__(
        self,
        tracker: Tracker,
        admission: Admission,
        admitted: bool,
        long_running: bool,
        counted: str | None,
    ) -> None:
        self.tracker = tracker
        self.admission = admission
        self.admitted = admitted
        self.flow_schema = admission.flow_schema
        self.priority_level = admission.priority_level
        self.long_running = long_running
        self.counted = counted  # the flow schema whose long-running cap it counts in
        self.task: asyncio.Task[Any] | None = None
        self.cancel_scope: trio.CancelScope | None = None
        self.arrival = 0.0
        self.deadline = 0.0
        self.tracked = False
        self.started = False
        self.reason: str | None = None
        self.body: BodyClock | None = None
        # At a shadow level, a refusal the gate would have made itself (the long-running
        # cap): the request's shadow outcome, whatever its twin says.
        self.would_refuse: ShadowOutcome | None = None
        self.released = False

    @property
    def queue_wait(self) -> float:
        """Seconds the request waited in a queue (0 when admitted at once): final once admitted."""
        return self.admission.queue_wait

    @property
    def shadow(self) -> str | None:
        """At a priority level in shadow mode, what enforcing would have done, as text.

        ``wait=0.125``, ``rejected=queue-full; retry-after=3``, ``pending`` or ``dropped``
        (read it as the response starts); ``None`` at an enforced level.
        """
        outcome = self.would_refuse or self.admission.shadow
        return None if outcome is None else shadow_value(outcome)

    def shadow_after(self, waited: float) -> str | None:
        """:attr:`shadow`, a pending outcome told with ``waited`` (``pending; waited=0.1``).

        Args:
            waited: Seconds since the request was admitted (it ran at once): the would-be wait
                of a pending twin is at least this long.
        """
        outcome = self.would_refuse or self.admission.shadow
        return None if outcome is None else shadow_value(outcome, waited)

    async def wait(self) -> None:
        """Wait in the queue until the request holds its seats (when :attr:`admitted` is false).

        Cancelling the waiting task takes the request out of its queue (or passes on seats
        given at that very instant): the ticket holds nothing then, and the cancellation
        propagates. Call :meth:`end` all the same.

        Raises:
            Rejected: With reason ``time-out`` when the wait limit passed.
        """
        try:
            await self.admission.wait()
        except BaseException:
            # Cancelled (the client left, a deadline, the server) or timed out: leave the
            # queue, or give back the seats that came in the same instant, unrun.
            self.admission.release(ran=False)
            raise

    def abandon(self) -> None:
        """Give up a request whose work never ran (its client left while it waited).

        Its place in the queue, or seats given at that instant, go back at once, unrun (no
        additional latency is held); its deadline stops. Call :meth:`end` all the same.
        """
        self.disarm()
        self.admission.release(ran=False)

    def response_started(self, stream: bool = False) -> None:
        """The response (or stream) started: the seats of a long-running request go back.

        Args:
            stream: The response is a stream that never ends by itself (a WebSocket
                accepted): its deadline ends here even if the request is not long-running.
        """
        if self.tracked:
            if self.long_running or stream:
                self.disarm()  # exempt from now on: no deadline, no body rate
            else:
                self.started = True  # expiring now aborts the response
        if self.long_running:
            self.admission.release()
            self.released = True

    def release(self) -> None:
        """Give the seats back now (the response is complete); idempotent."""
        self.admission.release()
        self.released = True

    def body_clock(self) -> BodyClock | None:
        """The clock of the request's body, when the minimum body rate applies (else ``None``).

        Call it only for a request that has a body: the rate binds from its first wait.
        """
        return self.tracker.body_clock(self)

    def disarm(self) -> None:
        """Stop the deadline (the request is being answered otherwise); :meth:`end` still due."""
        if self.tracked:
            self.tracked = False
            fifo = self.tracker.fifo
            while fifo and not fifo[0].tracked:
                fifo.popleft()

    def end(self, error: BaseException | None) -> bool:
        """End the request, once, as its work ends (returned, or raised ``error``).

        Its deadline stops, its seats go back (after its additional latency), its place
        among the open long-running requests is freed.

        Returns:
            Whether the request is to be answered as expired (see :attr:`reason`): it expired,
            and ``error`` is ``None`` or the cancellation that expiring caused (anything else
            is the front door's to propagate).
        """
        # One method, not two: every request ends here. The tracking ends first (a trio
        # cancel scope must be exited whatever follows), then the seats and the cap place.
        try:
            if self.tracked:
                self.tracked = False
                # Drop the finished tickets at the head of the FIFO: requests mostly end in
                # the order they came, so it stays about as long as the requests in flight.
                fifo = self.tracker.fifo
                while fifo and not fifo[0].tracked:
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
        finally:
            if not self.released:  # the front door gave the seats back as the response ended
                self.released = True
                self.admission.release()
            counted = self.counted
            if counted is not None:
                self.counted = None
                self.tracker.leave(counted)


class BodyClock:
    """Times a request body against the minimum data rate, in bytes over time.

    The front door calls :meth:`waiting` before each wait for body data and
    :meth:`received` after it (also when the wait fails): the clock runs only while someone
    waits for body data.

    Attributes:
        received_bytes: Body bytes received so far (while queued too).
        complete: The body ended (only a disconnect can follow).
    """

    __slots__ = (
        "tracker",
        "ticket",
        "active",
        "received_bytes",
        "since",
        "flying",
        "complete",
        "in_heap",
    )

    def __init__(self, tracker: Schedule, ticket: Ticket) -> None:
        self.tracker = tracker
        self.ticket = ticket
        self.active = 0.0  # seconds spent waiting for body data before the wait in flight
        self.received_bytes = 0
        self.since = 0.0  # when the wait in flight began
        self.flying = False  # a wait for body data is in flight
        self.complete = False
        self.in_heap = False  # the schedule holds this clock's check (one at a time)

    def waiting(self) -> None:
        """A wait for body data begins: it must keep up with the rate from now on."""
        if not self.complete:
            self.tracker.body_wait(self)

    def received(self, size: int, *, complete: bool) -> None:
        """The wait ended with ``size`` body bytes (0 when it failed); ``complete``: body over."""
        if self.flying:
            self.flying = False
            self.active += self.tracker.now() - self.since
        self.received_bytes += size
        if complete:
            self.complete = True
