"""Unit tests of the queue set: the exact cases of the Kubernetes queueset tests and more."""

from __future__ import annotations

import math

import pytest

from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.engine._seat_seconds import (
    ESTIMATED_SERVICE_NS,
    HIGH_R,
    MASK,
    R_DECREMENT,
    SCALE,
    seat_seconds_str,
    seats_times_duration,
)

SS = SCALE  # one seat-second


def _queue_set(queues: int, limit: int, *, hand: int = 1, qll: int = 10) -> QueueSet:
    return QueueSet(
        "test",
        desired_num_queues=queues,
        queue_length_limit=qll,
        hand_size=hand,
        concurrency_limit=limit,
        now=0.0,
    )


def _place(qs: QueueSet, index: int, next_r: int, seats: int) -> Request:
    """Put a waiting request at the head of queue ``index`` with ``next_dispatch_r``."""
    request = Request("fs", "test", initial_seats=seats)
    request.state = RequestState.WAITING
    queue = qs.queues[index]
    request.queue = queue
    queue.waiting.append(request)
    qs.waiting_tally.add(request)  # as _start_queued counts it for the metrics
    queue.total_work_sum += request.total_work
    queue.next_dispatch_r = next_r
    qs.requests_waiting += 1
    qs.seats_waiting += seats
    qs.active_queues += 1
    qs._push(queue)
    return request


def test_find_dispatch_queue_case_a_smallest_virtual_finish() -> None:
    qs = _queue_set(2, 1)
    _place(qs, 0, 200 * SS, 1)
    second = _place(qs, 1, 100 * SS, 1)
    qs.robin_index = -1
    assert qs._dispatch_one() is second
    assert qs.robin_index == 1


def test_find_dispatch_queue_case_b_no_free_seat() -> None:
    qs = _queue_set(1, 1)
    _place(qs, 0, 200 * SS, 1)
    qs.seats_in_use = 1
    qs.robin_index = -1
    assert qs._dispatch_as_much_as_possible() == ()
    assert qs._dispatch_one() is None
    assert qs.robin_index == 0


def test_find_dispatch_queue_case_c_fits_exactly() -> None:
    qs = _queue_set(2, 50)
    _place(qs, 0, 200 * SS, 50)
    second = _place(qs, 1, 100 * SS, 25)
    qs.seats_in_use = 25
    qs.robin_index = -1
    assert qs._dispatch_one() is second
    assert qs.robin_index == 1


def test_find_dispatch_queue_case_d_head_of_line_blocking() -> None:
    qs = _queue_set(2, 50)
    first = _place(qs, 0, 200 * SS, 10)
    second = _place(qs, 1, 100 * SS, 25)
    qs.seats_in_use = 26
    qs.robin_index = -1
    for _ in range(3):
        # q1 is the fair choice but does not fit; q0 (which would fit) is not tried.
        assert qs._dispatch_one() is None
        assert qs.robin_index == 1
    assert first.state is second.state is RequestState.WAITING
    assert qs.no_accommodation == 3


def test_find_dispatch_queue_case_e_fits_after_seats_drop() -> None:
    qs = _queue_set(2, 50)
    _place(qs, 0, 200 * SS, 10)
    second = _place(qs, 1, 100 * SS, 25)
    qs.seats_in_use = 26
    qs.robin_index = -1
    assert qs._dispatch_one() is None
    assert qs.robin_index == 1
    assert qs._dispatch_one() is None
    assert qs.robin_index == 1
    qs.seats_in_use = 25
    assert qs._dispatch_one() is second
    assert qs.robin_index == 1


def test_ties_go_to_the_next_queue_in_round_robin_order() -> None:
    qs = _queue_set(3, 10)
    requests = [_place(qs, i, 100 * SS, 1) for i in range(3)]
    qs.robin_index = 1
    order = [qs._dispatch_one() for _ in range(3)]
    assert order == [requests[2], requests[0], requests[1]]


@pytest.mark.parametrize(("final_seats", "latency"), [(10, 60.0), (0, 0.0)])
def test_finish_request_with_and_without_additional_latency(
    final_seats: int, latency: float
) -> None:
    qs = _queue_set(1, 1000)
    initial_seats = 1 if final_seats else 10
    request = Request(
        "fs",
        "test",
        initial_seats=initial_seats,
        final_seats=final_seats,
        additional_latency=latency,
    )
    other = Request("fs", "test", initial_seats=12)
    queue = qs.queues[0]
    for r in (request, other):
        r.state = RequestState.EXECUTING
        r.queue = queue
        queue.executing.add(r)
    qs.requests_executing = 111
    qs.seats_in_use = 222
    qs.queued_seats_in_use = 222
    queue.seats_in_use = 22
    qs.active_queues = 1
    qs.finish(request, 0.0)
    assert qs.requests_executing == 110
    assert queue.executing == {other}
    if latency:
        # Seats are held until the additional latency has passed.
        assert request.state is RequestState.LINGERING
        assert request.release_at == 60.0
        assert qs.seats_in_use == 222
        qs.release(request, 60.0)
    assert request.state is RequestState.DONE
    assert qs.seats_in_use == 212
    assert queue.seats_in_use == 12
    assert other in queue.executing


def test_request_seats_are_the_larger_of_initial_and_final() -> None:
    assert Request("f", "l", initial_seats=3, final_seats=3, additional_latency=1).max_seats == 3
    assert Request("f", "l", initial_seats=1, final_seats=3, additional_latency=1).max_seats == 3
    assert Request("f", "l", initial_seats=3, final_seats=1, additional_latency=1).max_seats == 3


def test_request_work_is_initial_plus_final_work() -> None:
    request = Request("f", "l", initial_seats=3, final_seats=50, additional_latency=70)
    # 3 seats for G = 3 ms plus 50 seats for 70 s.
    assert seat_seconds_str(request.total_work) == "3500.00900000ss"
    assert request.total_work == 3 * 300_000 + 50 * 70 * SS


def test_request_rejects_invalid_work_estimates() -> None:
    with pytest.raises(ValueError, match="initial_seats"):
        Request("f", "l", initial_seats=0)
    with pytest.raises(ValueError, match="final_seats"):
        Request("f", "l", final_seats=-1)
    with pytest.raises(ValueError, match="additional_latency"):
        Request("f", "l", additional_latency=-1)
    for latency in (math.inf, math.nan):
        with pytest.raises(ValueError, match="finite"):
            Request("f", "l", additional_latency=latency)


def test_queue_full_only_when_seats_are_also_full() -> None:
    qs = _queue_set(1, 2, qll=1)
    started = []
    for _ in range(3):
        r = Request("fs", "test")
        qs.start_request(r, 0.0)
        started.append(r)
    # Two run, one waits (the queue holds one).
    assert [r.state for r in started] == [
        RequestState.EXECUTING,
        RequestState.EXECUTING,
        RequestState.WAITING,
    ]
    rejected = Request("fs", "test")
    qs.start_request(rejected, 0.0)
    assert rejected.state is RequestState.REJECTED
    assert rejected.reject_reason == "queue-full"
    assert qs.rejected_queue_full == 1
    # enqueues counts every arrival, rejected ones included.
    assert qs.enqueues == 4


def test_reject_level_rejects_with_concurrency_limit() -> None:
    qs = _queue_set(0, 1)
    first, second = Request("fs", "test"), Request("fs", "test")
    qs.start_request(first, 0.0)
    qs.start_request(second, 0.0)
    assert first.state is RequestState.EXECUTING
    assert second.state is RequestState.REJECTED
    assert second.reject_reason == "concurrency-limit"
    qs.finish(first, 1.0)
    assert qs.is_idle


def test_exempt_level_never_limits_but_counts() -> None:
    qs = _queue_set(-1, 0)
    requests = [Request("fs", "exempt", initial_seats=3) for _ in range(5)]
    for r in requests:
        qs.start_request(r, 0.0)
    assert all(r.state is RequestState.EXECUTING for r in requests)
    assert qs.requests_executing == 5
    assert qs.seats_in_use == 15


@pytest.mark.parametrize("queues", [0, 4])
def test_zero_limit_admits_nothing(queues: int) -> None:
    # Deviation D3: Kubernetes would let one request through while the level is idle.
    qs = _queue_set(queues, 0)
    request = Request("fs", "test")
    qs.start_request(request, 0.0)
    assert request.state is (RequestState.WAITING if queues else RequestState.REJECTED)
    assert qs.requests_executing == 0
    # Raising the limit dispatches at once.
    dispatched = qs.set_concurrency_limit(1, 1.0)
    assert list(dispatched) == ([request] if queues else [])
    assert qs.requests_executing == (1 if queues else 0)


def test_too_wide_request_runs_alone() -> None:
    qs = _queue_set(2, 4, hand=1)
    wide = Request("fs", "test", initial_seats=6)
    narrow = Request("fs", "test", flow_hash=1)
    qs.start_request(wide, 0.0)
    assert wide.state is RequestState.EXECUTING
    assert qs.seats_in_use == 6
    qs.start_request(narrow, 0.0)
    assert narrow.state is RequestState.WAITING
    assert list(qs.finish(wide, 1.0)) == [narrow]


def test_final_seats_wider_than_limit_are_clamped_keeping_work() -> None:
    qs = _queue_set(1, 4)
    request = Request("fs", "test", initial_seats=1, final_seats=8, additional_latency=1.0)
    final_work = request.final_work
    qs.start_request(request, 0.0)
    assert request.state is RequestState.EXECUTING
    assert request.final_seats == 4
    assert request.max_seats == 4
    # 8 seats for 1 s is the same work as 4 seats for 2 s.
    assert request.additional_latency_ns == 2_000_000_000
    assert seats_times_duration(4, request.additional_latency_ns) == final_work
    qs.finish(request, 0.5)
    qs.release(request, 2.5)
    assert qs.seats_in_use == 0
    assert qs.seats_waiting == 0


def test_cancel_removes_the_request_and_dispatches_behind_a_departed_wide_head() -> None:
    qs = _queue_set(2, 4, hand=1)
    running = Request("fs", "test", initial_seats=3, flow_hash=1)
    qs.start_request(running, 0.0)
    wide = Request("fs", "test", initial_seats=2, flow_hash=0)
    qs.start_request(wide, 0.0)
    narrow = Request("fs", "test", flow_hash=1)
    qs.start_request(narrow, 0.0)
    # The wide head (q0) finishes first in virtual time but does not fit; the narrow one
    # (q1, behind the running request's work) would fit but is not tried.
    assert wide.state is narrow.state is RequestState.WAITING
    dispatched = qs.cancel(wide, 1.0, timed_out=True)
    assert wide.reject_reason == "time-out"
    assert list(dispatched) == [narrow]
    assert qs.timed_out == 1
    assert qs.requests_waiting == 0


def test_service_time_correction_uses_initial_seats_and_wraps() -> None:
    qs = _queue_set(1, 10)
    request = Request("fs", "test", initial_seats=2)
    qs.start_request(request, 0.0)
    queue = qs.queues[0]
    after_dispatch = queue.next_dispatch_r
    assert after_dispatch == request.total_work
    qs.finish(request, 1.0)
    # Charged G per seat; it took 1 s: next_dispatch_r moves by 2 × (1 s − 3 ms).
    expected = after_dispatch + 2 * (SS - ESTIMATED_SERVICE_NS // 10)
    assert queue.next_dispatch_r == expected & MASK


def test_virtual_time_advances_at_the_fair_rate() -> None:
    qs = _queue_set(4, 2, hand=1)
    a = Request("fs", "test", flow_hash=0)
    b = Request("fs", "test", flow_hash=1)
    qs.start_request(a, 0.0)
    qs.start_request(b, 0.0)
    assert qs.active_queues == 2
    qs.sync_time(1.0)
    # min(2 seats requested, limit 2) / 2 active queues = 1 seat-second per second.
    assert qs.current_r == SS


def test_epoch_advance_winds_virtual_time_back() -> None:
    qs = _queue_set(2, 1, hand=1)
    running = Request("fs", "test", flow_hash=0)
    qs.start_request(running, 0.0)
    waiting = Request("fs", "test", flow_hash=1)
    qs.start_request(waiting, 0.0)
    qs.current_r = HIGH_R - 10
    for queue in qs.queues:
        queue.next_dispatch_r = HIGH_R - 5
    waiting.arrival_r = HIGH_R - 10
    qs.sync_time(10.0)
    assert qs.epoch_advances == 1
    assert qs.current_r < R_DECREMENT
    assert waiting.arrival_r == HIGH_R - 10 - R_DECREMENT
    assert all(q.next_dispatch_r == HIGH_R - 5 - R_DECREMENT for q in qs.queues)


def test_more_queues_are_added_and_surplus_queues_removed_when_empty() -> None:
    qs = _queue_set(2, 10)
    qs.configure(
        desired_num_queues=4, queue_length_limit=10, hand_size=1, concurrency_limit=10, now=0.0
    )
    assert len(qs.queues) == 4
    request = Request("fs", "test", flow_hash=3)
    qs.start_request(request, 0.0)
    assert request.queue is qs.queues[3]
    qs.configure(
        desired_num_queues=1, queue_length_limit=10, hand_size=1, concurrency_limit=10, now=1.0
    )
    assert len(qs.queues) == 4  # attrition, not immediate removal
    qs.finish(request, 2.0)
    assert len(qs.queues) == 3
    assert [q.index for q in qs.queues] == [0, 1, 2]


def test_a_queue_is_removed_only_when_seats_are_released_from_it() -> None:
    # queueset.go (removeQueueIfEmptyLocked): a request leaving its queue by time-out or
    # cancellation does not remove the queue; the next release of seats removes *that
    # request's* queue.
    qs = QueueSet(
        "t", desired_num_queues=2, queue_length_limit=5, hand_size=1, concurrency_limit=1, now=0.0
    )
    running = Request("fs", "t", "a", 0)
    waiting = Request("fs", "t", "b", 1)
    qs.start_request(running, 0.0)
    qs.start_request(waiting, 0.0)
    assert (running.queue, waiting.queue) == (qs.queues[0], qs.queues[1])
    survivor = qs.queues[1]
    qs.configure(
        desired_num_queues=1, queue_length_limit=5, hand_size=1, concurrency_limit=1, now=1.0
    )
    qs.cancel(waiting, 2.0, timed_out=True)
    assert len(qs.queues) == 2  # the emptied surplus queue stays
    qs.finish(running, 3.0)
    # Releasing running's seats removes its queue (old index 0); the other one moves down.
    assert qs.queues == [survivor]
    assert survivor.index == 0
    assert survivor.next_dispatch_r == 0


def test_switching_to_reject_keeps_queue_shape_and_dispatches_waiting() -> None:
    qs = _queue_set(2, 1, hand=1, qll=5)
    running, waiting = Request("fs", "test"), Request("fs", "test")
    qs.start_request(running, 0.0)
    qs.start_request(waiting, 0.0)
    qs.configure(
        desired_num_queues=0, queue_length_limit=0, hand_size=0, concurrency_limit=1, now=0.0
    )
    assert qs.queue_length_limit == 5
    assert qs.hand_size == 1
    assert list(qs.finish(running, 1.0)) == [waiting]


def test_misuse_raises() -> None:
    qs = _queue_set(1, 1)
    request = Request("fs", "test")
    with pytest.raises(RuntimeError, match="not executing"):
        qs.finish(request, 0.0)
    qs.start_request(request, 0.0)
    with pytest.raises(RuntimeError, match="already started"):
        qs.start_request(request, 0.0)
    with pytest.raises(RuntimeError, match="not waiting"):
        qs.cancel(request, 0.0, timed_out=False)
    with pytest.raises(RuntimeError, match="not lingering"):
        qs.release(request, 0.0)
    with pytest.raises(ValueError, match="negative"):
        qs.set_concurrency_limit(-1, 0.0)


def test_arrivals_behind_a_head_leave_the_dispatch_index_alone() -> None:
    # The dispatch heap is cleaned lazily; re-indexing a queue whose head did not change
    # would push a stale duplicate per arrival (a deep backlog over many queues paid for it
    # in cache misses: benchmarks/saturation_bench.py).
    qs = _queue_set(1, 1, qll=1000)
    qs.start_request(Request("fs", "test"), 0.0)  # takes the only seat
    qs.start_request(Request("fs", "test"), 0.0)  # the head of the queue
    heap = list(qs._finishes)
    index = dict(qs._by_finish)
    for _ in range(100):
        qs.start_request(Request("fs", "test"), 0.0)
    assert qs.requests_waiting == 101
    assert qs._finishes == heap
    assert qs._by_finish == index


def _after_a_failed_epoch_advance(*behind: Request) -> tuple[QueueSet, Request]:
    """A queue whose waiting head's arrival_r wrapped in a failed epoch advance."""
    qs = _queue_set(1, 1)
    first, head = Request("fs", "test", additional_latency=1e12), Request("fs", "test")
    qs.start_request(first, 0.0)  # runs, then lingers for a long time
    for request in (head, *behind):
        qs.start_request(request, 0.0)  # waits, arrival_r 0
    qs.finish(first, 1e11)  # a long service time: the queue's virtual time is far ahead
    qs.sync_time(1.4e11)  # R passes HIGH_R; the head's arrival_r is below R_DECREMENT: wraps
    assert qs.epoch_advance_failures == 1
    return qs, head


def test_after_a_failed_epoch_advance_every_arrival_bounds_the_queue_as_kubernetes() -> None:
    qs, head = _after_a_failed_epoch_advance()
    queue = qs.queues[0]
    assert queue.next_dispatch_r < head.arrival_r
    qs.start_request(Request("fs", "test"), 1.4e11)  # behind the head
    assert queue.next_dispatch_r == head.arrival_r
    assert queue.finish == (head.arrival_r + head.total_work) & MASK


def test_cancelling_a_request_behind_the_head_re_indexes_a_bounded_queue() -> None:
    behind = Request("fs", "test")
    qs, head = _after_a_failed_epoch_advance(behind)
    queue = qs.queues[0]
    assert queue.next_dispatch_r < head.arrival_r
    qs.cancel(behind, 1.4e11, timed_out=True)  # anti-windup moves the queue's virtual time
    assert queue.next_dispatch_r == head.arrival_r
    assert queue.finish == (head.arrival_r + head.total_work) & MASK
