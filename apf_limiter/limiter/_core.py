"""The shell's core: the request path that :class:`Admission` and shadow twins call.

:class:`~apf_limiter.limiter._limiter.Limiter` holds a :class:`Core` (and adds the public API):
this module has what runs for each request (arrive, queue, finish, abandon, reject) and what
acts on the engine's :class:`~apf_limiter.engine._effects.Effects` (wake the waiters, report
levels and limits). Its public methods are the internal protocol of the request path: what
:class:`~apf_limiter.limiter._admission.Admission` calls, and, as
:class:`~apf_limiter.limiter._shadow.TwinHost`, what a shadow twin calls. Periodic work is not
here: each piece is a job of the :class:`~apf_limiter.limiter._scheduler.Scheduler`, which the
request path runs when ``now`` passes its ``next_check``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from apf_limiter._clock import Clock, RealClock, Timer, Wakeable, new_waiter
from apf_limiter._digest import RequestDigest
from apf_limiter._errors import ConfigError, Rejected
from apf_limiter.config._model import Configuration
from apf_limiter.engine._classifier import Classifier
from apf_limiter.engine._controller import Controller
from apf_limiter.engine._effects import NO_EFFECTS, Effects
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.limiter._adapting import AdaptiveJob, adapter_for
from apf_limiter.limiter._adjustments import Adjustments
from apf_limiter.limiter._reporter import Reporter
from apf_limiter.limiter._scheduler import Scheduler
from apf_limiter.limiter._shadow import DEFAULT_MAX_SHADOW_TWINS, Twins

if TYPE_CHECKING:
    from apf_limiter._observer import Observer
    from apf_limiter.config._sources import ConfigSource

_EXECUTING: Final = RequestState.EXECUTING
_WAITING: Final = RequestState.WAITING
_TIMED_OUT: Final = RequestState.TIMED_OUT
_LINGERING: Final = RequestState.LINGERING

logger = logging.getLogger("apf_limiter")


class HoldsCore:
    """What an admission is built from: a :class:`~apf_limiter.Limiter`, which holds its core.

    Only declares the attribute, so that an admission reads it directly (compiled, a field
    rather than a lookup by name); the core itself is held, not inherited.

    Attributes:
        _core: The limiter's request path.
    """

    _core: Core


class Core:
    """A limiter's parts and the request path; :class:`Limiter` holds one and adds the API.

    It takes the arguments of :class:`Limiter`, which documents them.

    Attributes:
        config: The configuration in force, as given (the controller's holds the adaptive
            limit's ServerCL).
        clock: The limiter's clock.
        now: Reads the clock (the real clock's function itself, on the real clock).
        hash_seed: The seed of the flow hash.
        reporter: Observer events and logs.
        controller: The engine.
        scheduler: Runs the periodic work (jobs) that fell due.
        adjustments: The borrowing adjustments (a job) and the release timers.
        adaptive: The adaptive limit's updates (a job; its adapter ``None`` when off).
        adapter: The adaptive limit, or ``None`` when off.
        twins: The shadow twins, and how many outlive their requests.
        loop: The asyncio event loop requests last arrived in (``None``: none yet, or only
            outside one); see :meth:`claim_loop`.
    """

    def __init__(
        self,
        config: ConfigSource | None,
        clock: Clock | None,
        hash_seed: int | None,
        observer: Observer | None,
        max_shadow_twins: int = DEFAULT_MAX_SHADOW_TWINS,
    ) -> None:
        # Shadow mode: twins that outlive their real requests, and how many may (_shadow.py).
        self.twins = Twins(self, max_shadow_twins)
        self.reporter = Reporter(observer)
        # A bad first configuration raises: there is nothing to keep.
        self.config = load_configuration(config)
        self.clock: Clock = clock if clock is not None else RealClock()
        # Read on every admission and release: the real clock's function itself, one C call
        # instead of a method calling it.
        self.now: Callable[[], float] = (
            time.monotonic if type(self.clock) is RealClock else self.clock.now
        )
        if hash_seed is not None and (type(hash_seed) is bool or not isinstance(hash_seed, int)):
            raise TypeError(f"hash_seed must be an integer or None, got {hash_seed!r}")
        self.hash_seed = secrets.randbits(64) if hash_seed is None else hash_seed
        now = self.clock.now()
        # adaptiveConcurrency: the controller runs with the learned ServerCL (_adapting.py).
        # Also the job's (self.adaptive.adapter): held here for finish()'s one check when off.
        self.adapter = adapter = adapter_for(self.config, None, now)
        effective = self.config if adapter is None else adapter.effective(self.config)
        self.controller = Controller(effective, hash_seed=self.hash_seed, now=now)
        # The periodic work, each piece a job (the configuration file's checks join with
        # Limiter.from_file).
        self.scheduler = scheduler = Scheduler(self.clock)
        self.adjustments = Adjustments(
            self.clock, self.controller, self.settle, self.config.borrowing_period, now, scheduler
        )
        self.adaptive = AdaptiveJob(adapter, self.config, self.controller, self.settle, scheduler)
        # Requests dispatched to tasks that died with their event loop, to finish (_wake).
        self._orphans: list[Request] = []
        self._finishing_orphans = False
        # Bound once: every waiting request's wait-limit timer holds it, and binding it per
        # timer would cost each waiting request another 64 bytes.
        self._wait_limit_callback = self._on_wait_limit
        self.loop: object | None = None
        self.reporter.applied_config(self.config)

    def claim_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve requests from ``loop`` from now on, unless the loop served runs in another thread.

        A limiter belongs to one event loop at a time: its waiters are that loop's futures,
        and its engine has no lock. A request from a second thread's loop while the first
        still runs would queue unnoticed (woken from the wrong thread, its loop sleeps on
        until its wait limit, the seats idle) while both threads change the queues. A loop
        that stopped (``asyncio.run`` after ``asyncio.run``, a test's loop) hands over.

        Raises:
            RuntimeError: If the loop served is still running (in another thread: a thread
                runs one loop at a time). Nothing is admitted.
        """
        owner = self.loop
        if (
            isinstance(owner, asyncio.AbstractEventLoop)
            and owner.is_running()
            and not owner.is_closed()
        ):
            raise RuntimeError(
                "this Limiter is in use by an event loop running in another thread: a "
                "Limiter serves one event loop at a time. Admit the request in that loop "
                "(asyncio.run_coroutine_threadsafe) or give each thread its own Limiter"
            )
        self.loop = loop

    def reconfigure(self, config: ConfigSource, ready: Classifier | None = None) -> None:
        """Apply a new configuration atomically; queued and executing requests survive.

        Everything is validated first: an invalid configuration raises :class:`ConfigError`
        and changes nothing. Then levels are reconfigured (removed busy levels drain first),
        the flow schemas re-sorted and a borrowing adjustment run.

        Args:
            config: The new configuration.
            ready: The classifier of ``config``, built beforehand (``Controller.prepare``, by
                the reload's worker thread), or ``None`` to build it here.

        Raises:
            ConfigError: If the configuration is invalid.
        """
        try:
            loaded = load_configuration(config)
        except ConfigError as exc:
            self.reporter.rejected_config(exc, source=config)
            raise
        now = self.clock.now()
        adjustments = self.adjustments
        adjustments.catch_up(now)
        self.adapter = adapter = adapter_for(loaded, self.adapter, now)
        effects = self.controller.apply(
            loaded if adapter is None else adapter.effective(loaded), now, ready
        )
        self.adaptive.configure(adapter, loaded)
        previous, self.config = self.config, loaded
        adjustments.set_period(loaded.borrowing_period, now)
        self._wake(effects.dispatched)
        adjustments.arm_borrowing_timer(now)
        self.reporter.applied_config(loaded, previous)
        for name in effects.quiescing_levels:
            self.reporter.quiescing(name)
        self._report_limits(effects)

    def run_due(self) -> float:
        """Run the periodic work that fell due (the jobs); the current time."""
        now = self.now()
        scheduler = self.scheduler
        if now >= scheduler.next_check:
            scheduler.run_due(now)
        return now

    def arrive(self, digest: RequestDigest) -> Request:
        """Start a request: on return it executes, waits, or was rejected (nothing reported)."""
        now = self.now()
        scheduler = self.scheduler
        if now >= scheduler.next_check:  # run_due(), inline: one comparison on the fast path
            scheduler.run_due(now)
        controller = self.controller
        request, effects = controller.start(digest, now)
        reporter = self.reporter
        observer = reporter.observer
        if observer is not None:
            # Inline, not notify(): free unless it raises (zero-cost try), on the fast path.
            try:
                observer.request_arrived(
                    request.priority_level, request.flow_schema, request.max_seats
                )
            except Exception:
                reporter.failed("request_arrived")
        if effects is not NO_EFFECTS:
            self._wake(effects.dispatched)
        state = request.state
        if state is _EXECUTING:
            if observer is not None:
                reporter.dispatched(request, 0.0, controller.is_exempt(request))
                if controller.is_shadow(request):
                    reporter.shadowed(request, 0.0, None)  # would have run at once too
            return request
        if state is not _WAITING:
            return request  # rejected: Admission.start raises
        if observer is not None:
            reporter.notify(
                "request_enqueued",
                request.priority_level,
                request.flow_schema,
                request.queue_length_after_enqueue,
            )
        opened = controller.open_level(request, now)
        if opened is not NO_EFFECTS:
            self.settle(opened)
            if request.state is _EXECUTING and observer is not None:
                reporter.dispatched(request, 0.0, False)
                if controller.is_shadow(request):
                    reporter.shadowed(request, 0.0, None)
        return request

    def queue(
        self, request: Request, wait_limit: float | None, handle: Wakeable | None = None
    ) -> Timer:
        """Set up a waiting request's waiter (``handle``: a shadow twin) and wait-limit timer."""
        if wait_limit is None:
            wait_limit = self.config.request_wait_limit
        try:
            request.handle = new_waiter() if handle is None else handle
            timer = self.clock.call_later(wait_limit, self._wait_limit_callback, request)
        except BaseException:
            # No event loop to wait in: leave nothing behind in the queue (a request nobody
            # waits for would take its seats once dispatched, and never give them back).
            self.abandon(request)
            raise
        self.adjustments.arm_borrowing_timer(self.clock.now())
        return timer

    def finish(self, request: Request, *, ran: bool = True, report: bool = True) -> None:
        """End an executing request; ``report=False`` for a shadow twin (its real one did)."""
        now = self.now()
        scheduler = self.scheduler
        if now >= scheduler.next_check:  # run_due(), inline: one comparison on the fast path
            scheduler.run_due(now)
        reporter = self.reporter
        observer = reporter.observer
        if observer is not None and report:
            # A request dispatched by a borrowing adjustment starts at the adjustment's due
            # time, which can read a hair (float rounding) after the clock: never report a
            # negative execution time.
            executed = now - request.start_time
            try:  # inline, as in arrive
                observer.request_finished(
                    request.priority_level,
                    request.flow_schema,
                    executed if executed > 0.0 else 0.0,
                )
            except Exception:
                reporter.failed("request_finished")
        if self.adapter is not None and ran and report:
            self._sample(request, now)
        effects = self.controller.finish(request, now, ran)  # positional: every release
        if request.state is _LINGERING:
            self.adjustments.arm_release(request)
        if effects is not NO_EFFECTS:
            self.settle(effects)  # skipped on the fast path: nothing to wake or report

    def _sample(self, request: Request, now: float) -> None:
        """Feed the adaptive limit a request that ran (exempt ones say nothing of the limit)."""
        if self.adapter is not None and not self.controller.is_exempt(request):
            latency = now - request.start_time
            self.adapter.learned.sample(
                request.priority_level, latency if latency > 0.0 else 0.0, request.max_seats
            )

    def finish_unrun(self, request: Request) -> None:
        """Count a dispatched request that will never run as dispatched and finished at once.

        Its seats go to the next request at once: it holds no additional latency.
        """
        self.reporter.dispatched(request, request.start_time - request.arrival_time, False)
        self.finish(request, ran=False)

    def dispatched(self, request: Request, queue_wait: float) -> None:
        """Report that a request that waited ``queue_wait`` seconds holds its seats."""
        self.reporter.dispatched(request, queue_wait, False)

    def is_shadow(self, request: Request) -> bool:
        """Whether the request's level is in shadow mode."""
        return self.controller.is_shadow(request)

    def withdraw(self, request: Request, now: float) -> None:
        """Take a waiting request out of its queue, without telling the observer."""
        self.settle(self.controller.cancel(request, now, timed_out=False))

    def abandon(self, request: Request) -> None:
        """The waiting task was cancelled: take the request out, or hand its seats back."""
        now = self.clock.now()
        # Run the adjustments that fell due before reading the state: one of them may have
        # dispatched the request, whose seats must then be handed back.
        self.adjustments.catch_up(now)
        state = request.state
        if state is _WAITING:
            self.withdraw(request, now)
            if self.reporter.observer is not None:
                self.reporter.notify(
                    "request_cancelled",
                    request.priority_level,
                    request.flow_schema,
                    now - request.arrival_time,
                )
        elif state is _EXECUTING:
            # Dispatched while the cancellation was on its way.
            self.finish_unrun(request)
        elif state is _TIMED_OUT:
            # Its wait limit passed just before the cancellation reached the waiting task:
            # the time-out is what happened. Report it as the woken task would have (the
            # observer, the log); the cancellation propagates.
            self.rejected(request, now)

    def rejection(self, request: Request) -> Rejected:
        """The exception for a rejection reported already (Retry-After as it is now)."""
        return _rejection(request, self.controller.retry_after(request), self.config)

    def rejected(self, request: Request, now: float, waited: float | None = None) -> Rejected:
        """Report a rejection (observer, log) and return its exception.

        ``waited`` is the time the request spent waiting, when it ended before ``now``.
        """
        waited = now - request.arrival_time if waited is None else waited
        self.reporter.rejected(request, waited, self.controller.is_exempt(request))
        return _rejection(request, request.retry_after, self.config)

    # ----------------------------------------------------------------------------------------
    # acting on the engine's effects

    def _on_wait_limit(self, request: Request) -> None:
        if request.state is not _WAITING:
            return
        now = self.clock.now()
        # The adjustments that fell due come first, and one of them may dispatch this very
        # request (its level's limit went up): then it has not timed out.
        self.adjustments.catch_up(now)
        if request.state is not _WAITING:
            return
        self.settle(self.controller.cancel(request, now, timed_out=True))
        request.handle.set()

    def settle(self, effects: Effects) -> None:
        """Act on what an engine call changed: wake, then report levels and limits."""
        if effects.dispatched:
            self._wake(effects.dispatched)
        if effects.removed_levels:
            self.reporter.removed_levels(effects.removed_levels)
        self._report_limits(effects)

    def _report_limits(self, effects: Effects) -> None:
        if effects.limit_changes:
            controller = self.controller
            self.reporter.borrowing(
                effects.limit_changes, controller.fair_fraction, controller.borrowing_regime
            )

    def _wake(self, dispatched: Sequence[Request]) -> None:
        """Wake the tasks waiting for the requests just dispatched."""
        orphans: list[Request] | None = None
        for request in dispatched:
            waiter = request.handle
            if waiter is not None and not waiter.set():
                orphans = self._orphans
                orphans.append(request)
        if orphans is None or self._finishing_orphans:
            # None, or an outer call is finishing them: one after another, so that a long
            # line of them is a loop, not a recursion (each finish dispatches the next).
            return
        self._finishing_orphans = True
        try:
            while orphans:
                request = orphans.pop(0)
                # Its task is gone with a loop closed without cancelling its tasks
                # (asyncio.run cancels them; a hand-run loop may not), so it would hold its
                # seats for good. Unless the task's coroutine, closed meanwhile by the
                # garbage collector, has given them back already.
                if request.state is _EXECUTING:
                    self.reporter.orphan(request)
                    self.finish_unrun(request)
        finally:
            self._finishing_orphans = False


def _rejection(request: Request, retry_after: int, config: Configuration) -> Rejected:
    reason: Any = request.reject_reason
    level = request.priority_level
    # Most configurations name no level: the one comparison on an overloaded server's path.
    status = (
        config.rejection_status_of(level)
        if config.priority_level_rejection_status
        else config.rejection_status
    )
    return Rejected(
        reason,
        priority_level=level,
        flow_schema=request.flow_schema,
        retry_after=retry_after,
        status=status,
        distinguisher=request.distinguisher,
    )


def load_configuration(config: ConfigSource | None) -> Configuration:
    """Load a configuration source (``None``: the built-in one); the loader loads at first use."""
    from apf_limiter.config._sources import load_source

    return load_source(config)
