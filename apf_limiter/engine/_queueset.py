"""The queue set of one priority level: fair queuing in virtual time.

Theory of operation
-------------------
A queue set holds the requests of one priority level. It enforces the level's *concurrency
limit* (seats) and, for a ``Queue``-type level, orders waiting requests fairly between flows.

* **Virtual time R** ("the progress meter") counts the seat-seconds each active queue would have
  received under perfectly fair sharing. Every entry point first *syncs time*: R advances by
  ``min(seats requested, limit) / active queues`` per second of real time. R is an unsigned
  64-bit fixed-point value; when it passes ``HIGH_R`` an *epoch advance* winds R and every
  queue's virtual times back by ``R_DECREMENT``.
* **Arrival.** A request's flow hash is dealt a hand of queues (shuffle sharding); it joins the
  one with the least waiting work, visiting the hand from a rotating offset. It is rejected with
  ``queue-full`` only when all seats are taken *and* that queue is at its length limit.
* **Dispatch.** While seats are free, the queue whose head would finish first in virtual time
  (``next_dispatch_r + head.total_work``) is served, ties going to the first queue in
  round-robin order after the last one served. If that head does not fit, nothing is dispatched
  (head-of-line blocking, as in Kubernetes). ``next_dispatch_r`` then advances by the head's work.
* **Completion** corrects the queue's virtual time for the actual service time (the request was
  charged 3 ms per seat up front) and releases the seats, possibly after an additional latency.
  *Anti-windup* keeps a queue's ``next_dispatch_r`` from falling behind its head's arrival.
* **Exempt and Reject levels** have no queues: an exempt level runs everything; a Reject level
  runs what fits and rejects the rest with ``concurrency-limit``.

Finding the queue to dispatch from uses an index of
the queues that have waiting requests: a heap of virtual finish times, and for each finish time
the sorted indices of its queues. A dispatch then costs O(log queues) rather than a scan of every
queue, and ties are broken exactly as the Kubernetes scan would (the first index after the robin
index, wrapping around).

All methods take ``now`` (seconds) and return the requests they dispatched, so the caller can
wake their waiters. Nothing here blocks, sleeps, logs or reads a clock. After every change the
*seat demand* (seats in use plus seats waiting) is sampled into :attr:`QueueSet.demand`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Final

from apf_limiter.engine._dump import (
    QueueDump,
    QueueSetCounts,
    QueueSetDump,
    RequestDump,
    WaitingSummary,
)
from apf_limiter.engine._integrator import Integrator, IntegratorResults
from apf_limiter.engine._request import Queue, Request, RequestEvent, RequestState, transition
from apf_limiter.engine._seat_seconds import (
    ESTIMATED_SERVICE_NS,
    HIGH_R,
    MASK,
    R_DECREMENT,
    duration_per_seat,
    seats_times_duration,
)
from apf_limiter.engine._shuffle_sharding import Dealer
from apf_limiter.engine._waiting_tally import WaitingTally

if TYPE_CHECKING:
    from apf_limiter._digest import RequestDigest

NOTHING: Final[Sequence[Request]] = ()
"""The shared empty result: nothing was dispatched."""

# Module-level aliases: a global lookup is cheaper than an enum attribute on the hot path.
_NEW: Final = RequestState.NEW
_WAITING: Final = RequestState.WAITING
_EXECUTING: Final = RequestState.EXECUTING
_LINGERING: Final = RequestState.LINGERING
_DONE: Final = RequestState.DONE
_ENQUEUE: Final = RequestEvent.ENQUEUE
_DISPATCH: Final = RequestEvent.DISPATCH
_REJECT: Final = RequestEvent.REJECT
_TIME_OUT: Final = RequestEvent.TIME_OUT
_CANCEL: Final = RequestEvent.CANCEL
_LINGER: Final = RequestEvent.LINGER

_HAND_CACHE_LIMIT: Final = 16384

# Below 2**53 the float computation of seats_times_duration is exact up to its final rounding,
# and a quotient by 10 is either exact (x.5 is representable) or at least 0.1 away from a
# rounding boundary, so integer rounding half away from zero -- (p + 5) // 10 for p >= 0 --
# gives the same result, faster. The hot paths use it inline (tests/engine pins each copy to
# seats_times_duration).
EXACT: Final = 1 << 53


class QueueSet:
    """The queues and seat accounting of one priority level.

    Args:
        name: The priority level's name.
        desired_num_queues: ``-1`` for an exempt level, ``0`` for a Reject level, else the
            number of queues.
        queue_length_limit: Waiting requests per queue before ``queue-full`` rejections.
        hand_size: Queues dealt to each flow.
        concurrency_limit: The current limit, in seats.
        now: The current time, in seconds.
    """

    def __init__(
        self,
        name: str,
        *,
        desired_num_queues: int,
        queue_length_limit: int = 0,
        hand_size: int = 0,
        concurrency_limit: int,
        now: float,
    ) -> None:
        self.name = name
        self.queues: list[Queue] = []
        self.desired_num_queues = 0
        self.queue_length_limit = 0
        self.hand_size = 0
        self.concurrency_limit = 0
        self._dealer: Dealer | None = None
        self._hands: dict[int, list[int]] = {}
        # Dispatch index: finish time -> sorted indices of the queues whose head finishes
        # then, and a heap of those finish times (lazily cleaned).
        self._by_finish: dict[int, list[int]] = {}
        self._finishes: list[int] = []
        self.current_r = 0
        self.last_real_time = now
        self.robin_index = 0
        self.enqueues = 0
        self.active_queues = 0
        self.requests_waiting = 0
        self.requests_executing = 0
        self.seats_in_use = 0
        self.seats_waiting = 0
        # The waiting requests by flow schema, flow and verb, for the metrics' gauges.
        self.waiting_tally = WaitingTally()
        self.queued_seats_in_use = 0
        self.queueless_executing: set[Request] = set()
        self.dispatched = 0
        self.rejected_queue_full = 0
        self.rejected_concurrency_limit = 0
        self.timed_out = 0
        self.cancelled = 0
        self.no_accommodation = 0
        self.no_accommodation_by_flow_schema: dict[str, int] = {}
        # Requests holding their final seats during their additional latency.
        self.lingering: set[Request] = set()
        # Virtual time at the last dispatch, and the dispatching queue's next_dispatch_r
        # before the request's work was added (Kubernetes' dispatch_r and latest_s).
        self.dispatch_r = 0
        self.latest_s = 0
        self.epoch_advances = 0
        self.epoch_advance_failures = 0
        self.r_overflows = 0
        self.demand = Integrator(now)
        self.configure(
            desired_num_queues=desired_num_queues,
            queue_length_limit=queue_length_limit,
            hand_size=hand_size,
            concurrency_limit=concurrency_limit,
            now=now,
        )

    # ----------------------------------------------------------------------------------------
    # configuration

    def configure(
        self,
        *,
        desired_num_queues: int,
        queue_length_limit: int,
        hand_size: int,
        concurrency_limit: int,
        now: float,
    ) -> Sequence[Request]:
        """Apply a new queuing and dispatching configuration, then dispatch what now fits.

        More queues are added at once; surplus queues are removed as they empty. A level
        switched to zero queues keeps its old queue length limit and hand size.

        Raises:
            ValueError: If ``desired_num_queues`` and ``hand_size`` make an invalid dealer.
        """
        if concurrency_limit < 0:
            raise ValueError(f"concurrency_limit must not be negative, got {concurrency_limit}")
        dealer = Dealer(desired_num_queues, hand_size) if desired_num_queues > 0 else None
        self._sync_time(now)
        if desired_num_queues > 0:
            for index in range(len(self.queues), desired_num_queues):
                self.queues.append(Queue(index))
            self.queue_length_limit = queue_length_limit
            self.hand_size = hand_size
            self._dealer = dealer
            self._hands = {}
        self.desired_num_queues = desired_num_queues
        self.concurrency_limit = concurrency_limit
        dispatched = self._dispatch_as_much_as_possible()
        self._note_demand(now)
        return dispatched

    def set_concurrency_limit(self, concurrency_limit: int, now: float) -> Sequence[Request]:
        """Change the current limit; a raised limit dispatches waiting requests at once."""
        if concurrency_limit < 0:
            raise ValueError(f"concurrency_limit must not be negative, got {concurrency_limit}")
        self._sync_time(now)
        self.concurrency_limit = concurrency_limit
        dispatched = self._dispatch_as_much_as_possible()
        self._note_demand(now)
        return dispatched

    # ----------------------------------------------------------------------------------------
    # arrival

    def start_request(self, request: Request, now: float) -> Sequence[Request]:
        """Admit, queue or reject an arriving request.

        Afterwards ``request.state`` is ``EXECUTING`` (dispatched at once), ``WAITING`` or
        ``REJECTED`` (with ``request.reject_reason`` set).

        Returns:
            The requests dispatched by this arrival (``request`` itself among them when it was
            dispatched at once).
        """
        if request.state is not _NEW:
            raise RuntimeError(f"request already started: {request!r}")
        # Inline "sync time" for the common case of no active queue: R stands still then.
        if self.active_queues:
            self._sync_time(now)
        else:
            self.last_real_time = now
        current_r = self.current_r
        request.arrival_time = now
        request.arrival_r = current_r
        if self.desired_num_queues < 1:
            return self._start_queueless(request, now)
        seats = request.max_seats
        limit = self.concurrency_limit
        in_use = self.seats_in_use
        if self.requests_waiting or limit <= 0 or in_use + seats > limit:
            return self._start_queued(request, now)
        # Fast path. Nothing waits and the request fits: the general path would enqueue it on
        # the first queue visited in its hand (every queue holds zero waiting work), find that
        # queue as the only candidate, and dispatch it. Do exactly that, inline.
        enqueues = self.enqueues
        self.enqueues = enqueues + 1
        hand = self._hands.get(request.flow_hash) or self._hand(request.flow_hash)
        queue = self.queues[hand[enqueues % self.hand_size]]
        executing = queue.executing
        if executing:
            # Anti-windup: dispatch in the virtual world must not precede arrival.
            next_r = queue.next_dispatch_r
            if next_r < current_r:
                next_r = current_r
        else:
            # An idle queue restarts at the current virtual time.
            self.active_queues += 1
            next_r = current_r
        request.queue = queue
        self.robin_index = queue.index
        if request.final_seats > limit:
            self._clamp_final_seats(request, limit)
            seats = request.max_seats
        # transition(request, DISPATCH), inlined (a hot-path copy, docs/internals.md): the
        # guard above proved the state NEW, and TRANSITIONS maps (NEW, DISPATCH) to EXECUTING.
        request.state = _EXECUTING
        request.start_time = now
        self.requests_executing += 1
        self.seats_in_use = in_use = in_use + seats
        self.queued_seats_in_use += seats
        executing.add(request)
        queue.seats_in_use += seats
        self.dispatch_r = current_r
        self.latest_s = next_r
        queue.next_dispatch_r = (next_r + request.total_work) & MASK
        self.dispatched += 1
        self.demand.set(in_use, now)  # nothing waits, so the demand is the seats in use
        return (request,)

    def _start_queueless(self, request: Request, now: float) -> Sequence[Request]:
        if not self._can_accommodate(request.max_seats):
            self.rejected_concurrency_limit += 1
            transition(request, _REJECT)
            request.reject_reason = "concurrency-limit"
            return NOTHING
        transition(request, _DISPATCH)
        request.start_time = now
        self.requests_executing += 1
        self.seats_in_use += request.max_seats
        self.queueless_executing.add(request)
        self.dispatched += 1
        self.demand.set(self.seats_in_use + self.seats_waiting, now)
        return (request,)

    def _start_queued(self, request: Request, now: float) -> Sequence[Request]:
        hand = self._hand(request.flow_hash)
        hand_size = self.hand_size
        offset = self.enqueues % hand_size
        self.enqueues += 1
        queues = self.queues
        queue = queues[hand[offset]]
        least_work = queue.total_work_sum
        for i in range(1, hand_size):
            candidate = queues[hand[(offset + i) % hand_size]]
            if candidate.total_work_sum < least_work:
                queue = candidate
                least_work = candidate.total_work_sum
        if (
            self.seats_in_use >= self.concurrency_limit
            and len(queue.waiting) >= self.queue_length_limit
        ):
            if self.epoch_advance_failures:
                # Kubernetes bounds the chosen queue on every arrival, rejected ones included
                # (timeoutOldRequestsAndRejectOrEnqueueLocked defers boundNextDispatchLocked
                # before the reject check): see the comment on the bound below.
                self._bound_next_dispatch(queue)
                self._push(queue)
            self.rejected_queue_full += 1
            transition(request, _REJECT)
            request.reject_reason = "queue-full"
            return NOTHING
        waiting = queue.waiting
        was_empty = not waiting
        if was_empty and not queue.executing:
            self.active_queues += 1
            queue.next_dispatch_r = self.current_r
        request.queue = queue
        transition(request, _ENQUEUE)
        waiting.append(request)
        self.waiting_tally.add(request)
        queue.initial_seats_sum += request.initial_seats
        queue.max_seats_sum += request.max_seats
        queue.total_work_sum += request.total_work
        request.queue_length_after_enqueue = len(waiting)
        self.requests_waiting += 1
        self.seats_waiting += request.max_seats
        # Sampled as it joins, before dispatch (queueset.go, enqueueToBoundLocked): a request
        # whose final seats are clamped at dispatch still counts at its full width in the
        # demand's high watermark, which borrowing reads.
        self.demand.set(self.seats_in_use + self.seats_waiting, now)
        if was_empty or self.epoch_advance_failures:
            self._bound_next_dispatch(queue)
            self._push(queue)
        # Else it joined behind a head: the head is the same, and so is the queue's virtual
        # time, kept at or above the head's arrival (anti-windup) by every path until an epoch
        # advance fails (then Kubernetes' bound on every arrival applies). Re-indexing would
        # read the head, long queued and out of cache in a deep backlog.
        dispatched = self._dispatch_as_much_as_possible()
        self._note_demand(now)
        return dispatched

    # ----------------------------------------------------------------------------------------
    # completion and removal

    def finish(self, request: Request, now: float, ran: bool = True) -> Sequence[Request]:
        """Record that an executing request's handler returned (normally or not).

        Releases its seats now, or marks it ``LINGERING`` with ``release_at`` set when it has
        an additional latency; the caller must then call :meth:`release` at that time.

        Args:
            request: The executing request.
            now: The current time.
            ran: ``False`` for a request dispatched but never run (its waiter left at that
                instant): it caused no later work, so it holds no additional latency, and its
                queue is refunded the final work charged at dispatch.

        Returns:
            The requests dispatched because seats or virtual time were freed.
        """
        if request.state is not _EXECUTING:
            raise RuntimeError(f"finish() of a request that is not executing: {request!r}")
        self._sync_time(now)
        self.requests_executing -= 1
        queue = request.queue
        if queue is None:
            self.queueless_executing.discard(request)
        else:
            executing = queue.executing
            executing.discard(request)
            waiting = queue.waiting
            if not executing and not waiting:
                self.active_queues -= 1
            # Charged G per seat at dispatch; correct for the actual service time S.
            # to_nanoseconds, inlined (a service time is never negative).
            service_ns = int((now - request.start_time) * 1e9 + 0.5)
            product = request.initial_seats * (ESTIMATED_SERVICE_NS - service_ns)
            if -EXACT < product < EXACT:
                # Integer rounding (see EXACT), inline: this runs for every request.
                correction = (product + 5) // 10 if product >= 0 else -((5 - product) // 10)
            else:
                correction = seats_times_duration(
                    request.initial_seats, ESTIMATED_SERVICE_NS - service_ns
                )
            if not ran:
                correction += request.final_work
            queue.next_dispatch_r = (queue.next_dispatch_r - correction) & MASK
            if waiting:
                self._bound_next_dispatch(queue)
                self._push(queue)
        if request.additional_latency_ns <= 0 or not ran:
            self._release_seats(request)
        else:
            transition(request, _LINGER)
            request.release_at = now + request.additional_latency
            self.lingering.add(request)
        dispatched = self._dispatch_as_much_as_possible() if self.requests_waiting else NOTHING
        demand = self.demand
        x = self.seats_in_use + self.seats_waiting
        if x != demand.x:
            demand.set(x, now)
        return dispatched

    def release(self, request: Request, now: float) -> Sequence[Request]:
        """Release a lingering request's final seats (its additional latency has passed)."""
        if request.state is not _LINGERING:
            raise RuntimeError(f"release() of a request that is not lingering: {request!r}")
        self._sync_time(now)
        self.lingering.discard(request)
        self._release_seats(request)
        dispatched = self._dispatch_as_much_as_possible()
        self._note_demand(now)
        return dispatched

    def _release_seats(self, request: Request) -> None:
        # transition(request, FINISH or RELEASE), inlined (a hot-path copy, docs/internals.md):
        # finish() and release() proved the state EXECUTING or LINGERING, and TRANSITIONS
        # maps both moves to DONE.
        request.state = _DONE
        seats = request.max_seats
        self.seats_in_use -= seats
        queue = request.queue
        if queue is not None:
            queue.seats_in_use -= seats
            if queue.index >= 0:
                self.queued_seats_in_use -= seats
                if len(self.queues) > self.desired_num_queues:
                    self._remove_queue_if_surplus(queue)

    def cancel(self, request: Request, now: float, *, timed_out: bool) -> Sequence[Request]:
        """Remove a waiting request from its queue: its wait limit passed or its waiter left.

        Unlike Kubernetes, dispatching is retried afterwards, so a departed wide head of line
        cannot leave seats idle until the next arrival or completion.

        Returns:
            The requests dispatched afterwards.
        """
        if request.state is not _WAITING:
            raise RuntimeError(f"cancel() of a request that is not waiting: {request!r}")
        self._sync_time(now)
        queue = request.queue
        assert queue is not None
        queue.waiting.remove(request)
        self.waiting_tally.remove(request)
        queue.initial_seats_sum -= request.initial_seats
        queue.max_seats_sum -= request.max_seats
        queue.total_work_sum -= request.total_work
        self.requests_waiting -= 1
        self.seats_waiting -= request.max_seats
        if not queue.waiting and not queue.executing:
            self.active_queues -= 1
        if timed_out:
            self.timed_out += 1
            transition(request, _TIME_OUT)
            request.reject_reason = "time-out"
        else:
            self.cancelled += 1
            transition(request, _CANCEL)
        self._bound_next_dispatch(queue)
        self._push(queue)  # a new head, or (anti-windup) a new virtual time
        dispatched = self._dispatch_as_much_as_possible()
        # No queue removal here: Kubernetes removes one on release (removeQueueIfEmptyLocked).
        self._note_demand(now)
        return dispatched

    # ----------------------------------------------------------------------------------------
    # observations and reads

    def update_observations(self, now: float) -> IntegratorResults:
        """Close the seat-demand interval at ``now`` and start the next one.

        Borrowing reads the result, as upstream's ``UpdateObservations`` (with
        ``seatDemandIntegrator.Reset``) feeds ``updateBorrowingLocked``.
        """
        return self.demand.reset(now)

    def overdue_lingering(self, overdue: float) -> list[Request]:
        """The lingering requests whose final seats were due back by ``overdue``."""
        return [request for request in self.lingering if request.release_at <= overdue]

    def counts(self) -> QueueSetCounts:
        """Return the counters, frozen (what the level's statistics report)."""
        return QueueSetCounts(
            self.concurrency_limit,
            len(self.queues),
            self.requests_executing,
            self.seats_in_use,
            self.requests_waiting,
            self.seats_waiting,
            self.dispatched,
            self.rejected_queue_full,
            self.rejected_concurrency_limit,
            self.timed_out,
            self.cancelled,
        )

    def waiting_summary(self) -> WaitingSummary:
        """The waiting requests counted by flow schema, flow and verb (a pure read).

        Its cost does not grow with the number of requests waiting (``flows`` grows with the
        number of distinct flows waiting). Copied with ``dict()``: atomic for a scrape from
        another thread.
        """
        tally = self.waiting_tally
        return WaitingSummary(
            dict(tally.requests), dict(tally.seats), dict(tally.flows), tally.read_only
        )

    def dump(self, waiting: bool = True) -> QueueSetDump:
        """Copy the queue set's virtual time, queues and requests into frozen values.

        A pure read, as upstream's ``QueueSet.Dump``. Containers are copied with ``list()``
        before they are walked: a scrape from another thread then sees a consistent container
        even if the event loop changes it meanwhile.
        """
        return QueueSetDump(
            desired_num_queues=self.desired_num_queues,
            queue_length_limit=self.queue_length_limit,
            hand_size=self.hand_size,
            active_queues=self.active_queues,
            current_r=self.current_r,
            dispatch_r=self.dispatch_r,
            latest_s=self.latest_s,
            epoch_advances=self.epoch_advances,
            epoch_advance_failures=self.epoch_advance_failures,
            r_overflows=self.r_overflows,
            no_accommodation=self.no_accommodation,
            no_accommodation_by_flow_schema=dict(self.no_accommodation_by_flow_schema),
            queues=tuple(
                _dump_queue(index, queue, waiting) for index, queue in enumerate(list(self.queues))
            ),
            queueless_executing=_by_start(
                [
                    _dump_request(request, -1, _EXECUTING_NAME)
                    for request in list(self.queueless_executing)
                ]
            ),
            lingering=_by_start(
                [
                    _dump_request(request, _queue_index(request), _LINGERING_NAME)
                    for request in list(self.lingering)
                ]
            ),
        )

    # ----------------------------------------------------------------------------------------
    # state, virtual time and dispatch

    @property
    def is_exempt(self) -> bool:
        """Whether the level is exempt (never limits, never queues)."""
        return self.desired_num_queues < 0

    @property
    def is_idle(self) -> bool:
        """Whether no request is waiting or executing."""
        return self.requests_waiting == 0 and self.requests_executing == 0

    @property
    def seat_demand(self) -> int:
        """Seats in use plus seats waiting: what the borrowing integrator samples."""
        return self.seats_in_use + self.seats_waiting

    def _note_demand(self, now: float) -> None:
        demand = self.demand
        x = self.seats_in_use + self.seats_waiting
        if x != demand.x:
            demand.set(x, now)

    def _can_accommodate(self, seats: int) -> bool:
        if self.desired_num_queues < 0:
            return True
        limit = self.concurrency_limit
        if limit <= 0:
            # Deviation D3: a level whose current limit is 0 admits nothing, where
            # Kubernetes would let one request through whenever the level is idle.
            return False
        if seats > limit:
            # Too wide for the whole limit: it runs alone.
            return self.requests_executing == 0
        return self.seats_in_use + seats <= limit

    def _dispatch_as_much_as_possible(self) -> Sequence[Request]:
        dispatched: list[Request] | None = None
        while self.requests_waiting and self.seats_in_use < self.concurrency_limit:
            request = self._dispatch_one()
            if request is None:
                break
            if dispatched is None:
                dispatched = [request]
            else:
                dispatched.append(request)
        return NOTHING if dispatched is None else dispatched

    def _dispatch_one(self) -> Request | None:
        queue = self._find_dispatch_queue()
        if queue is None:
            return None
        request = queue.waiting[0]
        if not self._can_accommodate(request.max_seats):
            # Head-of-line blocking, as in Kubernetes: no other queue is tried.
            self.no_accommodation += 1
            by_schema = self.no_accommodation_by_flow_schema
            by_schema[request.flow_schema] = by_schema.get(request.flow_schema, 0) + 1
            return None
        queue.waiting.popleft()
        self.waiting_tally.remove(request)  # before a clamp of its seats, as the sums below
        queue.initial_seats_sum -= request.initial_seats
        queue.max_seats_sum -= request.max_seats
        queue.total_work_sum -= request.total_work
        self.requests_waiting -= 1
        self.seats_waiting -= request.max_seats
        limit = self.concurrency_limit
        if request.final_seats > limit:
            self._clamp_final_seats(request, limit)
        # The queues that were not chosen win the next tie.
        self.robin_index = queue.index
        self._begin_execution(request, queue, self.last_real_time)
        self._push(queue)
        return request

    def _begin_execution(self, request: Request, queue: Queue, now: float) -> None:
        transition(request, _DISPATCH)
        request.start_time = now
        seats = request.max_seats
        self.requests_executing += 1
        self.seats_in_use += seats
        self.queued_seats_in_use += seats
        queue.executing.add(request)
        queue.seats_in_use += seats
        self.dispatch_r = self.current_r
        self.latest_s = queue.next_dispatch_r
        queue.next_dispatch_r = (queue.next_dispatch_r + request.total_work) & MASK
        if queue.waiting:
            self._bound_next_dispatch(queue)
        self.dispatched += 1

    @staticmethod
    def _clamp_final_seats(request: Request, limit: int) -> None:
        # Keep the final work constant while fitting the final seats into the limit. The
        # waiting-seat totals were already settled with the old width, so nothing leaks.
        if limit > 0:
            request.additional_latency_ns = duration_per_seat(request.final_work, limit)
        request.final_seats = limit
        request.max_seats = max(request.initial_seats, limit)

    def _find_dispatch_queue(self) -> Queue | None:
        """Return the queue whose head finishes first in virtual time (None if none waits).

        Equivalent to the Kubernetes scan of every queue in round-robin order starting after
        ``robin_index``, keeping the strictly smallest virtual finish time: among the queues
        tied on the smallest finish time, the first index after ``robin_index`` wins,
        wrapping around.
        """
        finishes = self._finishes
        by_finish = self._by_finish
        while finishes:
            group = by_finish.get(finishes[0])
            if group is not None:
                break
            heappop(finishes)  # a finish time no queue has any more
        else:
            return None
        # After a full scan the Kubernetes robin index is back where it started.
        start = self.robin_index % len(self.queues)
        self.robin_index = start
        position = bisect_right(group, start)
        return self.queues[group[position] if position < len(group) else group[0]]

    def _push(self, queue: Queue) -> None:
        """(Re-)index a queue under its head's virtual finish time, or unindex it."""
        by_finish = self._by_finish
        old = queue.finish
        waiting = queue.waiting
        finish = (queue.next_dispatch_r + waiting[0].total_work) & MASK if waiting else None
        if finish == old:
            # Unchanged: re-indexing would only leave a stale duplicate in the heap.
            return
        if old is not None:
            group = by_finish[old]
            if len(group) == 1:
                del by_finish[old]
            else:
                del group[bisect_left(group, queue.index)]
        queue.finish = finish
        if finish is None:
            return
        peers = by_finish.get(finish)
        if peers is None:
            by_finish[finish] = [queue.index]
            finishes = self._finishes
            heappush(finishes, finish)
            if len(finishes) > 2 * len(by_finish) + 64:
                self._finishes = list(by_finish)
                heapify(self._finishes)
        else:
            insort(peers, queue.index)

    def _rebuild_heap(self) -> None:
        """Re-index every queue (after indices or virtual times changed wholesale)."""
        self._by_finish = {}
        self._finishes = []
        for queue in self.queues:
            queue.finish = None
            self._push(queue)

    @staticmethod
    def _bound_next_dispatch(queue: Queue) -> None:
        # Anti-windup: dispatch in the virtual world must not precede arrival.
        if queue.waiting:
            arrival_r = queue.waiting[0].arrival_r
            if queue.next_dispatch_r < arrival_r:
                queue.next_dispatch_r = arrival_r

    def sync_time(self, now: float) -> None:
        """Advance virtual time to ``now`` (every other entry point does this first)."""
        self._sync_time(now)

    def _sync_time(self, now: float) -> None:
        elapsed = now - self.last_real_time
        self.last_real_time = now
        active = self.active_queues
        if not active or elapsed <= 0:
            return
        seats = self.queued_seats_in_use + self.seats_waiting
        limit = self.concurrency_limit
        if seats > limit:
            seats = limit
        elapsed_ns = int(elapsed * 1e9 + 0.5)  # to_nanoseconds, inlined (elapsed > 0 here)
        if active == 1:
            # The common case: an integral rate allows exact integer arithmetic (and
            # integer rounding inline, see EXACT: this runs on every arrival and completion).
            product = seats * elapsed_ns
            if product < EXACT:
                increment = (product + 5) // 10
            else:
                increment = seats_times_duration(seats, elapsed_ns)
        else:
            increment = seats_times_duration(seats / active, elapsed_ns)
        current_r = self.current_r
        new_r = (current_r + increment) & MASK
        if new_r < current_r:
            # Kubernetes only logs this; keep the count so it can be observed.
            self.r_overflows += 1
        elif new_r >= HIGH_R:
            new_r = self._advance_epoch(new_r)
        self.current_r = new_r

    def _advance_epoch(self, current_r: int) -> int:
        success = True
        for queue in self.queues:
            if not queue.waiting and not queue.executing:
                queue.next_dispatch_r = 0
                continue
            if queue.next_dispatch_r < R_DECREMENT:
                success = False
            queue.next_dispatch_r = (queue.next_dispatch_r - R_DECREMENT) & MASK
            for request in queue.waiting:
                if request.arrival_r < R_DECREMENT:
                    success = False
                request.arrival_r = (request.arrival_r - R_DECREMENT) & MASK
        if success:
            self.epoch_advances += 1
        else:
            self.epoch_advance_failures += 1
        self._rebuild_heap()
        return (current_r - R_DECREMENT) & MASK

    def _hand(self, flow_hash: int) -> list[int]:
        hand = self._hands.get(flow_hash)
        if hand is None:
            assert self._dealer is not None
            hand = self._dealer.deal(flow_hash)
            if len(self._hands) >= _HAND_CACHE_LIMIT:
                self._hands.clear()
            self._hands[flow_hash] = hand
        return hand

    def _remove_queue_if_surplus(self, queue: Queue) -> None:
        queues = self.queues
        if len(queues) <= self.desired_num_queues or queue.waiting or queue.executing:
            return
        if self.desired_num_queues < 0:
            return
        index = queue.index
        if index < 0 or index >= len(queues) or queues[index] is not queue:
            # Deviation D6: already removed. Kubernetes (removeQueueIfEmptyLocked) would use
            # the removed queue's stale index and remove whichever queue has moved into it,
            # orphaning the requests waiting there.
            return
        del queues[index]
        for later in queues[index:]:
            later.index -= 1
        # Seats still held by lingering requests of a removed queue no longer count towards
        # the virtual clock's rate (it sums over the queues in the set).
        self.queued_seats_in_use -= queue.seats_in_use
        queue.index = -1
        if self.robin_index >= index:
            self.robin_index -= 1
        self._rebuild_heap()

    def __repr__(self) -> str:
        return (
            f"<QueueSet {self.name} limit={self.concurrency_limit} "
            f"executing={self.requests_executing} seats={self.seats_in_use} "
            f"waiting={self.requests_waiting}>"
        )


# A request's state is known from the container it is in (the queue set keeps them so), and
# reading ``request.state.name`` would cost as much as the rest of the request's dump.
_WAITING_NAME: Final = "WAITING"
_EXECUTING_NAME: Final = "EXECUTING"
_LINGERING_NAME: Final = "LINGERING"


def _dump_queue(index: int, queue: Queue, with_waiting: bool) -> QueueDump:
    # Most queues are empty: they cost no list and no sort.
    waiting = queue.waiting
    executing = queue.executing
    return QueueDump(
        index,
        tuple([_dump_request(request, index, _WAITING_NAME) for request in list(waiting)])
        if waiting and with_waiting
        else (),
        _by_start([_dump_request(request, index, _EXECUTING_NAME) for request in list(executing)])
        if executing
        else (),
        queue.next_dispatch_r,
        queue.seats_in_use,
        queue.initial_seats_sum,
        queue.max_seats_sum,
        queue.total_work_sum,
        len(waiting),
    )


def _dump_request(request: Request, queue_index: int, state: str) -> RequestDump:
    # The digest is a slot the shell fills in; a request built by hand may lack it.
    digest: RequestDigest | None = getattr(request, "digest", None)
    # Positional: keywords would almost triple the cost of each request's tuple.
    return RequestDump(
        request.flow_schema,
        request.priority_level,
        request.distinguisher,
        state,
        queue_index,
        request.initial_seats,
        request.final_seats,
        request.max_seats,
        request.additional_latency_ns,
        request.total_work,
        request.arrival_time,
        request.start_time,
        request.release_at if state == _LINGERING_NAME else 0.0,
        digest.verb if digest is not None else "",
        digest,
    )


def _queue_index(request: Request) -> int:
    queue = request.queue
    return queue.index if queue is not None else -1


def _start_key(request: RequestDump) -> tuple[float, float]:
    return (request.start_time, request.arrival_time)


def _by_start(requests: list[RequestDump]) -> tuple[RequestDump, ...]:
    # A stable sort of the set's iteration order, as the dumps have always listed them.
    requests.sort(key=_start_key)
    return tuple(requests)
