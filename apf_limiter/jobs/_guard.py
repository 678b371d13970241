"""Guarding async code: :func:`guard` (an async context) and :func:`guarded` (a decorator)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from apf_limiter._digest import RequestDigest
from apf_limiter.jobs._job import Job, digest_of
from apf_limiter.jobs._retry import admit_with_retry, check_retry_for
from apf_limiter.limiter import Admission, Limiter, check_wait_limit

_P = ParamSpec("_P")
_T = TypeVar("_T")


class _Guard(AbstractAsyncContextManager[Admission]):
    """One guarded block: admits on entry (retrying, if asked), releases on exit."""

    __slots__ = ("_limiter", "_digest", "_retry_for", "_wait_limit", "_admission")

    def __init__(
        self,
        limiter: Limiter,
        digest: RequestDigest,
        retry_for: float | None,
        wait_limit: float | None,
    ) -> None:
        self._limiter = limiter
        self._digest = digest
        self._retry_for = retry_for
        self._wait_limit = wait_limit
        self._admission: Admission | None = None

    async def __aenter__(self) -> Admission:
        if self._admission is not None:
            raise RuntimeError("a guard is entered once; call guard() again for another job")
        if self._retry_for is None:
            admission = self._limiter.admit(self._digest, wait_limit=self._wait_limit)
            self._admission = admission
            return await admission.__aenter__()
        self._admission = await admit_with_retry(
            self._limiter, self._digest, retry_for=self._retry_for, wait_limit=self._wait_limit
        )
        return self._admission

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Whatever ended the body (return, exception, cancellation), the seats go back.
        if self._admission is not None:
            self._admission.release()


def guard(
    limiter: Limiter,
    job: Job | RequestDigest,
    *,
    retry_for: float | None = None,
    wait_limit: float | None = None,
) -> AbstractAsyncContextManager[Admission]:
    """Guard a block of async code, as ``async with`` around an admission.

    Entering admits the job (waiting in its queue if it must) and leaving gives its seats
    back, however the block ends: return, exception or cancellation. A task cancelled while
    it waits leaves its queue.

    Args:
        limiter: The limiter to admit through.
        job: The job, or any request digest.
        retry_for: ``None`` (the default) raises the first rejection; a number of seconds
            retries after each ``Retry-After`` until then (see :func:`admit_with_retry`).
        wait_limit: The longest queue wait of one try (default: ``requestWaitLimit``).

    Returns:
        An async context manager whose value is the :class:`~apf_limiter.Admission`.

    Raises:
        Rejected: On entering, when the job may not run (with ``retry_for``: the last
            rejection, once the deadline came).
        TypeError: If ``limiter`` is not a :class:`~apf_limiter.Limiter`, or ``job`` neither
            a :class:`Job` nor a request digest.
        TypeError, ValueError: If ``retry_for`` or ``wait_limit`` is out of range.
    """
    _check_options(limiter, retry_for, wait_limit)
    return _Guard(limiter, digest_of(job), retry_for, wait_limit)


def _check_options(limiter: Limiter, retry_for: float | None, wait_limit: float | None) -> None:
    """Refuse a wrong limiter, retry budget or wait limit when the guard is made, not used."""
    if not isinstance(limiter, Limiter):
        raise TypeError(f"limiter must be a Limiter, got {limiter!r}")
    if retry_for is not None:
        check_retry_for(retry_for)
    if wait_limit is not None:
        check_wait_limit(wait_limit)


def guarded(
    limiter: Limiter,
    kind: str,
    *,
    tenant: str | Callable[..., str] = "",
    seats: int = 1,
    retry_for: float | None = None,
    wait_limit: float | None = None,
) -> Callable[[Callable[_P, Awaitable[_T]]], Callable[_P, Coroutine[Any, Any, _T]]]:
    """Guard every call of an async function as a job of ``kind``.

    .. code-block:: python

        @guarded(limiter, "report", tenant=lambda tenant, *_: tenant, retry_for=30)
        async def build_report(tenant: str, month: str) -> bytes: ...

    Args:
        limiter: The limiter to admit through.
        kind: The jobs' kind.
        tenant: The jobs' tenant, or a function of the call's arguments that returns it
            (called with the same positional and keyword arguments as the function).
        seats: Seats each call occupies while it runs.
        retry_for: As for :func:`guard`: ``None`` raises the first rejection.
        wait_limit: As for :func:`guard`.

    Returns:
        A decorator of ``async def`` functions; the decorated function raises
        :class:`~apf_limiter.Rejected` when a call is not admitted.

    Raises:
        TypeError: If what is decorated is not an ``async def`` function (an async
            generator function neither), or ``tenant`` neither a string nor callable.
        TypeError, ValueError: If ``kind``, ``seats``, ``retry_for`` or ``wait_limit`` is
            invalid (all checked when decorating).
    """
    if not isinstance(tenant, str) and not callable(tenant):
        raise TypeError(f"tenant must be a string or a function returning one, got {tenant!r}")
    fixed = Job(kind, tenant if isinstance(tenant, str) else "", seats=seats)
    _check_options(limiter, retry_for, wait_limit)
    tenant_of = None if isinstance(tenant, str) else tenant

    def decorate(function: Callable[_P, Awaitable[_T]]) -> Callable[_P, Coroutine[Any, Any, _T]]:
        if inspect.isasyncgenfunction(function):
            # Its body runs as it is iterated, after the call returned: no guard could hold
            # seats for that. Guard each step inside it with ``async with guard(...)``.
            raise TypeError(
                f"guarded() decorates coroutine functions, not the async generator function "
                f"{function!r}: use `async with guard(...)` inside it"
            )
        if not inspect.iscoroutinefunction(function):
            raise TypeError(f"guarded() decorates async def functions, not {function!r}")

        @functools.wraps(function)
        async def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
            job = fixed if tenant_of is None else Job(kind, tenant_of(*args, **kwargs), seats=seats)
            async with _Guard(limiter, job.digest, retry_for, wait_limit):
                return await function(*args, **kwargs)

        return run

    return decorate
