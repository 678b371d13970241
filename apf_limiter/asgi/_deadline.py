"""Request deadlines and the minimum request-body data rate of the middleware.

Kubernetes bounds every request that is not long-running with a deadline (``--request-timeout``,
60 s; ``WithTimeoutForNonLongRunningRequests`` in ``apiserver/pkg/server/filters/timeout.go``
answers 504 when nothing was written yet); without one, slow clients keep seats indefinitely.
Every request is tracked from its arrival; a long-running one (and a WebSocket) only until its
response starts (or it is accepted), since until then it holds its seats like any other:

* **The request deadline** (:data:`DEADLINE`): arrival + the route's, the priority level's or
  the middleware's ``request_timeout``, queue wait included.
* **The minimum body data rate** (:data:`BODY`, like Kestrel's ``MinRequestBodyDataRate``): the
  body bytes received must keep up with ``min_body_rate`` after a grace period. The clock runs
  while someone waits for body data (the disconnect watcher while queued, the application while
  it executes), not while nobody reads (the server stops reading the socket then). Each wait
  has a deadline of its own, so a client that sends nothing at all is caught too.

When either passes, the seats go back at once (:meth:`Admission.release`), the request's work is
cancelled, and the middleware answers 504 (deadline) or 408 (body), or, once the response has
started, ends it unfinished. The fast path costs a small record per request in a FIFO (with
the middleware's own timeout, arrival order is deadline order) and one shared timer per event
loop, armed for the earliest deadline; other deadlines and body waits sit in a heap beside it.
Cancelling uses the request's task under asyncio (``cancel()``, then ``uncancel()``, as
:func:`asyncio.timeout` does) and a cancel scope under trio.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import time
from asyncio import current_task, get_running_loop
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

from apf_limiter._clock import Clock, RealClock, Timer, current_loop
from apf_limiter.asgi._expiry import BODY, DEADLINE, BodyClock, Expiry
from apf_limiter.asgi._identity import route_path
from apf_limiter.asgi._types import Receive, Scope
from apf_limiter.asgi._waiting import body_expected
from apf_limiter.limiter import Admission

logger = logging.getLogger("apf_limiter")

_INF: Final = math.inf
_COMPACT_AT: Final = 1024  # records kept before one pass drops the finished ones
_SLACK: Final = 1e-6


class Deadlines:
    """The request deadlines and body-rate waits of one middleware, with one shared timer.

    Args:
        clock: The limiter's clock (deadlines follow its time; a fake clock in tests).
        request_timeout: The default deadline in seconds (``math.inf``: none).
        level_timeouts: Deadlines by priority-level name (``math.inf``: none).
        min_body_rate: Bytes per second a body must keep up with, or ``None`` for no minimum.
        body_grace: Seconds of waiting for body data before the rate counts.
    """

    def __init__(
        self,
        clock: Clock,
        request_timeout: float,
        level_timeouts: Mapping[str, float],
        min_body_rate: float | None,
        body_grace: float,
    ) -> None:
        self._clock = clock
        # time.monotonic itself for the real clock: one Python call less per request.
        self.now = time.monotonic if type(clock) is RealClock else clock.now
        self._default = request_timeout
        self._levels = dict(level_timeouts)
        self._min_rate = min_body_rate
        self._grace = body_grace
        self._loop: object = None
        # Records with the default timeout, in arrival (= deadline) order; finished ones stay
        # until they reach the head or a compaction pass.
        self.fifo: deque[Expiry] = deque()
        self._compact_at = _COMPACT_AT
        # (when, sequence, record, reason): other deadlines and body waits, checked when due.
        self._heap: list[tuple[float, int, Expiry, str]] = []
        self._heap_compact_at = _COMPACT_AT
        self._sequence = 0
        self._timer: Timer | None = None
        self._timer_at = _INF

    def track(
        self, admission: Admission, scope: Scope, receive: Receive, timeout: float | None
    ) -> Expiry | None:
        """Start tracking a request that was just started (queued or admitted).

        Args:
            admission: The request's admission, started.
            scope: Its ``http`` or ``websocket`` scope.
            receive: The server's ``receive``.
            timeout: The route's deadline, or ``None`` for the level's or the default.

        Returns:
            The record, or ``None`` when neither a deadline nor the body rate applies.
        """
        if timeout is None:
            timeout = self._default
            if self._levels:
                timeout = self._levels.get(admission.priority_level, timeout)
        if timeout == _INF and self._min_rate is None:
            return None
        try:
            loop: Any = get_running_loop()
        except RuntimeError:  # trio
            loop = current_loop()
            task = None
        else:
            task = current_task(loop)  # with the loop: asyncio would look it up again
        if loop is not self._loop:
            self._reset(loop)
        now = self.now()
        deadline = now + timeout
        expiry = Expiry(self, admission, scope, task, now, deadline, receive)
        if task is None:  # trio: a scope of its own, cancelled by the timer
            import trio

            cancel_scope = expiry.cancel_scope = trio.CancelScope()
            cancel_scope.__enter__()  # exited by Expiry.finish, in this task
        if deadline != _INF:
            if timeout == self._default:
                fifo = self.fifo
                fifo.append(expiry)  # arrival order is deadline order: the head is due first
                if len(fifo) > self._compact_at:
                    self._compact()
            else:
                self._push(deadline, expiry, DEADLINE)
            if deadline < self._timer_at:
                self._arm(deadline, now)
        return expiry

    def body_clock(self, expiry: Expiry) -> BodyClock | None:
        """A clock for the body of a tracked request, if the minimum rate applies to it."""
        if self._min_rate is None or not body_expected(expiry.scope):
            return None
        clock = expiry.body = BodyClock(self, expiry, expiry.server_receive)
        return clock

    def _compact(self) -> None:
        """Keep the live records only: a long request at the head keeps all behind it."""
        fifo = self.fifo
        live = [e for e in fifo if e.live]
        fifo.clear()  # the same deque: records hold on to it
        fifo.extend(live)
        self._compact_at = max(_COMPACT_AT, 2 * len(fifo))

    def body_wait(self, clock: BodyClock) -> None:
        """A wait for body data begins: make sure its rate deadline will be checked."""
        now = self.now()
        clock.since = now
        clock.flying = True
        if not clock.in_heap and clock.expiry.live:
            # One check per clock at a time: a later wait's deadline is never earlier (the
            # received bytes only grow, and pauses do not count), so the check, when due,
            # reschedules itself for the wait then in flight.
            clock.in_heap = True
            due = self.body_due(clock)
            self._push(due, clock.expiry, BODY)
            if due < self._timer_at:
                self._arm(due, now)

    def body_due(self, clock: BodyClock) -> float:
        """When the wait in flight falls below the minimum rate (after the grace period)."""
        rate = self._min_rate
        assert rate is not None
        return clock.since - clock.active + self._grace + clock.received / rate

    def _push(self, when: float, expiry: Expiry, reason: str) -> None:
        heap = self._heap
        if len(heap) > self._heap_compact_at:
            # Checks of finished requests wait for their time: drop them now and then.
            heap[:] = [item for item in heap if item[2].live]
            heapq.heapify(heap)
            self._heap_compact_at = max(_COMPACT_AT, 2 * len(heap))
        self._sequence += 1
        heapq.heappush(heap, (when, self._sequence, expiry, reason))

    def _arm(self, when: float, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._clock.call_later(max(0.0, when - now), self._fire)

    def _reset(self, loop: object) -> None:
        """A new event loop (tests, Starlette's TestClient): the old one's timer and records go."""
        if self._timer is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: the timer is dead
                self._timer.cancel()
        self._timer = None
        self._timer_at = _INF
        self.fifo.clear()
        self._heap = []
        self._loop = loop

    def _fire(self) -> None:
        """The shared timer: expire every record that is due, then re-arm for the next one."""
        self._timer = None
        self._timer_at = _INF
        now = self.now()
        # Due within a microsecond counts as due: a timer rounded to the clock's resolution
        # must not find its deadline still ahead (and re-arm for it again and again).
        limit = now + _SLACK
        due: list[tuple[Expiry, str]] = []
        fifo = self.fifo
        while fifo:
            head = fifo[0]
            if head.live and head.deadline > limit:
                break
            fifo.popleft()
            if head.live:
                due.append((head, DEADLINE))
        heap = self._heap
        while heap and heap[0][0] <= limit:
            when, _, expiry, reason = heapq.heappop(heap)
            if not expiry.live:
                continue
            if reason == DEADLINE:
                if when == expiry.deadline:
                    due.append((expiry, DEADLINE))
                continue
            clock = expiry.body
            if clock is None or clock.complete or not clock.flying:
                if clock is not None:
                    clock.in_heap = False  # nobody waits for body data now
                continue
            later = self.body_due(clock)
            if later <= limit:
                due.append((expiry, BODY))
            else:
                self._push(later, expiry, BODY)
        for expiry, reason in due:
            if expiry.live:  # not expired already for the other reason
                try:
                    self._expire(expiry, reason)
                except Exception:  # pragma: no cover - defensive: keep the timer going
                    logger.exception("apf_limiter: expiring a request failed")
        when = heap[0][0] if heap else _INF
        if fifo and fifo[0].deadline < when:
            when = fifo[0].deadline
        if when != _INF:
            self._arm(when, now)

    def _expire(self, expiry: Expiry, reason: str) -> None:
        """Cancel the request's work, give its seats back at once, and log it."""
        expiry.live = False
        expiry.reason = reason
        task = expiry.task
        if task is not None:
            task.cancel()
        elif expiry.cancel_scope is not None:
            expiry.cancel_scope.cancel()
        admission = expiry.admission
        admission.release()
        if reason == DEADLINE:
            level, status = logging.WARNING, 504
            what = f"request deadline of {expiry.deadline - expiry.arrival:g}s passed"
        else:
            level, status = logging.INFO, 408
            received = expiry.body.received if expiry.body is not None else 0
            what = (
                f"request body slower than {self._min_rate:g} bytes/s "
                f"({received} bytes in {self.now() - expiry.arrival:.3g}s)"
            )
        scope = expiry.scope
        logger.log(
            level,
            "apf_limiter: %s: %s %s (flow schema %s, priority level %s); its seats are "
            "returned and %s",
            what,
            scope.get("method", ""),
            route_path(scope),
            admission.flow_schema,
            admission.priority_level,
            "its response aborted" if expiry.started else f"it is answered {status}",
        )
