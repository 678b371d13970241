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

The state, virtual time and dispatch live in :mod:`apf_limiter.engine._queueset_base`; this
module adds arrival, completion and removal. Finding the queue to dispatch from uses an index of
the queues that have waiting requests: a heap of virtual finish times, and for each finish time
the sorted indices of its queues. A dispatch then costs O(log queues) rather than a scan of every
queue, and ties are broken exactly as the Kubernetes scan would (the first index after the robin
index, wrapping around).

All methods take ``now`` (seconds) and return the requests they dispatched, so the caller can
wake their waiters. Nothing here blocks, sleeps, logs or reads a clock. After every change the
*seat demand* (seats in use plus seats waiting) is sampled into :attr:`QueueSet.demand`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from apf_limiter.engine._queueset_base import EXACT, NOTHING, QueueSetBase
from apf_limiter.engine._request import Queue, Request, RequestState
from apf_limiter.engine._seat_seconds import ESTIMATED_SERVICE_NS, MASK, seats_times_duration
from apf_limiter.engine._shuffle_sharding import Dealer

# Module-level aliases: a global lookup is cheaper than an enum attribute on the hot path.
_NEW: Final = RequestState.NEW
_WAITING: Final = RequestState.WAITING
_EXECUTING: Final = RequestState.EXECUTING
_LINGERING: Final = RequestState.LINGERING
_DONE: Final = RequestState.DONE


class QueueSet(QueueSetBase):
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
        super().__init__(name, now)
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
            request.state = RequestState.REJECTED
            request.reject_reason = "concurrency-limit"
            return NOTHING
        request.state = _EXECUTING
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
            request.state = RequestState.REJECTED
            request.reject_reason = "queue-full"
            return NOTHING
        waiting = queue.waiting
        was_empty = not waiting
        if was_empty and not queue.executing:
            self.active_queues += 1
            queue.next_dispatch_r = self.current_r
        request.queue = queue
        request.state = _WAITING
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
            request.state = _LINGERING
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
            request.state = RequestState.TIMED_OUT
            request.reject_reason = "time-out"
        else:
            self.cancelled += 1
            request.state = RequestState.CANCELLED
        self._bound_next_dispatch(queue)
        self._push(queue)  # a new head, or (anti-windup) a new virtual time
        dispatched = self._dispatch_as_much_as_possible()
        # No queue removal here: Kubernetes removes one on release (removeQueueIfEmptyLocked).
        self._note_demand(now)
        return dispatched

    def __repr__(self) -> str:
        return (
            f"<QueueSet {self.name} limit={self.concurrency_limit} "
            f"executing={self.requests_executing} seats={self.seats_in_use} "
            f"waiting={self.requests_waiting}>"
        )
