"""Request deadlines and the minimum request-body data rate, for every front door of the gate.

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
cancelled, and its front door answers (HTTP: 504 for the deadline, 408 for the body), or, once
the response has started, ends it unfinished. The fast path costs a small record per request
in a FIFO (with the gate's own timeout, arrival order is deadline order) and one shared timer
per event loop, armed for the earliest deadline; other deadlines and body waits sit in a heap
beside it.
Cancelling uses the request's task under asyncio (``cancel()``, then ``uncancel()``, as
:func:`asyncio.timeout` does) and a cancel scope under trio.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import time
from asyncio import AbstractEventLoop
from collections import deque
from collections.abc import Mapping
from typing import Final

from apf_limiter._clock import Clock, RealClock, Timer
from apf_limiter.gate._ticket import BODY, DEADLINE, BodyClock, Ticket

logger = logging.getLogger("apf_limiter")

_INF: Final = math.inf
_COMPACT_AT: Final = 1024  # records kept before one pass drops the finished ones
_SLACK: Final = 1e-6


class Deadlines:
    """The request deadlines and body-rate waits of one gate, with one shared timer.

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
        self.fifo: deque[Ticket] = deque()
        self._compact_at = _COMPACT_AT
        # (when, sequence, record, reason): other deadlines and body waits, checked when due.
        self._heap: list[tuple[float, int, Ticket, str]] = []
        self._heap_compact_at = _COMPACT_AT
        self._sequence = 0
        self._timer: Timer | None = None
        self._timer_at = _INF

    def body_clock(self, ticket: Ticket) -> BodyClock | None:
        """A clock for the body of a request, if the minimum rate applies (one per ticket)."""
        if self._min_rate is None:
            return None
        clock = ticket.body
        if clock is None:
            clock = ticket.body = BodyClock(self, ticket)
        return clock

    def _compact(self) -> None:
        """Keep the live records only: a long request at the head keeps all behind it."""
        fifo = self.fifo
        live = [t for t in fifo if t.tracked]
        fifo.clear()  # the same deque: records hold on to it
        fifo.extend(live)
        self._compact_at = max(_COMPACT_AT, 2 * len(fifo))

    def body_wait(self, clock: BodyClock) -> None:
        """A wait for body data begins: make sure its rate deadline will be checked."""
        now = self.now()
        clock.since = now
        clock.flying = True
        if not clock.in_heap and clock.ticket.tracked:
            # One check per clock at a time: a later wait's deadline is never earlier (the
            # received bytes only grow, and pauses do not count), so the check, when due,
            # reschedules itself for the wait then in flight.
            clock.in_heap = True
            due = self.body_due(clock)
            self._push(due, clock.ticket, BODY)
            if due < self._timer_at:
                self._arm(due, now)

    def body_due(self, clock: BodyClock) -> float:
        """When the wait in flight falls below the minimum rate (after the grace period)."""
        rate = self._min_rate
        assert rate is not None
        return clock.since - clock.active + self._grace + clock.received_bytes / rate

    def _push(self, when: float, ticket: Ticket, reason: str) -> None:
        heap = self._heap
        if len(heap) > self._heap_compact_at:
            # Checks of finished requests wait for their time: drop them now and then.
            heap[:] = [item for item in heap if item[2].tracked]
            heapq.heapify(heap)
            self._heap_compact_at = max(_COMPACT_AT, 2 * len(heap))
        self._sequence += 1
        heapq.heappush(heap, (when, self._sequence, ticket, reason))

    def _arm(self, when: float, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._clock.call_later(max(0.0, when - now), self._fire)

    def _reset(self, loop: object) -> None:
        """A new event loop (tests, Starlette's TestClient): the old one's timer and records go.

        Raises:
            RuntimeError: If the old loop still runs (in another thread: a thread runs one
                loop at a time). Its requests' deadlines would be dropped unenforced.
        """
        old = self._loop
        if isinstance(old, AbstractEventLoop) and old.is_running() and not old.is_closed():
            raise RuntimeError(
                "this gate is in use by an event loop running in another thread: a gate (and "
                "its Limiter) serves one event loop at a time. Start the request in that loop "
                "(asyncio.run_coroutine_threadsafe) or give each thread its own Gate and Limiter"
            )
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
        due: list[tuple[Ticket, str]] = []
        fifo = self.fifo
        while fifo:
            head = fifo[0]
            if head.tracked and head.deadline > limit:
                break
            fifo.popleft()
            if head.tracked:
                due.append((head, DEADLINE))
        heap = self._heap
        while heap and heap[0][0] <= limit:
            when, _, ticket, reason = heapq.heappop(heap)
            if not ticket.tracked:
                continue
            if reason == DEADLINE:
                if when == ticket.deadline:
                    due.append((ticket, DEADLINE))
                continue
            clock = ticket.body
            if clock is None or clock.complete or not clock.flying:
                if clock is not None:
                    clock.in_heap = False  # nobody waits for body data now
                continue
            later = self.body_due(clock)
            if later <= limit:
                due.append((ticket, BODY))
            else:
                self._push(later, ticket, BODY)
        for ticket, reason in due:
            if ticket.tracked:  # not expired already for the other reason
                try:
                    self._expire(ticket, reason)
                except Exception:  # pragma: no cover - defensive: keep the timer going
                    logger.exception("apf_limiter: expiring a request failed")
        when = heap[0][0] if heap else _INF
        if fifo and fifo[0].deadline < when:
            when = fifo[0].deadline
        if when != _INF:
            self._arm(when, now)

    def _expire(self, ticket: Ticket, reason: str) -> None:
        """Cancel the request's work, give its seats back at once, and log it."""
        ticket.tracked = False
        ticket.reason = reason
        task = ticket.task
        if task is not None:
            task.cancel()
        elif ticket.cancel_scope is not None:
            ticket.cancel_scope.cancel()
        admission = ticket.admission
        admission.release()
        if reason == DEADLINE:
            level, status = logging.WARNING, 504
            what = f"request deadline of {ticket.deadline - ticket.arrival:g}s passed"
        else:
            level, status = logging.INFO, 408
            received = ticket.body.received_bytes if ticket.body is not None else 0
            what = (
                f"request body slower than {self._min_rate:g} bytes/s "
                f"({received} bytes in {self.now() - ticket.arrival:.3g}s)"
            )
        digest = admission.digest
        logger.log(
            level,
            "apf_limiter: %s: %s %s (flow schema %s, priority level %s); its seats are "
            "returned and %s",
            what,
            digest.verb.upper(),
            digest.path,
            ticket.flow_schema,
            ticket.priority_level,
            # The status HTTP front doors answer; others map the reason onto their protocol.
            "its response aborted" if ticket.started else f"it is answered {status}",
        )
