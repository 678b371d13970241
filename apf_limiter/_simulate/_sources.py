"""Where a simulation's requests come from: open-loop flows, bursts, closed-loop clients, lists.

Each source hands the loop its next arrival time (``next_ns``, integer nanoseconds; ``-1``:
none) and, when it comes, the :class:`Job` to start. Every random draw comes from the flow's
own generator, seeded by the scenario's seed and the flow's name: the same scenario gives the
same open-loop traffic whatever the configuration, so two configurations compare on one traffic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
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


def draw(distribution: Distribution, rng: random.Random) -> float:
    """One value of ``distribution``, in seconds."""
    kind = distribution.kind
    if kind == "constant":
        return distribution.a
    if kind == "exponential":
        return rng.expovariate(1.0 / distribution.a)
    if kind == "lognormal":
        return rng.lognormvariate(math.log(distribution.a), distribution.b)
    return rng.uniform(distribution.a, distribution.b)


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
        self._digests: dict[int, RequestDigest] = {}
        self.stop = flow.stop

    def job(self, client: int | None = None) -> Job:
        flow = self.flow
        index = (
            client
            if client is not None
            else (self.rng.randrange(flow.users) if flow.users > 1 else 0)
        )
        digest = self._digests.get(index)
        if digest is None:
            digest = self._digests[index] = RequestDigest(
                user=flow.user.replace("{i}", str(index)),
                groups=flow.groups,
                verb=flow.verb,
                path=flow.path,
                seats=flow.seats,
                final_seats=flow.final_seats,
                additional_latency=flow.additional_latency,
            )
        service = draw(flow.service, self.rng)
        return Job(flow.name, digest, service, flow.service.per_request)


class OpenSource(_FlowSource):
    """Open loop: Poisson or evenly spaced arrivals at ``rate`` from ``start`` to ``stop``."""

    def __init__(self, flow: Flow, rng: random.Random) -> None:
        super().__init__(flow, rng)
        self.poisson = flow.arrivals == "poisson"
        self.gap = 1.0 / flow.rate
        self.at = flow.start
        self._advance(first=True)

    def _advance(self, first: bool = False) -> None:
        if self.poisson:
            self.at += self.rng.expovariate(self.flow.rate)
        elif not first:
            self.at += self.gap
        self.next_ns = round(self.at * _NS) if self.at < self.stop else -1

    def take(self, now_ns: int) -> Job:
        job = self.job()
        self._advance()
        return job


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
        think = self._think()
        # Clients start spread over one think time, not all in the same nanosecond.
        at = flow.start + rng.random() * think
        self.next_ns = round(at * _NS) if at < self.stop else -1

    def _think(self) -> float:
        think = self.flow.think
        return draw(think, self.rng) if think is not None else 0.0

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
