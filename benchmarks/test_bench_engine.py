"""pytest-benchmark versions of the engine benchmarks (``make bench``).

Each APF measurement has its baseline in the same group, so the report shows them side by
side; ``python -m benchmarks.engine_bench`` prints the ratios directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from apf_limiter import Limiter, RequestDigest
from benchmarks.engine_bench import USER, saturated_level, twenty_schemas_config

BATCH = 1000


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _batch(loop: asyncio.AbstractEventLoop, body: Callable[[], object]) -> Callable[[], None]:
    async def run() -> None:
        for _ in range(BATCH):
            await body()  # type: ignore[misc]

    return lambda: loop.run_until_complete(run())


@pytest.mark.benchmark(group="uncontended admit+release (x1000)")
def test_semaphore_baseline(benchmark, loop) -> None:  # type: ignore[no-untyped-def]
    semaphore = asyncio.Semaphore(10)

    async def body() -> None:
        async with semaphore:
            pass

    benchmark(_batch(loop, body))


@pytest.mark.benchmark(group="uncontended admit+release (x1000)")
@pytest.mark.parametrize("config", ["default", "twenty-schemas"])
def test_apf_admit(benchmark, loop, config: str) -> None:  # type: ignore[no-untyped-def]
    limiter = Limiter(None if config == "default" else twenty_schemas_config(), hash_seed=1)
    digest: RequestDigest = USER

    async def body() -> None:
        async with limiter.admit(digest):
            pass

    benchmark(_batch(loop, body))


@pytest.mark.benchmark(group="saturated enqueue+dispatch")
@pytest.mark.parametrize(("queues", "flows"), [(64, 10), (64, 10_000), (4096, 10), (4096, 10_000)])
def test_saturated(benchmark, queues: int, flows: int) -> None:  # type: ignore[no-untyped-def]
    step = saturated_level(queues, flows)
    benchmark.pedantic(step, args=(1000,), rounds=10, iterations=1)
