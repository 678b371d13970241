"""The shell's periodic work as jobs, and the one scheduler that runs those that fell due.

A limiter runs no background task. Its periodic work (the borrowing adjustments, the
configuration file's checks, the adaptive limit's updates) rides on the calls that come anyway:
every admission and release compares ``now`` with :attr:`Scheduler.next_check`, the earliest
time any job is due, and only when it passed calls :meth:`Scheduler.run_due`. Each job says
when it is next due (:attr:`Job.next_run`) and what to do then (:meth:`Job.run`); it moves its
own time with :meth:`Scheduler.schedule`, which keeps ``next_check`` the earliest of them. So a
new periodic feature is one more job registered with :meth:`Scheduler.add`: neither the request
path nor this module changes.

A quiet server makes no calls, so the jobs registered with ``timed=True`` (the configuration
file's checks: a change from outside the requests) also run on one event-loop timer, armed for
the earliest of them while an event loop runs and re-armed as they are scheduled
(:meth:`Scheduler.arm`); none is armed while no timed job is due. Outside an event loop nothing
can be armed, and the jobs run on the next call as before. The other jobs need no timer: a late
borrowing adjustment is replayed exactly (the demand did not change since), and while requests
wait their own timer runs them; the adaptive limit learns only from requests that finish, so a
quiet server has nothing to update it with. Every read of the limiter's state (the dashboard,
the dumps, the scrape) runs the due work first (``Limiter.run_due``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, Protocol

from apf_limiter._clock import current_loop

if TYPE_CHECKING:
    from apf_limiter._clock import Clock, Timer

#: A time that never comes: the due time of a job with nothing to do.
NEVER: Final = math.inf

#: The shortest delay of the scheduler's timer: a job that stays due after it ran (a file check
#: still running on its worker thread) is looked at again this much later, not in a busy loop.
MIN_TIMER_DELAY: Final = 0.02


class Job(Protocol):
    """A piece of periodic work, run by the :class:`Scheduler` when it falls due.

    Attributes:
        next_run: When the job is next due (:data:`NEVER`: not until it schedules itself
            again). Set it only through :meth:`Scheduler.schedule`, which keeps the fast path's
            one comparison up to date.
    """

    next_run: float

    def run(self, now: float) -> None:
        """Do the work that fell due by ``now``, and schedule the next run.

        It runs inside whichever call into the limiter came due (a release, say): it must
        not raise for anything but a bug, or that call would fail with it.
        """


class Scheduler:
    """Runs a limiter's jobs: those due, in the order they were added, on the next call.

    Args:
        clock: Sets the timer of the timed jobs; ``None``: no timer (jobs run on calls only).

    Attributes:
        next_check: The earliest :attr:`Job.next_run` of the jobs: the one comparison on the
            fast path (:data:`NEVER` without jobs).
        closed: Whether :meth:`close` was called: no timer is armed any more.
    """

    __slots__ = (
        "_jobs",
        "_timed",
        "next_check",
        "closed",
        "_clock",
        "_timer",
        "_timer_due",
        "_timer_loop",
        "_timer_arming",
    )

    def __init__(self, clock: Clock | None = None) -> None:
        self._jobs: list[Job] = []
        self._timed: list[Job] = []
        self.next_check = NEVER
        self.closed = False
        self._clock = clock
        self._timer: Timer | None = None
        self._timer_due = NEVER  # the due time the timer was set for
        self._timer_loop: object | None = None  # the event loop it was set in
        # Which arming the timer belongs to: a replaced timer that fires after all sees
        # another number and does nothing.
        self._timer_arming = 0

    @property
    def jobs(self) -> tuple[Job, ...]:
        """The jobs, in the order they run when several are due."""
        return tuple(self._jobs)

    @property
    def timer_due(self) -> float:
        """When the timer fires (:data:`NEVER`: no timer is armed)."""
        return self._timer_due

    def add(self, job: Job, *, first: bool = False, timed: bool = False) -> None:
        """Register ``job``, due at its ``next_run``; ``first``: it runs before the others.

        A job that changes what the others work with (a new configuration) comes first, so
        that what runs after it in the same call runs under the change. A ``timed`` job also
        runs on the scheduler's timer, without a call into the limiter.
        """
        if first:
            self._jobs.insert(0, job)
        else:
            self._jobs.append(job)
        if timed:
            self._timed.append(job)
        self._refresh()

    def remove(self, job: Job) -> None:
        """Unregister ``job`` (it is not run again)."""
        self._jobs.remove(job)
        if job in self._timed:
            self._timed.remove(job)
        self._refresh()

    def schedule(self, job: Job, due: float) -> None:
        """Set when ``job`` is next due (:data:`NEVER`: not on its own)."""
        job.next_run = due
        self._refresh()

    def run_due(self, now: float) -> None:
        """Run every job due by ``now``, in order.

        Each job is looked at once, after the ones before it ran: a job that the one before
        made due (or not due) is run (or not) accordingly.
        """
        jobs = self._jobs
        for job in tuple(jobs):
            if now >= job.next_run and job in jobs:  # not removed by a job before it
                job.run(now)

    def arm(self) -> None:
        """Arm the timer for the earliest timed job, in the running event loop.

        Kept when it is set in this loop for that time; cancelled when no timed job is due
        (or the scheduler is closed); left alone outside an event loop, where none can be set
        (the jobs then run on the next call into the limiter).
        """
        clock = self._clock
        if clock is None:
            return
        due = NEVER
        for job in self._timed:
            if job.next_run < due:
                due = job.next_run
        if self.closed or due == NEVER:
            self.cancel_timer()
            return
        loop = current_loop()
        if loop is None:
            return
        if self._timer is not None:
            if loop is self._timer_loop and due == self._timer_due:
                return
            self.cancel_timer()
        self._timer_arming = arming = self._timer_arming + 1
        delay = due - clock.now()
        self._timer = clock.call_later(max(delay, MIN_TIMER_DELAY), self._on_timer, arming)
        self._timer_due = due
        self._timer_loop = loop

    def _on_timer(self, arming: int) -> None:
        if arming != self._timer_arming or self._timer is None or self._clock is None:
            return  # replaced or cancelled
        due = self._timer_due
        self._timer = None
        self._timer_due = NEVER
        self._timer_loop = None
        # The timer was set for ``due``: a clock reading a hair before it (a FakeClock rounds
        # delays to whole nanoseconds) must not leave the job undone.
        now = self._clock.now()
        self.run_due(max(now, due))
        self.arm()  # a job still due (a check running on its thread) is looked at later

    def cancel_timer(self) -> None:
        """Stop the timer, if one is set."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_due = NEVER
            self._timer_loop = None

    def close(self) -> None:
        """Cancel the timer and arm no other (the jobs still run on calls into the limiter)."""
        self.closed = True
        self.cancel_timer()

    def _refresh(self) -> None:
        next_check = NEVER
        for job in self._jobs:
            due = job.next_run
            if due < next_check:
                next_check = due
        self.next_check = next_check
        if self._timed:
            self.arm()
