"""The async shell's front: :class:`Limiter`, its public API, holding the shell's core.

The shell is thin. It reads the clock, asks the engine (the controller) what to do, and acts on
the :class:`~apf_limiter.engine._effects.Effects` it answers: it wakes the waiters of dispatched
requests, raises :class:`Rejected`, and runs timers for wait limits and additional latencies.
That is the request path, the limiter's :class:`~._core.Core`, which it holds (not inherits).
Periodic work (borrowing adjustments, the configuration file's checks, the adaptive limit) is
jobs of one scheduler (:mod:`._scheduler`). Events and logs go through one reporter
(:mod:`._reporter`); one request's phases are its :class:`Admission` (:mod:`._admission`).

The fast path, an ``admit`` that finds free seats and its release, never yields to the event
loop and creates no task or timer. A request that has to wait gets one waiter and one wait-limit
timer.
"""

from __future__ import annotations

import logging
from os import PathLike
from typing import TYPE_CHECKING

from apf_limiter._clock import Clock
from apf_limiter._digest import RequestDigest
from apf_limiter._errors import Rejected, RejectReason
from apf_limiter._observer import Observer
from apf_limiter.config._model import Configuration
from apf_limiter.config._settings import (
    DEFAULT_MAX_FILE_SIZE,
    MAX_REQUEST_WAIT_LIMIT,
    check_max_file_size,
)
from apf_limiter.engine._dump import EngineDump
from apf_limiter.engine._statistics import AdaptiveStatistics, LimiterStatistics
from apf_limiter.limiter._admission import Admission
from apf_limiter.limiter._config_file import ConfigFile, Outcome
from apf_limiter.limiter._core import Core, HoldsCore
from apf_limiter.limiter._reload import Reloader
from apf_limiter.limiter._shadow import DEFAULT_MAX_SHADOW_TWINS, ShadowOutcome

if TYPE_CHECKING:
    from apf_limiter.config._sources import ConfigSource

logger = logging.getLogger("apf_limiter")


def check_wait_limit(wait_limit: float) -> None:
    """Refuse a queue wait limit that is negative, not a number, or above Kubernetes' cap.

    Raises:
        TypeError: If ``wait_limit`` is not a number.
        ValueError: If ``wait_limit`` is not within 0..60 seconds.
    """
    if isinstance(wait_limit, bool) or not isinstance(wait_limit, int | float):
        raise TypeError(f"wait_limit must be a number of seconds, got {wait_limit!r}")
    if not 0 <= wait_limit <= MAX_REQUEST_WAIT_LIMIT:
        raise ValueError(
            f"wait_limit must be between 0 and {MAX_REQUEST_WAIT_LIMIT:g} seconds (Kubernetes "
            f"caps queue waits at one minute), got {wait_limit!r}"
        )


class Limiter(HoldsCore):
    """Kubernetes API Priority and Fairness for asyncio (and trio) code.

    Args:
        config: ``None`` for the built-in web-app configuration, or a configuration mapping,
            a path to a YAML/JSON file, or a loaded :class:`Configuration`.
        clock: The time source; :class:`apf_limiter.testing.FakeClock` makes every timing
            behaviour deterministic. Defaults to the real (monotonic) clock.
        hash_seed: Seed of the flow hash; ``None`` picks a random one, so clients cannot
            pre-compute flows that collide with a victim's queues.
        observer: Receives every request's events (for metrics); ``None`` costs nothing.
        max_shadow_twins: In shadow mode (``enforcement: Shadow``), how many virtual twins
            may outlive their requests at once (still queued, or holding seats for their
            request's execution time); past it a new one is dropped and reported as
            ``dropped``. See ``docs/rolling-out.md``.

    Raises:
        ConfigError: If the configuration is invalid.
        TypeError: If ``hash_seed`` is not an integer.
        ValueError: If ``max_shadow_twins`` is negative.
    """

    def __init__(
        self,
        config: ConfigSource | None = None,
        *,
        clock: Clock | None = None,
        hash_seed: int | None = None,
        observer: Observer | None = None,
        max_shadow_twins: int = DEFAULT_MAX_SHADOW_TWINS,
    ) -> None:
        # The request path, and every part it runs on: the engine, the clock, the jobs.
        self._core = Core(config, clock, hash_seed, observer, max_shadow_twins)
        self._reloader: Reloader | None = None  # set by from_file

    def reconfigure(self, config: ConfigSource) -> None:
        """Apply a new configuration atomically; queued and executing requests survive.

        Everything is validated first: an invalid configuration raises :class:`ConfigError`
        and changes nothing. Then levels are reconfigured (removed busy levels drain first),
        the flow schemas re-sorted and a borrowing adjustment run.

        Raises:
            ConfigError: If the configuration is invalid.
        """
        self._core.reconfigure(config)

    def reload(self) -> bool:
        """Reload the configuration file now if it changed (``from_file`` limiters).

        The file is read and parsed on the calling thread, at once (a check in flight on the
        worker thread is waited for, and applied, first). Content that is the same as the
        running configuration's is not applied again.

        Returns:
            Whether a new configuration was applied. A file that fails to load (or holds no
            document) is logged with all its problems and leaves the running configuration in
            force; so does a file that kept changing while it was read.

        Raises:
            RuntimeError: If the limiter was not created with :meth:`from_file`.
        """
        if self._reloader is None:
            raise RuntimeError("reload() needs a limiter created with Limiter.from_file()")
        return self._reloader.reload()

    def _apply_file(self, outcome: Outcome) -> bool:
        """Act on what a check of the configuration file found; whether it was applied."""
        path = self._reloader.file.path if self._reloader is not None else ""
        if outcome.failure is not None:
            logger.error("reloading %s failed", path, exc_info=outcome.failure)
            return False
        if outcome.config is None:
            if outcome.error is not None:
                self._core.reporter.rejected_config(outcome.error, source=path)
            return False
        # Parsed, validated and its classifier built on the worker thread: what is left is
        # the engine's swap.
        self._core.reconfigure(outcome.config, outcome.classifier)
        return True

    @classmethod
    def from_file(
        cls,
        path: str | PathLike[str],
        *,
        reload: bool = False,
        reload_interval: float = 1.0,
        clock: Clock | None = None,
        hash_seed: int | None = None,
        observer: Observer | None = None,
        max_shadow_twins: int = DEFAULT_MAX_SHADOW_TWINS,
        # An object, checked below: the compiled build would refuse another type with a
        # TypeError of its own before the check's ValueError.
        max_file_size: object = DEFAULT_MAX_FILE_SIZE,
    ) -> Limiter:
        """Create a limiter from a YAML or JSON file, optionally reloading it when it changes.

        With ``reload=True`` the file is checked at most every ``reload_interval`` seconds,
        on the next call into the limiter (no background task). The check runs on a worker
        thread (one at a time), so requests never wait for a file to be read or parsed: it
        compares the file's stat (inode, size, modification and change times) with the last
        one, and reads, parses and builds the configuration only once a new stat has stayed
        the same for one check (a file renamed over the old one) or two (the same file
        written in place), so that a file caught half-written is not applied; a later call
        applies the result, which is the engine's atomic swap alone. A change is thus applied
        one to two intervals after it was written (two to three in place). Content the same
        as the running configuration's is not applied again; a file that fails to load, holds
        no document (empty, or only comments), is not a regular file (a named pipe, a
        device, a directory) or is bigger than ``max_file_size`` is logged at ERROR with all
        its problems and the running configuration is kept. :meth:`reload` reads the file at
        once; :meth:`close` stops the checks.

        Args:
            path: The YAML or JSON file.
            reload: Whether to check the file for changes.
            reload_interval: Seconds between checks.
            clock: As for :class:`Limiter`.
            hash_seed: As for :class:`Limiter`.
            observer: As for :class:`Limiter`.
            max_shadow_twins: As for :class:`Limiter`.
            max_file_size: The largest file read, in bytes (4 MiB by default), at start and
                at every reload.

        Raises:
            ConfigError: If the file does not load at start (one holding no document, not a
                regular file or too big included).
            ValueError: If ``reload_interval`` is not positive (with ``reload=True``), or
                ``max_file_size`` not a positive integer.
        """
        if reload and not reload_interval > 0:
            raise ValueError(f"reload_interval must be positive, got {reload_interval!r}")
        file = ConfigFile(
            path, reload_interval if reload else 0.0, check_max_file_size(max_file_size)
        )
        # Read once, and the configuration is loaded from that very content: what the file
        # held then is what a later check compares with.
        limiter = cls(
            file.load(),
            clock=clock,
            hash_seed=hash_seed,
            observer=observer,
            max_shadow_twins=max_shadow_twins,
        )
        # The file's checks: one more job of the limiter's scheduler; its worker also builds
        # each new configuration's classifier.
        core = limiter._core
        reloader = Reloader(file, core.scheduler, limiter._apply_file, core.controller.prepare)
        limiter._reloader = reloader
        if reload:
            reloader.watch(core.clock.now())
        return limiter

    @property
    def config(self) -> Configuration:
        """The configuration in force."""
        return self._core.config

    @property
    def observer(self) -> Observer | None:
        """The observer receiving this limiter's events, if any."""
        return self._core.reporter.observer

    @property
    def clock(self) -> Clock:
        """The limiter's clock."""
        return self._core.clock

    @property
    def hash_seed(self) -> int:
        """The seed of the flow hash."""
        return self._core.hash_seed

    def admit(self, digest: RequestDigest, *, wait_limit: float | None = None) -> Admission:
        """Admit a request: ``async with limiter.admit(digest) as admission: ...``.

        Args:
            digest: What classification needs to know of the request.
            wait_limit: Seconds the request may wait in a queue, at most 60 (Kubernetes caps
                every queue wait at one minute); defaults to the configuration's
                ``requestWaitLimit``.

        Returns:
            An :class:`Admission`, to be entered with ``async with``. Entering raises
            :class:`Rejected` (reason ``queue-full``, ``concurrency-limit`` or ``time-out``)
            when the request may not run; cancelling the waiting task removes the request
            from its queue.

        Raises:
            TypeError: If ``wait_limit`` is not a number.
            ValueError: If ``wait_limit`` is negative or above 60 seconds.
        """
        if wait_limit is not None:
            check_wait_limit(wait_limit)
        return Admission(self, digest, wait_limit)

    def classify(self, digest: RequestDigest) -> tuple[str, str]:
        """Classify a request without admitting it (nothing is counted or reported).

        Args:
            digest: What classification needs to know of the request.

        Returns:
            The names of the flow schema it matches and of that schema's priority level.

        Raises:
            LookupError: If no flow schema matches and there is no ``catch-all`` schema.
        """
        classification = self._core.controller.classifier.classify(digest)
        return classification.flow_schema.name, classification.priority_level

    def refuse(
        self, flow_schema: str, priority_level: str, reason: RejectReason, *, retry_after: int
    ) -> Rejected:
        """Report a request refused outside the limiter, as its own rejections are reported.

        For a cap the caller keeps itself (the middleware's ``max_long_running``): the
        observer's ``request_rejected`` (no queue wait) and the DEBUG log, so the metrics count
        it with the rejections. The engine's statistics do not: it never saw the request.

        Args:
            flow_schema: The request's flow schema (from :meth:`classify`).
            priority_level: Its priority level.
            reason: Why it was refused.
            retry_after: The ``Retry-After`` seconds the client is told.

        Returns:
            The exception describing the rejection (not raised).
        """
        try:
            exempt = self.config.priority_level(priority_level).is_exempt
        except KeyError:  # reconfigured away since it was classified
            exempt = False
        self._core.reporter.refused(priority_level, flow_schema, reason, retry_after, exempt)
        return Rejected(
            reason,
            priority_level=priority_level,
            flow_schema=flow_schema,
            retry_after=retry_after,
            status=self.config.rejection_status_of(priority_level),
        )

    def would_refuse(
        self, flow_schema: str, priority_level: str, reason: RejectReason, *, retry_after: int
    ) -> ShadowOutcome | None:
        """:meth:`refuse` at a level in shadow mode: report the would-be refusal instead.

        For a cap the caller keeps itself: at a level whose enforcement is ``Shadow`` the
        request is not refused (it runs, as every request does there); the observer's
        ``request_shadowed`` counts what enforcing would have done.

        Args:
            flow_schema: The request's flow schema (from :meth:`classify`).
            priority_level: Its priority level.
            reason: Why enforcing would refuse it.
            retry_after: The ``Retry-After`` seconds the refusal would carry.

        Returns:
            The would-be outcome, or ``None`` when the level enforces: then call
            :meth:`refuse`.
        """
        if self.config.enforcement_of(priority_level) != "Shadow":
            return None
        self._core.reporter.shadow_refused(priority_level, flow_schema, reason)
        return ShadowOutcome(True, None, reason, retry_after)

    def level_usage(self, priority_level: str) -> tuple[int, int] | None:
        """A level's current limit and the seats in use there now (a cheap read).

        For response metadata such as the ``RateLimit`` header fields; ``None`` for an exempt
        level or a level that does not exist (any more).
        """
        return self._core.controller.level_usage(priority_level)

    def statistics(self) -> LimiterStatistics:
        """Return a frozen snapshot of every priority level and flow schema (a pure read)."""
        return self._core.controller.statistics()

    @property
    def adaptive_concurrency(self) -> AdaptiveStatistics | None:
        """The adaptive server limit (``adaptiveConcurrency``), or ``None`` when it is off.

        The learned limit, the limit in force as ServerCL, each level's baseline execution
        time and the last latency ratio and sample: a pure read, like :meth:`statistics`
        (whose ``server_concurrency_limit`` is the limit in force).
        """
        adapter = self._core.adapter
        return None if adapter is None else adapter.statistics()

    def dump(self, *, waiting: bool = True) -> EngineDump:
        """Return a frozen view of every level, queue and waiting or executing request.

        A pure read, in the style of Kubernetes' ``QueueSet.Dump()``: the debug dumps, the
        dashboard and the metrics read nothing else of the engine.

        Args:
            waiting: ``False`` copies no waiting request; each level's ``waiting_summary``
                counts them by flow schema, flow and verb instead, kept up to date by the
                engine as requests join and leave queues. The metrics scrape so: its cost
                does not grow with the number of requests waiting.
        """
        core = self._core
        return core.controller.dump(core.clock.now(), waiting=waiting)

    def adjust_borrowing(self) -> None:
        """Run one borrowing adjustment now (the periodic schedule is not moved)."""
        core = self._core
        now = core.clock.now()
        core.adjustments.catch_up(now)
        core.adjustments.adjust(now)

    def run_due(self) -> None:
        """Run the work that fell due: borrowing adjustments, and a configuration file check.

        Every admission and release does this on its own; while an event loop runs, a timer
        does it for the configuration file's checks and the adaptive limit's updates (armed
        by the first call into the limiter in that loop, this one included), and while
        requests wait another runs the borrowing adjustments. The debug dumps, the dashboard
        and the metrics call it before they read; call it to bring :meth:`statistics` up to
        date after a quiet spell.
        """
        core = self._core
        core.run_due()
        core.scheduler.arm()

    def close(self) -> None:
        """Stop the timers (the scheduler's, the borrowing one) and the configuration file's checks.

        Requests still release normally, and :meth:`reload` still reads the file on demand.
        A check in flight on the worker thread is waited for (its outcome is dropped).
        """
        adjustments = self._core.adjustments
        adjustments.closed = True
        adjustments.cancel_borrowing_timer()
        self._core.scheduler.close()
        if self._reloader is not None:
            self._reloader.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a closed limiter still admits requests)."""
        return self._core.adjustments.closed

    def __repr__(self) -> str:
        parts = [
            f"{level.name}: {level.executing_seats}/{level.current_limit} seats, "
            f"{level.executing_requests} executing, {level.waiting_requests} waiting"
            for level in self._core.controller.statistics().priority_levels.values()
        ]
        return f"<Limiter {'; '.join(parts)}>"
