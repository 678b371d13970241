"""guard() and guarded(): a job admitted on entry, its seats back however the block ends."""

from __future__ import annotations

import asyncio

import pytest

from apf_limiter import Limiter, Rejected
from apf_limiter.jobs import Job, guard, guarded
from apf_limiter.testing import FakeClock
from tests.jobs.configs import jobs_config

pytestmark = pytest.mark.timeout(30)


def _level(limiter: Limiter) -> tuple[int, int]:
    level = limiter.statistics().priority_levels["jobs"]
    return level.executing_requests, level.waiting_requests


def test_a_job_is_a_resource_request_without_http_words() -> None:
    job = Job("report", tenant="acme", seats=2)
    digest = job.digest
    assert (digest.verb, digest.api_group, digest.resource, digest.namespace) == (
        "create",
        "jobs",
        "report",
        "acme",
    )
    assert (digest.user, digest.seats) == ("system:anonymous", 2)
    assert Job("report", user="bob").digest.user == "bob"
    assert job == Job("report", tenant="acme", seats=2)
    assert "digest" not in repr(job)


@pytest.mark.parametrize("kind", ["", "report/logs", "*", "big report", "x" * 254])
def test_a_kind_is_one_word(kind: str) -> None:
    with pytest.raises(ValueError, match="Job kind"):
        Job(kind)


def test_a_job_checks_its_fields() -> None:
    with pytest.raises(TypeError, match="tenant must be a string"):
        Job("report", tenant=7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seats must be an integer"):
        Job("report", seats=0)
    with pytest.raises(ValueError, match="additional_latency"):
        Job("report", additional_latency=-1.0)


async def test_guard_admits_and_releases_on_return_and_on_exception() -> None:
    limiter = Limiter(jobs_config(), clock=FakeClock())
    async with guard(limiter, Job("report", tenant="acme")) as admission:
        assert (admission.flow_schema, admission.priority_level) == ("jobs", "jobs")
        assert _level(limiter) == (1, 0)
    assert _level(limiter) == (0, 0)
    with pytest.raises(KeyError):
        async with guard(limiter, Job("report", tenant="acme")):
            raise KeyError("boom")
    assert _level(limiter) == (0, 0)


async def test_a_guard_is_entered_once() -> None:
    limiter = Limiter(jobs_config(), clock=FakeClock())
    block = guard(limiter, Job("report"))
    async with block:
        pass
    with pytest.raises(RuntimeError, match="entered once"):
        async with block:
            pass


async def test_cancellation_in_the_body_or_in_the_queue_releases_everything() -> None:
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=1), clock=clock)
    entered = asyncio.Event()

    async def run(tenant: str) -> None:
        async with guard(limiter, Job("report", tenant=tenant)):
            entered.set()
            await clock.sleep(100)

    holder = asyncio.create_task(run("acme"))
    await entered.wait()
    queued = asyncio.create_task(run("globex"))
    await clock.advance(1)
    assert _level(limiter) == (1, 1)
    queued.cancel()  # waiting in its queue: it leaves the queue
    await clock.advance(0)
    assert _level(limiter) == (1, 0)
    holder.cancel()  # running: its seat goes back
    await clock.advance(0)
    assert _level(limiter) == (0, 0)
    for task in (holder, queued):
        with pytest.raises(asyncio.CancelledError):
            await task
    stats = limiter.statistics().priority_levels["jobs"]
    assert (stats.dispatched, stats.cancelled) == (1, 1)


async def test_guard_raises_the_rejection_without_retry_for() -> None:
    limiter = Limiter(jobs_config(limit=1, reject=True), clock=FakeClock())
    async with guard(limiter, Job("report")):
        with pytest.raises(Rejected) as rejected:
            async with guard(limiter, Job("export")):
                pass
    assert rejected.value.reason == "concurrency-limit"
    assert _level(limiter) == (0, 0)


async def test_guarded_takes_the_tenant_from_the_call() -> None:
    config = jobs_config()
    config["flowSchemas"][0]["jobs"]["tenants"] = ["acme"]  # globex's jobs go to catch-all
    limiter = Limiter(config, clock=FakeClock())
    seen: list[tuple[str, str]] = []

    @guarded(limiter, "report", tenant=lambda tenant, month: tenant, seats=1)
    async def build_report(tenant: str, month: str) -> str:
        """Build one month's report."""
        level = limiter.statistics().priority_levels["jobs"]
        seen.append((tenant, f"{month}:{level.executing_requests}"))
        return f"{tenant}-{month}"

    assert await build_report("acme", month="may") == "acme-may"
    assert await build_report("globex", "june") == "globex-june"
    assert seen == [("acme", "may:1"), ("globex", "june:0")]
    assert build_report.__name__ == "build_report"
    assert build_report.__doc__ == "Build one month's report."
    assert _level(limiter) == (0, 0)


async def test_guarded_releases_on_exception_and_refuses_plain_functions() -> None:
    limiter = Limiter(jobs_config(), clock=FakeClock())

    @guarded(limiter, "report")
    async def fails() -> None:
        raise ValueError("bad month")

    with pytest.raises(ValueError, match="bad month"):
        await fails()
    assert _level(limiter) == (0, 0)
    with pytest.raises(TypeError, match="async def"):
        guarded(limiter, "report")(lambda: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="Job kind"):
        guarded(limiter, "report/logs")
