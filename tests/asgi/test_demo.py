"""``apf-limiter demo`` with a tiny duration, its generator check, and its table arithmetic."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from apf_limiter._cli import main
from apf_limiter._demo.command import DemoOptions, run_demo
from apf_limiter._demo.load import ClientResult, LoadOptions, run_load
from apf_limiter._demo.report import percentile

pytestmark = pytest.mark.timeout(60)

_GENERATOR_LINE = re.compile(
    r"^  load generator: (\d+)% of a CPU core \([\d.]+ s CPU in [\d.]+ s\), event loop late "
    r"(\d+) ms at p99, \d+ ms at most; (\d+) requests sent",
    re.MULTILINE,
)


def test_demo_runs_both_setups_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["demo", "--duration", "4", "--elephant", "12", "--mice", "2"])
    out = capsys.readouterr().out
    assert status == 0
    assert "semaphore (today)" in out and "APF (apf_limiter)" in out
    rows = {line.split("|")[0].strip(): line for line in out.splitlines() if "|" in line}
    assert {"elephant", "mouse-1", "mouse-2", "all mice"} <= set(rows)
    served = rows["elephant"].split("|")
    assert int(served[1].split()[0]) > 0 and int(served[2].split()[0]) > 0
    # Each run says how busy its generator was; the closing sentences are computed (a busy
    # machine may starve the generator, and then the demo must say so instead).
    generators = _GENERATOR_LINE.findall(out)
    assert len(generators) == 2 and all(int(sent) > 0 for _, _, sent in generators)
    assert "Mice were " in out or "WARNING: the load generator could not keep up" in out


def test_demo_warns_when_its_generator_is_starved() -> None:
    # 20 ms of CPU burnt after each response: the generator cannot keep 8 requests in flight.
    options = DemoOptions(duration=4, elephant_concurrency=8, mice=2, generator_burn=0.02)
    out = io.StringIO()
    runs = asyncio.run(run_demo(options, out))
    text = out.getvalue()
    assert text.count("<- SATURATED") == 2
    assert "WARNING: the load generator could not keep up, so there is no verdict." in text
    assert "\n  semaphore (today): it" in text and "\n  APF (apf_limiter): it" in text
    assert "Mice were" not in text and "The elephant got" not in text
    assert "The elephant was" not in text  # (the table's note on Retry-After is not a verdict)
    for run in runs.values():
        assert run.generator.cpu_share >= 0.75 or run.generator.lag_p99 >= 0.02


async def test_the_generator_process_reports_failures_and_its_own_load() -> None:
    # Nothing listens on the port: every request fails, and the run still ends on time.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    options = LoadOptions(
        duration=0.6, warmup=0.1, elephant_concurrency=2, mice=1, mouse_interval=0.1
    )
    seen: list[float] = []

    def progress(elapsed: float, results: dict[str, ClientResult]) -> None:
        seen.append(elapsed)

    run = await run_load(f"http://127.0.0.1:{port}", options, progress)
    assert list(run.results) == ["elephant", "mouse-1"]
    assert all(r.served == 0 and r.rejected == 0 and r.failed > 0 for r in run.results.values())
    assert run.generator.requests >= sum(r.failed for r in run.results.values())
    assert 0.6 <= run.generator.wall_seconds < 5 and run.generator.cpu_seconds > 0
    assert seen and seen == sorted(seen) and max(seen) <= options.duration


def test_demo_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--duration", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err


def test_percentile_is_nearest_rank() -> None:
    values = [0.4, 0.1, 0.3, 0.2]
    assert [percentile(values, q) for q in (0.25, 0.5, 0.99, 1.0)] == [0.1, 0.2, 0.4, 0.4]
