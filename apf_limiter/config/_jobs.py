"""The ``jobs`` short form of a flow schema: units of work described without HTTP words.

A job is a resource request in Kubernetes' terms: its *kind* is the resource, its *tenant* the
namespace, in the API group :data:`JOB_API_GROUP` with the verb :data:`JOB_VERB` (submitting a
job creates one). So ``jobs: {kinds: [report, export]}`` in a flow schema stands for the rule

.. code-block:: yaml

    - subjects: [{kind: Group, group: {name: "*"}}]
      resourceRules:
        - verbs: [create]
          apiGroups: [jobs]
          resources: [report, export]
          namespaces: ["*"]
          clusterScope: true       # jobs without a tenant too

and ``tenants: [acme, globex]`` narrows ``namespaces`` to those tenants (and drops
``clusterScope``). The rule is appended to the schema's ``rules`` when it is built: the model,
``dump_config`` and ``apf-limiter show`` hold only ordinary Kubernetes rules. The distinguisher
``ByTenant`` is ``ByNamespace`` under its jobs name. :class:`apf_limiter.jobs.Job` builds the
matching :class:`~apf_limiter.RequestDigest`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from apf_limiter.config._fields import Reader
from apf_limiter.config._model import PolicyRulesWithSubjects, ResourcePolicyRule, Subject
from apf_limiter.config._names import dns1123_label_errors
from apf_limiter.config._problems import Problems, index, join

JOB_API_GROUP: Final = "jobs"
"""The API group of every job (a resource request's ``api_group``)."""
JOB_VERB: Final = "create"
"""The verb of every job: submitting a job creates one (a Kubernetes resource verb)."""
BY_TENANT: Final = "ByTenant"
"""The jobs name of the ``ByNamespace`` distinguisher: one flow per tenant."""
MAX_KIND_LENGTH: Final = 253

_JOBS_KEYS = ("kinds", "tenants")
_TENANT_INTRO = "each member of this list must be '*' or a DNS-1123 label; "


@dataclass(slots=True)
class JobsDraft:
    """Draft of a flow schema's ``jobs`` block.

    Attributes:
        kinds: ``jobs.kinds`` as written.
        tenants: ``jobs.tenants`` as written (empty: every tenant, and jobs without one).
    """

    kinds: list[str] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)


def job_kind_error(kind: object) -> str | None:
    """Return what is wrong with a job kind, or ``None`` if it is one.

    A kind is matched exactly against a rule's resources, so it is one word: not empty, at
    most 253 characters, without ``/`` (a subresource), ``*`` (the wildcard) or white-space.
    """
    if not isinstance(kind, str):
        return f"must be a string, not {type(kind).__name__}"
    if not kind:
        return "must not be empty"
    if len(kind) > MAX_KIND_LENGTH:
        return f"must be no more than {MAX_KIND_LENGTH} characters"
    if "/" in kind or "*" in kind or any(c.isspace() for c in kind):
        return "must not contain '/', '*' or white-space"
    return None


def parse_jobs(spec: Reader) -> JobsDraft | None:
    """Parse ``jobs`` of a flow schema's spec; ``None`` when absent (or not a mapping)."""
    jobs = spec.mapping("jobs", _JOBS_KEYS)
    if jobs is None:
        return None
    return JobsDraft(kinds=jobs.strings("kinds"), tenants=jobs.strings("tenants"))


def validate_jobs(jobs: JobsDraft, path: str, problems: Problems) -> None:
    """Check a ``jobs`` block, with the field paths the user wrote."""
    kinds_path = join(path, "kinds")
    if not jobs.kinds:
        problems.required(kinds_path, "must list at least one kind of job (or '*')")
    elif "*" in jobs.kinds:
        if len(jobs.kinds) > 1:
            problems.invalid(kinds_path, jobs.kinds, "if '*' is present, must not list others")
    else:
        for i, kind in enumerate(jobs.kinds):
            message = job_kind_error(kind)
            if message is not None:
                problems.invalid(index(kinds_path, i), kind, message)
    tenants_path = join(path, "tenants")
    if "*" in jobs.tenants:
        if len(jobs.tenants) > 1:
            problems.invalid(tenants_path, jobs.tenants, "if '*' is present, must not list others")
        return
    for i, tenant in enumerate(jobs.tenants):
        for message in dns1123_label_errors(tenant):
            problems.invalid(index(tenants_path, i), tenant, _TENANT_INTRO + message)


def jobs_rule(jobs: JobsDraft) -> PolicyRulesWithSubjects:
    """The Kubernetes rule a validated ``jobs`` block stands for (see the module docs)."""
    every_tenant = not jobs.tenants or jobs.tenants == ["*"]
    return PolicyRulesWithSubjects(
        subjects=(Subject(kind="Group", name="*"),),
        resource_rules=(
            ResourcePolicyRule(
                verbs=(JOB_VERB,),
                api_groups=(JOB_API_GROUP,),
                resources=tuple(jobs.kinds),
                cluster_scope=every_tenant,
                namespaces=("*",) if every_tenant else tuple(jobs.tenants),
            ),
        ),
    )
