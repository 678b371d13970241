"""The three Kubernetes debug dumps: exact text, JSON rows, and their counters."""

from __future__ import annotations

import asyncio

from apf_limiter import Limiter
from apf_limiter.observability import Dump, dump_priority_levels, dump_queues, dump_requests
from apf_limiter.testing import FakeClock
from tests.observability.scenario import (
    ADMIN,
    RITA,
    ROB,
    WALL_CLOCK_NS,
    Holder,
    scenario_config,
    user,
)


async def _busy_limiter(clock: FakeClock) -> tuple[Limiter, list[Holder]]:
    """2 executing + 2 waiting at ``queued``, 1 queue-full, 1 at ``rejecting`` + 1 rejected,
    1 exempt; the dump happens at t=4 (wall clock 2023-11-14T22:13:20Z)."""
    limiter = Limiter(scenario_config(), clock=clock)
    arrivals = [
        (0.0, user("alice", verb="get", path="/a")),
        (0.5, user("bob", verb="post", path="/b")),
        (1.0, user("carol", verb="list", resource="pods", namespace="ns1")),
        (
            1.25,
            user(
                "dave",
                verb="get",
                resource="deployments",
                api_group="apps",
                namespace="ns2",
                name="web",
                subresource="scale",
            ),
        ),
        (1.5, user("erin")),
        (2.0, RITA),
        (2.0, ROB),
        (3.0, ADMIN),
    ]
    holders = []
    for when, digest in arrivals:
        await clock.advance_to(when)
        holders.append(Holder(limiter, digest))
    await clock.advance_to(4.0)
    return limiter, holders


async def test_dump_priority_levels_text_and_json() -> None:
    clock = FakeClock()
    limiter, holders = await _busy_limiter(clock)
    dump = dump_priority_levels(limiter)
    assert dump.text() == (
        "PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, "
        "ExecutingRequests, DispatchedRequests, RejectedRequests, TimedoutRequests, "
        "CancelledRequests\n"
        "catch-all,         0,            true,   false,       0,               "
        "0,                 0,                  0,                0,                0\n"
        "exempt,            0,            false,  false,       0,               "
        "1,                 1,                  0,                0,                0\n"
        "queued,            1,            false,  false,       2,               "
        "2,                 2,                  1,                0,                0\n"
        "rejecting,         0,            false,  false,       0,               "
        "1,                 1,                  1,                0,                0\n"
    )
    rows = dump.json_rows()
    assert [row["PriorityLevelName"] for row in rows] == [
        "catch-all",
        "exempt",
        "queued",
        "rejecting",
    ]
    assert rows[2] == {
        "PriorityLevelName": "queued",
        "ActiveQueues": 1,
        "IsIdle": False,
        "IsQuiescing": False,
        "WaitingRequests": 2,
        "ExecutingRequests": 2,
        "DispatchedRequests": 2,
        "RejectedRequests": 1,
        "TimedoutRequests": 0,
        "CancelledRequests": 0,
    }
    for holder in holders:
        holder.release.set()
    await clock.advance(0)


async def test_dump_queues_shows_virtual_times_as_seat_seconds() -> None:
    clock = FakeClock()
    limiter, holders = await _busy_limiter(clock)
    # R ran at 1 seat/s for 0.5 s, then at 2 seats/s until carol arrived at R = 1.5: the
    # head's arrival bounds the queue's next dispatch (anti-windup).
    assert dump_queues(limiter).text() == (
        "PriorityLevelName, Index,  PendingRequests, ExecutingRequests, SeatsInUse, "
        "NextDispatchR, InitialSeatsSum, MaxSeatsSum, TotalWorkSum\n"
        "queued,            0,      2,               2,                 2,          "
        "1.50000000ss,  2,               2,           0.00600000ss\n"
    )
    assert dump_queues(limiter).json_rows()[0]["TotalWorkSum"] == "0.00600000ss"
    for holder in holders:
        holder.release.set()
    await clock.advance(0)


async def test_dump_requests_with_and_without_details() -> None:
    clock = FakeClock()
    limiter, holders = await _busy_limiter(clock)
    plain = dump_requests(limiter, wall_clock_ns=lambda: WALL_CLOCK_NS).text()
    assert plain.splitlines() == [
        "PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, "
        "ArriveTime,              InitialSeats, FinalSeats, AdditionalLatency, StartTime",
        "exempt,            exempt,         -1,         -1,                  ,                "
        "2023-11-14T22:13:19Z,    1,            0,          0s,                "
        "2023-11-14T22:13:19Z",
        "queued,            queued-users,   0,          0,                   ,                "
        "2023-11-14T22:13:17Z,    1,            0,          0s,                "
        "0001-01-01T00:00:00Z",
        "queued,            queued-users,   0,          1,                   ,                "
        "2023-11-14T22:13:17.25Z, 1,            0,          0s,                "
        "0001-01-01T00:00:00Z",
        "queued,            queued-users,   0,          -1,                  ,                "
        "2023-11-14T22:13:16Z,    1,            0,          0s,                "
        "2023-11-14T22:13:16Z",
        "queued,            queued-users,   0,          -1,                  ,                "
        "2023-11-14T22:13:16.5Z,  1,            0,          0s,                "
        "2023-11-14T22:13:16.5Z",
        "rejecting,         rejecters,      -1,         -1,                  ,                "
        "2023-11-14T22:13:18Z,    1,            0,          0s,                "
        "2023-11-14T22:13:18Z",
    ]
    detailed = dump_requests(limiter, include_details=True, wall_clock_ns=lambda: WALL_CLOCK_NS)
    assert detailed.columns[-8:] == (
        "UserName",
        "Verb",
        "APIPath",
        "Namespace",
        "Name",
        "APIVersion",
        "Resource",
        "SubResource",
    )
    rows = detailed.json_rows()
    dave = next(row for row in rows if row["UserName"] == "dave")
    assert dave == {
        "PriorityLevelName": "queued",
        "FlowSchemaName": "queued-users",
        "QueueIndex": 0,
        "RequestIndexInQueue": 1,
        "FlowDistingsher": "",
        "ArriveTime": "2023-11-14T22:13:17.25Z",
        "InitialSeats": 1,
        "FinalSeats": 0,
        "AdditionalLatency": "0s",
        "StartTime": "0001-01-01T00:00:00Z",
        "UserName": "dave",
        "Verb": "get",
        "APIPath": "/",
        "Namespace": "ns2",
        "Name": "web",
        "APIVersion": "apps/",
        "Resource": "deployments",
        "SubResource": "scale",
    }
    header = detailed.text().splitlines()[0]
    assert header.endswith(
        "StartTime,              UserName, Verb,   APIPath,   Namespace, "
        "Name,   APIVersion, Resource,    SubResource"
    )
    for holder in holders:
        holder.release.set()
    await clock.advance(0)


async def test_additional_latency_and_distinguisher_columns() -> None:
    clock = FakeClock()
    limiter = Limiter(scenario_config(distinguisher=True, queues=2), clock=clock)
    digest = user("zoe", seats=2, final_seats=1, additional_latency=0.0015)
    holder = Holder(limiter, digest)
    await clock.advance(0)
    (row,) = dump_requests(limiter, wall_clock_ns=lambda: WALL_CLOCK_NS).json_rows()
    # The level's maxSeats is 1 (ceil(0.15 x 2 seats)): the dump shows the clamped estimate.
    assert (row["FlowDistingsher"], row["InitialSeats"], row["FinalSeats"]) == ("zoe", 1, 1)
    assert row["AdditionalLatency"] == "1.5ms"
    holder.release.set()
    await clock.advance(0)


async def test_no_distinguisher_at_a_level_that_does_not_hash() -> None:
    # Kubernetes computes the flow only for a Queue level with more than one queue
    # (apf_controller.go, computeFlowDistinguisher): with one queue the column is empty, as is
    # the admission's.
    clock = FakeClock()
    limiter = Limiter(scenario_config(distinguisher=True, queues=1), clock=clock)
    holder = Holder(limiter, user("zoe"))
    await clock.advance(0)
    (row,) = dump_requests(limiter, wall_clock_ns=lambda: WALL_CLOCK_NS).json_rows()
    assert row["FlowDistingsher"] == ""
    assert row["FlowSchemaName"] == "queued-users"
    holder.release.set()
    await clock.advance(0)


async def test_ended_waits_count_as_rejected_and_cancelled_like_kubernetes() -> None:
    clock = FakeClock()
    limiter = Limiter(scenario_config(wait_limit=5), clock=clock)
    holders = [Holder(limiter, user(name)) for name in ("a", "b", "c", "d", "e")]
    await clock.advance(0)
    holders[3].task.cancel()  # its waiter goes away: cancelled
    await clock.advance(5)  # the other waiter times out
    assert [h.rejected.reason if h.rejected else None for h in holders] == [
        None,
        None,
        "time-out",
        None,
        "queue-full",
    ]
    stats = limiter.statistics().priority_levels["queued"]
    assert (stats.rejected["time-out"], stats.cancelled) == (1, 1)
    row = next(
        r for r in dump_priority_levels(limiter).json_rows() if r["PriorityLevelName"] == "queued"
    )
    # Kubernetes: every ended wait is "rejected" and "cancelled"; "timed out" is never counted.
    assert (row["RejectedRequests"], row["TimedoutRequests"], row["CancelledRequests"]) == (3, 0, 2)
    for holder in holders:
        holder.release.set()
    await asyncio.gather(*(h.task for h in holders), return_exceptions=True)


async def test_dump_of_an_idle_limiter_has_headers_only_where_nothing_runs() -> None:
    limiter = Limiter(scenario_config(queues=3, hand_size=2), clock=FakeClock())
    assert dump_requests(limiter).rows == ()
    assert dump_requests(limiter).text().count("\n") == 1
    queues = dump_queues(limiter).json_rows()
    assert [(r["PriorityLevelName"], r["Index"], r["PendingRequests"]) for r in queues] == [
        ("queued", 0, 0),
        ("queued", 1, 0),
        ("queued", 2, 0),
    ]


def test_client_text_cannot_change_the_shape_of_a_text_dump() -> None:
    # Distinguishers, user names and paths come from clients: tabs and newlines would add
    # columns or forge rows (and ~1,200 tabs overflowed the tab writer's recursion), escape
    # sequences would drive the operator's terminal. They are escaped, Go style.
    from apf_limiter import RequestDigest
    from tests.helpers import single_level_config

    limiter = Limiter(single_level_config(limit=1), clock=FakeClock())
    hostile = "evil,\tFAKE\nexempt,\texempt\x1b[2J" + "\t" * 1200
    admission = limiter.admit(RequestDigest(user=hostile, path="/x\ny"))
    assert admission.start()
    text = dump_requests(limiter, include_details=True).text()
    lines = text.splitlines()
    assert len(lines) == 2  # the header and the one request
    assert "\t" not in text and "\x1b" not in text
    assert "evil,\\tFAKE\\nexempt,\\texempt\\x1b[2J" in lines[1] and "/x\\ny" in lines[1]
    admission.release()
    # Line separators and bidi overrides too, and a backslash, so that no escape is faked.
    rendered = Dump(("A", "B"), (("u\u2028fake\u202e", "a\\tb"),)).text()
    assert len(rendered.splitlines()) == 2
    assert "u\\u2028fake\\u202e" in rendered and "a\\\\tb" in rendered


async def test_one_long_client_value_cannot_blow_up_a_text_dump() -> None:
    # Every row is padded to its column's widest cell, and a client chooses some cells: one
    # 60 kB path made every row 60 kB wide (315 MB of text from a busy limiter). A text cell
    # is cut at MAX_CELL_WIDTH, marked with how much was left out; the JSON rows keep it all.
    from apf_limiter import RequestDigest
    from apf_limiter.observability._debug_text import CUT_MARK, MAX_CELL_WIDTH
    from tests.helpers import single_level_config

    limiter = Limiter(single_level_config(limit=1, queue_length_limit=200), clock=FakeClock())
    long_path = "/" + "p" * 60_000
    admissions = [limiter.admit(RequestDigest(user="mallory", path=long_path))]
    assert admissions[0].start()
    for index in range(100):
        admission = limiter.admit(RequestDigest(user=f"user{index}", path="/x"))
        assert not admission.start()
        admissions.append(admission)
    dump = dump_requests(limiter, include_details=True)
    text = dump.text()
    lines = text.splitlines()
    assert len(lines) == 102
    widest = max(len(line) for line in lines)
    # 18 columns at most MAX_CELL_WIDTH wide each (plus ",\t" padding): far below 60 kB.
    assert widest <= len(dump.columns) * (MAX_CELL_WIDTH + 2)
    assert len(text) < 102 * widest + 102
    assert f"{CUT_MARK}{60_001 - (MAX_CELL_WIDTH - len(CUT_MARK) - 6)})" in text
    assert any(row["APIPath"] == long_path for row in dump.json_rows())
    for admission in admissions:
        admission.release()
