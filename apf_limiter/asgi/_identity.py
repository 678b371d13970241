"""From an ASGI scope to a :class:`~apf_limiter.RequestDigest`: identity, path, verb, client.

By default the identity comes from Starlette's ``AuthenticationMiddleware`` (``scope["user"]``
and ``scope["auth"]``), every request is a non-resource request (verb = lower-case method,
path = the route path), and the client address feeds ``ByClientIP``. Header values for
``ByHeader`` are read lazily, only if a schema asks for one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from apf_limiter._digest import ANONYMOUS_USER, UNAUTHENTICATED_GROUP, RequestDigest, fill_digest
from apf_limiter.asgi._types import Scope
from apf_limiter.gate import Identity, ResourceAttributes, WorkEstimate, identity_names

_ANONYMOUS_GROUPS: Final[tuple[str, ...]] = (UNAUTHENTICATED_GROUP,)
# The lower-case verbs of the common methods, as constants: ready-made, with cached hashes.
_METHODS: Final = {
    m: m.lower() for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
}
_RESOURCE_VERBS: Final = {"get": "get", "head": "get", "post": "create", "put": "update"}
_COLLECTION_VERBS: Final = {"get": "list", "head": "list", "delete": "deletecollection"}


def default_identify(scope: Scope) -> Identity | None:
    """The default ``identify`` hook: the user set by Starlette's ``AuthenticationMiddleware``.

    An authenticated ``scope["user"]`` gives its ``identity`` (or, when the user class does not
    implement it, its ``display_name``) as the user name, and the scopes of ``scope["auth"]``
    as groups. No user, or an unauthenticated one, is anonymous.

    Args:
        scope: The ASGI connection scope.

    Returns:
        The identity, or ``None`` for an anonymous request.
    """
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    scopes: Sequence[Any] = getattr(scope.get("auth"), "scopes", None) or ()
    return Identity(_user_name(user), tuple(str(s) for s in scopes))


def _user_name(user: object) -> str:
    for attribute in ("identity", "display_name"):
        try:
            value = getattr(user, attribute)
        except (AttributeError, NotImplementedError):
            continue
        if isinstance(value, str) and value:
            return value
    return str(user)


def route_path(scope: Scope) -> str:
    """The request path as the application routes it: ``scope["path"]`` without ``root_path``.

    Args:
        scope: An ``http`` or ``websocket`` scope.

    Returns:
        The path, starting with ``/``.
    """
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        rest = path[len(root) :]
        if not rest:
            return "/"
        if rest[0] == "/":
            return rest
    return path


def remove_dot_segments(path: str) -> str:
    """``path`` without ``.`` and ``..`` segments, as RFC 3986 (section 5.2.4) removes them.

    Classification matches ``nonResourceURLs`` against this, not the raw path: otherwise
    ``/healthz/../../api/x`` (or ``/healthz/%2e%2e/api/x``, which servers percent-decode into
    the same) matches an exempt ``/healthz/*`` rule, and an application with a catch-all route
    serves it without admission. ``..`` never climbs above the root.
    """
    if "/." not in path:
        return path  # the common case: a dot segment always follows a slash
    segments = path.split("/")
    rooted = not segments[0]  # ASGI paths start with "/"
    kept: list[str] = []
    for segment in segments[1:] if rooted else segments:
        if segment == "..":
            if kept:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    normalized = ("/" if rooted else "") + "/".join(kept)
    if segments[-1] in (".", "..") and kept:
        normalized += "/"  # "/a/b/.." is the directory "/a/"
    return normalized


class ScopeHeaders(Mapping[str, str]):
    """The request headers of a scope as a lower-case name to value mapping, decoded on demand.

    The first value of a repeated header wins. Building one costs nothing until a ``ByHeader``
    distinguisher looks a header up.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: Sequence[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def __getitem__(self, name: str) -> str:
        key = name.lower().encode("latin-1")
        for header, value in self._raw:
            if header == key:
                return value.decode("latin-1")
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        seen: set[bytes] = set()
        for header, _ in self._raw:
            if header not in seen:
                seen.add(header)
                yield header.decode("latin-1")

    def __len__(self) -> int:
        return len({header for header, _ in self._raw})

    def __repr__(self) -> str:
        return f"ScopeHeaders({dict(self)!r})"


def build_digest(
    scope: Scope,
    identity: Identity | None,
    resource: ResourceAttributes | None,
    estimate: WorkEstimate | None,
) -> RequestDigest:
    """Build the digest the limiter classifies a request by.

    Args:
        scope: An ``http`` or ``websocket`` scope.
        identity: Who sent it (``None``: anonymous).
        resource: The resource it acts on (``None``: a non-resource request).
        estimate: Its work estimate (``None``: 1 seat).

    Returns:
        The request digest.
    """
    if identity is None:  # the common case, inline: a call costs more than the rest
        user, groups = ANONYMOUS_USER, _ANONYMOUS_GROUPS
    else:
        user, groups = identity_names(identity)
    peer = scope.get("client")
    raw_method: str = scope.get("method", "GET") if scope["type"] == "http" else "GET"
    method = _METHODS.get(raw_method) or raw_method.lower()
    client = peer[0] if peer else ""
    headers = ScopeHeaders(scope.get("headers") or ())
    path: str = scope["path"]
    if "/." in path or scope.get("root_path"):  # else the path is the route path already
        path = remove_dot_segments(route_path(scope))
    # fill_digest, not RequestDigest(...): this runs for every request, and the constructor's
    # keyword arguments and checks (groups is a tuple already) cost more than the rest.
    if resource is None and estimate is None:  # the common case: no resource, 1 seat
        return fill_digest(
            RequestDigest, user, groups, method, path, "", "", "", "", "", client, headers,
            None, 0, 0.0,
        )  # fmt: skip
    if estimate is None:
        seats, final_seats, latency = None, 0, 0.0
    else:
        seats, final_seats, latency = (
            estimate.seats,
            estimate.final_seats,
            estimate.additional_latency,
        )
    if resource is None:
        verb = method
        api_group = kind = subresource = namespace = name = ""
    else:
        named_verb = resource.verb
        verb = (
            named_verb
            if named_verb is not None
            else _resource_verb(scope["type"], method, bool(resource.name))
        )
        api_group, kind = resource.api_group, resource.resource
        subresource, namespace, name = resource.subresource, resource.namespace, resource.name
    return fill_digest(
        RequestDigest,
        user,
        groups,
        verb,
        path,
        api_group,
        kind,
        subresource,
        namespace,
        name,
        client,
        headers,
        seats,
        final_seats,
        latency,
    )


def _resource_verb(kind: str, method: str, named: bool) -> str:
    if kind == "websocket":
        return "watch"
    if not named and method in _COLLECTION_VERBS:
        return _COLLECTION_VERBS[method]
    return _RESOURCE_VERBS.get(method, method)
