"""Admission with retries: wait after each ``Retry-After`` and try again, up to a deadline.

For producers that must not drop work. Every wait is on the limiter's own clock (its
``call_later``), so :class:`apf_limiter.testing.FakeClock` drives it in fake time, and under
asyncio and trio alike.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable

import anyio

from apf_limiter._clock import Clock
from apf_limiter._digest import RequestDigest
from apf_limiter._errors import Rejected
from apf_limiter.jobs._job import Job, digest_of
from apf_limiter.limiter import Admission, Limiter, check_wait_limit

#: The longest pause between two tries by default: Kubernetes' largest ``Retry-After``.
DEFAULT_MAX_DELAY = 32.0
#: By default each pause is ``Retry-After`` stretched by up to half again, at random.
DEFAULT_JITTER = 0.5


def check_retry_for(retry_for: float) -> None:
    """Refuse a retry budget that is not a finite, non-negative number of seconds.

    Raises:
        TypeError: If ``retry_for`` is not a number.
        ValueError: If it is negative or not finite.
    """
    if isinstance(retry_for, bool) or not isinstance(retry_for, int | float):
        raise TypeError(f"retry_for must be a number of seconds, got {retry_for!r}")
    if not (math.isfinite(retry_for) and retry_for >= 0):
        raise ValueError(f"retry_for must be a finite, non-negative number, got {retry_for!r}")


async def admit_with_retry(
    limiter: Limiter,
    job: Job | RequestDigest,
    *,
    retry_for: float,
    wait_limit: float | None = None,
    max_delay: float = DEFAULT_MAX_DELAY,
    jitter: float = DEFAULT_JITTER,
    random: Callable[[], float] | None = None,
) -> Admission:
    """Admit a job, retrying after each rejection's ``Retry-After`` until ``retry_for`` passes.

    Each try queues as :meth:`Limiter.admit` does, its queue wait cut to the time left. After a
    rejection it pauses for the rejection's ``retry_after`` (at most ``max_delay``), stretched
    by a random factor between 1 and ``1 + jitter`` so that producers rejected together do not
    come back together, then tries again. When the next try would come after the deadline,
    the last rejection is raised at once (with a note of the tries made): nothing is held
    then. Cancelling the calling task while it queues or pauses leaves nothing behind either.

    Args:
        limiter: The limiter to admit through (its clock times the pauses).
        job: The job, or any request digest.
        retry_for: Seconds from now within which the job must be admitted.
        wait_limit: The longest queue wait of one try (default: the configuration's
            ``requestWaitLimit``), cut to the time left.
        max_delay: The longest pause between two tries, before jitter.
        jitter: How far a pause may be stretched, as a fraction of it (0 for none).
        random: Returns a number in ``[0, 1)`` for the jitter (default :func:`random.random`);
            give a seeded one for reproducible tests.

    Returns:
        The admission, holding its seats: release it (:meth:`Admission.release`), or use
        :func:`guard` with ``retry_for`` to have ``async with`` do it.

    Raises:
        Rejected: The last rejection, when the deadline came first.
        TypeError, ValueError: If an argument is out of range (``job`` neither a
            :class:`Job` nor a request digest: ``TypeError``).
    """
    check_retry_for(retry_for)
    _check_delay("max_delay", max_delay, positive=True)
    _check_delay("jitter", jitter, positive=False)
    if wait_limit is not None:
        check_wait_limit(wait_limit)
    digest = digest_of(job)
    longest = limiter.config.request_wait_limit if wait_limit is None else wait_limit
    pick = _random.random if random is None else random
    clock = limiter.clock
    deadline = clock.now() + retry_for
    tries = 0
    while True:
        tries += 1
        left = max(0.0, deadline - clock.now())
        admission = limiter.admit(digest, wait_limit=min(longest, left))
        try:
            if not admission.start():
                await admission.wait()
            return admission
        except Rejected as rejected:
            last = rejected
        pause = min(float(last.retry_after), max_delay) * (1.0 + jitter * pick())
        if clock.now() + pause > deadline:
            last.add_note(
                f"apf_limiter: {tries} {'try' if tries == 1 else 'tries'} in {retry_for:g}s; "
                f"the next would have come {pause:.3g}s later, after the deadline"
            )
            raise last
        await sleep_on(clock, pause)


async def sleep_on(clock: Clock, seconds: float) -> None:
    """Sleep ``seconds`` on ``clock`` (real or fake), in asyncio or trio; cancellable."""
    woken = anyio.Event()
    timer = clock.call_later(seconds, woken.set)
    try:
        await woken.wait()
    finally:
        timer.cancel()


def _check_delay(name: str, value: float, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be a finite, {bound} number, got {value!r}")
