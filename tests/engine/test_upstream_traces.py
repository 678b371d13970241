"""Short traces on which an earlier engine parted from Kubernetes (or on which we part on purpose).

Each trace is the smallest found for its point: a level's shape, then its events. The expected
figures are Kubernetes' (``queueset.go``, ``apf_controller.go``), worked out in each test.
"""

from __future__ import annotations

from typing import Any

from apf_limiter import RequestDigest, load_config
from apf_limiter.engine._controller import Controller
from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.engine._seat_seconds import MASK, R_DECREMENT
from tests.helpers import limited_level, subject_schema


def _queue_set(queues: int, limit: int, *, hand: int = 1, qll: int = 1) -> QueueSet:
    return QueueSet(
        "pl",
        desired_num_queues=queues,
        queue_length_limit=qll,
        hand_size=hand,
        concurrency_limit=limit,
        now=0.0,
    )


def _exempt_level() -> dict[str, Any]:
    return {"name": "exempt", "type": "Exempt", "exempt": {"nominalConcurrencyShares": 0}}


# ------------------------------------------------------------------------------------------
# The seat-demand high watermark counts a request at its width as it joins its queue.


def test_a_request_clamped_at_dispatch_counts_at_full_width_in_the_demand_high_watermark() -> None:
    # 1 queue, hand 1, queue length limit 1, limit 1. One request: 1 initial seat, 3 final
    # seats, no latency. Kubernetes samples the demand as it is enqueued (3 seats:
    # enqueueToBoundLocked), before dispatch clamps its final seats to the limit of 1.
    qs = _queue_set(1, 1)
    request = Request("fs", "pl", initial_seats=1, final_seats=3)
    assert list(qs.start_request(request, 0.0)) == [request]
    assert request.max_seats == 1  # clamped at dispatch
    assert qs.seat_demand == 1
    assert qs.demand.reset(0.0).max == 3


def test_the_clamped_width_reaches_borrowing_through_the_high_watermark() -> None:
    # pl0: nominal 15, maxSeats 3, lower limit 1; a busy catch-all has borrowed the rest, so
    # pl0's current limit is 1, below its maxSeats. A request with 3 final seats is clamped to
    # 1 at dispatch, but its level's high watermark is 3, and the next adjustment raises the
    # level's lower bound to min(nominal, high watermark) = 3.
    config = {
        "serverConcurrencyLimit": 20,
        "priorityLevels": [
            _exempt_level(),
            limited_level("pl0", 15, lendable=95, queues=1, hand_size=1, queue_length_limit=5),
        ],
        "flowSchemas": [subject_schema("fs", "pl0", group="g")],
    }
    controller = Controller(load_config(config), hash_seed=1, now=0.0)
    for i in range(60):  # the catch-all's demand
        controller.start(RequestDigest(user=f"u{i}", groups=("other",)), 0.0)
    controller.adjust_borrowing(10.0)
    pl0 = controller.statistics().priority_levels["pl0"]
    assert (pl0.max_seats, pl0.lower_limit, pl0.current_limit) == (3, 1, 1)
    digest = RequestDigest(user="u", groups=("g",), final_seats=3, additional_latency=1.0)
    request, _ = controller.start(digest, 10.0)
    assert request.state is RequestState.EXECUTING and request.max_seats == 1
    controller.adjust_borrowing(20.0)
    pl0 = controller.statistics().priority_levels["pl0"]
    assert pl0.demand_high_watermark == 3
    assert pl0.current_limit == 3


# ------------------------------------------------------------------------------------------
# After a failed epoch advance, a rejected arrival still bounds its queue's virtual start.


def test_a_rejected_arrival_after_a_failed_epoch_advance_bounds_its_queue() -> None:
    # 1 queue, hand 1, queue length limit 1, limit 2000. At 0: A (2000 seats, 2000 final
    # seats for 5e7 s) runs; B (1 seat) waits, arrival R 0. At 7e7 s, R passes highR: the
    # epoch advance fails (B's arrival R underflows). C (1 seat) is rejected, queue full;
    # Kubernetes bounds the queue on every arrival (timeoutOldRequestsAndRejectOrEnqueueLocked
    # defers boundNextDispatchLocked before the reject check), so the queue's next dispatch R
    # becomes B's wrapped arrival R.
    qs = _queue_set(1, 2000)
    a = Request("fs", "pl", initial_seats=2000, final_seats=2000, additional_latency=5e7)
    b = Request("fs", "pl")
    c = Request("fs", "pl")
    qs.start_request(a, 0.0)
    qs.start_request(b, 0.0)
    assert b.state is RequestState.WAITING
    queue = qs.queues[0]
    qs.start_request(c, 7e7)
    assert qs.epoch_advance_failures == 1
    assert c.state is RequestState.REJECTED and c.reject_reason == "queue-full"
    assert b.arrival_r == (0 - R_DECREMENT) & MASK == 9223372036854775809
    assert queue.next_dispatch_r == 9223372036854775809  # was 776627963745224193
    assert queue.finish == (b.arrival_r + b.total_work) & MASK  # re-indexed for dispatch


# ------------------------------------------------------------------------------------------
# A digest reconfigures each queue set once, with its new limit.


def test_a_digest_tries_to_dispatch_once_per_queue_set() -> None:
    # ServerCL 20: exempt (0 shares), catch-all (5) and pl0 (15 shares: limit 15, maxSeats 3;
    # 1 queue, hand 1, queue length limit 5). Four 3-seat requests and a 1-seat one run (13
    # seats); a 3-seat request is blocked at its queue's head: one dispatch without
    # accommodation. Applying the same configuration again reconfigures pl0's queue set once
    # (setConfiguration, from updateBorrowingLocked): one more, 2 in all.
    config = load_config(
        {
            "serverConcurrencyLimit": 20,
            "priorityLevels": [
                _exempt_level(),
                limited_level("pl0", 15, queues=1, hand_size=1, queue_length_limit=5),
            ],
            "flowSchemas": [subject_schema("fs", "pl0", group="g")],
        }
    )
    controller = Controller(config, hash_seed=1, now=0.0)
    for seats in (3, 3, 3, 3, 1):
        request, _ = controller.start(RequestDigest(user="u", groups=("g",), seats=seats), 0.0)
        assert request.state is RequestState.EXECUTING
    blocked, _ = controller.start(RequestDigest(user="u", groups=("g",), seats=3), 0.0)
    assert blocked.state is RequestState.WAITING
    queue_set = controller.levels["pl0"].queue_set
    assert queue_set.no_accommodation == 1
    effects = controller.apply(config, 1.0)
    assert list(effects.dispatched) == [] and effects.limit_changes == {}
    assert queue_set.no_accommodation == 2
    assert queue_set.no_accommodation_by_flow_schema == {"fs": 2}


def test_a_digest_dispatches_with_the_new_limit() -> None:
    # A configuration that raises pl0's limit dispatches the blocked head in the digest's one
    # reconfiguration (with the new limit), not on a second try.
    def config(shares: int) -> Any:
        return load_config(
            {
                "serverConcurrencyLimit": 20,
                "priorityLevels": [
                    _exempt_level(),
                    limited_level("pl0", shares, queues=1, hand_size=1, queue_length_limit=5),
                ],
                "flowSchemas": [subject_schema("fs", "pl0", group="g")],
            }
        )

    controller = Controller(config(15), hash_seed=1, now=0.0)
    for seats in (3, 3, 3, 3, 1):  # 13 of 15 seats
        controller.start(RequestDigest(user="u", groups=("g",), seats=seats), 0.0)
    blocked, _ = controller.start(RequestDigest(user="u", groups=("g",), seats=3), 0.0)
    assert blocked.state is RequestState.WAITING
    queue_set = controller.levels["pl0"].queue_set
    assert queue_set.no_accommodation == 1
    effects = controller.apply(config(45), 1.0)  # nominal ceil(20 × 45/50) = 18
    assert effects.limit_changes["pl0"] == (15, 18)
    assert list(effects.dispatched) == [blocked]
    assert queue_set.no_accommodation == 1  # the old limit of 15 was not tried again


# ------------------------------------------------------------------------------------------
# Deviation D6: removing a surplus queue never uses a removed queue's stale index.


def test_a_request_waiting_at_a_reused_index_is_dispatched_after_a_queue_removal() -> None:
    # 4 queues shrunk to 2 (hand 1, limit 2). A1 and A2 ran in queue 1 and linger. A1's
    # release removes queue 1; old queue 2 moves down to index 1. W (2 seats) waits there.
    # A2's release: Kubernetes' removeQueueIfEmptyLocked reads A2's queue's stale index 1
    # and removes the queue holding W, which is never dispatched. We keep it and dispatch W.
    qs = _queue_set(4, 2, qll=10)
    a1 = Request("fs", "pl", flow_hash=1, additional_latency=10.0)
    a2 = Request("fs", "pl", flow_hash=1, additional_latency=10.0)
    qs.start_request(a1, 0.0)
    qs.start_request(a2, 0.0)
    removed = qs.queues[1]
    assert a1.queue is a2.queue is removed
    moved = qs.queues[2]
    qs.configure(
        desired_num_queues=2, queue_length_limit=10, hand_size=1, concurrency_limit=2, now=0.0
    )
    qs.finish(a1, 1.0)
    qs.finish(a2, 1.0)
    qs.release(a1, 11.0)
    assert removed not in qs.queues and moved.index == 1
    w = Request("fs", "pl", flow_hash=1, initial_seats=2)
    qs.start_request(w, 11.0)
    assert w.state is RequestState.WAITING and w.queue is moved
    assert list(qs.release(a2, 11.0)) == [w]
    assert moved in qs.queues and len(qs.queues) == 3
    assert (qs.requests_waiting, qs.seats_waiting, qs.seats_in_use) == (0, 0, 2)
    qs.finish(w, 12.0)  # the surplus queue goes once it empties
    assert [queue.index for queue in qs.queues] == [0, 1]
    assert moved not in qs.queues
