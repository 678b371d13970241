"""Virtual-time arithmetic on the queue set's fast paths equals ``seats_times_duration`` exactly.

The arrival/finish fast paths round ``seats * ns / 10`` in integer arithmetic instead of
calling :func:`seats_times_duration`; these tests pin that shortcut to the reference, ties
(``x.5``, rounded away from zero) and negative service-time corrections included.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import Request
from apf_limiter.engine._seat_seconds import (
    ESTIMATED_SERVICE_NS,
    MASK,
    seats_times_duration,
    to_nanoseconds,
)

_NS = 1e-9


def _started(seats: int, start_ns: int) -> tuple[QueueSet, Request]:
    qs = QueueSet(
        "test",
        desired_num_queues=4,
        queue_length_limit=10,
        hand_size=2,
        concurrency_limit=1000,
        now=0.0,
    )
    request = Request("fs", "test", "flow", 7, initial_seats=seats)
    qs.start_request(request, start_ns * _NS)
    return qs, request


@given(
    seats=st.integers(1, 1000),
    service_ns=st.integers(0, 10**11),
)
@example(seats=1, service_ns=ESTIMATED_SERVICE_NS - 15)  # correction 1.5 -> 2
@example(seats=1, service_ns=ESTIMATED_SERVICE_NS + 15)  # correction -1.5 -> -2
@example(seats=3, service_ns=ESTIMATED_SERVICE_NS + 5)  # correction -1.5 -> -2
@example(seats=1, service_ns=ESTIMATED_SERVICE_NS + 14)  # correction -1.4 -> -1
def test_finish_corrects_the_queue_for_the_actual_service_time(seats: int, service_ns: int) -> None:
    # Whole microseconds of start time keep ns -> seconds -> ns round trips exact.
    qs, request = _started(seats, 1000)
    queue = request.queue
    assert queue is not None
    before = queue.next_dispatch_r
    start = request.start_time
    qs.finish(request, start + service_ns * _NS)
    actual_ns = to_nanoseconds(start + service_ns * _NS - start)
    correction = seats_times_duration(seats, ESTIMATED_SERVICE_NS - actual_ns)
    assert queue.next_dispatch_r == (before - correction) & MASK


@given(seats=st.integers(1, 1000), elapsed_ns=st.integers(1, 10**11))
@example(seats=1, elapsed_ns=15)  # 1.5 -> 2
@example(seats=1, elapsed_ns=14)  # 1.4 -> 1
@example(seats=3, elapsed_ns=5)  # 1.5 -> 2
def test_virtual_time_advances_by_the_seats_in_use_times_elapsed_time(
    seats: int, elapsed_ns: int
) -> None:
    qs, request = _started(seats, 0)
    before = qs.current_r
    now = request.start_time + elapsed_ns * _NS
    actual_ns = to_nanoseconds(now - qs.last_real_time)
    qs.sync_time(now)
    assert qs.current_r == (before + seats_times_duration(seats, actual_ns)) & MASK
