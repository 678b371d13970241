"""The demo's closing sentences follow the measured numbers (hand-made tables, no server)."""

from __future__ import annotations

from apf_limiter._demo.load import ELEPHANT, ClientResult, GeneratorReport, LoadRun
from apf_limiter._demo.verdict import closing, generator_line, generator_problems, lag_limit

SERVICE_TIME = 0.1
HEALTHY = GeneratorReport(
    cpu_seconds=0.7, wall_seconds=14.0, lag_p99=0.003, lag_max=0.008, requests=3000
)


def generator(*, cpu_seconds: float, lag_p99: float) -> GeneratorReport:
    """A 10 s run's generator report."""
    return GeneratorReport(cpu_seconds, 10.0, lag_p99, lag_max=2 * lag_p99, requests=1500)


def client(
    name: str,
    latencies: list[float],
    *,
    rejected: int = 0,
    retry_after: int | None = None,
    failed: int = 0,
) -> ClientResult:
    return ClientResult(
        name,
        "elephant" if name == ELEPHANT else "mouse",
        latencies=list(latencies),
        rejected=rejected,
        retry_after=rejected if retry_after is None else retry_after,
        failed=failed,
    )


def run(
    elephant: ClientResult, mice: list[ClientResult], generator: GeneratorReport = HEALTHY
) -> LoadRun:
    return LoadRun({ELEPHANT: elephant, **{mouse.name: mouse for mouse in mice}}, generator)


def two_mice(latency: float, count: int = 20, *, rejected: int = 0) -> list[ClientResult]:
    return [client(f"mouse-{n}", [latency] * count, rejected=rejected) for n in (1, 2)]


def semaphore_run(**elephant: int) -> LoadRun:
    """The usual baseline: mice wait ~0.9 s behind the elephant's backlog."""
    return run(client(ELEPHANT, [0.8] * 900, **elephant), two_mice(0.9, 12))


def test_zero_429s_is_not_called_backing_off() -> None:
    runs = {
        "semaphore": semaphore_run(),
        "apf": run(client(ELEPHANT, [0.4] * 870, rejected=0), two_mice(0.15, 30)),
    }
    text = closing(runs, SERVICE_TIME)
    assert "back off" not in text and "Retry-After" not in text
    assert "The elephant got no 429 behind APF" in text
    assert "it had 870 requests served (900 behind the semaphore)" in text


def test_429s_are_counted_with_their_retry_after() -> None:
    runs = {
        "semaphore": semaphore_run(),
        "apf": run(client(ELEPHANT, [0.5] * 880, rejected=2063), two_mice(0.15, 30)),
    }
    assert "told to back off behind APF: 2063 x 429 (each with Retry-After)" in closing(
        runs, SERVICE_TIME
    )
    partial = run(client(ELEPHANT, [0.5] * 880, rejected=10, retry_after=4), two_mice(0.15))
    text = closing({"semaphore": semaphore_run(), "apf": partial}, SERVICE_TIME)
    assert "10 x 429 (4 of them with Retry-After)" in text
    bare = run(client(ELEPHANT, [0.5] * 880, rejected=10, retry_after=0), two_mice(0.15))
    text = closing({"semaphore": semaphore_run(), "apf": bare}, SERVICE_TIME)
    assert "10 x 429 (none with Retry-After)" in text


def test_mice_served_faster_gives_the_measured_factor() -> None:
    runs = {
        "semaphore": semaphore_run(),
        "apf": run(client(ELEPHANT, [0.5] * 880, rejected=50), two_mice(0.2, 30)),
    }
    text = closing(runs, SERVICE_TIME)
    assert "Mice were served faster behind APF (4.5x lower p99)" in text
    assert "p99 900 ms -> 200 ms, p50 900 ms -> 200 ms, 24 -> 60 requests served" in text


def test_mice_not_better_with_apf_says_so() -> None:
    same = {
        "semaphore": semaphore_run(),
        "apf": run(client(ELEPHANT, [0.8] * 900), two_mice(0.85, 12)),
    }
    text = closing(same, SERVICE_TIME)
    assert "Mice were not served faster behind APF (about the same p99)" in text
    assert "x lower p99" not in text and "not overloaded" not in text
    worse = {
        "semaphore": semaphore_run(),
        "apf": run(client(ELEPHANT, [0.8] * 900), two_mice(1.8, 6)),
    }
    assert "Mice were served slower behind APF (2.0x higher p99)" in closing(worse, SERVICE_TIME)


def test_an_idle_server_is_named_as_the_reason_nothing_changed() -> None:
    light = run(client(ELEPHANT, [0.1] * 400), two_mice(0.1, 40))
    text = closing({"semaphore": light, "apf": light}, SERVICE_TIME)
    assert "about the same p99" in text
    assert "The semaphore kept them waiting little too: the server was not overloaded." in text


def test_rejected_mice_and_failures_are_reported() -> None:
    runs = {
        "semaphore": run(client(ELEPHANT, [0.8] * 900, failed=3), two_mice(0.9, 12)),
        "apf": run(client(ELEPHANT, [0.5] * 880, rejected=9), two_mice(0.2, 30, rejected=2)),
    }
    text = closing(runs, SERVICE_TIME)
    assert "Behind APF the mice were rejected too: 4 x 429." in text
    assert "3 requests failed" in text and "3 behind the semaphore, 0 behind APF" in text
    clean = closing({"semaphore": semaphore_run(), "apf": runs["apf"]}, SERVICE_TIME)
    assert "failed" not in clean


def test_totals_compare_what_was_served_in_all() -> None:
    about_the_same = {
        "semaphore": semaphore_run(),  # 900 + 24
        "apf": run(client(ELEPHANT, [0.5] * 860, rejected=9), two_mice(0.2, 30)),  # 920
    }
    assert (
        "In all, 920 requests were served behind APF and 924 behind the semaphore: about as "
        in (closing(about_the_same, SERVICE_TIME))
    )
    fewer = {
        "semaphore": semaphore_run(),
        "apf": run(client(ELEPHANT, [0.5] * 500, rejected=9), two_mice(0.2, 31)),  # 562
    }
    assert "562 requests were served behind APF and 924 behind the semaphore: 39% fewer." in (
        closing(fewer, SERVICE_TIME)
    )


def test_no_mice_served_means_no_comparison() -> None:
    runs = {
        "semaphore": semaphore_run(),
        "apf": run(client(ELEPHANT, [0.5] * 880), two_mice(0.2, 0)),
    }
    assert "Too few mice requests were served to compare the runs." in closing(runs, SERVICE_TIME)


def test_generator_problems_follow_its_cpu_and_lag() -> None:
    assert generator_problems(HEALTHY, SERVICE_TIME) == []
    busy = generator(cpu_seconds=10.5, lag_p99=0.004)
    assert generator_problems(busy, SERVICE_TIME) == ["it used 105% of a CPU core"]
    late = generator(cpu_seconds=1.0, lag_p99=0.045)
    assert generator_problems(late, SERVICE_TIME) == [
        "its event loop ran 45 ms late at p99 (limit 20 ms)"
    ]
    # The lag allowed shrinks with the service time, down to 5 ms.
    assert lag_limit(0.1) == 0.02 and lag_limit(0.05) == 0.01 and lag_limit(0.001) == 0.005
    assert generator_problems(HEALTHY, 0.01) == []
    assert "SATURATED" in generator_line(busy, SERVICE_TIME)
    assert "SATURATED" not in generator_line(HEALTHY, SERVICE_TIME)
    assert "5% of a CPU core (0.7 s CPU in 14.0 s)" in generator_line(HEALTHY, SERVICE_TIME)


def test_a_saturated_generator_gives_a_warning_and_no_verdict() -> None:
    busy = generator(cpu_seconds=10.5, lag_p99=0.05)
    # The numbers of the starved run: few 429s, mice only a little better.
    runs = {
        "semaphore": semaphore_run(),
        "apf": run(client(ELEPHANT, [0.5] * 540, rejected=31), two_mice(0.45, 20), busy),
    }
    text = closing(runs, SERVICE_TIME)
    assert text.startswith(
        "WARNING: the load generator could not keep up, so there is no verdict.\n"
        "  APF (apf_limiter): it used 105% of a CPU core, its event loop ran 50 ms late at p99 "
        "(limit 20 ms).\n"
    )
    assert "semaphore (today):" not in text
    assert "Mice were" not in text and "The elephant" not in text and "In all" not in text
