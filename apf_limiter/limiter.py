"""The async shell: :class:`Limiter` and :class:`Admission`.

The shell is thin. It reads the clock, asks the engine (:class:`Controller`) what to do, and
acts: it wakes the waiters of dispatched requests, raises :class:`Rejected`, and runs timers for
wait limits, additional latencies and the borrowing schedule.

The fast path — an ``admit`` that finds free seats, and its release — never yields to the event
loop and creates no task or timer. A request that has to wait gets one waiter and one
wait-limit timer. Borrowing adjustments need no background task: while requests wait in
queues a timer runs them every ``borrowingPeriod``; otherwise the adjustments that fell due are
replayed (exactly, since the demand did not change) at the next call into the limiter.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from os import PathLike
from types import TracebackType
from typing import Any, Final

from apf_limiter.clock import Clock, RealClock, Timer, current_loop, new_waiter
from apf_limiter.config.loader import MAX_REQUEST_WAIT_LIMIT
from apf_limiter.config.model import Configuration
from apf_limiter.digest import RequestDigest
from apf_limiter.engine.controller import Controller, LevelState
from apf_limiter.engine.request import Request, RequestState
from apf_limiter.engine.statistics import LimiterStatistics
from apf_limiter.errors import ConfigError, Rejected
from apf_limiter.observer import Observer

__all__ = ["Admission", "Limiter", "ConfigSource"]

ConfigSource = Configuration | Mapping[str, object] | str | PathLike[str]

_EXECUTING: Final = RequestState.EXECUTING
_WAITING: Final = RequestState.WAITING
_LINGERING: Final = RequestState.LINGERING
_TIMED_OUT: Final = RequestState.TIMED_OUT
_MAX_REPLAYED_ADJUSTMENTS: Final = 1000
_NEVER: Final = math.inf

logger = logging.getLogger("apf_limiter")


class Admission:
    """One admission of a request, used as ``async with limiter.admit(digest) as admission``.

    Entering waits (if needed) until the request may run, or raises :class:`Rejected`;
    leaving releases its seats, whatever happened in the body. Inside, the attributes say how
    the request was classified and how long it waited.

    Integrations that cannot use ``async with`` use the same steps directly:
    :meth:`start` (never waits), :meth:`wait` (only if ``start`` returned ``False``) and
    :meth:`release`.
    """

    __slots__ = ("_limiter", "_digest", "_wait_limit", "_request", "_queue_wait", "_timer")

    def __init__(self, limiter: Limiter, digest: RequestDigest, wait_limit: float | None) -> None:
        self._limiter = limiter
        self._digest = digest
        self._wait_limit = wait_limit
        self._request: Request | None = None
        self._queue_wait = 0.0
        self._timer: Timer | None = None

    @property
    def _started(self) -> Request:
        request = self._request
        if request is None:
            raise RuntimeError("the admission has not been entered (or started) yet")
        return request

    @property
    def flow_schema(self) -> str:
        """The name of the flow schema that matched the request."""
        return self._started.flow_schema

    @property
    def priority_level(self) -> str:
        """The name of the priority level the request runs at."""
        return self._started.priority_level

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
            RuntimeError: If the admission was already started.
        """
        if self._request is not None:
            raise RuntimeError("an Admission can be started (entered) only once")
        limiter = self._limiter
        now = limiter._now()
        if now >= limiter._next_check:
            limiter._housekeeping(now)
        request, dispatched = limiter._controller.start(self._digest, now)
        self._request = request
        state = request.state
        observer = limiter._observer
        if observer is not None:
            # Inline, not _notify: free unless it raises (zero-cost try), on the fast path.
            try:
                observer.request_arrived(
                    request.priority_level, request.flow_schema, request.max_seats
                )
            except Exception:
                limiter._observer_failed("request_arrived")
        if state is _EXECUTING:
            if len(dispatched) > 1:
                limiter._wake(dispatched)
            if observer is not None:
                try:
                    observer.request_dispatched(
                        request.priority_level, request.flow_schema, 0.0, _is_exempt(request)
                    )
                except Exception:
                    limiter._observer_failed("request_dispatched")
            return True
        if dispatched:
            limiter._wake(dispatched)
        if state is not _WAITING:
            raise limiter._rejected(request, now)
        if observer is not None:
            limiter._notify(
                "request_enqueued",
                request.priority_level,
                request.flow_schema,
                request.queue_length_after_enqueue,
            )
        if request.level.queue_set.concurrency_limit <= 0:
            # A level whose current limit is 0 admits nothing (deviation D3) until borrowing
            # gives it seats; adjust now, with this request in its demand, instead of leaving
            # it to wait for the next period.
            limiter._adjust(now, request.level)
            if request.state is _EXECUTING:
                if observer is not None:
                    limiter._notify(
                        "request_dispatched",
                        request.priority_level,
                        request.flow_schema,
                        0.0,
                        False,
                    )
                return True
        wait_limit = self._wait_limit
        if wait_limit is None:
            wait_limit = limiter._config.request_wait_limit
        try:
            request.handle = new_waiter()
            self._timer = limiter._clock.call_later(
                wait_limit, limiter._wait_limit_callback, request
            )
        except BaseException:
            # No event loop to wait in: leave nothing behind in the queue (a request nobody
            # waits for would take its seats once dispatched, and never give them back).
            limiter._abandon(request)
            raise
        limiter._arm_borrowing_timer(now)
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
        limiter = self._limiter
        timer = self._timer
        if timer is None:
            # Not waiting (any more): admitted at start(), or already done waiting.
            if request.state is _EXECUTING:
                return
            if request.state is _TIMED_OUT:
                raise limiter._rejection(request, limiter._controller.retry_after(request))
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

    def _wait_interrupted(self) -> None:
        """The waiting task was cancelled (or failed): leave the queue or pass the seats on."""
        request = self._request
        timer = self._timer
        self._timer = None
        if request is None or timer is None:
            return
        timer.cancel()
        self._limiter._abandon(request)

    def _wait_ended(self) -> None:
        """The waiter was woken: the request holds its seats, timed out, or was released."""
        request = self._request
        assert request is not None
        timer = self._timer
        self._timer = None
        if timer is not None:
            timer.cancel()
        limiter = self._limiter
        state = request.state
        if state is _TIMED_OUT:
            if timer is None:  # reported already, by a release() before this task resumed
                raise limiter._rejection(request, limiter._controller.retry_after(request))
            raise limiter._rejected(request, limiter._now())
        if state is not _EXECUTING:
            raise RuntimeError("the admission was released while it waited")
        self._queue_wait = request.start_time - request.arrival_time
        if limiter._observer is not None:
            limiter._notify(
                "request_dispatched",
                request.priority_level,
                request.flow_schema,
                self._queue_wait,
                False,
            )

    def release(self) -> None:
        """Give the seats back (or leave the queue). Idempotent; ``async with`` calls it."""
        request = self._request
        if request is None:
            return
        state = request.state
        if state is _EXECUTING:
            timer = self._timer
            if timer is not None:
                # Dispatched from its queue an instant ago, before the waiting task could
                # see it (it will find the admission released): it never ran.
                self._timer = None
                timer.cancel()
                self._queue_wait = request.start_time - request.arrival_time
                self._limiter._finish_unrun(request)
            else:
                self._limiter._finish(request)
        elif state is _WAITING:
            timer = self._timer
            self._timer = None
            if timer is not None:
                timer.cancel()
            self._limiter._abandon(request)
            request.handle.set()  # a concurrent wait() wakes up and reports the release
        elif state is _TIMED_OUT and self._timer is not None:
            # Its wait limit passed while no task was in wait(): report the time-out now
            # (Retry-After, observer, log), once; a later wait() raises it without a report.
            self._timer = None
            limiter = self._limiter
            limiter._rejected(request, limiter._now(), request.release_at - request.arrival_time)

    def _release_unrun(self) -> None:
        """:meth:`release`, for an admission entered but whose work never ran.

        The ASGI client left as its request was admitted: no additional latency is held.
        """
        request = self._request
        if request is not None and request.state is _EXECUTING and self._timer is None:
            self._limiter._finish(request, ran=False)
        else:
            self.release()

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


def _is_exempt(request: Request) -> bool:
    return bool(request.level.queue_set.desired_num_queues < 0)


class Limiter:
    """Kubernetes API Priority and Fairness for asyncio (and trio) code.

    Args:
        config: ``None`` for the built-in web-app configuration, or a configuration mapping,
            a path to a YAML/JSON file, or a loaded :class:`Configuration`.
        clock: The time source; :class:`apf_limiter.testing.FakeClock` makes every timing
            behaviour deterministic. Defaults to the real (monotonic) clock.
        hash_seed: Seed of the flow hash; ``None`` picks a random one, so clients cannot
            pre-compute flows that collide with a victim's queues.
        observer: Receives every request's events (for metrics); ``None`` costs nothing.

    Raises:
        ConfigError: If the configuration is invalid.
        TypeError: If ``hash_seed`` is not an integer.
    """

    def __init__(
        self,
        config: ConfigSource | None = None,
        *,
        clock: Clock | None = None,
        hash_seed: int | None = None,
        observer: Observer | None = None,
    ) -> None:
        self._observer = observer
        self._observer_failures: set[str] = set()
        self._config = _load(config)  # a bad first configuration raises: nothing to keep
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
        self._controller = Controller(self._config, hash_seed=self._hash_seed, now=now)
        self._period = self._config.borrowing_period
        self._next_adjustment = now + self._period
        self._borrowing_timer: Timer | None = None
        self._borrowing_timer_due = _NEVER  # the adjustment the borrowing timer was set for
        # Which arming the borrowing timer belongs to: a replaced timer that fires after all
        # sees another number and does nothing (no second chain of timers).
        self._borrowing_timer_arming = 0
        self._borrowing_timer_loop: object | None = None  # the event loop it was set in
        # Requests dispatched to tasks that died with their event loop, to finish (_wake).
        self._orphans: list[Request] = []
        self._finishing_orphans = False
        self._closed = False
        self._config_path: str | None = None
        self._config_content: bytes | None = None
        self._reload_interval = 0.0
        self._next_reload = _NEVER
        # One comparison on the fast path covers both kinds of housekeeping.
        self._next_check = self._next_adjustment
        # Bound once: every waiting request's wait-limit timer holds it, and binding it per
        # timer would cost each waiting request another 64 bytes.
        self._wait_limit_callback = self._on_wait_limit
        self._report_applied_config()

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
    ) -> Limiter:
        """Create a limiter from a YAML or JSON file, optionally reloading it when it changes.

        With ``reload=True`` the file is checked at most every ``reload_interval`` seconds,
        on the next call into the limiter (no background task). A changed file is applied
        with :meth:`reconfigure`; a file that fails to load is logged with all its problems
        and the running configuration is kept.

        Raises:
            ConfigError: If the file does not load at first.
        """
        limiter = cls(path, clock=clock, hash_seed=hash_seed, observer=observer)
        limiter._config_path = os.fspath(path)
        limiter._config_content = _read_config(limiter._config_path)
        if reload:
            if not reload_interval > 0:
                raise ValueError(f"reload_interval must be positive, got {reload_interval!r}")
            limiter._reload_interval = reload_interval
            limiter._next_reload = limiter._clock.now() + reload_interval
            limiter._next_check = min(limiter._next_adjustment, limiter._next_reload)
        return limiter

    def reload(self) -> bool:
        """Reload the configuration file now if it changed (``from_file`` limiters).

        Returns:
            Whether a new configuration was applied. A file that fails to load is logged
            (with all its problems) and leaves the running configuration in force.

        Raises:
            RuntimeError: If the limiter was not created with :meth:`from_file`.
        """
        if self._config_path is None:
            raise RuntimeError("reload() needs a limiter created with Limiter.from_file()")
        content = _read_config(self._config_path)
        if content == self._config_content:
            return False
        self._config_content = content
        try:
            self.reconfigure(self._config_path)
        except ConfigError:
            return False  # reported (logged) by reconfigure; the running config stays
        return True

    @property
    def config(self) -> Configuration:
        """The configuration in force."""
        return self._config

    @property
    def observer(self) -> Observer | None:
        """The observer receiving this limiter's events, if any."""
        return self._observer

    @property
    def clock(self) -> Clock:
        """The limiter's clock."""
        return self._clock

    @property
    def hash_seed(self) -> int:
        """The seed of the flow hash."""
        return self._hash_seed

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

    def statistics(self) -> LimiterStatistics:
        """Return a frozen snapshot of every priority level and flow schema."""
        now = self._clock.now()
        if now >= self._next_check:
            self._housekeeping(now)  # due borrowing adjustments, and a due file reload
        return self._controller.statistics()

    def reconfigure(self, config: ConfigSource) -> None:
        """Apply a new configuration atomically; queued and executing requests survive.

        Everything is validated first: an invalid configuration raises :class:`ConfigError`
        and changes nothing. Then levels are reconfigured (removed busy levels drain first),
        the flow schemas re-sorted and a borrowing adjustment run.

        Raises:
            ConfigError: If the configuration is invalid.
        """
        try:
            loaded = _load(config)
        except ConfigError as exc:
            self._report_rejected_config(exc, source=config)
            raise
        now = self._clock.now()
        self._catch_up(now)
        quiescing_before = self._quiescing_levels()
        limits = self._limits()
        dispatched = self._controller.apply(loaded, now)
        self._config = loaded
        if loaded.borrowing_period != self._period:
            self._period = loaded.borrowing_period
            self._schedule_adjustment(now + self._period)
            self._cancel_borrowing_timer()
        self._wake(dispatched)
        self._arm_borrowing_timer(now)
        self._report_applied_config()
        for name in sorted(self._quiescing_levels() - quiescing_before):
            logger.info(
                "priority level %s removed while busy; it drains before it disappears",
                name,
                extra={"priority_level": name},
            )
            if self._observer is not None:
                self._notify("level_quiescing", name)
        self._report_borrowing(limits)

    def adjust_borrowing(self) -> None:
        """Run one borrowing adjustment now (the periodic schedule is not moved)."""
        now = self._clock.now()
        self._catch_up(now)
        self._adjust(now)

    def close(self) -> None:
        """Stop the borrowing timer (requests still release normally)."""
        self._closed = True
        self._cancel_borrowing_timer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a closed limiter still admits requests)."""
        return self._closed

    # ----------------------------------------------------------------------------------------
    # internals

    def _on_wait_limit(self, request: Request) -> None:
        if request.state is not _WAITING:
            return
        now = self._clock.now()
        # The adjustments that fell due come first, and one of them may dispatch this very
        # request (its level's limit went up): then it has not timed out.
        self._catch_up(now)
        if request.state is not _WAITING:
            return
        self._settle(self._controller.cancel(request, now, timed_out=True))
        request.release_at = now  # when its wait ended, for a report at release()
        request.handle.set()

    def _abandon(self, request: Request) -> None:
        """The waiting task was cancelled: take the request out, or hand its seats back."""
        now = self._clock.now()
        # Run the adjustments that fell due before reading the state: one of them may have
        # dispatched the request, whose seats must then be handed back.
        self._catch_up(now)
        state = request.state
        if state is _WAITING:
            self._settle(self._controller.cancel(request, now, timed_out=False))
            self._controller.record_rejection(request, now)
            if self._observer is not None:
                self._notify(
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
            # the time-out is what happened. Record it as the woken task would have (the
            # Retry-After tracker, the observer, the log); the cancellation propagates.
            self._rejected(request, now)

    def _finish(self, request: Request, *, ran: bool = True) -> None:
        now = self._now()
        if now >= self._next_check:
            self._housekeeping(now)
        observer = self._observer
        if observer is not None:
            # A request dispatched by a borrowing adjustment starts at the adjustment's due
            # time, which can read a hair (float rounding) after the clock: never report a
            # negative execution time.
            executed = now - request.start_time
            try:  # inline, as in Admission.start
                observer.request_finished(
                    request.priority_level,
                    request.flow_schema,
                    executed if executed > 0.0 else 0.0,
                )
            except Exception:
                self._observer_failed("request_finished")
        dispatched = self._controller.finish(request, now, ran)  # positional: every release
        if request.state is _LINGERING:
            self._arm_release(request)
        if dispatched or self._controller.quiesce_report is not None:
            self._settle(dispatched)  # skipped on the fast path: nothing to wake or report

    def _arm_release(self, request: Request) -> None:
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
        self._catch_up(now)
        if request.state is _LINGERING:  # the catch-up may have released it, a period late
            self._settle(self._controller.release(request, now))

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
                    logger.warning(
                        "a request was given its seats after its event loop had closed; "
                        "they go back (priority level %s, flow schema %s)",
                        request.priority_level,
                        request.flow_schema,
                        extra={
                            "priority_level": request.priority_level,
                            "flow_schema": request.flow_schema,
                        },
                    )
                    self._finish_unrun(request)
        finally:
            self._finishing_orphans = False

    def _finish_unrun(self, request: Request) -> None:
        """Count a dispatched request that will never run as dispatched and finished at once.

        Its seats go to the next request at once: it holds no additional latency.
        """
        if self._observer is not None:
            self._notify(
                "request_dispatched",
                request.priority_level,
                request.flow_schema,
                request.start_time - request.arrival_time,
                False,
            )
        self._finish(request, ran=False)

    def _settle(self, dispatched: Sequence[Request]) -> None:
        """After seats were freed: wake what was dispatched, report a level that drained away."""
        if dispatched:
            self._wake(dispatched)
        controller = self._controller
        report = controller.quiesce_report
        if report is None:
            return
        controller.quiesce_report = None
        limits, removed = report
        for name in removed:
            logger.info(
                "priority level %s drained and removed", name, extra={"priority_level": name}
            )
        self._report_borrowing(limits)

    def _rejection(self, request: Request, retry_after: int) -> Rejected:
        reason: Any = request.reject_reason
        return Rejected(
            reason,
            priority_level=request.priority_level,
            flow_schema=request.flow_schema,
            retry_after=retry_after,
        )

    def _rejected(self, request: Request, now: float, waited: float | None = None) -> Rejected:
        """Record a rejection (Retry-After, observer, log) and return its exception.

        ``waited`` is the time the request spent waiting, when it ended before ``now``.
        """
        retry_after = self._controller.record_rejection(request, now)
        reason: Any = request.reject_reason
        if self._observer is not None:
            self._notify(
                "request_rejected",
                request.priority_level,
                request.flow_schema,
                reason,
                now - request.arrival_time if waited is None else waited,
                _is_exempt(request),
            )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "request rejected (%s) at priority level %s, flow schema %s",
                reason,
                request.priority_level,
                request.flow_schema,
                extra={
                    "reason": reason,
                    "priority_level": request.priority_level,
                    "flow_schema": request.flow_schema,
                    "retry_after": retry_after,
                },
            )
        return self._rejection(request, retry_after)

    def _housekeeping(self, now: float) -> None:
        if now >= self._next_reload:
            self._next_reload = now + self._reload_interval
            try:
                self.reload()
            except Exception:
                # This runs inside whichever call came due (a release, say): whatever went
                # wrong must not stop that call, let alone leak its seats.
                logger.exception("reloading %s failed", self._config_path)
        self._catch_up(now)
        # Both kinds may have moved (a reload check always does): the fast path's one
        # comparison must see the next one, not this one again.
        self._next_check = min(self._next_adjustment, self._next_reload)

    def _catch_up(self, now: float) -> None:
        """Run the borrowing adjustments that fell due up to ``now``."""
        if now < self._next_adjustment:
            return
        replayed = 0
        # The schedule moves on before each adjustment runs: an adjustment may finish a
        # request (one whose task died with its event loop, _wake), and that finish's own
        # housekeeping must find this adjustment done rather than run it a second time.
        while True:
            due = self._next_adjustment
            if due > now:
                break
            period = self._period
            if replayed >= _MAX_REPLAYED_ADJUSTMENTS:
                # A long idle stretch: the smoothed demand has long decayed; resume on the grid.
                self._schedule_adjustment(due + period * math.ceil((now - due) / period + 1e-9))
                self._adjust(now)
                break
            self._schedule_adjustment(due + period)
            # Nothing changed since the last event, so adjusting "late" at the due time is
            # exactly what a timer would have done.
            self._adjust(due)
            replayed += 1
        # Seats whose additional latency ended a whole period ago: their timers were lost
        # with an event loop that has ended (a limiter outliving asyncio.run).
        self._release_lost_lingering(now - self._period)

    def _schedule_adjustment(self, due: float) -> None:
        self._next_adjustment = due
        self._next_check = min(due, self._next_reload)

    def _release_lost_lingering(self, overdue: float) -> None:
        """Release the final seats that were due back by ``overdue`` (their timers are lost)."""
        now = self._clock.now()
        for state in list(self._controller.levels.values()):
            lost = [r for r in state.queue_set.lingering if r.release_at <= overdue]
            for request in lost:
                self._settle(self._controller.release(request, now))

    def _adjust(self, now: float, waking: LevelState | None = None) -> None:
        limits = self._limits()
        self._wake(self._controller.adjust_borrowing(now, waking=waking))
        self._report_borrowing(limits)

    def _limits(self) -> dict[str, int]:
        return {name: s.queue_set.concurrency_limit for name, s in self._controller.levels.items()}

    def _quiescing_levels(self) -> set[str]:
        return {name for name, state in self._controller.levels.items() if state.quiescing}

    def _report_borrowing(self, before: dict[str, int]) -> None:
        after = self._limits()
        changes = {
            name: (before.get(name, 0), limit)
            for name, limit in after.items()
            if before.get(name) != limit
        }
        if not changes:
            return
        if self._observer is not None:
            self._notify("borrowing_adjusted", changes)
        # Log only changes of at least 10% (and at least one seat), so that a steady state
        # stays quiet while real shifts of capacity are visible.
        large = {
            name: change
            for name, change in changes.items()
            if abs(change[1] - change[0]) >= max(1.0, 0.1 * max(change[0], 1))
        }
        if large and logger.isEnabledFor(logging.INFO):
            text = ", ".join(f"{name} {old}->{new}" for name, (old, new) in sorted(large.items()))
            logger.info(
                "borrowing moved seats: %s",
                text,
                extra={
                    "changes": large,
                    "fair_fraction": self._controller.fair_fraction,
                    "borrowing_regime": self._controller.borrowing_regime,
                },
            )

    def _report_applied_config(self) -> None:
        config = self._config
        logger.info(
            "configuration applied: %d priority levels, %d flow schemas, "
            "server concurrency limit %d",
            len(config.priority_levels),
            len(config.flow_schemas),
            config.server_concurrency_limit,
            extra={
                "priority_levels": [level.name for level in config.priority_levels],
                "flow_schemas": [schema.name for schema in config.flow_schemas],
                "server_concurrency_limit": config.server_concurrency_limit,
            },
        )
        if self._observer is not None:
            self._notify("configuration_applied", config)

    def _report_rejected_config(self, error: ConfigError, *, source: object) -> None:
        problems = [str(problem) for problem in error.problems]
        where = source if isinstance(source, str | PathLike) else type(source).__name__
        logger.error(
            "configuration rejected (%s); keeping the running configuration:\n%s",
            where,
            "\n".join(f"  {problem}" for problem in problems),
            extra={"config_source": str(where), "problems": problems},
        )
        if self._observer is not None:
            self._notify("configuration_rejected", error.problems)

    def _notify(self, event: str, *args: Any) -> None:
        """Call the observer's method ``event``: an exception is reported and dropped.

        A bug in an observer must not leave a request half-way through (holding seats, or
        with the tasks it should have woken asleep), so none propagates.
        """
        try:
            getattr(self._observer, event)(*args)
        except Exception:
            self._observer_failed(event)

    def _observer_failed(self, event: str) -> None:
        # Called inside the except block, so the log record carries the traceback.
        if event in self._observer_failures:
            return  # once per method: a broken observer fails on every request
        self._observer_failures.add(event)
        logger.error(
            "the observer's %s raised; its events are dropped, requests go on (reported "
            "once per method)",
            event,
            exc_info=True,
            extra={"observer_event": event},
        )

    def _arm_borrowing_timer(self, now: float) -> None:
        timer = self._borrowing_timer
        loop = current_loop()
        if timer is not None:
            if loop is None or (
                now < self._borrowing_timer_due and loop is self._borrowing_timer_loop
            ):
                # Kept: set in this loop and not yet due; or called from synchronous code,
                # where no timer could be set to replace it.
                return
            # Set in another event loop, which may have ended (a limiter outliving
            # asyncio.run) and taken the timer with it; or due and not fired: lost the same
            # way, or late on a busy loop. The caller has run the adjustments due
            # (_catch_up), so set a timer for the next one in the running loop; the old one
            # does nothing should it fire after all.
            self._cancel_borrowing_timer()
        # A closed limiter runs no borrowing timer; its adjustments are replayed at the next
        # call into it, as when no request waits.
        if not self._closed and self._controller.waiting_requests:
            self._borrowing_timer_arming = arming = self._borrowing_timer_arming + 1
            self._borrowing_timer = self._clock.call_later(
                self._next_adjustment - now, self._on_borrowing_timer, arming
            )
            self._borrowing_timer_due = self._next_adjustment
            self._borrowing_timer_loop = loop

    def _on_borrowing_timer(self, arming: int) -> None:
        if arming != self._borrowing_timer_arming or self._borrowing_timer is None:
            return  # replaced (given up for lost) or cancelled: another timer, or none, runs
        due = self._borrowing_timer_due
        self._borrowing_timer = None
        self._borrowing_timer_due = _NEVER
        self._borrowing_timer_loop = None
        now = self._clock.now()
        # The timer was set for an adjustment, so that one is due, even when the clock reads a
        # hair before it (a FakeClock rounds delays to whole nanoseconds; asyncio fires timers
        # within its clock resolution): otherwise it would re-arm itself for ~0 s, forever.
        # Not any later one: a call may have run this adjustment already.
        self._catch_up(max(now, due) if due != _NEVER else now)
        self._arm_borrowing_timer(now)

    def _cancel_borrowing_timer(self) -> None:
        if self._borrowing_timer is not None:
            self._borrowing_timer.cancel()
            self._borrowing_timer = None
            self._borrowing_timer_due = _NEVER
            self._borrowing_timer_loop = None

    def __repr__(self) -> str:
        parts = []
        for state in self._controller.levels.values():
            qs = state.queue_set
            parts.append(
                f"{qs.name}: {qs.seats_in_use}/{qs.concurrency_limit} seats, "
                f"{qs.requests_executing} executing, {qs.requests_waiting} waiting"
            )
        return f"<Limiter {'; '.join(parts)}>"


def _read_config(path: str) -> bytes | None:
    """The file's content, or ``None`` if it cannot be read: what a reload compares.

    The content itself, not its modification time and size: a file rewritten in place with the
    same size within the file system's timestamp resolution (or by ``cp -p``) has changed too.
    Configuration files are small, and this runs at most every ``reload_interval``.
    """
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


def _load(config: ConfigSource | None) -> Configuration:
    if config is None:
        from apf_limiter.config.defaults import default_configuration

        return default_configuration()
    from apf_limiter.config.loader import load_config

    return load_config(config)
