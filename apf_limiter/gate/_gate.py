"""The request gate: the life of one request, implemented once for every front door.

A front door (the ASGI middleware, a gRPC interceptor, an aiohttp middleware, a job runner)
maps its protocol onto four steps:

1. **Classify**: build a :class:`~apf_limiter.RequestDigest` (who, what, how many seats) and
   the per-request options (long-running, its own deadline).
2. **Start**: :meth:`Gate.start` never waits. It counts a long-running request against its
   flow schema's cap, starts its admission, and tracks its deadline and body rate. It returns
   a :class:`~apf_limiter.gate.Ticket` holding the response metadata (flow schema, priority
   level), or raises :class:`~apf_limiter.Rejected` with the reason and ``Retry-After``.
3. **Wait** (only when ``ticket.admitted`` is false): ``await ticket.wait()``; the front door
   cancels that wait (or calls ``ticket.abandon()``) when its client leaves, and the ticket
   then holds nothing.
4. **Run, then end**: ``ticket.response_started()`` as the response starts,
   ``ticket.release()`` as it completes, ``ticket.end(error)`` once, in a ``finally``; when it
   answers ``True`` the request expired (``ticket.reason``) and the front door answers so.

See ``docs/gate.md``.
"""

from __future__ import annotations

import math
from asyncio import current_task, get_running_loop
from collections.abc import Mapping
from typing import Any, Final

from apf_limiter._clock import current_loop
from apf_limiter._digest import RequestDigest
from apf_limiter._errors import Rejected
from apf_limiter.gate._deadline import Deadlines
from apf_limiter.gate._long_running import LongRunningCaps
from apf_limiter.gate._options import SlowClients
from apf_limiter.gate._ratelimit import RateLimitFields
from apf_limiter.gate._ticket import DEADLINE, Ticket
from apf_limiter.limiter import Admission, Limiter, ShadowOutcome, check_wait_limit

_DEFAULT_SLOW_CLIENTS: Final = SlowClients()
_INF: Final = math.inf


class Gate(Deadlines):
    """The life of one request through a :class:`~apf_limiter.Limiter`, for any front door.

    Args:
        limiter: The limiter requests are admitted through.
        wait_limit: Seconds a request may wait in a queue, at most 60 (Kubernetes' cap);
            ``None``: the configuration's ``requestWaitLimit``.
        slow_clients: The request deadlines and the minimum body rate.
        max_long_running: Caps on open long-running requests by flow-schema name (``"*"``:
            each schema not named); one more is refused (``long-running-limit``).

    Raises:
        ValueError: On out-of-range arguments.
    """

    def __init__(
        self,
        limiter: Limiter,
        *,
        wait_limit: float | None = None,
        slow_clients: SlowClients = _DEFAULT_SLOW_CLIENTS,
        max_long_running: Mapping[str, int] | None = None,
    ) -> None:
        if wait_limit is not None:
            check_wait_limit(wait_limit)
        if not isinstance(slow_clients, SlowClients):
            raise TypeError(f"slow_clients must be a SlowClients, got {slow_clients!r}")
        super().__init__(
            limiter.clock,
            _seconds(slow_clients.request_timeout),
            slow_clients.level_timeouts(),
            slow_clients.min_body_rate,
            slow_clients.grace,
        )
        self._limiter = limiter
        self._wait_limit = wait_limit
        self.slow_clients = slow_clients
        self._caps = (
            None if max_long_running is None else LongRunningCaps(max_long_running, limiter)
        )
        self._rate_limit_fields: RateLimitFields | None = None  # made at first use

    def rate_limit(
        self,
        priority_level: str,
        flow_schema: str,
        distinguisher: str,
        reset: int | None = None,
    ) -> tuple[str, str] | None:
        """The IETF ``RateLimit-Policy`` and ``RateLimit`` values of a response, or ``None``.

        draft-ietf-httpapi-ratelimit-headers-10, as Structured Fields: the policy is the
        priority level, its quota ``q`` the level's current limit in seats with
        ``qu="concurrent-requests"``, ``r`` the seats left now, ``pk`` a keyed hash of the
        flow; ``t`` the ``Retry-After`` of a rejection (``reset``). ``None`` at an exempt
        level. Read it as the response starts: the seats in use are those of that instant.

        Args:
            priority_level: The request's priority level.
            flow_schema: Its flow schema.
            distinguisher: Its flow distinguisher (``Admission.distinguisher``,
                ``Rejected.distinguisher``).
            reset: On a rejection, its ``retry_after``.
        """
        fields = self._rate_limit_fields
        if fields is None:
            fields = self._rate_limit_fields = RateLimitFields(self._limiter)
        return fields.fields(priority_level, flow_schema, distinguisher, reset)

    @property
    def limiter(self) -> Limiter:
        """The limiter requests are admitted through."""
        return self._limiter

    @property
    def times_bodies(self) -> bool:
        """Whether request bodies are timed against a minimum rate (see ``Ticket.body_clock``)."""
        return self.slow_clients.min_body_rate is not None

    def start(
        self,
        digest: RequestDigest,
        long_running: bool = False,
        request_timeout: float | None = None,
        client_deadline: float | None = None,
    ) -> Ticket:
        """Start one request: count it, admit or queue it, track its deadline. Never waits.

        Call it from the task that runs the request's work: expiring cancels that task.

        Args:
            digest: The request, classified by the front door.
            long_running: Whether its seats go back (and its deadline ends) as its response
                starts (streams, watches, WebSockets).
            request_timeout: Its own deadline in seconds (``math.inf``: none); ``None`` keeps
                the gate's (by priority level, else the default).
            client_deadline: Seconds its client still waits for the answer (a gRPC call's
                remaining time, a timeout header; see :meth:`client_wait`), or ``None``:
                unknown. When shorter than the wait limit, it is this request's wait limit:
                its wait ends as a ``time-out`` rejection no later than its client gives up.

        Returns:
            Its ticket: ``ticket.admitted`` says whether it holds its seats already.

        Raises:
            Rejected: Refused on arrival: ``queue-full``, ``concurrency-limit`` or
                ``long-running-limit``, with its ``retry_after`` and the names of its flow
                schema and priority level.
            LookupError: If no flow schema matches.
        """
        counted: str | None = None
        would: ShadowOutcome | None = None
        if long_running:
            caps = self._caps
            if caps is not None:
                entered = caps.enter(digest)
                if isinstance(entered, Rejected):
                    raise entered
                if entered is not None:
                    counted, would = entered
        wait_limit = self._wait_limit
        bound = _INF
        if client_deadline is not None:  # the one test the option costs when off
            bound = self._bound(client_deadline)
            if bound != _INF:
                wait_limit = bound
        admission = Admission(self._limiter, digest, wait_limit)
        try:
            admitted = admission.start()  # never waits: the fast path ends here
        except BaseException:
            if counted is not None:
                self.leave(counted)
            raise
        ticket = Ticket(self, admission, admitted, long_running, counted)
        if would is not None:
            ticket.would_refuse = would
        # The deadline, inline (every request comes here): one shared timer per event loop.
        timeout = request_timeout
        if timeout is None:
            timeout = self._default
            if self._levels:
                timeout = self._levels.get(ticket.priority_level, timeout)
        if timeout == _INF and self._min_rate is None:
            return ticket  # neither a deadline nor the body rate applies
        try:
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
            ticket.task = task
            ticket.arrival = now
            ticket.deadline = deadline
            ticket.tracked = True
            if task is None:  # trio: a scope of its own, cancelled by the timer
                import trio

                cancel_scope = ticket.cancel_scope = trio.CancelScope()
                cancel_scope.__enter__()  # exited by Ticket.end, in this task
        except BaseException:
            ticket.end(None)  # no event loop it knows, say: the seats go back
            raise
        if deadline != _INF:
            if timeout == self._default:
                fifo = self.fifo
                fifo.append(ticket)  # arrival order is deadline order: the head is due first
                if len(fifo) > self._compact_at:
                    self._compact()
            else:
                self._push(deadline, ticket, DEADLINE)
            if deadline < self._timer_at:
                self._arm(deadline, now)
        return ticket

    def _bound(self, client_deadline: float) -> float:
        """The wait limit a client deadline sets, or ``math.inf`` if not shorter than the gate's."""
        limit = self._wait_limit
        if limit is None:
            limit = self._limiter.config.request_wait_limit  # read now: a reload may change it
        if not client_deadline < limit:  # NaN too: no usable deadline
            return _INF
        return client_deadline if client_deadline > 0.0 else 0.0

    def client_wait(self, request_timeout: float | None, *remaining: float | None) -> float | None:
        """A request's client deadline for :meth:`start`: the shortest of those known.

        Args:
            request_timeout: The request's own deadline (a route's), or ``None`` for the
                gate's default; ``math.inf``: none.
            *remaining: Seconds the client still waits, from each source the front door
                reads (``None``: not told).

        Returns:
            The shortest, or ``None`` if none is known.
        """
        shortest = self._default if request_timeout is None else request_timeout
        for seconds in remaining:
            if seconds is not None and seconds < shortest:
                shortest = seconds
        return None if shortest == _INF else shortest

    def leave(self, schema: str) -> None:
        """Count a long-running request out of its flow schema's cap (``Ticket.end`` does)."""
        if self._caps is not None:
            self._caps.leave(schema)

    def open_long_running(self, schema: str) -> int:
        """How many long-running requests of ``schema`` are open (0 without caps)."""
        return 0 if self._caps is None else self._caps.open_requests(schema)

    def __repr__(self) -> str:
        return f"<Gate {self._limiter!r}>"


def _seconds(timeout: float | None) -> float:
    return float("inf") if timeout is None else float(timeout)
