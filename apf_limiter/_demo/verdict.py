"""The demo's closing sentences, computed from the measured table, and the generator's check.

Nothing here is fixed text about the outcome: every claim is derived from the numbers, so a
run where the mice were not better off, or the elephant got no 429, says so. When the load
generator could not keep up (its CPU saturated, or its event loop running late) there is no
verdict at all: it sent less load than asked and its latencies include its own delays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from apf_limiter._demo.load import ELEPHANT, ClientResult, GeneratorReport, LoadRun
from apf_limiter._demo.report import RUN_TITLES, all_mice, ms, percentile

SATURATED_CPU_SHARE = 0.75
"""A generator using this much of a core is busy most of the time: callbacks wait their turn."""

_BETTER = 1.25  # a p99 ratio beyond this (or below its inverse) is a difference, not noise
_SAME_TOTAL = 0.10  # totals served within 10% are "about as many"


def lag_limit(service_time: float) -> float:
    """How late the generator's loop may run (p99) before its latencies are not the server's.

    A fifth of the service time, between 5 and 20 ms: 20 ms against the default 100 ms
    endpoint, small beside the latencies compared.
    """
    return max(0.005, min(0.02, service_time / 5))


def generator_problems(report: GeneratorReport, service_time: float) -> list[str]:
    """Why the generator could not keep up in a run; empty when it could."""
    problems = []
    if report.cpu_share >= SATURATED_CPU_SHARE:
        problems.append(f"it used {report.cpu_share:.0%} of a CPU core")
    if report.lag_p99 >= lag_limit(service_time):
        problems.append(
            f"its event loop ran {report.lag_p99 * 1000:.0f} ms late at p99 "
            f"(limit {lag_limit(service_time) * 1000:.0f} ms)"
        )
    return problems


def generator_line(report: GeneratorReport, service_time: float) -> str:
    """One line on how busy the generator was in a run, flagged when it was saturated."""
    line = (
        f"  load generator: {report.cpu_share:.0%} of a CPU core "
        f"({report.cpu_seconds:.1f} s CPU in {report.wall_seconds:.1f} s), event loop late "
        f"{report.lag_p99 * 1000:.0f} ms at p99, {report.lag_max * 1000:.0f} ms at most; "
        f"{report.requests} requests sent"
    )
    if generator_problems(report, service_time):
        line += "  <- SATURATED"
    return line + "\n"


def closing(runs: Mapping[str, LoadRun], service_time: float) -> str:
    """The closing sentences: a warning if the generator was saturated, else the verdict.

    Args:
        runs: The ``semaphore`` and ``apf`` runs.
        service_time: Seconds the endpoint takes.

    Returns:
        The sentences, one per line.
    """
    saturated = {
        mode: problems
        for mode, run in runs.items()
        if (problems := generator_problems(run.generator, service_time))
    }
    if saturated:
        where = "".join(
            f"  {RUN_TITLES.get(mode, mode)}: {', '.join(problems)}.\n"
            for mode, problems in saturated.items()
        )
        return (
            f"WARNING: the load generator could not keep up, so there is no verdict.\n{where}"
            "It sent less load than asked and its latencies include its own delays: the table "
            "shows the generator's limits, not the server's.\n"
            "Close other busy programs, or lower --elephant and --mice, and run again.\n"
        )
    before = runs["semaphore"].results
    after = runs["apf"].results
    sentences = [
        _mice(all_mice(before), all_mice(after), service_time),
        _elephant(before[ELEPHANT], after[ELEPHANT]),
        _totals(before, after),
    ]
    failed = {mode: sum(r.failed for r in run.results.values()) for mode, run in runs.items()}
    if any(failed.values()):
        sentences.append(
            f"{sum(failed.values())} requests failed (a transport error or another status "
            f"than 200 and 429): {failed.get('semaphore', 0)} behind the semaphore, "
            f"{failed.get('apf', 0)} behind APF."
        )
    return "".join(sentence + "\n" for sentence in sentences if sentence)


def _mice(before: ClientResult, after: ClientResult, service_time: float) -> str:
    p99_before = percentile(before.latencies, 0.99)
    p99_after = percentile(after.latencies, 0.99)
    if math.isnan(p99_before) or math.isnan(p99_after) or p99_after <= 0:
        return "Too few mice requests were served to compare the runs."
    numbers = (
        f"p99 {ms(p99_before)} -> {ms(p99_after)}, "
        f"p50 {ms(percentile(before.latencies, 0.5))} -> "
        f"{ms(percentile(after.latencies, 0.5))}, "
        f"{before.served} -> {after.served} requests served"
    )
    ratio = p99_before / p99_after
    if ratio >= _BETTER:
        sentence = f"Mice were served faster behind APF ({ratio:.1f}x lower p99): {numbers}."
    elif ratio <= 1 / _BETTER:
        sentence = f"Mice were served slower behind APF ({1 / ratio:.1f}x higher p99): {numbers}."
    else:
        sentence = f"Mice were not served faster behind APF (about the same p99): {numbers}."
        if p99_before < 1.5 * service_time:
            sentence += (
                " The semaphore kept them waiting little too: the server was not overloaded."
            )
    if after.rejected:
        sentence += f" Behind APF the mice were rejected too: {after.rejected} x 429."
    return sentence


def _elephant(before: ClientResult, after: ClientResult) -> str:
    served = f"{after.served} requests served ({before.served} behind the semaphore)"
    if after.rejected == 0:
        return (
            "The elephant got no 429 behind APF (its requests all fit in its queues); "
            f"it had {served}."
        )
    if after.retry_after == after.rejected:
        retry = "each with Retry-After"
    elif after.retry_after == 0:
        retry = "none with Retry-After"
    else:
        retry = f"{after.retry_after} of them with Retry-After"
    return (
        f"The elephant was told to back off behind APF: {after.rejected} x 429 ({retry}); "
        f"it had {served}."
    )


def _totals(before: Mapping[str, ClientResult], after: Mapping[str, ClientResult]) -> str:
    total_before = sum(result.served for result in before.values())
    total_after = sum(result.served for result in after.values())
    if total_before == 0:
        return ""
    change = total_after / total_before - 1
    if abs(change) <= _SAME_TOTAL:
        how = "about as many"
    else:
        how = f"{abs(change):.0%} {'more' if change > 0 else 'fewer'}"
    return (
        f"In all, {total_after} requests were served behind APF and {total_before} behind "
        f"the semaphore: {how}."
    )
