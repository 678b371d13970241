"""What queues that respect client deadlines do to goodput under overload, in fake time.

Run: ``.venv/bin/python -m benchmarks.client_deadlines`` (``--quick`` for a smoke test).

Issue 29 section 3's scenario, through the request gate (:class:`~apf_limiter.gate.Gate`) with
:class:`~apf_limiter.testing.FakeClock`, so the figures are exact and the same on every
machine: a service whose capacity is 20 seats held 50 ms a request (400 requests/s), one
priority level of 64 queues (hand size 6, 50 requests each), ``requestWaitLimit`` 15 s; 100
clients (one flow each, ``ByUser``) send requests open-loop (Poisson arrivals, a seeded
generator) at 2x and 5x capacity, and give up after 1 s. Three variants:

* ``off, unseen`` — the option off, and the server never learns that a client gave up (a
  proxy that keeps its upstream connection, a client whose disconnect goes unnoticed): a
  queued request waits up to ``requestWaitLimit`` and may be dispatched long after;
* ``off, seen`` — the option off, and a client that gives up while its request is queued
  cancels it (the ASGI middleware's disconnect watch, gRPC's cancellation): its place is freed;
* ``on`` — ``Gate.start(..., client_deadline=1.0)`` (a ``grpc-timeout``, a timeout header):
  the request waits no longer than its client does, and its wait ends as a ``time-out``
  rejection (429 with ``Retry-After``), never dispatched after its client gave up;
* ``on, less the service time`` — the same with ``client_deadline=0.95``: the client's
  timeout less the 50 ms the request then runs (what a front door could pass if it knew the
  handler's time; the gate is given a deadline, it does not guess one).

Per variant and multiple, after a warm-up (the queues fill first), over the responses
completed in the measured window: **goodput** (responses completed within their client's 1 s,
per second, over capacity) and the **wasted** work (the share of those responses that came
after their client gave up); over the requests that arrived in it: the longest queue wait of
one then dispatched, and how requests ended (admitted, rejected on arrival, timed out or
cancelled in a queue). The results go to ``benchmarks/results/client_deadlines.json`` (``--out`` for
another file).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.gate import Gate, SlowClients
from apf_limiter.testing import FakeClock
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT

__all__ = ["VARIANTS", "main", "run"]

DEFAULT_OUT: Final = REPO_ROOT / "benchmarks" / "results" / "client_deadlines.json"
SEATS: Final = 20
SERVICE: Final = 0.050  # seconds a request holds its seat
CAPACITY: Final = SEATS / SERVICE  # requests per second
CLIENT_TIMEOUT: Final = 1.0  # seconds a client waits for its response
WAIT_LIMIT: Final = 15.0  # requestWaitLimit
CLIENTS: Final = 100
#: The variants: (the client deadline the gate is given, or ``None``; whether a client that
#: gives up cancels its queued request).
VARIANTS: Final[dict[str, tuple[float | None, bool]]] = {
    "off, unseen": (None, False),
    "off, seen": (None, True),
    "on": (CLIENT_TIMEOUT, False),
    "on, less the service time": (CLIENT_TIMEOUT - SERVICE, False),
}


def _config() -> dict[str, Any]:
    """One queuing level of exactly ``SEATS`` seats, fair per user, ``WAIT_LIMIT`` seconds."""
    queuing = {"queues": 64, "handSize": 6, "queueLengthLimit": 50}
    return {
        "serverConcurrencyLimit": SEATS,
        "requestWaitLimit": WAIT_LIMIT,
        "priorityLevels": [
            {
                "name": "work",
                "limited": {
                    "nominalConcurrencyShares": 10000,
                    "lendablePercent": 0,
                    "limitResponse": {"type": "Queue", "queuing": queuing},
                },
            }
        ],
        "flowSchemas": [
            {
                "name": "everyone",
                "priorityLevelConfiguration": {"name": "work"},
                "matchingPrecedence": 100,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            }
        ],
    }


@dataclass
class _Tally:
    """How the requests that arrived in the measured window ended."""

    arrived: int = 0
    good: int = 0  # completed within the client's timeout
    late: int = 0  # completed after the client gave up (seat time wasted)
    rejected: int = 0  # on arrival: queue-full
    timed_out: int = 0  # in a queue: the wait limit (or the client deadline) passed
    cancelled: int = 0  # in a queue: the client gave up and the server saw it
    max_queue_wait: float = 0.0  # the longest wait of a request that was then dispatched
    good_latencies: list[float] = field(default_factory=list)


def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()


async def _request(
    gate: Gate,
    clock: FakeClock,
    digest: RequestDigest,
    client_deadline: float | None,
    seen: bool,
    tally: _Tally,
    window: tuple[float, float],
) -> None:
    arrival = clock.now()
    measured = window[0] <= arrival < window[1]  # how it ended counts by its arrival
    try:
        ticket = gate.start(digest, client_deadline=client_deadline)
    except Rejected:
        tally.rejected += measured
        return
    error: BaseException | None = None
    try:
        if not ticket.admitted:
            gives_up = None
            if seen:  # the client's give-up reaches the server: cancel the queued wait
                task = asyncio.current_task()
                assert task is not None
                gives_up = clock.call_later(CLIENT_TIMEOUT, _cancel, task)
            try:
                await ticket.wait()
            finally:
                if gives_up is not None:
                    gives_up.cancel()
            if measured:
                tally.max_queue_wait = max(tally.max_queue_wait, ticket.queue_wait)
        await clock.sleep(SERVICE)
    except BaseException as exc:
        error = exc
    finally:
        ticket.end(error)
    if isinstance(error, Rejected):
        tally.timed_out += measured
    elif isinstance(error, asyncio.CancelledError):
        tally.cancelled += measured
    elif error is None:
        if not window[0] <= clock.now() < window[1]:
            return  # a response counts by when it completes: goodput is a rate
        latency = clock.now() - arrival
        if latency <= CLIENT_TIMEOUT + 1e-9:
            tally.good += 1
            tally.good_latencies.append(latency)
        else:
            tally.late += 1
    else:
        raise error


async def _overload(
    multiple: float, variant: str, duration: float, warmup: float, seed: int
) -> dict[str, Any]:
    """One run: open-loop arrivals at ``multiple`` times capacity for ``duration`` seconds."""
    client_deadline, seen = VARIANTS[variant]
    clock = FakeClock()
    limiter = Limiter(_config(), clock=clock)
    gate = Gate(limiter, slow_clients=SlowClients(request_timeout=None, min_body_rate=None))
    digests = [RequestDigest(user=f"client-{i}", verb="post", path="/work") for i in range(100)]
    tally = _Tally()
    tasks: set[asyncio.Task[None]] = set()
    rng = random.Random(seed)
    rate = multiple * CAPACITY

    window = (warmup, duration)

    def arrive(digest: RequestDigest) -> None:
        task = asyncio.create_task(
            _request(gate, clock, digest, client_deadline, seen, tally, window)
        )
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        tally.arrived += warmup <= clock.now()

    at = rng.expovariate(rate)
    while at < duration:
        clock.call_later(at, arrive, rng.choice(digests))
        at += rng.expovariate(rate)
    await clock.run_until_idle()
    await asyncio.gather(*tasks)
    limiter.close()
    seconds = duration - warmup
    latencies = sorted(tally.good_latencies)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else None
    return {
        "multiple": multiple,
        "variant": variant,
        "arrived": tally.arrived,
        "goodput": round(tally.good / seconds / CAPACITY, 4),
        "wasted": round(tally.late / max(1, tally.good + tally.late), 4),
        "good": tally.good,
        "late": tally.late,
        "rejected_on_arrival": tally.rejected,
        "timed_out": tally.timed_out,
        "cancelled_in_queue": tally.cancelled,
        "max_queue_wait_s": round(tally.max_queue_wait, 4),
        "good_p99_s": None if p99 is None else round(p99, 4),
    }


def run(
    multiples: tuple[float, ...] = (2.0, 5.0),
    duration: float = 40.0,
    warmup: float = 10.0,
    seed: int = 29,
) -> list[dict[str, Any]]:
    """Every variant at every multiple; one row each (see the module's docstring)."""
    if not 0 <= warmup < duration:
        raise ValueError(f"warmup must be in [0, duration), got {warmup!r}")
    return [
        asyncio.run(_overload(multiple, variant, duration, warmup, seed))
        for multiple in multiples
        for variant in VARIANTS
    ]


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| load | variant | goodput | wasted | longest wait (s) | rejected on arrival "
        "| timed out | cancelled |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        arrived = row["arrived"] or 1
        lines.append(
            f"| {row['multiple']:g}x | {row['variant']} | {row['goodput']:.2f} | "
            f"{row['wasted']:.0%} | {row['max_queue_wait_s']:.2f} | "
            f"{row['rejected_on_arrival'] / arrived:.0%} | "
            f"{row['timed_out'] / arrived:.0%} | {row['cancelled_in_queue'] / arrived:.0%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and write its JSON result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 s of fake time, 0.5 s warm-up")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    duration, warmup = (2.0, 0.5) if args.quick else (40.0, 10.0)
    started = time.perf_counter()
    rows = run(duration=duration, warmup=warmup)
    print(_table(rows))
    result = {
        "scenario": {
            "seats": SEATS,
            "service_s": SERVICE,
            "capacity_per_s": CAPACITY,
            "client_timeout_s": CLIENT_TIMEOUT,
            "request_wait_limit_s": WAIT_LIMIT,
            "clients": CLIENTS,
            "duration_s": duration,
            "warmup_s": warmup,
            "clock": "fake",
        },
        "rows": rows,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
