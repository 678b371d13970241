"""Jobs: guard units of work in asyncio services, described without HTTP words.

A :class:`Job` is a kind and a tenant (``Job("report", tenant="acme")``); a flow schema's
``jobs`` short form matches it (``jobs: {kinds: [report]}``, ``distinguisherMethod: {type:
ByTenant}``). :func:`guard` is the async context, :func:`guarded` the decorator, and
:func:`admit_with_retry` retries after each ``Retry-After`` up to a deadline, for producers
that must not drop work. See ``docs/engine.md``.
"""

from apf_limiter.jobs._guard import guard, guarded
from apf_limiter.jobs._job import Job
from apf_limiter.jobs._retry import admit_with_retry

__all__ = ["Job", "admit_with_retry", "guard", "guarded"]
