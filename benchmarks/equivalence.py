"""Fingerprints of observable behaviour, for proving that a refactor changes nothing.

Run it before and after a change and compare the output (``--out`` writes the whole record, so a
difference can be located, not only detected)::

    python -m benchmarks.equivalence --out before.json     # on the old commit
    python -m benchmarks.equivalence --out after.json      # on the new one
    python -m benchmarks.equivalence --compare before.json after.json

What it fingerprints, all in fake time and through public names only (so the same script runs
on both sides of a restructure):

* ``fairness``: the fake-time fairness figures (``benchmarks.fairness_bench.fake_time``) of 20
  hash seeds: mice percentiles, utilisation, Jain's index, per seed.
* ``traces``: 60 random traces through the public API (``Limiter.admit`` with ``async with``
  and by hand, cancellations, wait limits, work estimates, reconfigurations, borrowing
  adjustments, shadow levels and the adaptive limit): every request's outcome (flow schema,
  level, queue wait, rejection reason and Retry-After), every observer event, and the
  ``statistics()`` after every step.
* ``observability``: a scripted overload scenario's text and JSON dumps (the three Kubernetes
  dumps and the top flows), the dashboard feed and the Prometheus scrape.

Each section's digest is a SHA-256 of its canonical JSON. Run with a fixed ``PYTHONHASHSEED``
for both sides (the harness sets nothing itself).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

from apf_limiter import ConfigError, Limiter, Rejected, RequestDigest
from apf_limiter.observability import (
    Observer,
    dashboard_feed,
    dump_priority_levels,
    dump_queues,
    dump_requests,
    dump_top_flows,
)
from apf_limiter.testing import FakeClock

TRACES = 60
FAIRNESS_SEEDS = 20
WALL_CLOCK_NS = 1_700_000_000_000_000_000


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------
# fairness


def fairness() -> Any:
    """The fake-time fairness figures of 20 hash seeds."""
    from benchmarks.fairness_bench import fake_time

    return fake_time(list(range(FAIRNESS_SEEDS)))


# ------------------------------------------------------------------------------------------
# random traces


class _Recorder(Observer):
    """Every observer event, in order, with its arguments."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("request_") or name.startswith("configuration_"):
            events = object.__getattribute__(self, "events")

            def record(*args: Any, **kwargs: Any) -> None:
                events.append([name, [_plain(a) for a in args], sorted(kwargs.items())])

            return record
        return object.__getattribute__(self, name)


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _config(rng: random.Random) -> dict[str, Any]:
    names = rng.sample(["a", "b", "c", "d"], rng.randint(1, 4))
    levels: list[dict[str, Any]] = []
    schemas: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        limited: dict[str, Any] = {
            "nominalConcurrencyShares": rng.choice([1, 5, 10, 30, 50, 100]),
            "lendablePercent": rng.choice([0, 0, 25, 50, 100]),
        }
        borrowing = rng.choice([None, 0, 50, 100, 200])
        if borrowing is not None:
            limited["borrowingLimitPercent"] = borrowing
        if rng.random() < 0.25:
            limited["limitResponse"] = {"type": "Reject"}
        else:
            queues = rng.choice([1, 2, 4, 8])
            limited["limitResponse"] = {
                "type": "Queue",
                "queuing": {
                    "queues": queues,
                    "handSize": rng.randint(1, queues),
                    "queueLengthLimit": rng.randint(1, 5),
                },
            }
        levels.append({"name": name, "limited": limited})
        schema: dict[str, Any] = {
            "name": f"s-{name}",
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": 100 + index,
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": f"g-{name}"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                }
            ],
        }
        if rng.random() < 0.6:
            schema["distinguisherMethod"] = {"type": "ByUser"}
        schemas.append(schema)
    config: dict[str, Any] = {
        "serverConcurrencyLimit": rng.randint(2, 16),
        "requestWaitLimit": rng.choice([0.5, 1.0, 2.0, 5.0]),
        "borrowingPeriod": rng.choice([0.5, 1.0, 3.0]),
        "priorityLevels": levels,
        "flowSchemas": schemas,
    }
    shadow = [name for name in names if rng.random() < 0.2]
    if shadow:
        config["priorityLevelEnforcement"] = {name: "Shadow" for name in shadow}
    if rng.random() < 0.15:
        config["adaptiveConcurrency"] = {"minLimit": 2, "maxLimit": 40, "smoothing": 1.0}
    return config


def _request_digest(rng: random.Random) -> RequestDigest:
    group = rng.choice(["g-a", "g-b", "g-c", "g-d", "system:masters", "none"])
    groups = ("system:authenticated",) if group == "none" else (group, "system:authenticated")
    latency = rng.choice([0.0, 0.0, 0.0, 0.5, 2.0])
    return RequestDigest(
        user=rng.choice(["u1", "u2", "u3", "u4", "u5"]),
        groups=groups,
        verb=rng.choice(["get", "list", "post"]),
        path=rng.choice(["/x", "/y/z"]),
        seats=rng.choice([None, 1, 1, 2, 3, 7]),
        additional_latency=latency,
        final_seats=rng.choice([0, 1, 3]) if latency else 0,
    )


async def _trace(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    clock = FakeClock(rng.choice([0.0, 1000.3]))
    events: list[Any] = []
    config = _config(rng)
    limiter = Limiter(config, clock=clock, hash_seed=seed, observer=_Recorder(events))
    outcomes: dict[int, list[Any]] = {}
    snapshots: list[str] = []
    tasks: list[asyncio.Task[None]] = []

    async def hold(ident: int, digest: RequestDigest, duration: float, limit: float | None):
        record = outcomes.setdefault(ident, [])
        try:
            async with limiter.admit(digest, wait_limit=limit) as admission:
                record.append(
                    [
                        "admitted",
                        clock.now(),
                        admission.flow_schema,
                        admission.priority_level,
                        admission.queue_wait,
                        admission.seats,
                        repr(admission.shadow),
                    ]
                )
                await clock.sleep(duration)
            record.append(["done", clock.now()])
        except Rejected as exc:
            record.append(
                [
                    "rejected",
                    clock.now(),
                    exc.reason,
                    exc.flow_schema,
                    exc.priority_level,
                    exc.retry_after,
                ]
            )
        except asyncio.CancelledError:
            record.append(["cancelled", clock.now()])

    ident = 0
    for _step in range(80):
        action = rng.random()
        if action < 0.55:
            for _ in range(rng.randint(1, 4)):
                ident += 1
                limit = rng.choice([None, None, 0.3, 3.0])
                duration = rng.choice([0.05, 0.2, 0.5, 1.5, 4.0])
                digest = _request_digest(rng)
                tasks.append(asyncio.create_task(hold(ident, digest, duration, limit)))
        elif action < 0.65 and tasks:
            victim = rng.choice(tasks)
            victim.cancel()
        elif action < 0.72:
            ident += 1
            admission = limiter.admit(_request_digest(rng))
            started = None
            try:
                started = admission.start()
            except Rejected as exc:
                outcomes[ident] = [["manual-rejected", exc.reason, exc.retry_after]]
            if started is not None:
                outcomes[ident] = [["manual", started, admission.priority_level]]
                if started:
                    admission.release(ran=rng.random() < 0.8)
                else:
                    admission.release(ran=False)
        elif action < 0.77:
            try:
                limiter.reconfigure(_config(rng))
                snapshots.append("reconfigured")
            except ConfigError as exc:
                snapshots.append(f"refused {len(exc.problems)}")
        elif action < 0.82:
            limiter.adjust_borrowing()
        await asyncio.sleep(0)
        await clock.advance(rng.choice([0.0, 0.01, 0.1, 0.3, 1.0]))
        snapshots.append(repr(limiter.statistics()))
    while not all(task.done() for task in tasks):
        await clock.advance(0.5)
    snapshots.append(repr(limiter.statistics()))
    snapshots.append(repr(limiter.adaptive_concurrency))
    limiter.close()
    return {
        "outcomes": sorted(outcomes.items()),
        "events": events,
        "snapshots": snapshots,
    }


def traces(count: int = TRACES) -> list[Any]:
    """Every outcome, event and statistics snapshot of ``count`` random traces."""
    return [asyncio.run(_trace(seed)) for seed in range(count)]


# ------------------------------------------------------------------------------------------
# observability


async def _observability() -> dict[str, Any]:
    from tests.observability.scenario import RITA, ROB, Holder, scenario_config, user

    clock = FakeClock(100.0)
    try:
        from prometheus_client import CollectorRegistry, generate_latest

        from apf_limiter.observability import PrometheusMetrics

        registry: Any = CollectorRegistry()
        metrics: Any = PrometheusMetrics(registry, top_flows=5)
    except ImportError:  # pragma: no cover - the dev install has the extra
        registry = metrics = None
    config = scenario_config(queues=4, hand_size=2, distinguisher=True, server_limit=30)
    limiter = Limiter(config, clock=clock, hash_seed=7, observer=metrics)
    if metrics is not None:
        metrics.bind(limiter)
    holders = [Holder(limiter, user(f"user-{n % 7}", seats=1 + n % 3)) for n in range(60)]
    holders += [Holder(limiter, RITA), Holder(limiter, ROB)]
    await clock.advance(0.5)
    out: dict[str, Any] = {}

    def snapshot(tag: str) -> None:
        for name, dump in (
            ("priority_levels", dump_priority_levels(limiter)),
            ("queues", dump_queues(limiter)),
            ("requests", dump_requests(limiter, wall_clock_ns=lambda: WALL_CLOCK_NS)),
            (
                "requests_details",
                dump_requests(limiter, include_details=True, wall_clock_ns=lambda: WALL_CLOCK_NS),
            ),
            ("top_flows", dump_top_flows(limiter)),
            ("top_flows_hashed", dump_top_flows(limiter, hash_distinguishers=b"k")),
        ):
            text, rows = dump.text(), dump.json_rows()
            if name.startswith("requests"):
                # Requests that started at the same instant are listed in the order of a set of
                # objects (by address): compare these dumps as sets of rows.
                header, *lines = text.splitlines()
                text = "\n".join([header, *sorted(lines)])
                rows = sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))
            out[f"{tag}/{name}/text"] = text
            out[f"{tag}/{name}/json"] = rows
        out[f"{tag}/dashboard"] = dashboard_feed(limiter)
        if registry is not None:
            out[f"{tag}/scrape"] = generate_latest(registry).decode()

    snapshot("loaded")
    for index, holder in enumerate(holders):
        if index % 3 == 0:
            holder.release.set()
    await clock.advance(3.0)
    snapshot("draining")
    for holder in holders:
        holder.release.set()
    await clock.advance(20.0)
    snapshot("idle")
    limiter.close()
    return out


def observability() -> dict[str, Any]:
    """Every dump, the dashboard feed and the scrape of a scripted scenario."""
    return asyncio.run(_observability())


# ------------------------------------------------------------------------------------------


SECTIONS = {"fairness": fairness, "traces": traces, "observability": observability}


def run(sections: list[str]) -> dict[str, Any]:
    """Each section's record and digest."""
    record: dict[str, Any] = {}
    for name in sections:
        value = json.loads(json.dumps(SECTIONS[name](), sort_keys=True, default=repr))
        record[name] = {"digest": _digest(value), "value": value}
    return record


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The sections whose digests differ, each with the first differing path."""
    differences = []
    for name in sorted(set(before) | set(after)):
        left, right = before.get(name), after.get(name)
        if left is None or right is None:
            differences.append(f"{name}: only on one side")
        elif left["digest"] != right["digest"]:
            differences.append(f"{name}: {_first_difference(left['value'], right['value'], name)}")
    return differences


def _first_difference(left: Any, right: Any, path: str) -> str:
    if type(left) is not type(right):
        return f"{path}: {left!r:.200} != {right!r:.200}"
    if isinstance(left, dict):
        for key in sorted(set(left) | set(right)):
            if left.get(key) != right.get(key):
                return _first_difference(left.get(key), right.get(key), f"{path}/{key}")
    if isinstance(left, list):
        for index, (a, b) in enumerate(zip(left, right, strict=False)):
            if a != b:
                return _first_difference(a, b, f"{path}[{index}]")
        if len(left) != len(right):
            return f"{path}: length {len(left)} != {len(right)}"
    return f"{path}: {left!r:.300} != {right!r:.300}"


def main(argv: list[str] | None = None) -> int:
    """Print each section's digest; write, or compare, whole records."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the whole record here (JSON)")
    parser.add_argument("--only", action="append", choices=sorted(SECTIONS))
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(path.read_text()) for path in args.compare)
        differences = compare(before, after)
        for line in differences:
            print(line)
        print("identical" if not differences else f"{len(differences)} section(s) differ")
        return 1 if differences else 0
    record = run(args.only or list(SECTIONS))
    for name, section in record.items():
        print(f"{name}: {section['digest']}")
    if args.out:
        args.out.write_text(json.dumps(record, sort_keys=True, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
