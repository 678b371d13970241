"""Shadow mode: a request runs at once while its virtual twin is held as if enforced.

At a level whose enforcement is ``Shadow``, :meth:`Admission.start` never waits and never
raises. A request the engine dispatched at once needs nothing more: its engine request is its
own twin and ends with it. Any other one gets a :class:`Twin` here, holding the engine request
that waits in its queue (or was rejected) exactly as an enforced request would, with the
wait-limit timer and the borrowing timer of an enforced one. When the engine dispatches the
twin, it holds its seats for the real request's execution time, counted from the moment the
real request started (its arrival), and then for its additional latency. So in fake time,
with service times that do not depend on load, the twin sees the very waits, rejections and
Retry-After values that enforcing would have produced.

A twin that outlives its real request (still queued, or still "executing" its copy of the
real execution time) is counted by the limiter's :class:`Twins` against its
``max_shadow_twins``; past it, a new one is dropped: left out of its queue and reported as
``dropped``, or, holding its seats already (its would-be wait reported when it got them),
finished at once; each request's outcome is reported once. What a twin keeps alive is bounded
anyway: the engine holds at most its queues' capacity plus the levels' seats; the cap bounds
how many finished real requests stay referenced by twins.

A twin runs on the request path as a waiting request does: what it calls of it is
:class:`TwinHost`, which the shell's core implements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

from apf_limiter._clock import Clock, Timer, Wakeable
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.limiter._reporter import Reporter

_EXECUTING: Final = RequestState.EXECUTING
_WAITING: Final = RequestState.WAITING
_TIMED_OUT: Final = RequestState.TIMED_OUT


@dataclass(frozen=True, slots=True)
class ShadowOutcome:
    """What enforcing would have done to a request that ran in shadow mode.

    Attributes:
        decided: Whether the outcome is known: ``False`` while the request's twin still waits
            in its queue (it may outlive the request itself).
        queue_wait: Seconds the request would have waited before running (0.0 when it would
            have run at once); ``None`` when it would have been rejected or is undecided.
        reject_reason: ``"queue-full"``, ``"concurrency-limit"`` or ``"time-out"`` when it
            would have been rejected; ``"dropped"`` when its twin was dropped (the shadow
            cap) before the outcome was known; else ``None``.
        retry_after: The ``Retry-After`` seconds a rejection would have carried.
    """

    decided: bool
    queue_wait: float | None = None
    reject_reason: str | None = None
    retry_after: int | None = None

    @property
    def rejected(self) -> bool:
        """Whether enforcing would have rejected the request."""
        return self.reject_reason is not None and self.reject_reason != "dropped"


#: The outcome of a request its level would have run at once.
ADMITTED_AT_ONCE: Final = ShadowOutcome(True, 0.0)
_PENDING: Final = ShadowOutcome(False)

#: In shadow mode, the virtual twins that may outlive their requests at once, by default.
DEFAULT_MAX_SHADOW_TWINS: Final = 10_000


class TwinHost(Protocol):
    """What a twin calls of the request path (the shell's core): a waiting request's calls.

    Attributes:
        clock: The limiter's clock.
        reporter: The limiter's observer events and logs.
    """

    clock: Clock
    reporter: Reporter

    def queue(self, request: Request, wait_limit: float | None, handle: Wakeable) -> Timer:
        """Set up a waiting request's waiter (``handle``) and wait-limit timer."""
        ...

    def run_due(self) -> float:
        """Run the periodic work that fell due; the current time."""
        ...

    def finish(self, request: Request, *, ran: bool = True, report: bool = True) -> None:
        """End an executing request (``report=False``: without telling the observer)."""
        ...

    def withdraw(self, request: Request, now: float) -> None:
        """Take a waiting request out of its queue, without telling the observer."""
        ...


class Twins:
    """A limiter's shadow twins: what they run on, and how many outlive their requests.

    Args:
        host: The request path the twins run on.
        limit: How many twins may outlive their requests at once (``max_shadow_twins``).

    Attributes:
        outliving: How many twins outlive their requests now.

    Raises:
        ValueError: If ``limit`` is not a non-negative integer.
    """

    __slots__ = ("host", "limit", "outliving")

    def __init__(self, host: TwinHost, limit: int = DEFAULT_MAX_SHADOW_TWINS) -> None:
        if type(limit) is not int or limit < 0:
            raise ValueError(f"max_shadow_twins must be a non-negative integer, got {limit!r}")
        self.host = host
        self.limit = limit
        self.outliving = 0

    def start(self, request: Request, wait_limit: float | None) -> Twin:
        """The twin of a shadow-mode request the engine did not dispatch at arrival."""
        return Twin(self, request, wait_limit)

    def outlive(self) -> bool:
        """Count one more twin outliving its request; ``False`` (not counted) at the cap."""
        if self.outliving >= self.limit:
            return False
        self.outliving += 1
        return True

    def outlived(self) -> None:
        """A twin that outlived its request has ended."""
        self.outliving -= 1


class Twin:
    """The virtual twin of a shadow-mode request the engine did not dispatch at arrival.

    It stands in for the waiter of its engine request (``request.handle``): the shell's wake
    and wait-limit paths call :meth:`set` as they would wake a waiting task.

    Args:
        twins: The limiter's twins (what they run on, how many outlive their requests).
        request: The engine request, waiting in its queue or rejected on arrival.
        wait_limit: The queue wait limit (``None``: the configuration's).
    """

    __slots__ = (
        "_twins",
        "_host",
        "request",
        "outcome",
        "_timer",
        "_duration",
        "_ran",
        "_outliving",
    )

    def __init__(self, twins: Twins, request: Request, wait_limit: float | None) -> None:
        self._twins = twins
        self._host = host = twins.host
        self.request = request
        self._timer: Timer | None = None
        self._duration = -1.0  # the real execution time, once the real request ended
        self._ran = True
        self._outliving = False
        if request.state is _WAITING:
            self.outcome = _PENDING
            self._timer = host.queue(request, wait_limit, self)
        else:
            self._decide(ShadowOutcome(True, None, request.reject_reason, request.retry_after))
        host.reporter.dispatched(request, 0.0, False)  # the real request runs at once

    def set(self) -> bool:
        """The engine dispatched the twin, or its wait limit passed: record the outcome."""
        request = self.request
        state = request.state
        if state is _EXECUTING:
            self._stop_timer()
            self._decide(ShadowOutcome(True, request.start_time - request.arrival_time))
            if self._duration >= 0.0:
                self._run_for(self._duration)
        elif state is _TIMED_OUT:
            self._stop_timer()
            self._decide(ShadowOutcome(True, None, request.reject_reason, request.retry_after))
            self._outlived()
        return True  # a twin is always there to be told

    def real_ended(self, ran: bool) -> None:
        """The real request ended: report it; the twin runs as long, from its own start."""
        host = self._host
        now = host.run_due()
        request = self.request
        reporter = host.reporter
        if reporter.observer is not None:
            reporter.notify(
                "request_finished",
                request.priority_level,
                request.flow_schema,
                now - request.arrival_time,
            )
        state = request.state
        if state is not _WAITING and state is not _EXECUTING:
            return  # rejected or timed out: nothing holds seats
        if not self._twins.outlive():
            self._drop(now)
            return
        self._outliving = True
        self._duration = now - request.arrival_time
        self._ran = ran
        if state is _EXECUTING:
            # Dispatched after the real request started: it ends that much later.
            self._run_for(request.start_time + self._duration - now)

    def _run_for(self, seconds: float) -> None:
        self._host.clock.call_later(seconds if seconds > 0.0 else 0.0, self._finish)

    def _finish(self) -> None:
        request = self.request
        if request.state is _EXECUTING:
            self._host.finish(request, ran=self._ran, report=False)
        self._outlived()

    def _drop(self, now: float) -> None:
        """Over the cap: take the twin out of its queue, or end it now, and report it."""
        host = self._host
        request = self.request
        self._stop_timer()
        if request.state is _WAITING:
            self._decide(ShadowOutcome(False, None, "dropped"))
            host.withdraw(request, now)
        else:
            # Dispatched already: its outcome (the wait) was decided and reported then. The
            # cap only ends its hold early; reporting "dropped" too would count it twice.
            host.finish(request, report=False)

    def _decide(self, outcome: ShadowOutcome) -> None:
        self.outcome = outcome
        self._host.reporter.shadowed(self.request, outcome.queue_wait, outcome.reject_reason)

    def _stop_timer(self) -> None:
        timer = self._timer
        if timer is not None:
            self._timer = None
            timer.cancel()

    def _outlived(self) -> None:
        if self._outliving:
            self._outliving = False
            self._twins.outlived()

    def __repr__(self) -> str:
        state: Any = self.request.state.name.lower()
        return f"<Twin {self.request.flow_schema}/{self.request.priority_level} {state}>"
