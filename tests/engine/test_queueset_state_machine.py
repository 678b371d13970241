"""A hypothesis state machine over the queue set: invariants under any sequence of events."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from apf_limiter import RequestDigest
from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import TRANSITIONS, Request, RequestEvent, RequestState
from apf_limiter.engine._seat_seconds import MASK

TERMINAL = {
    RequestState.DONE,
    RequestState.REJECTED,
    RequestState.TIMED_OUT,
    RequestState.CANCELLED,
}


class QueueSetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.qs = QueueSet(
            "sm",
            desired_num_queues=4,
            queue_length_limit=3,
            hand_size=2,
            concurrency_limit=3,
            now=0.0,
        )
        self.requests: list[Request] = []
        self.sequence: dict[int, int] = {}  # id(request) -> arrival number
        self.width: dict[int, int] = {}  # id(request) -> seats asked for (before any clamp)
        self.ended: dict[int, RequestState] = {}
        self.dispatched = 0
        self.rejected = {"queue-full": 0, "concurrency-limit": 0}
        self.timed_out = 0
        self.cancelled = 0

    # -- helpers ---------------------------------------------------------------------------

    def _in(self, *states: RequestState) -> list[Request]:
        return [r for r in self.requests if r.state in states]

    def _after(self, dispatched: Sequence[Request], before: dict[int, RequestState]) -> None:
        qs = self.qs
        # Every state a request changed to is one move of the table, the inlined hot-path
        # copies of transition() included.
        for request in self.requests:
            old = before[id(request)]
            if request.state is not old:
                moves = [e for e in RequestEvent if TRANSITIONS.get((old, e)) is request.state]
                assert moves, f"{old.name} -> {request.state.name} is not in TRANSITIONS"
        for request in dispatched:
            assert before[id(request)] in (RequestState.NEW, RequestState.WAITING)
            assert request.state is RequestState.EXECUTING
            self.dispatched += 1
            # FIFO within a queue: nothing that arrived earlier in the same queue still waits.
            if request.queue is not None:
                mine = self.sequence[id(request)]
                assert all(self.sequence[id(w)] > mine for w in request.queue.waiting)
        if dispatched and qs.seats_in_use > qs.concurrency_limit:
            # Only a request wider than the whole limit may exceed it, and it runs alone.
            assert qs.requests_executing == 1
            (wide,) = [r for r in dispatched if r.state is RequestState.EXECUTING]
            # (Its final seats may be clamped to the limit after the too-wide check.)
            assert self.width[id(wide)] > qs.concurrency_limit
        if qs.concurrency_limit == 0:
            assert not dispatched  # deviation D3
        # A request ends exactly once and never changes afterwards.
        for request in self.requests:
            key = id(request)
            if key in self.ended:
                assert request.state is self.ended[key]
            elif request.state in TERMINAL:
                self.ended[key] = request.state

    def _snapshot(self) -> dict[int, RequestState]:
        return {id(r): r.state for r in self.requests}

    # -- rules -----------------------------------------------------------------------------

    @rule(
        flow=st.integers(0, 5),
        seats=st.integers(1, 3),
        final_seats=st.integers(0, 3),
        latency=st.sampled_from([0.0, 0.5, 2.0]),
    )
    def arrive(self, flow: int, seats: int, final_seats: int, latency: float) -> None:
        request = Request(
            f"fs{flow % 2}",
            "sm",
            f"d{flow}",
            flow_hash=flow * 7919,
            initial_seats=seats,
            final_seats=final_seats,
            additional_latency=latency,
        )
        if flow % 3:  # a read-only verb, a mutating one, or no digest (a request built by hand)
            request.digest = RequestDigest(verb="get" if flow % 3 == 1 else "post")
        self.sequence[id(request)] = len(self.requests)
        self.width[id(request)] = request.max_seats
        self.requests.append(request)
        before = self._snapshot()
        dispatched = self.qs.start_request(request, self.now)
        if request.state is RequestState.REJECTED:
            self.rejected[request.reject_reason] += 1
            assert request not in dispatched
        self._after(dispatched, before)

    @precondition(lambda self: any(r.state is RequestState.EXECUTING for r in self.requests))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        request = data.draw(st.sampled_from(self._in(RequestState.EXECUTING)))
        before = self._snapshot()
        dispatched = self.qs.finish(request, self.now)
        assert request.state in (RequestState.DONE, RequestState.LINGERING)
        self._after(dispatched, before)

    @precondition(lambda self: any(r.state is RequestState.LINGERING for r in self.requests))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        request = data.draw(st.sampled_from(self._in(RequestState.LINGERING)))
        self.now = max(self.now, request.release_at)
        before = self._snapshot()
        dispatched = self.qs.release(request, self.now)
        assert request.state is RequestState.DONE
        self._after(dispatched, before)

    @precondition(lambda self: any(r.state is RequestState.WAITING for r in self.requests))
    @rule(data=st.data(), timed_out=st.booleans())
    def cancel(self, data: st.DataObject, timed_out: bool) -> None:
        request = data.draw(st.sampled_from(self._in(RequestState.WAITING)))
        before = self._snapshot()
        dispatched = self.qs.cancel(request, self.now, timed_out=timed_out)
        if timed_out:
            self.timed_out += 1
        else:
            self.cancelled += 1
        self._after(dispatched, before)

    @rule(dt=st.sampled_from([0.0, 0.001, 0.1, 1.0, 5.0]))
    def advance(self, dt: float) -> None:
        self.now += dt
        self.qs.sync_time(self.now)

    @rule(limit=st.integers(0, 6))
    def set_limit(self, limit: int) -> None:
        before = self._snapshot()
        self._after(self.qs.set_concurrency_limit(limit, self.now), before)

    @rule(queues=st.integers(1, 6), hand=st.integers(1, 3), qll=st.integers(1, 4))
    def reconfigure(self, queues: int, hand: int, qll: int) -> None:
        hand = min(hand, queues)
        before = self._snapshot()
        dispatched = self.qs.configure(
            desired_num_queues=queues,
            queue_length_limit=qll,
            hand_size=hand,
            concurrency_limit=self.qs.concurrency_limit,
            now=self.now,
        )
        self._after(dispatched, before)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def accounting_agrees_with_an_independent_count(self) -> None:
        qs = self.qs
        holding = self._in(RequestState.EXECUTING, RequestState.LINGERING)
        waiting = self._in(RequestState.WAITING)
        executing = self._in(RequestState.EXECUTING)
        assert qs.seats_in_use == sum(r.max_seats for r in holding)
        assert qs.seats_waiting == sum(r.max_seats for r in waiting)
        assert qs.requests_waiting == len(waiting)
        assert qs.requests_executing == len(executing)
        assert qs.lingering == set(self._in(RequestState.LINGERING))
        assert sum(len(q.waiting) for q in qs.queues) == len(waiting)
        assert sum(q.seats_in_use for q in qs.queues) == qs.queued_seats_in_use
        active = sum(1 for q in qs.queues if q.waiting or q.executing)
        assert qs.active_queues == active
        for queue in qs.queues:
            assert queue.total_work_sum == sum(r.total_work for r in queue.waiting)
            order = [self.sequence[id(r)] for r in queue.waiting]
            assert order == sorted(order), "FIFO within a queue"
        assert qs.dispatched == self.dispatched
        assert qs.rejected_queue_full == self.rejected["queue-full"]
        assert qs.rejected_concurrency_limit == self.rejected["concurrency-limit"]
        assert qs.timed_out == self.timed_out
        assert qs.cancelled == self.cancelled
        # The metrics' counts of the waiting requests (WaitingTally), kept as they move.
        tally = qs.waiting_tally
        assert tally.requests == Counter(r.flow_schema for r in waiting)
        assert tally.seats == {
            schema: sum(r.max_seats for r in waiting if r.flow_schema == schema)
            for schema in tally.requests
        }
        assert tally.flows == Counter((r.flow_schema, r.distinguisher) for r in waiting)
        read_only = [r for r in waiting if getattr(r, "digest", None) is not None]
        assert tally.read_only == sum(1 for r in read_only if r.digest.verb == "get")

    @invariant()
    def dispatch_index_agrees_with_a_scan_of_every_queue(self) -> None:
        qs = self.qs
        groups: dict[int, list[int]] = {}
        for queue in qs.queues:
            if queue.waiting:
                finish = (queue.next_dispatch_r + queue.waiting[0].total_work) & MASK
                assert queue.finish == finish
                groups.setdefault(finish, []).append(queue.index)
            else:
                assert queue.finish is None
        assert qs._by_finish == groups
        assert set(groups) <= set(qs._finishes)
        # Kubernetes' scan: round robin after robin_index, the strictly smallest finish wins.
        count = len(qs.queues)
        best = None
        best_finish = 0
        for step in range(1, count + 1):
            queue = qs.queues[(qs.robin_index + step) % count]
            if queue.finish is not None and (best is None or queue.finish < best_finish):
                best, best_finish = queue, queue.finish
        robin_index = qs.robin_index
        assert qs._find_dispatch_queue() is best
        qs.robin_index = robin_index

    def teardown(self) -> None:
        # Drain everything: every request must end exactly once and no seat may leak.
        qs = self.qs
        qs.set_concurrency_limit(100, self.now)
        for _ in range(1000):
            executing = self._in(RequestState.EXECUTING)
            lingering = self._in(RequestState.LINGERING)
            waiting = self._in(RequestState.WAITING)
            if executing:
                qs.finish(executing[0], self.now)
            elif lingering:
                self.now = max(self.now, lingering[0].release_at)
                qs.release(lingering[0], self.now)
            elif waiting:
                qs.cancel(waiting[0], self.now, timed_out=True)
            else:
                break
        assert all(r.state in TERMINAL for r in self.requests)
        assert (qs.seats_in_use, qs.seats_waiting, qs.requests_executing) == (0, 0, 0)
        assert qs.requests_waiting == 0 and qs.is_idle


QueueSetMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueSetMachine = QueueSetMachine.TestCase
