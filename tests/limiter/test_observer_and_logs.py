"""The observer hooks and the structured logs of the shell."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from apf_limiter import ConfigError, Limiter, Rejected, RequestDigest
from apf_limiter._errors import ConfigProblem, RejectReason
from apf_limiter._observer import Observer
from apf_limiter.config._model import Configuration
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


class Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def request_arrived(self, priority_level: str, flow_schema: str, seats: int) -> None:
        self.events.append(("arrived", priority_level, flow_schema, seats))

    def request_enqueued(self, priority_level: str, flow_schema: str, queue_length: int) -> None:
        self.events.append(("enqueued", priority_level, queue_length))

    def request_dispatched(
        self, priority_level: str, flow_schema: str, queue_wait: float, exempt: bool
    ) -> None:
        self.events.append(("dispatched", priority_level, queue_wait, exempt))

    def request_rejected(
        self,
        priority_level: str,
        flow_schema: str,
        reason: RejectReason,
        queue_wait: float,
        exempt: bool,
    ) -> None:
        self.events.append(("rejected", priority_level, reason, queue_wait))

    def request_cancelled(self, priority_level: str, flow_schema: str, queue_wait: float) -> None:
        self.events.append(("cancelled", priority_level, queue_wait))

    def request_finished(
        self, priority_level: str, flow_schema: str, execution_time: float
    ) -> None:
        self.events.append(("finished", priority_level, execution_time))

    def configuration_applied(self, config: Configuration) -> None:
        self.events.append(("config", config.server_concurrency_limit))

    def configuration_rejected(self, problems: tuple[ConfigProblem, ...]) -> None:
        self.events.append(("config-rejected", len(problems)))

    def borrowing_adjusted(self, changes: dict[str, tuple[int, int]]) -> None:
        self.events.append(("borrowing", changes))

    def level_quiescing(self, priority_level: str) -> None:
        self.events.append(("quiescing", priority_level))


def _digest(user: str) -> RequestDigest:
    return RequestDigest(user=user)


async def test_every_step_of_a_request_reaches_the_observer() -> None:
    clock = FakeClock()
    recorder = Recorder()
    limiter = Limiter(
        single_level_config(limit=1, queue_length_limit=2, wait_limit=5),
        clock=clock,
        observer=recorder,
    )
    assert recorder.events == [("config", 1)]
    recorder.events.clear()
    release = asyncio.Event()

    async def hold(user: str) -> None:
        async with limiter.admit(_digest(user)):
            await clock.sleep(2)
            await release.wait()

    async def try_admit(user: str) -> None:
        try:
            async with limiter.admit(_digest(user)):
                pass
        except Rejected:
            pass

    loop = asyncio.get_running_loop()
    holder = loop.create_task(hold("a"))
    await clock.advance(0)
    waiter = loop.create_task(try_admit("b"))
    doomed = loop.create_task(try_admit("c"))
    await clock.advance(1)
    await try_admit("d")  # queue holds 2: rejected queue-full
    doomed.cancel()
    await clock.advance(0)
    await clock.advance(5)  # b times out at t = 5
    release.set()
    await clock.advance(0)
    await asyncio.gather(holder, waiter, doomed, return_exceptions=True)
    assert recorder.events == [
        ("arrived", "test", "test", 1),
        ("dispatched", "test", 0.0, False),
        ("arrived", "test", "test", 1),
        ("enqueued", "test", 1),
        ("arrived", "test", "test", 1),
        ("enqueued", "test", 2),
        ("arrived", "test", "test", 1),
        ("rejected", "test", "queue-full", 0.0),
        ("cancelled", "test", 1.0),
        ("rejected", "test", "time-out", 5.0),
        ("finished", "test", 6.0),
    ]


async def test_config_borrowing_and_quiescing_events_are_logged_and_observed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    recorder = Recorder()
    two_levels: dict[str, Any] = single_level_config(limit=10)
    two_levels["priorityLevels"].append(
        {
            "name": "other",
            "limited": {"nominalConcurrencyShares": 10000, "lendablePercent": 50},
        }
    )
    two_levels["flowSchemas"].insert(
        0,
        {
            "name": "other",
            "priorityLevelConfiguration": {"name": "other"},
            "matchingPrecedence": 50,
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": "o"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    )
    caplog.set_level(logging.DEBUG, logger="apf_limiter")
    limiter = Limiter(two_levels, clock=clock, observer=recorder)
    applied = [r for r in caplog.records if r.getMessage().startswith("configuration applied")]
    assert len(applied) == 1
    assert applied[0].server_concurrency_limit == 10  # type: ignore[attr-defined]
    release = asyncio.Event()

    async def hold() -> None:
        async with limiter.admit(_digest("o")):
            await release.wait()

    task = asyncio.get_running_loop().create_task(hold())
    await clock.advance(0)
    caplog.clear()
    bad = single_level_config(limit=10)
    bad["serverConcurrencyLimit"] = -1
    with pytest.raises(ConfigError):
        limiter.reconfigure(bad)
    (error,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "serverConcurrencyLimit" in error.getMessage()
    assert error.problems == [  # type: ignore[attr-defined]
        "serverConcurrencyLimit: Invalid value: -1: must be positive"
    ]
    assert ("config-rejected", 1) in recorder.events
    caplog.clear()
    limiter.reconfigure(single_level_config(limit=10))
    messages = [r.getMessage() for r in caplog.records]
    assert any("other removed while busy" in m for m in messages)
    assert ("quiescing", "other") in recorder.events
    caplog.clear()
    release.set()
    await task
    # Once "other" has drained it disappears, and "test" gets its seats.
    borrowing = [r for r in caplog.records if r.getMessage().startswith("borrowing moved seats")]
    assert borrowing and "test" in borrowing[0].changes  # type: ignore[attr-defined]
    assert any(event[0] == "borrowing" and "test" in event[1] for event in recorder.events)


async def test_nothing_is_logged_per_request_at_info(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1, reject=True), clock=clock)
    caplog.set_level(logging.INFO, logger="apf_limiter")
    caplog.clear()
    async with limiter.admit(_digest("a")):
        with pytest.raises(Rejected):
            async with limiter.admit(_digest("b")):
                pass
    assert caplog.records == []
    caplog.set_level(logging.DEBUG, logger="apf_limiter")
    async with limiter.admit(_digest("a")):
        with pytest.raises(Rejected):
            async with limiter.admit(_digest("b")):
                pass
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG
    assert record.reason == "concurrency-limit"  # type: ignore[attr-defined]
    assert record.priority_level == "test"  # type: ignore[attr-defined]


async def test_a_release_at_the_instant_of_dispatch_reports_the_dispatch() -> None:
    # Another task releases a queued admission right after its seats came, before the
    # waiting task resumed: dispatched and finished must still pair up for the metrics.
    clock = FakeClock()
    recorder = Recorder()
    limiter = Limiter(single_level_config(limit=1), clock=clock, observer=recorder)
    holder = limiter.admit(_digest("a"))
    assert holder.start()
    queued = limiter.admit(_digest("b"))
    assert not queued.start()
    waiting = asyncio.get_running_loop().create_task(queued.wait())
    await clock.advance(1)
    recorder.events.clear()
    holder.release()  # dispatches b
    queued.release()  # before b's task has run
    with pytest.raises(RuntimeError, match="released while it waited"):
        await waiting
    assert [event[0] for event in recorder.events] == ["finished", "dispatched", "finished"]
    assert recorder.events[1] == ("dispatched", "test", 1.0, False)
    assert queued.queue_wait == 1.0
    assert limiter.statistics().priority_levels["test"].executing_seats == 0


class Broken(Recorder):
    """An observer whose one method raises (after recording the event)."""

    def __init__(self, broken: str) -> None:
        super().__init__()
        self.broken = broken
        original = getattr(self, broken)

        def raising(*args: Any) -> None:
            original(*args)
            raise ZeroDivisionError(f"bug in {broken}")

        setattr(self, broken, raising)


REQUEST_EVENTS = [
    "request_arrived",
    "request_enqueued",
    "request_dispatched",
    "request_rejected",
    "request_cancelled",
    "request_finished",
]


async def _every_request_outcome(limiter: Limiter, clock: FakeClock) -> dict[str, str]:
    """A holds the one seat; C is rejected (queue full); D is cancelled while it waits; B
    runs after A and holds the seat on, so that E times out. Returns what each saw."""
    outcomes: dict[str, str] = {}
    releases = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def request(user: str) -> None:
        try:
            async with limiter.admit(_digest(user)):
                if user in releases:
                    await releases[user].wait()
                outcomes[user] = "ran"
        except Rejected as rejected:
            outcomes[user] = rejected.reason
        except asyncio.CancelledError:
            outcomes[user] = "cancelled"

    loop = asyncio.get_running_loop()
    a = loop.create_task(request("a"))
    await clock.advance(0)
    b = loop.create_task(request("b"))
    d = loop.create_task(request("d"))
    await clock.advance(1)
    await request("c")  # t = 1: B and D fill the queue
    d.cancel()
    await clock.advance(0)
    e = loop.create_task(request("e"))  # waits from t = 1 to its wait limit, t = 6
    await clock.advance(1)
    releases["a"].set()  # t = 2: B's turn
    await clock.advance(5)
    releases["b"].set()  # t = 7
    await clock.advance(0)
    await asyncio.gather(a, b, d, e)
    return outcomes


@pytest.mark.parametrize("broken", REQUEST_EVENTS)
async def test_an_observer_that_raises_loses_its_event_never_a_request(
    broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    observer = Broken(broken)
    config = single_level_config(limit=1, queue_length_limit=2, wait_limit=5)
    limiter = Limiter(config, clock=clock, observer=observer)
    outcomes = await _every_request_outcome(limiter, clock)
    # Exactly what a working observer sees, and every seat back.
    assert outcomes == {
        "a": "ran",
        "b": "ran",
        "c": "queue-full",
        "d": "cancelled",
        "e": "time-out",
    }
    statistics = limiter.statistics()
    assert (statistics.executing_requests, statistics.waiting_requests) == (0, 0)
    assert statistics.executing_seats == 0
    assert any(event[0] == broken.removeprefix("request_") for event in observer.events)
    # Reported, once per method however often it fails, with the traceback.
    reports = [r for r in caplog.records if r.name == "apf_limiter" and "observer" in r.message]
    assert len(reports) == 1 and reports[0].levelno == logging.ERROR
    assert broken in reports[0].message and reports[0].exc_info is not None


@pytest.mark.parametrize(
    "broken", ["configuration_applied", "configuration_rejected", "level_quiescing"]
)
async def test_an_observer_that_raises_on_configuration_events_changes_nothing(
    broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    observer = Broken(broken)
    limiter = Limiter(single_level_config(limit=1), clock=clock, observer=observer)
    release = asyncio.Event()
    ran: list[str] = []

    async def request(user: str) -> None:
        async with limiter.admit(_digest(user)):
            await release.wait()
            ran.append(user)

    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(request(user)) for user in ("a", "b")]
    await clock.advance(0)
    with pytest.raises(ConfigError):
        limiter.reconfigure({"serverConcurrencyLimit": -1})
    # Rename the level: the old one, busy, quiesces; the new one has two seats.
    renamed = single_level_config(limit=2)
    renamed["priorityLevels"][0]["name"] = "renamed"
    renamed["flowSchemas"][0]["priorityLevelConfiguration"]["name"] = "renamed"
    limiter.reconfigure(renamed)
    assert limiter.statistics().priority_levels.keys() >= {"renamed"}
    release.set()
    await clock.advance(0)
    await asyncio.gather(*tasks)
    assert sorted(ran) == ["a", "b"]
    statistics = limiter.statistics()
    assert (statistics.executing_requests, statistics.waiting_requests) == (0, 0)
    reports = [r for r in caplog.records if r.name == "apf_limiter" and "observer" in r.message]
    assert len(reports) == 1 and broken in reports[0].message


async def test_execution_time_is_never_negative() -> None:
    # Adjustments fall due at a float sum of periods (0.1 + 0.1 + 0.1 = 0.30000000000000004):
    # a request they dispatch starts a hair after the clock reads 0.3.
    rule = [
        {
            "subjects": [{"kind": "Group", "group": {"name": "busy"}}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }
    ]
    config = {
        "serverConcurrencyLimit": 4,
        "borrowingPeriod": 0.1,
        "priorityLevels": [
            {"name": "busy", "limited": {"nominalConcurrencyShares": 100}},
            {"name": "idle", "limited": {"nominalConcurrencyShares": 100, "lendablePercent": 100}},
        ],
        "flowSchemas": [
            {"name": "busy", "priorityLevelConfiguration": {"name": "busy"}, "rules": rule}
        ],
    }
    clock = FakeClock()
    recorder = Recorder()
    limiter = Limiter(config, clock=clock, observer=recorder)
    await clock.advance(0.25)
    admissions = [limiter.admit(RequestDigest(user="u", groups=("busy",))) for _ in range(4)]
    assert [admission.start() for admission in admissions] == [True, True, True, False]
    await clock.advance(0.05)  # the adjustment at 0.3 gives the level its fourth seat
    for admission in admissions:
        admission.release()
    finished = [event[2] for event in recorder.events if event[0] == "finished"]
    assert len(finished) == 4 and min(finished) >= 0.0
