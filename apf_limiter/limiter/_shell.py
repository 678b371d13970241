"""The request path of the shell: the narrow calls of :class:`Admission`, and acting on effects.

:class:`~apf_limiter.limiter._limiter.Limiter` builds on :class:`Shell`: this module has what
runs for each request (start, queue, finish, abandon, reject) and what acts on the engine's
:class:`~apf_limiter.engine._effects.Effects` (wake the waiters, report levels and limits), the
housekeeping that runs inside those calls when due, and acting on what a check of the
configuration file found (:mod:`._reload` reads and parses it on a worker thread).
"""

from __future__ import annotations

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
from apf_limiter.limiter._adapting import adapter_for
from apf_limiter.limiter._reload import Reloader
from apf_limiter.limiter._reporter import Reporter
from apf_limiter.limiter._scheduler import NEVER, Scheduler

if TYPE_CHECKING:
    from apf_limiter._observer import Observer
    from apf_limiter.config._sources import ConfigSource

_EXECUTING: Final = RequestState.EXECUTING
_WAITING: Final = RequestState.WAITING
_TIMED_OUT: Final = RequestState.TIMED_OUT
_LINGERING: Final = RequestState.LINGERING

logger = logging.getLogger("apf_limiter")

#: In shadow mode, the virtual twins that may outlive their requests at once, by default
#: (``limiter/_shadow.py``).
DEFAULT_MAX_SHADOW_TWINS: Final = 10_000


class Shell:
    """A limiter's parts and the code that acts for requests; :class:`Limiter` adds the API.

    It takes the arguments of :class:`Limiter`, which documents them.
    """

    def __init__(
        self,
        config: ConfigSource | None,
        clock: Clock | None,
        hash_seed: int | None,
        observer: Observer | None,
        max_shadow_twins: int = DEFAULT_MAX_SHADOW_TWINS,
    ) -> None:
        if type(max_shadow_twins) is not int or max_shadow_twins < 0:
            raise ValueError(
                f"max_shadow_twins must be a non-negative integer, got {max_shadow_twins!r}"
            )
        # Shadow mode: twins that outlive their real requests, and how many may (_shadow.py).
        self._outliving_twins = 0
        self._max_shadow_twins = max_shadow_twins
        self._reporter = Reporter(observer)
        # A bad first configuration raises: there is nothing to keep.
        self._config = load_configuration(config)
        self._clock: Clock = clock if clock is not None else RealClock()
        # Read on every admission and release: the real clock's function itself, one C call
        # instead of a method calling it.
        self._now: Callable[[], float] = (
            time.monotonic if type(self._clock) is RealClock else self._clock.now
        )
        if hash_seed is not None and (type(hash_seed) is bool or not isinstance(hash_seed, int)):
            raise TypeError(f"hash_seed must be an integer or None, got {hash_seed!r}")
        self._hash_seed = secrets.randbits(64) if hash_seed is None else hash_seed
        now = self._clock.now()
        # adaptiveConcurrency: the controller runs with the learned ServerCL (_adapting.py).
        self._adapter = adapter = adapter_for(self._config, None, now)
        effective = self._config if adapter is None else adapter.effective(self._config)
        self._controller = Controller(effective, hash_seed=self._hash_seed, now=now)
        self._scheduler = Scheduler(
            self._clock, self._controller, self._settle, self._config.borrowing_period, now
        )
        self._scheduler.schedule_adaptive(NEVER if adapter is None else adapter.next_update)
        self._reloader: Reloader | None = None  # set by Limiter.from_file
        # Requests dispatched to tasks that died with their event loop, to finish (_wake).
        self._orphans: list[Request] = []
        self._finishing_orphans = False
        # Bound once: every waiting request's wait-limit timer holds it, and binding it per
        # timer would cost each waiting request another 64 bytes.
        self._wait_limit_callback = self._on_wait_limit
        self._reporter.applied_config(self._config)

    def reconfigure(self, config: ConfigSource) -> None:
        """Apply a new configuration atomically; queued and executing requests survive.

        Everything is validated first: an invalid configuration raises :class:`ConfigError`
        and changes nothing. Then levels are reconfigured (removed busy levels drain first),
        the flow schemas re-sorted and a borrowing adjustment run.

        Raises:
            ConfigError: If the configuration is invalid.
        """
        self._reconfigure(config, None)

    def _reconfigure(self, config: ConfigSource, ready: Classifier | None) -> None:
        """:meth:`reconfigure` (``ready``: the classifier of ``config``, built beforehand)."""
        try:
            loaded = load_configuration(config)
        except ConfigError as exc:
            self._reporter.rejected_config(exc, source=config)
            raise
        now = self._clock.now()
        scheduler = self._scheduler
        scheduler.catch_up(now)
        self._adapter = adapter = adapter_for(loaded, self._adapter, now)
        effects = self._controller.apply(
            loaded if adapter is None else adapter.effective(loaded), now, ready
        )
        scheduler.schedule_adaptive(NEVER if adapter is None else adapter.next_update)
        previous, self._config = self._config, loaded
        scheduler.set_period(loaded.borrowing_period, now)
        self._wake(effects.dispatched)
        scheduler.arm_borrowing_timer(now)
        self._reporter.applied_config(loaded, previous)
        for name in effects.quiescing_levels:
            self._reporter.quiescing(name)
        self._report_limits(effects)

    def _arrive(self, digest: RequestDigest) -> Request:
        """Start a request: on return it executes, waits, or was rejected (nothing reported)."""
        now = self._now()
        scheduler = self._scheduler
        if now >= scheduler.next_check:
            self._housekeeping(now)
        controller = self._controller
        request, effects = controller.start(digest, now)
        reporter = self._reporter
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
            self._settle(opened)
            if request.state is _EXECUTING and observer is not None:
                reporter.dispatched(request, 0.0, False)
                if controller.is_shadow(request):
                    reporter.shadowed(request, 0.0, None)
        return request

    def _queue(
        self, request: Request, wait_limit: float | None, handle: Wakeable | None = None
    ) -> Timer:
        """Set up a waiting request's waiter (``handle``: a shadow twin) and wait-limit timer."""
        if wait_limit is None:
            wait_limit = self._config.request_wait_limit
        try:
            request.handle = new_waiter() if handle is None else handle
            timer = self._clock.call_later(wait_limit, self._wait_limit_callback, request)
        except BaseException:
            # No event loop to wait in: leave nothing behind in the queue (a request nobody
            # waits for would take its seats once dispatched, and never give them back).
            self._abandon(request)
            raise
        self._scheduler.arm_borrowing_timer(self._clock.now())
        return timer

    def _finish(self, request: Request, *, ran: bool = True, report: bool = True) -> None:
        """End an executing request; ``report=False`` for a shadow twin (its real one did)."""
        now = self._now()
        if now >= self._scheduler.next_check:
            self._housekeeping(now)
        reporter = self._reporter
        observer = reporter.observer
        if observer is not None and report:
            # A request dispatched by a borrowing adjustment starts at the adjustment's due
            # time, which can read a hair (float rounding) after the clock: never report a
            # negative execution time.
            executed = now - request.start_time
            try:  # inline, as in _arrive
                observer.request_finished(
                    request.priority_level,
                    request.flow_schema,
                    executed if executed > 0.0 else 0.0,
                )
            except Exception:
                reporter.failed("request_finished")
        if self._adapter is not None and ran and report:
            self._sample(request, now)
        effects = self._controller.finish(request, now, ran)  # positional: every release
        if request.state is _LINGERING:
            self._scheduler.arm_release(request)
        if effects is not NO_EFFECTS:
            self._settle(effects)  # skipped on the fast path: nothing to wake or report

    def _sample(self, request: Request, now: float) -> None:
        """Feed the adaptive limit a request that ran (exempt ones say nothing of the limit)."""
        if self._adapter is not None and not self._controller.is_exempt(request):
            latency = now - request.start_time
            self._adapter.learned.sample(
                request.priority_level, latency if latency > 0.0 else 0.0, request.max_seats
            )

    def _finish_unrun(self, request: Request) -> None:
        """Count a dispatched request that will never run as dispatched and finished at once.

        Its seats go to the next request at once: it holds no additional latency.
        """
        self._reporter.dispatched(request, request.start_time - request.arrival_time, False)
        self._finish(request, ran=False)

    def _abandon(self, request: Request) -> None:
        """The waiting task was cancelled: take the request out, or hand its seats back."""
        now = self._clock.now()
        # Run the adjustments that fell due before reading the state: one of them may have
        # dispatched the request, whose seats must then be handed back.
        self._scheduler.catch_up(now)
        state = request.state
        if state is _WAITING:
            self._settle(self._controller.cancel(request, now, timed_out=False))
            if self._reporter.observer is not None:
                self._reporter.notify(
                    "request_cancelled",
                    request.priority_level,
                    request.flow_schema,
                    now - request.arrival_time,
                )
        elif state is _EXECUTING:
            # Dispatched while the cancellation was on its way.
            self._finish_unrun(request)
        elif state is _TIMED_OUT:
            # Its wait limit passed just before the cancellation reached the waiting task:
            # the time-out is what happened. Report it as the woken task would have (the
            # observer, the log); the cancellation propagates.
            self._rejected(request, now)

    def _rejection(self, request: Request) -> Rejected:
        """The exception for a rejection reported already (Retry-After as it is now)."""
        return _rejection(request, self._controller.retry_after(request))

    def _rejected(self, request: Request, now: float, waited: float | None = None) -> Rejected:
        """Report a rejection (observer, log) and return its exception.

        ``waited`` is the time the request spent waiting, when it ended before ``now``.
        """
        waited = now - request.arrival_time if waited is None else waited
        self._reporter.rejected(request, waited, self._controller.is_exempt(request))
        return _rejection(request, request.retry_after)

    # ----------------------------------------------------------------------------------------
    # acting on the engine's effects

    def _on_wait_limit(self, request: Request) -> None:
        if request.state is not _WAITING:
            return
        now = self._clock.now()
        # The adjustments that fell due come first, and one of them may dispatch this very
        # request (its level's limit went up): then it has not timed out.
        self._scheduler.catch_up(now)
        if request.state is not _WAITING:
            return
        self._settle(self._controller.cancel(request, now, timed_out=True))
        request.handle.set()

    def _settle(self, effects: Effects) -> None:
        """Act on what an engine call changed: wake, then report levels and limits."""
        if effects.dispatched:
            self._wake(effects.dispatched)
        if effects.removed_levels:
            self._reporter.removed_levels(effects.removed_levels)
        self._report_limits(effects)

    def _report_limits(self, effects: Effects) -> None:
        if effects.limit_changes:
            controller = self._controller
            self._reporter.borrowing(
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
                    self._reporter.orphan(request)
                    self._finish_unrun(request)
        finally:
            self._finishing_orphans = False

    def _housekeeping(self, now: float) -> None:
        """Run what fell due: the configuration file's check, then the borrowing adjustments.

        The scheduler keeps ``next_check``, the fast path's one comparison, at the earlier of
        the two next times as it moves them.
        """
        scheduler = self._scheduler
        reloader = self._reloader
        if reloader is not None and now >= scheduler.next_reload:
            try:
                # Starts a check on the worker thread, or applies what a finished one found:
                # the file is neither read nor parsed here.
                reloader.run_due(now)
            except Exception:
                # This runs inside whichever call came due (a release, say): whatever went
                # wrong must not stop that call, let alone leak its seats.
                logger.exception("reloading %s failed", reloader.file.path)
        scheduler.catch_up(now)
        adapter = self._adapter
        if adapter is not None and now >= scheduler.next_adaptive:
            adapter.run_due(now, self._controller, self._config, self._settle)
            scheduler.schedule_adaptive(adapter.next_update)


def _rejection(request: Request, retry_after: int) -> Rejected:
    reason: Any = request.reject_reason
    return Rejected(
        reason,
        priority_level=request.priority_level,
        flow_schema=request.flow_schema,
        retry_after=retry_after,
    )


def load_configuration(config: ConfigSource | None) -> Configuration:
    """Load a configuration source (``None``: the built-in one); the loader loads at first use."""
    from apf_limiter.config._sources import load_source

    return load_source(config)
