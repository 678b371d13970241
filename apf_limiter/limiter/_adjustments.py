"""The borrowing adjustments as a job: catch-up, their timer, lost-loop recovery, final seats.

Borrowing adjustments need no background task. While requests wait in queues a timer runs them
every ``borrowingPeriod``; otherwise the adjustments that fell due are replayed (exactly, since
the demand did not change) at the next call into the limiter, by :meth:`Adjustments.catch_up`
(the job's :meth:`~Adjustments.run`, which the scheduler calls when it falls due).
A timer can be lost with an event loop that ended (a limiter outliving ``asyncio.run``): a timer
set in another loop, or due and not fired, is replaced, and final seats whose release timer was
lost come back a period late: the catch-up releases them after the adjustments it replays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from apf_limiter._clock import Clock, Timer, current_loop
from apf_limiter.engine._controller import Controller
from apf_limiter.engine._effects import Effects
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.limiter._scheduler import NEVER, Scheduler

_LINGERING: Final = RequestState.LINGERING
_MAX_REPLAYED_ADJUSTMENTS: Final = 1000


class Adjustments:
    """A limiter's borrowing adjustments (a :class:`~._scheduler.Job`) and its release timers.

    It registers itself with ``scheduler``.

    Args:
        clock: The limiter's clock.
        controller: The engine.
        settle: Acts on what an engine call changed (wakes waiters, reports).
        period: Seconds between borrowing adjustments.
        now: The current time.
        scheduler: Runs the adjustments when they fall due on a call into the limiter.

    Attributes:
        next_run: When the next borrowing adjustment falls due.
        closed: Whether the limiter was closed (no borrowing timer is set then).
    """

    def __init__(
        self,
        clock: Clock,
        controller: Controller,
        settle: Callable[[Effects], None],
        period: float,
        now: float,
        scheduler: Scheduler,
    ) -> None:
        self._clock = clock
        self._controller = controller
        self._settle = settle
        self._scheduler = scheduler
        self.period = period
        self.next_run = now + period
        self.closed = False
        self.borrowing_timer: Timer | None = None
        self.borrowing_timer_due = NEVER  # the adjustment the borrowing timer was set for
        # Which arming the borrowing timer belongs to: a replaced timer that fires after all
        # sees another number and does nothing (no second chain of timers).
        self.borrowing_timer_arming = 0
        self.borrowing_timer_loop: object | None = None  # the event loop it was set in
        scheduler.add(self)

    def run(self, now: float) -> None:
        """The job: run the adjustments that fell due (see :meth:`catch_up`)."""
        self.catch_up(now)

    def schedule_adjustment(self, due: float) -> None:
        """Set when the next adjustment falls due."""
        self._scheduler.schedule(self, due)

    def set_period(self, period: float, now: float) -> None:
        """Take a new borrowing period: the next adjustment is a whole period from now."""
        if period != self.period:
            self.period = period
            self.schedule_adjustment(now + period)
            self.cancel_borrowing_timer()

    def adjust(self, now: float) -> None:
        """Run one borrowing adjustment now and act on it."""
        self._settle(self._controller.adjust_borrowing(now))

    def catch_up(self, now: float) -> None:
        """Run the borrowing adjustments that fell due up to ``now``."""
        if now < self.next_run:
            return
        replayed = 0
        # The schedule moves on before each adjustment runs: an adjustment may finish a
        # request (one whose task died with its event loop), and that finish's own
        # check of the due jobs must find this adjustment done rather than run it again.
        while True:
            due = self.next_run
            if due > now:
                break
            period = self.period
            if replayed >= _MAX_REPLAYED_ADJUSTMENTS:
                # A long idle stretch: the smoothed demand has long decayed; resume on the grid.
                self.schedule_adjustment(due + period * math.ceil((now - due) / period + 1e-9))
                self.adjust(now)
                break
            self.schedule_adjustment(due + period)
            # Nothing changed since the last event, so adjusting "late" at the due time is
            # exactly what a timer would have done.
            self.adjust(due)
            replayed += 1
        # Seats whose additional latency ended a whole period ago: their timers were lost
        # with an event loop that has ended (a limiter outliving asyncio.run).
        self._release_lost_lingering(now - self.period)

    def _release_lost_lingering(self, overdue: float) -> None:
        """Release the final seats that were due back by ``overdue`` (their timers are lost)."""
        now = self._clock.now()
        for request in self._controller.overdue_lingering(overdue):
            self._settle(self._controller.release(request, now))

    def arm_borrowing_timer(self, now: float) -> None:
        """Make sure a timer runs the next adjustment while requests wait."""
        timer = self.borrowing_timer
        loop = current_loop()
        if timer is not None:
            if loop is None or (
                now < self.borrowing_timer_due and loop is self.borrowing_timer_loop
            ):
                # Kept: set in this loop and not yet due; or called from synchronous code,
                # where no timer could be set to replace it.
                return
            # Set in another event loop, which may have ended (a limiter outliving
            # asyncio.run) and taken the timer with it; or due and not fired: lost the same
            # way, or late on a busy loop. The caller has run the adjustments due
            # (catch_up), so set a timer for the next one in the running loop; the old one
            # does nothing should it fire after all.
            self.cancel_borrowing_timer()
        # A closed limiter runs no borrowing timer; its adjustments are replayed at the next
        # call into it, as when no request waits.
        if not self.closed and self._controller.waiting_requests:
            self.borrowing_timer_arming = arming = self.borrowing_timer_arming + 1
            self.borrowing_timer = self._clock.call_later(
                self.next_run - now, self._on_borrowing_timer, arming
            )
            self.borrowing_timer_due = self.next_run
            self.borrowing_timer_loop = loop

    def _on_borrowing_timer(self, arming: int) -> None:
        if arming != self.borrowing_timer_arming or self.borrowing_timer is None:
            return  # replaced (given up for lost) or cancelled: another timer, or none, runs
        due = self.borrowing_timer_due
        self.borrowing_timer = None
        self.borrowing_timer_due = NEVER
        self.borrowing_timer_loop = None
        now = self._clock.now()
        # The timer was set for an adjustment, so that one is due, even when the clock reads a
        # hair before it (a FakeClock rounds delays to whole nanoseconds; asyncio fires timers
        # within its clock resolution): otherwise it would re-arm itself for ~0 s, forever.
        # Not any later one: a call may have run this adjustment already.
        self.catch_up(max(now, due) if due != NEVER else now)
        self.arm_borrowing_timer(now)

    def cancel_borrowing_timer(self) -> None:
        """Stop the borrowing timer, if one is set."""
        if self.borrowing_timer is not None:
            self.borrowing_timer.cancel()
            self.borrowing_timer = None
            self.borrowing_timer_due = NEVER
            self.borrowing_timer_loop = None

    def arm_release(self, request: Request) -> None:
        """Set the timer that gives a lingering request's final seats back."""
        try:
            self._clock.call_later(request.additional_latency, self._release, request)
        except RuntimeError:
            if current_loop() is not None:
                raise
            # Finished outside any event loop (a request whose task died with its loop,
            # finished by a call from synchronous code): no timer can be set. The first
            # borrowing adjustment a period after release_at gives the seats back
            # (_release_lost_lingering), as for a timer lost with its loop.

    def _release(self, request: Request) -> None:
        if request.state is not _LINGERING:
            return  # released already, its timer given up for lost (_release_lost_lingering)
        now = self._clock.now()
        self.catch_up(now)
        if request.state is _LINGERING:  # the catch-up may have released it, a period late
            self._settle(self._controller.release(request, now))
