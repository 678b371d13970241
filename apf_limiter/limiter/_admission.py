"""One request's admission: its phases, from start to release.

An admission calls the request path through the public methods of the shell's
:class:`~apf_limiter.limiter._core.Core` (``arrive``, ``queue``, ``finish``, ``finish_unrun``,
``abandon``, ``rejected``, ``rejection``, ``dispatched``, ``is_shadow``, ``now``), and starts a
shadow twin through the core's :class:`~apf_limiter.limiter._shadow.Twins`.
"""

from __future__ import annotations

from asyncio import _get_running_loop
from collections.abc import Awaitable, Generator
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from apf_limiter._clock import Timer
from apf_limiter._digest import RequestDigest
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.limiter._shadow import ADMITTED_AT_ONCE, ShadowOutcome, Twin

if TYPE_CHECKING:
    from apf_limiter.limiter._core import HoldsCore


_EXECUTING: Final = RequestState.EXECUTING
_WAITING: Final = RequestState.WAITING
_TIMED_OUT: Final = RequestState.TIMED_OUT


class Phase(Enum):
    """Where an admission is, as its owner sees it (the engine request has its own state)."""

    NEW = "new"
    """Not started (entered) yet."""
    QUEUED = "queued"
    """Waiting in a queue with a wait-limit timer. The engine may have dispatched or timed the
    request out already; the admission has not seen that outcome yet."""
    ADMITTED = "admitted"
    """Holds its seats, and knows it: admitted at start, or seen dispatched after waiting."""
    ENDED = "ended"
    """Released, rejected, or its wait's outcome seen and reported."""


# Module-level aliases: a global lookup is cheaper than an enum attribute on the hot path.
_NEW: Final = Phase.NEW
_QUEUED: Final = Phase.QUEUED
_ADMITTED: Final = Phase.ADMITTED
_ENDED: Final = Phase.ENDED


class Admission:
    """One admission of a request, used as ``async with limiter.admit(digest) as admission``.

    Entering waits (if needed) until the request may run, or raises :class:`Rejected`;
    leaving releases its seats, whatever happened in the body. Inside, the attributes say how
    the request was classified and how long it waited.

    Integrations that cannot use ``async with`` use the same steps directly:
    :meth:`start` (never waits), :meth:`wait` (only if ``start`` returned ``False``) and
    :meth:`release`.
    """

    __slots__ = (
        "_core",
        "_digest",
        "_wait_limit",
        "_request",
        "_queue_wait",
        "_timer",
        "_phase",
        "_twin",
    )

    def __init__(self, limiter: HoldsCore, digest: RequestDigest, wait_limit: float | None) -> None:
        self._core = limiter._core
        self._digest = digest
        self._wait_limit = wait_limit
        self._request: Request | None = None
        self._queue_wait = 0.0
        self._timer: Timer | None = None  # the wait-limit timer, while QUEUED
        self._phase = _NEW
        # Shadow mode: the virtual twin of a request admitted at once at a shadow level that
        # enforcing would not have admitted at once (limiter/_shadow.py).
        self._twin: Twin | None = None

    @property
    def _started(self) -> Request:
        request = self._request
        if request is None:
            raise RuntimeError("the admission has not been entered (or started) yet")
        return request

    @property
    def phase(self) -> Phase:
        """Where the admission is: new, queued, admitted or ended."""
        return self._phase

    # The two names are read for every request (the middleware's response headers): without
    # going through _started, one property call each.
    @property
    def flow_schema(self) -> str:
        """The name of the flow schema that matched the request."""
        request = self._request
        return self._started.flow_schema if request is None else request.flow_schema

    @property
    def priority_level(self) -> str:
        """The name of the priority level the request runs at."""
        request = self._request
        return self._started.priority_level if request is None else request.priority_level

    @property
    def distinguisher(self) -> str:
        """The request's flow distinguisher (e.g. the user name for ``ByUser``)."""
        return self._started.distinguisher

    @property
    def queue_wait(self) -> float:
        """Seconds the request waited in a queue (0 when it was admitted at once)."""
        self._started  # noqa: B018 -- raises when not entered
        return self._queue_wait

    @property
    def seats(self) -> int:
        """Seats the request holds while executing (after clamping to the level's maxSeats)."""
        return self._started.initial_seats

    @property
    def final_seats(self) -> int:
        """Final seats: with :attr:`seats`, the wider of the two stays held for the latency."""
        return self._started.final_seats

    @property
    def additional_latency(self) -> float:
        """Seconds the request's seats stay held after it finishes."""
        return self._started.additional_latency

    @property
    def digest(self) -> RequestDigest:
        """The request digest that was admitted."""
        return self._digest

    @property
    def shadow(self) -> ShadowOutcome | None:
        """What enforcing would have done, if the request's level is in shadow mode.

        ``None`` when the level enforces. In shadow mode the request runs at once, and this
        tells the wait it would have had, or the rejection and Retry-After it would have got;
        ``decided`` is ``False`` while its twin still waits in its queue (which can outlast
        the request).
        """
        twin = self._twin
        if twin is not None:
            return twin.outcome
        request = self._started
        if self._core.is_shadow(request):
            return ADMITTED_AT_ONCE
        return None

    def start(self) -> bool:
        """Classify the request and start it, without waiting.

        This is the first half of entering (``async with`` calls it); integrations that
        must do something else while a request waits (an ASGI server watching for the client
        to disconnect, say) call it directly, then :meth:`wait`.

        Returns:
            ``True`` when the request holds its seats now; ``False`` when it waits in a queue
            (then ``await`` :meth:`wait`, or :meth:`release` to give up).

        Raises:
            Rejected: With reason ``queue-full`` or ``concurrency-limit``.
            RuntimeError: If the admission was already started, or the limiter serves an
                event loop running in another thread (``Core.claim_loop``).
        """
        if self._phase is not _NEW:
            raise RuntimeError("an Admission can be started (entered) only once")
        core = self._core
        loop = _get_running_loop()
        if loop is not core.loop and loop is not None:  # one identity check, as a rule
            core.claim_loop(loop)
        # Should classification raise, nothing started: the admission stays new.
        self._request = request = core.arrive(self._digest)
        state = request.state
        if state is _EXECUTING:
            self._phase = _ADMITTED
            return True
        if core.is_shadow(request):
            # Shadow mode: the request runs now; its twin waits, or was rejected, for it.
            self._twin = core.twins.start(request, self._wait_limit)
            self._phase = _ADMITTED
            return True
        self._phase = _ENDED  # rejected, or (should queuing fail) abandoned
        if state is not _WAITING:
            raise core.rejected(request, request.arrival_time)
        self._timer = core.queue(request, self._wait_limit)
        self._phase = _QUEUED
        return False

    async def wait(self) -> None:
        """Wait until a queued request holds its seats (after :meth:`start` returned False).

        Cancelling the waiting task takes the request out of its queue (or, if it was given
        its seats at that very moment, passes them on) and re-raises the cancellation.

        Raises:
            Rejected: With reason ``time-out`` when the wait limit passed (again on every
                later call).
            RuntimeError: If the admission was not started, was released while (or before)
                it waited, or another task is waiting for it already.
        """
        request = self._request
        if request is None:
            raise RuntimeError("wait() needs start() first")
        if self._phase is not _QUEUED:
            # Not waiting (any more): admitted at start(), or already done waiting.
            if request.state is _EXECUTING or self._twin is not None:
                return
            if request.state is _TIMED_OUT:
                raise self._core.rejection(request)
            if request.state is RequestState.REJECTED:
                raise RuntimeError("the request was rejected by start(): it never waited")
            raise RuntimeError(
                f"the request is no longer waiting (it is {request.state.name.lower()}): "
                "it was released"
            )
        waiting = request.handle.wait()  # raises if another task is waiting already
        try:
            await waiting
        except BaseException:
            self._wait_interrupted()
            raise
        self._wait_ended()

    def _end_wait(self) -> bool:
        """Leave the QUEUED phase (stopping the wait-limit timer); whether it was QUEUED."""
        if self._phase is not _QUEUED:
            return False
        self._phase = _ENDED
        timer = self._timer
        self._timer = None
        if timer is not None:
            timer.cancel()
        return True

    def _wait_interrupted(self) -> None:
        """The waiting task was cancelled (or failed): leave the queue or pass the seats on."""
        request = self._request
        if request is not None and self._end_wait():
            self._core.abandon(request)

    def _wait_ended(self) -> None:
        """The waiter was woken: the request holds its seats, timed out, or was released."""
        request = self._request
        assert request is not None
        was_queued = self._end_wait()
        core = self._core
        state = request.state
        if state is _TIMED_OUT:
            if not was_queued:  # reported already, by a release() before this task resumed
                raise core.rejection(request)
            raise core.rejected(request, core.now())
        if state is not _EXECUTING:
            raise RuntimeError("the admission was released while it waited")
        self._phase = _ADMITTED
        self._queue_wait = request.start_time - request.arrival_time
        core.dispatched(request, self._queue_wait)

    def release(self, *, ran: bool = True) -> None:
        """Give the seats back (or leave the queue). Idempotent; ``async with`` calls it.

        Args:
            ran: ``False`` when the admitted request's work never ran (an HTTP client that
                left as its request was admitted, say): then it holds no additional latency.
        """
        request = self._request
        if request is None:
            return
        phase = self._phase
        state = request.state
        if phase is _ADMITTED:
            self._phase = _ENDED
            twin = self._twin
            if twin is not None:
                twin.real_ended(ran)
            elif state is _EXECUTING:
                self._core.finish(request, ran=ran)
        elif phase is _QUEUED:
            self._end_wait()
            core = self._core
            if state is _EXECUTING:
                # Dispatched from its queue an instant ago, before the waiting task could
                # see it (it will find the admission released): it never ran.
                self._queue_wait = request.start_time - request.arrival_time
                core.finish_unrun(request)
            elif state is _WAITING:
                core.abandon(request)
                request.handle.set()  # a concurrent wait() wakes up and reports the release
            elif state is _TIMED_OUT:
                # Its wait limit passed while no task was in wait(): report the time-out now
                # (observer, log), once; a later wait() raises it without a report.
                core.rejected(request, core.now(), request.ended_at - request.arrival_time)

    async def __aenter__(self) -> Admission:
        if not self.start():
            # wait(), inlined: one coroutine frame per waiting request rather than two.
            request = self._request
            assert request is not None
            try:
                await request.handle.wait()
            except BaseException:
                self._wait_interrupted()
                raise
            self._wait_ended()
        return self

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> Awaitable[None]:
        # A plain method returning a finished awaitable: releasing never waits, and this
        # saves creating a coroutine per request.
        self.release()
        return _RELEASED

    def __repr__(self) -> str:
        request = self._request
        if request is None:
            return f"<Admission (not entered) {self._digest!r}>"
        return (
            f"<Admission {request.flow_schema}/{request.priority_level} "
            f"{request.state.name.lower()} seats={request.max_seats} "
            f"queue_wait={self._queue_wait:.6f}s>"
        )


class _Released:
    """An awaitable that is already complete (what ``Admission.__aexit__`` returns)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]


_RELEASED: Final = _Released()
