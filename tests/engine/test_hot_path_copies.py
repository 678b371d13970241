"""Each hand-inlined copy of hot-path logic, driven side by side with the code it copies.

The engine keeps a few copies for speed (docs/internals.md, "Hot-path copies"):

* ``QueueSet.start_request``'s fast path (nothing waits, the request fits) short-cuts the
  general path: enqueue on the first queue of the hand, find it, dispatch it.
* ``QueueSet.finish`` and ``QueueSet._sync_time`` round ``seats × duration`` inline.
* ``QueueSet.finish`` ends with ``QueueSet._note_demand`` inline (and the fast path sets the
  demand inline too, pinned with the rest of the fast path).
* ``Integrator.set`` inlines ``Integrator._update``.

Each test drives both copies on the same inputs and compares every piece of state, so a fix to
one copy that misses the other fails here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apf_limiter.engine._integrator import Integrator
from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.engine._seat_seconds import ESTIMATED_SERVICE_NS, MASK, seats_times_duration


def start_by_the_general_path(qs: QueueSet, request: Request, now: float) -> Sequence[Request]:
    """``QueueSet.start_request`` without its fast path (a function: compiled classes cannot
    be subclassed from Python)."""
    if request.state is not RequestState.NEW:
        raise RuntimeError(f"request already started: {request!r}")
    qs._sync_time(now)
    request.arrival_time = now
    request.arrival_r = qs.current_r
    if qs.desired_num_queues < 1:
        return qs._start_queueless(request, now)
    return qs._start_queued(request, now)


# Every counter and scalar of a queue set (vars() does not exist on the compiled class; a test
# below checks, in pure Python, that this list misses none).
QUEUE_SET_SCALARS = (
    "name",
    "desired_num_queues",
    "queue_length_limit",
    "hand_size",
    "concurrency_limit",
    "current_r",
    "last_real_time",
    "robin_index",
    "enqueues",
    "active_queues",
    "requests_waiting",
    "requests_executing",
    "seats_in_use",
    "seats_waiting",
    "queued_seats_in_use",
    "dispatched",
    "rejected_queue_full",
    "rejected_concurrency_limit",
    "timed_out",
    "cancelled",
    "no_accommodation",
    "dispatch_r",
    "latest_s",
    "epoch_advances",
    "epoch_advance_failures",
    "r_overflows",
)
INTEGRATOR_FIELDS = ("last_ns", "x", "duration", "integral", "integral_of_squares", "min", "max")


def _fields(obj: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def test_the_lists_of_fields_compared_miss_none() -> None:
    qs = QueueSet("t", desired_num_queues=2, hand_size=1, concurrency_limit=1, now=0.0)
    if not hasattr(qs, "__dict__"):
        pytest.skip("the compiled class keeps no __dict__ to compare with")
    scalars = {
        name
        for name, value in vars(qs).items()
        if isinstance(value, int | float | str) and name != "_finishes"
    }
    assert scalars == set(QUEUE_SET_SCALARS)
    integrator = Integrator(0.0)
    assert set(type(integrator).__slots__) == set(INTEGRATOR_FIELDS)


def _state(qs: QueueSet, requests: list[Request]) -> dict[str, Any]:
    """Everything that decides what the queue set does next."""
    ids = {id(request): number for number, request in enumerate(requests)}
    # (The finish-time heap is cleaned lazily: its stale entries are not state.)
    scalars = _fields(qs, QUEUE_SET_SCALARS)
    queues = [
        (
            queue.index,
            [ids[id(r)] for r in queue.waiting],
            sorted(ids[id(r)] for r in queue.executing),
            queue.next_dispatch_r,
            queue.seats_in_use,
            queue.initial_seats_sum,
            queue.max_seats_sum,
            queue.total_work_sum,
            queue.finish,
        )
        for queue in qs.queues
    ]
    records = [
        (
            r.state,
            r.queue.index if r.queue is not None else None,
            r.start_time,
            getattr(r, "arrival_r", None),
            r.max_seats,
            r.final_seats,
            r.additional_latency_ns,
            getattr(r, "release_at", None),
        )
        for r in requests
    ]
    return {
        "scalars": scalars,
        "by_finish": dict(qs._by_finish),
        "no_accommodation": dict(qs.no_accommodation_by_flow_schema),
        "queues": queues,
        "requests": records,
        "demand": _fields(qs.demand, INTEGRATOR_FIELDS),
    }


arrivals = st.tuples(
    st.just("arrive"),
    st.integers(0, 7),  # flow
    st.integers(1, 4),  # seats
    st.integers(0, 5),  # final seats
    st.sampled_from([0.0, 0.0, 0.004, 0.25]),  # additional latency
)
operations = st.lists(
    st.one_of(
        arrivals,
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.0005, 0.003, 0.01, 0.3, 2.0])),
        st.tuples(st.just("limit"), st.integers(0, 8)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations, st.integers(1, 6), st.integers(1, 3))
def test_the_arrival_fast_path_does_what_the_general_path_does(
    ops: list[tuple[Any, ...]], queues: int, hand_size: int
) -> None:
    hand_size = min(hand_size, queues)
    shape: dict[str, Any] = {
        "desired_num_queues": queues,
        "queue_length_limit": 3,
        "hand_size": hand_size,
        "concurrency_limit": 4,
        "now": 0.0,
    }
    fast, general = QueueSet("fast", **shape), QueueSet("fast", **shape)
    mine: list[Request] = []
    theirs: list[Request] = []
    now = 0.0
    for op in ops:
        kind = op[0]
        pairs = list(zip(mine, theirs, strict=True))
        if kind == "arrive":
            _, flow, seats, final_seats, latency = op
            one = Request("s", "fast", str(flow), flow * 7919, seats, final_seats, latency)
            two = Request("s", "fast", str(flow), flow * 7919, seats, final_seats, latency)
            mine.append(one)
            theirs.append(two)
            got = fast.start_request(one, now)
            want = start_by_the_general_path(general, two, now)
        elif kind == "advance":
            now += op[1]
            continue
        elif kind == "limit":
            got = fast.set_concurrency_limit(op[1], now)
            want = general.set_concurrency_limit(op[1], now)
        else:
            wanted = {
                "finish": RequestState.EXECUTING,
                "cancel": RequestState.WAITING,
                "release": RequestState.LINGERING,
            }[kind]
            candidates = [(a, b) for a, b in pairs if a.state is wanted]
            if not candidates:
                continue
            one, two = candidates[op[1] % len(candidates)]
            if kind == "finish":
                got, want = fast.finish(one, now), general.finish(two, now)
            elif kind == "cancel":
                got = fast.cancel(one, now, timed_out=False)
                want = general.cancel(two, now, timed_out=False)
            else:
                got, want = fast.release(one, now), general.release(two, now)
        assert [mine.index(r) for r in got] == [theirs.index(r) for r in want]
        assert _state(fast, mine) == _state(general, theirs)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 10_000),
    st.integers(0, 10**13),
    st.booleans(),
    st.integers(0, 8),
    st.sampled_from([0.0, 0.003, 1.0]),
)
def test_finish_corrects_virtual_time_exactly_as_seats_times_duration(
    seats: int, service_ns: int, ran: bool, final_seats: int, latency: float
) -> None:
    qs = QueueSet("t", desired_num_queues=1, hand_size=1, queue_length_limit=5,
                  concurrency_limit=10_000, now=0.0)  # fmt: skip
    request = Request("s", "t", "", 0, seats, final_seats, latency)
    qs.start_request(request, 0.0)
    assert request.queue is not None
    before = request.queue.next_dispatch_r
    now = service_ns / 1e9
    qs.finish(request, now, ran)
    # The queue has nothing left, so nothing else moved its virtual time.
    service = int(now * 1e9 + 0.5)
    correction = seats_times_duration(seats, ESTIMATED_SERVICE_NS - service)
    if not ran:
        correction += request.final_work
    assert request.queue.next_dispatch_r == (before - correction) & MASK


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3_000), st.integers(1, 3_000), st.integers(1, 10**13))
def test_sync_time_advances_virtual_time_exactly_as_seats_times_duration(
    limit: int, seats: int, elapsed_ns: int
) -> None:
    qs = QueueSet("t", desired_num_queues=1, hand_size=1, queue_length_limit=5,
                  concurrency_limit=limit, now=0.0)  # fmt: skip
    qs.start_request(Request("s", "t", "", 0, seats), 0.0)  # one active queue from now on
    before = qs.current_r
    elapsed = elapsed_ns / 1e9
    qs.sync_time(elapsed)
    ns = int(elapsed * 1e9 + 0.5)
    used = min(qs.queued_seats_in_use + qs.seats_waiting, limit)
    assert qs.current_r == (before + seats_times_duration(used, ns)) & MASK


def _update_then_take(integrator: Integrator, x: float, now: float) -> None:
    """What ``Integrator.set`` does, through the copy it inlines (``_update``)."""
    integrator._update(now)
    integrator.x = x
    integrator.min = min(integrator.min, x)
    integrator.max = max(integrator.max, x)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 500), st.floats(0, 5_000, allow_nan=False)), max_size=40),
    st.floats(0, 1e6, allow_nan=False),
)
def test_integrator_set_is_update_then_take(samples: list[tuple[int, float]], start: float) -> None:
    inlined, reference = Integrator(start), Integrator(start)
    now = start
    for x, step in samples:
        now += step
        inlined.set(float(x), now)
        _update_then_take(reference, float(x), now)
        assert _fields(inlined, INTEGRATOR_FIELDS) == _fields(reference, INTEGRATOR_FIELDS)
    # Compared as reprs: the deviation is NaN when rounding makes the variance negative (as
    # Go's math.Sqrt gives), and NaN != NaN.
    assert repr(inlined.reset(now + 1.0)) == repr(reference.reset(now + 1.0))


def _integrator_with(fields: dict[str, Any]) -> Integrator:
    copy = Integrator(0.0)
    for name, value in fields.items():
        setattr(copy, name, value)
    return copy


@settings(max_examples=200, deadline=None)
@given(operations, st.integers(1, 6), st.integers(1, 3))
def test_finish_notes_the_seat_demand_as_note_demand_does(
    ops: list[tuple[Any, ...]], queues: int, hand_size: int
) -> None:
    """``finish`` moves the seat demand only in its last lines, a copy of ``_note_demand``:
    the demand after a finish equals ``_note_demand`` run on the demand before it, with the
    seats in use and waiting after it."""
    qs = QueueSet(
        "q",
        desired_num_queues=queues,
        queue_length_limit=3,
        hand_size=min(hand_size, queues),
        concurrency_limit=4,
        now=0.0,
    )
    reference = QueueSet("r", desired_num_queues=1, hand_size=1, concurrency_limit=1, now=0.0)
    requests: list[Request] = []
    now = 0.0
    for op in ops:
        kind = op[0]
        if kind == "arrive":
            _, flow, seats, final_seats, latency = op
            request = Request("s", "q", str(flow), flow * 7919, seats, final_seats, latency)
            requests.append(request)
            qs.start_request(request, now)
        elif kind == "advance":
            now += op[1]
        elif kind == "limit":
            qs.set_concurrency_limit(op[1], now)
        elif kind == "finish":
            executing = [r for r in requests if r.state is RequestState.EXECUTING]
            if not executing:
                continue
            before = _fields(qs.demand, INTEGRATOR_FIELDS)
            qs.finish(executing[op[1] % len(executing)], now)
            reference.demand = _integrator_with(before)
            reference.seats_in_use = qs.seats_in_use
            reference.seats_waiting = qs.seats_waiting
            reference._note_demand(now)
            assert _fields(qs.demand, INTEGRATOR_FIELDS) == _fields(
                reference.demand, INTEGRATOR_FIELDS
            )
        elif kind == "cancel":
            waiting = [r for r in requests if r.state is RequestState.WAITING]
            if waiting:
                qs.cancel(waiting[op[1] % len(waiting)], now, timed_out=False)
        else:
            lingering = [r for r in requests if r.state is RequestState.LINGERING]
            if lingering:
                qs.release(lingering[op[1] % len(lingering)], now)
