"""The shell's periodic work as jobs, and the one scheduler that runs those that fell due.

A limiter runs no background task. Its periodic work (the borrowing adjustments, the
configuration file's checks, the adaptive limit's updates) rides on the calls that come anyway:
every admission and release compares ``now`` with :attr:`Scheduler.next_check`, the earliest
time any job is due, and only when it passed calls :meth:`Scheduler.run_due`. Each job says
when it is next due (:attr:`Job.next_run`) and what to do then (:meth:`Job.run`); it moves its
own time with :meth:`Scheduler.schedule`, which keeps ``next_check`` the earliest of them. So a
new periodic feature is one more job registered with :meth:`Scheduler.add`: neither the request
path nor this module changes.
"""

from __future__ import annotations

import math
from typing import Final, Protocol

#: A time that never comes: the due time of a job with nothing to do.
NEVER: Final = math.inf


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

    Attributes:
        next_check: The earliest :attr:`Job.next_run` of the jobs: the one comparison on the
            fast path (:data:`NEVER` without jobs).
    """

    __slots__ = ("_jobs", "next_check")

    def __init__(self) -> None:
        self._jobs: list[Job] = []
        self.next_check = NEVER

    @property
    def jobs(self) -> tuple[Job, ...]:
        """The jobs, in the order they run when several are due."""
        return tuple(self._jobs)

    def add(self, job: Job, *, first: bool = False) -> None:
        """Register ``job``, due at its ``next_run``; ``first``: it runs before the others.

        A job that changes what the others work with (a new configuration) comes first, so
        that what runs after it in the same call runs under the change.
        """
        if first:
            self._jobs.insert(0, job)
        else:
            self._jobs.append(job)
        self._refresh()

    def remove(self, job: Job) -> None:
        """Unregister ``job`` (it is not run again)."""
        self._jobs.remove(job)
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

    def _refresh(self) -> None:
        next_check = NEVER
        for job in self._jobs:
            due = job.next_run
            if due < next_check:
                next_check = due
        self.next_check = next_check
