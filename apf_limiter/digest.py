"""The :class:`RequestDigest`: what classification and work estimation need of a request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["RequestDigest", "ANONYMOUS_USER", "UNAUTHENTICATED_GROUP", "AUTHENTICATED_GROUP"]

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
AUTHENTICATED_GROUP = "system:authenticated"


@dataclass(frozen=True, slots=True)
class RequestDigest:
    """A request, as seen by classification.

    A non-resource request (the default, and every plain HTTP request) is matched by
    ``nonResourceRules`` on ``verb`` and ``path``. Setting ``resource`` makes it a resource
    request, matched by ``resourceRules`` on ``verb``, ``api_group``, ``resource``,
    ``subresource`` and ``namespace``.

    Attributes:
        user: The user name (``system:anonymous`` when not authenticated).
        groups: The user's groups.
        verb: Lower-case verb: the HTTP method for non-resource requests, or a Kubernetes
            verb (get, list, create, ...) for resource requests.
        path: The request path (non-resource requests).
        api_group: API group of a resource request (``""`` is the core group).
        resource: Resource of a resource request; non-empty makes this a resource request.
        subresource: Subresource of a resource request.
        namespace: Namespace of a resource request (``""`` for cluster-scoped requests).
        name: Object name of a resource request.
        client: Client address, used by the ``ByClientIP`` distinguisher.
        headers: Lower-case header names to values, used by the ``ByHeader`` distinguisher.
        seats: Seats the request occupies while executing (initial seats); ``None`` means 1.
        final_seats: Seats held after the request finishes, for ``additional_latency``.
        additional_latency: Seconds the final seats stay held after the request finishes.
    """

    user: str = ANONYMOUS_USER
    groups: tuple[str, ...] = ()
    verb: str = "get"
    path: str = "/"
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    client: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    seats: int | None = None
    final_seats: int = 0
    additional_latency: float = 0.0

    @property
    def is_resource_request(self) -> bool:
        """Whether this is a resource request (``resource`` is set)."""
        return bool(self.resource)
