"""The demo's clients: one elephant flooding the server, a few mice sending now and then.

The elephant keeps ``elephant_concurrency`` requests in flight and, told 429, tries again after
a short pause (a flood ignores ``Retry-After``). Each mouse sends one request, then waits
about ``mouse_interval`` seconds. Only requests started after the warm-up and before the end
count; the run stops starting requests at its end and waits for those in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import httpx


ELEPHANT = "elephant"
_ELEPHANT_RETRY_PAUSE = 0.2
_DRAIN_TIMEOUT = 20.0


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """The load of one run.

    Attributes:
        duration: Seconds of load (the warm-up included).
        warmup: Seconds at the start whose requests are not counted.
        elephant_concurrency: Requests the elephant keeps in flight.
        mice: Number of mice.
        mouse_interval: Mean seconds a mouse waits between two requests.
        seed: Seed of the mice's jitter.
    """

    duration: float
    warmup: float
    elephant_concurrency: int
    mice: int
    mouse_interval: float
    seed: int = 7


@dataclass(slots=True)
class ClientResult:
    """What one client saw in one run.

    Attributes:
        name: ``elephant`` or ``mouse-<n>``.
        kind: ``elephant`` or ``mouse``.
        latencies: Seconds each served (200) request took.
        rejected: Requests answered 429.
        failed: Requests that failed otherwise (other status or transport error).
    """

    name: str
    kind: Literal["elephant", "mouse"]
    latencies: list[float] = field(default_factory=list)
    rejected: int = 0
    failed: int = 0

    @property
    def served(self) -> int:
        """Requests answered 200."""
        return len(self.latencies)


Progress = Callable[[float, dict[str, ClientResult]], None]


class _Run:
    def __init__(self, options: LoadOptions) -> None:
        self.options = options
        now = time.perf_counter()
        self.counted_from = now + options.warmup
        self.end = now + options.duration

    async def request(self, client: httpx.AsyncClient, result: ClientResult) -> bool:
        """Send one request; returns whether it was rejected with 429."""
        import httpx

        started = time.perf_counter()
        try:
            response = await client.get("/work")
        except httpx.HTTPError:
            status = 0
        else:
            status = response.status_code
        if started < self.counted_from:
            return status == 429
        if status == 200:
            result.latencies.append(time.perf_counter() - started)
        elif status == 429:
            result.rejected += 1
        else:
            result.failed += 1
        return status == 429

    async def elephant(self, client: httpx.AsyncClient, result: ClientResult) -> None:
        while time.perf_counter() < self.end:
            if await self.request(client, result):
                await asyncio.sleep(_ELEPHANT_RETRY_PAUSE)

    async def mouse(self, client: httpx.AsyncClient, result: ClientResult, seed: int) -> None:
        jitter = random.Random(seed)
        interval = self.options.mouse_interval
        # Mice start spread out, so they do not all arrive in step.
        await asyncio.sleep(jitter.uniform(0, interval))
        while time.perf_counter() < self.end:
            await self.request(client, result)
            await asyncio.sleep(interval * jitter.uniform(0.5, 1.5))


async def run_load(
    base_url: str, options: LoadOptions, progress: Progress | None = None
) -> dict[str, ClientResult]:
    """Drive one run of the demo's load against ``base_url``.

    Args:
        base_url: The server, e.g. ``http://127.0.0.1:8000``.
        options: The load.
        progress: Called about four times a second with the elapsed seconds and the results
            so far.

    Returns:
        The results by client name (the elephant first, then the mice in order).
    """
    import httpx

    run = _Run(options)
    results = {ELEPHANT: ClientResult(ELEPHANT, "elephant")}
    for number in range(1, options.mice + 1):
        results[f"mouse-{number}"] = ClientResult(f"mouse-{number}", "mouse")
    timeout = httpx.Timeout(30.0)
    clients = {
        name: httpx.AsyncClient(
            base_url=base_url,
            headers={"authorization": f"Bearer {name}"},
            timeout=timeout,
            limits=httpx.Limits(
                max_connections=options.elephant_concurrency if name == ELEPHANT else 1,
                max_keepalive_connections=options.elephant_concurrency,
            ),
        )
        for name in results
    }
    started = time.perf_counter()
    try:
        tasks = [
            asyncio.create_task(run.elephant(clients[ELEPHANT], results[ELEPHANT]))
            for _ in range(options.elephant_concurrency)
        ]
        tasks += [
            asyncio.create_task(run.mouse(clients[name], results[name], options.seed + index))
            for index, name in enumerate(results)
            if name != ELEPHANT
        ]
        everything = asyncio.gather(*tasks)
        while not everything.done():
            await asyncio.wait([everything], timeout=0.25)
            elapsed = time.perf_counter() - started
            if progress is not None:
                progress(min(elapsed, options.duration), results)
            if elapsed > options.duration + _DRAIN_TIMEOUT:
                everything.cancel()
                break
        await asyncio.gather(everything, return_exceptions=True)
    finally:
        for client in clients.values():
            await client.aclose()
    return results
