

async def test_guarded_refuses_an_async_generator_function_by_name() -> None:
    # Before: "decorates async def functions" for a function declared async def.
    limiter = Limiter(jobs_config(), clock=FakeClock())

    async def pages() -> AsyncIterator[int]:
        yield 1

    with pytest.raises(TypeError, match="async generator function .* async with guard"):
        guarded(limiter, "report")(pages)  # type: ignore[arg-type]


async def test_a_nested_guard_at_a_full_level_waits_out_its_wait_limit_then_lets_go() -> None:
    # A job that guards another job at its own level, all of whose seats it holds, cannot be
    # admitted until it lets go: the inner guard is rejected at its wait limit (a bounded
    # wait, not a deadlock), and every seat comes back.
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=1, wait_limit=5), clock=clock)

    async def outer() -> None:
        async with guard(limiter, Job("report")):
            async with guard(limiter, Job("export")):
                pass

    task = asyncio.create_task(outer())
    await clock.run_until_idle()
    error = task.exception()
    assert isinstance(error, Rejected) and error.reason == "time-out"
    level = limiter.statistics().priority_levels["jobs"]
    assert (level.executing_requests, level.waiting_requests, level.timed_out) == (0, 0, 1)


async def test_real_time_stress_of_short_jobs_with_random_cancels() -> None:
    """Real clock, real tasks: 600 short jobs on 2 seats, about a third cancelled at random."""
    pick = random.Random(7)
    tally = Tally()
    limiter = Limiter(
        jobs_config(limit=2, queues=2, queue_length_limit=50, wait_limit=0.5), observer=tally
    )
    gate = Gate(limiter, slow_clients=SlowClients(request_timeout=0.2))
    tasks: list[asyncio.Task[None]] = []
    outcomes: Counter[str] = Counter()

    async def work() -> None:
        await asyncio.sleep(pick.choice((0, 0, 0.001, 0.002)))

    async def one(i: int) -> None:
        entry = ENTRIES[i % len(ENTRIES)]
        job = Job("report", tenant=f"t{i % 5}")
        try:
            async with asyncio.timeout(pick.choice((None, 0.01, 0.05))):
                if entry == "gate":
                    await run_through_gate(gate, job, work)
                elif entry == "admit_with_retry":
                    admission = await admit_with_retry(limiter, job, retry_for=0.5)
                    try:
                        await work()
                    finally:
                        admission.release()
                else:
                    async with guard(limiter, job, retry_for=0.5 if entry == "retry" else None):
                        await work()
            outcomes["ran"] += 1
        except (Rejected, TimeoutError, asyncio.CancelledError) as error:
            outcomes[type(error).__name__] += 1

    started = asyncio.get_running_loop().time()
    for i in range(600):
        tasks.append(asyncio.create_task(one(i)))
        if i % 3 == 0:
            victim = tasks[pick.randrange(len(tasks))]
            asyncio.get_running_loop().call_later(pick.random() * 0.01, victim.cancel)
        if i % 50 == 0:
            await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    elapsed = asyncio.get_running_loop().time() - started
    check_everything_came_back(limiter, tally, [])
    assert outcomes["ran"] > 100 and outcomes["CancelledError"] > 50, outcomes
    assert elapsed < 5, elapsed
    # The limiter still serves: a job runs at once.
    async with guard(limiter, Job("report")) as admission:
        assert admission.queue_wait == 0.0
