"""The state of one queue set, its virtual clock and its dispatching.

:class:`~apf_limiter.engine._queueset.QueueSet` builds on this: the theory of operation opens
that module. Here are the counters and queues it keeps, virtual time (sync and epoch advance),
the index of queues by virtual finish time, and dispatch: serving the queue whose head finishes
first while seats are free. Upstream: ``queueset.go`` (``syncTimeLocked``, ``advanceEpoch``,
``dispatchLocked``, ``findDispatchQueueToBoundLocked``, ``boundNextDispatchLocked``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from heapq import heapify, heappop, heappush
from typing import Final

from apf_limiter.engine._integrator import Integrator
from apf_limiter.engine._request import Queue, Request, RequestState
from apf_limiter.engine._seat_seconds import (
    HIGH_R,
    MASK,
    R_DECREMENT,
    duration_per_seat,
    seats_times_duration,
)
from apf_limiter.engine._shuffle_sharding import Dealer
from apf_limiter.engine._waiting_tally import WaitingTally

NOTHING: Final[Sequence[Request]] = ()
"""The shared empty result: nothing was dispatched."""

_EXECUTING: Final = RequestState.EXECUTING

_HAND_CACHE_LIMIT: Final = 16384

# Below 2**53 the float computation of seats_times_duration is exact up to its final rounding,
# and a quotient by 10 is either exact (x.5 is representable) or at least 0.1 away from a
# rounding boundary, so integer rounding half away from zero -- (p + 5) // 10 for p >= 0 --
# gives the same result, faster. The hot paths use it inline (tests/engine pins each copy to
# seats_times_duration).
EXACT: Final = 1 << 53


class QueueSetBase:
    """The counters, queues and virtual clock of one priority level's queue set.

    Args:
        name: The priority level's name.
        now: The current time, in seconds.
    """

    def __init__(self, name: str, now: float) -> None:
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
        request.state = _EXECUTING
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
