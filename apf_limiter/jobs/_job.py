"""A unit of work described without HTTP words: :class:`Job`, and its request digest."""

from __future__ import annotations

from dataclasses import dataclass, field

from apf_limiter._digest import ANONYMOUS_USER, RequestDigest
from apf_limiter.config._jobs import JOB_API_GROUP, JOB_VERB, job_kind_error


@dataclass(frozen=True, slots=True)
class Job:
    """One unit of work to guard, by its kind and its tenant.

    Classification sees it as a Kubernetes resource request: the kind is the resource, the
    tenant the namespace, in the API group ``jobs`` with the verb ``create``. A flow schema's
    ``jobs: {kinds: [...], tenants: [...]}`` short form matches it, and the ``ByTenant``
    distinguisher (``ByNamespace``) gives each tenant its own flow. See ``docs/engine.md``.

    Attributes:
        kind: What the job is (``"report"``, ``"export"``): one word, matched exactly.
        tenant: Whose job it is: its flow under ``ByTenant``; ``""`` for none (matched only by
            a schema that lists no ``tenants``).
        user: Who submits it (``ByUser``, ``User`` subjects); ``""`` is ``system:anonymous``.
        seats: Seats the job occupies while it runs (at least 1).
        final_seats: Seats it holds for ``additional_latency`` seconds after it ends.
        additional_latency: Seconds its seats stay held after it ends.
        digest: The :class:`~apf_limiter.RequestDigest` that classification sees, built (and
            checked) once, when the job is.
    """

    kind: str
    tenant: str = ""
    user: str = ""
    seats: int = 1
    final_seats: int = 0
    additional_latency: float = 0.0
    digest: RequestDigest = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check the fields and build the digest.

        Raises:
            TypeError: If ``tenant`` or ``user`` is not a string.
            ValueError: If ``kind`` is not one word (empty, too long, or holding ``/``, ``*``
                or white-space), or the seats or latency are not a valid work estimate.
        """
        problem = job_kind_error(self.kind)
        if problem is not None:
            raise ValueError(f"Job kind {self.kind!r} {problem}")
        for name, value in (("tenant", self.tenant), ("user", self.user)):
            if not isinstance(value, str):
                raise TypeError(f"Job {name} must be a string, got {value!r}")
        digest = RequestDigest(
            user=self.user or ANONYMOUS_USER,
            verb=JOB_VERB,
            api_group=JOB_API_GROUP,
            resource=self.kind,
            namespace=self.tenant,
            seats=self.seats,
            final_seats=self.final_seats,
            additional_latency=self.additional_latency,
        )
        object.__setattr__(self, "digest", digest)


def digest_of(job: Job | RequestDigest) -> RequestDigest:
    """The request digest of ``job`` (a :class:`Job`, or any request digest).

    Raises:
        TypeError: If ``job`` is neither (a kind given as a string, say), at once rather than
            as an ``AttributeError`` from classification.
    """
    if isinstance(job, Job):
        return job.digest
    if isinstance(job, RequestDigest):
        return job
    raise TypeError(f"job must be a Job or a RequestDigest, got {job!r}")
