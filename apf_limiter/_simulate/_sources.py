"""Where a simulation's requests come from: open-loop flows, bursts, closed-loop clients, lists.

Each source hands the loop its next arrival time (``next_ns``, integer nanoseconds; ``-1``:
none) and, when it comes, the :class:`Job` to start. Every random draw comes from the flow's
own generator, seeded by the scenario's seed and the flow's name: the same scenario gives the
same open-loop traffic whatever the configuration, so two configurations compare on one traffic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Final

from apf_limiter._digest import RequestDigest
from apf_limiter._simulate._scenario import Distribution, Flow, Scenario

_NS: Final = 1e9


class Job:
    """One request of a source: what the engine sees of it and how long it runs.

    Attributes:
        flow: The name of the scenario flow (or log) it came from.
        digest: What classification sees.
        service: Seconds it runs once dispatched (before any load factor).
        per_request: The load factor of its flow's service time (0: none).
        tag: Its index in the recorded outcomes (-1: not recorded).
        source: The closed-loop client to tell when it ends (``None``: open loop).
    """

    __slots__ = ("flow", "digest", "service", "per_request", "tag", "source")

    def __init__(
        self,
        flow: str,
        digest: RequestDigest,
        service: float,
        per_request: float = 0.0,
        tag: int = -1,
        source: Source | None = None,
    ) -> None:
        self.flow = flow
        self.digest = digest
        self.service = service
        self.per_request = per_request
        self.tag = tag
        self.source = source

    def set(self) -> bool:
        """Stand in for a waiter in the engine request's ``handle`` slot (never woken)."""
        return True


def sampler(distribution: Distribution, rng: random.Random) -> Callable[[], float]:
    """A function drawing values of ``distribution``, in seconds, from ``rng``.

    Its arguments are computed once (``1 / mean``, ``log(median)``): the same values as
    computing them at each draw, without the work.
    """
    kind = distribution.kind
    a = distribution.a
    if kind == "constant":
        return partial(_constant, a)
    if kind == "exponential":
        return partial(rng.expovariate, 1.0 / a)
    if kind == "lognormal":
        return partial(rng.lognormvariate, math.log(a), distribution.b)
    return partial(rng.uniform, a, distribution.b)


def _constant(value: float) -> float:
    return value


class Source:
    """Arrivals of one kind; subclasses say when and what."""

    next_ns: int = -1

    def first(self) -> int:
        """The first arrival time (``-1``: none)."""
        return self.next_ns

    def take(self, now_ns: int) -> Job:
        """The request arriving now; moves ``next_ns`` on."""
        raise NotImplementedError

    def ended(self, now_ns: int) -> int:
        """A request of this source ended now: when the next one comes (``-1``: none)."""
        return -1


class _FlowSource(Source):
    """What the sources of one scenario flow share: digests and service times."""

    def __init__(self, flow: Flow, rng: random.Random) -> None:
        self.flow = flow
        self.rng = rng
        self._digests: list[RequestDigest | None] = [None] * max(flow.users, 1)
        self.stop = flow.stop
        self._service = sampler(flow.service, rng)

    def digest(self, index: int) -> RequestDigest:
        """The digest of the flow's user ``index`` (one object per user, made once)."""
        digest = self._digests[index]
        if digest is None:
            flow = self.flow
            digest = self._digests[index] = RequestDigest(
                user=flow.user.replace("{i}", str(index)),
                groups=flow.groups,
                verb=flow.verb,
                path=flow.path,
                seats=flow.seats,
                final_seats=flow.final_seats,
                additional_latency=flow.additional_latency,
            )
        return digest

    def job(self, client: int | None = None) -> Job:
        flow = self.flow
        index = (
            client
            if client is not None
            else (self.rng.randrange(flow.users) if flow.users > 1 else 0)
        )
        digest = self.digest(index)
        return Job(flow.name, digest, self._service(), flow.service.per_request)


#: Open-loop arrivals drawn ahead at a time: the same draws in the same order, fewer calls.
_CHUNK: Final = 512


class OpenSource(_FlowSource):
    """Open loop: Poisson or evenly spaced arrivals at ``rate`` from ``start`` to ``stop``.

    Arrivals are drawn ahead, :data:`_CHUNK` at a time, from the flow's own generator, in the
    order one at a time would draw them (the user, the service time, the gap to the next):
    nothing else draws from it, so the traffic is the same.
    """

    def __init__(self, flow: Flow, rng: random.Random) -> None:
        super().__init__(flow, rng)
        self.poisson = flow.arrivals == "poisson"
        self.gap = 1.0 / flow.rate
        self.at = flow.start
        if self.poisson:
            self.at += rng.expovariate(flow.rate)
        self.next_ns = round(self.at * _NS) if self.at < self.stop else -1
        self._jobs: list[Job] = []
        self._times: list[int] = []
        self._index = 0

    def take(self, now_ns: int) -> Job:
        index = self._index
        if index >= len(self._jobs):
            self._draw_ahead()
            index = 0
        self._index = index + 1
        self.next_ns = self._times[index]
        return self._jobs[index]

    def _draw_ahead(self) -> None:
        """Draw the next :data:`_CHUNK` arrivals (fewer if the flow stops first)."""
        flow = self.flow
        rng = self.rng
        users = flow.users
        randrange = rng.randrange
        service = self._service
        expovariate = rng.expovariate
        rate = flow.rate
        poisson = self.poisson
        gap = self.gap
        stop = self.stop
        name = flow.name
        per_request = flow.service.per_request
        digests = self._digests
        digest = self.digest
        at = self.at
        jobs: list[Job] = []
        times: list[int] = []
        for _ in range(_CHUNK):
            index = randrange(users) if users > 1 else 0
            known = digests[index]
            jobs.append(
                Job(name, known if known is not None else digest(index), service(), per_request)
            )
            if poisson:
                at += expovariate(rate)
            else:
                at += gap
            if at < stop:
                times.append(round(at * _NS))
            else:
                times.append(-1)
                break
        self.at = at
        self._jobs = jobs
        self._times = times
        self._index = 0


class BurstSource(_FlowSource):
    """``requests`` arrivals spread evenly over ``over`` seconds from ``at``."""

    def __init__(self, flow: Flow, rng: random.Random, at: float, requests: int, over: float):
        super().__init__(flow, rng)
        self.at = at
        self.left = requests
        self.gap = over / requests
        self.next_ns = round(at * _NS)

    def take(self, now_ns: int) -> Job:
        job = self.job()
        self.left -= 1
        self.at += self.gap
        self.next_ns = round(self.at * _NS) if self.left > 0 else -1
        return job


class ClientSource(_FlowSource):
    """Closed loop: one client sends a request, waits for its end, thinks, sends the next."""

    def __init__(self, flow: Flow, rng: random.Random, client: int) -> None:
        super().__init__(flow, rng)
        self.client = client
        self._think_time = sampler(flow.think, rng) if flow.think is not None else None
        think = self._think()
        # Clients start spread over one think time, not all in the same nanosecond.
        at = flow.start + rng.random() * think
        self.next_ns = round(at * _NS) if at < self.stop else -1

    def _think(self) -> float:
        think = self._think_time
        return think() if think is not None else 0.0

    def take(self, now_ns: int) -> Job:
        job = self.job(self.client % self.flow.users)
        job.source = self
        self.next_ns = -1  # the next request waits for this one's end
        return job

    def ended(self, now_ns: int) -> int:
        at = now_ns / _NS + self._think()
        if at >= self.stop:
            return -1
        # Never in the same nanosecond: a client with no think time still sends afterwards.
        return max(round(at * _NS), now_ns + 1)


class ListSource(Source):
    """Given arrivals, in time order: ``(at seconds, flow, digest, service seconds)``.

    Each job's tag is its index in the list, so a run can record every outcome.
    """

    def __init__(self, arrivals: Sequence[tuple[float, str, RequestDigest, float]]) -> None:
        self.arrivals = arrivals
        self.index = 0
        self.next_ns = round(arrivals[0][0] * _NS) if arrivals else -1

    def take(self, now_ns: int) -> Job:
        index = self.index
        _, flow, digest, service = self.arrivals[index]
        self.index = index + 1
        arrivals = self.arrivals
        self.next_ns = round(arrivals[index + 1][0] * _NS) if index + 1 < len(arrivals) else -1
        return Job(flow, digest, service, 0.0, index)


def scenario_sources(scenario: Scenario) -> list[Source]:
    """The sources of every flow of a scenario, each with its own seeded generator."""
    sources: list[Source] = []
    for flow in scenario.flows:
        seed = f"{scenario.seed}/{flow.name}"
        if flow.rate > 0:
            sources.append(OpenSource(flow, random.Random(f"{seed}/open")))
        for i, burst in enumerate(flow.bursts):
            rng = random.Random(f"{seed}/burst/{i}")
            sources.append(BurstSource(flow, rng, burst.at, burst.requests, burst.over))
        for client in range(flow.clients):
            sources.append(ClientSource(flow, random.Random(f"{seed}/client/{client}"), client))
    return sources
