"""The :class:`RequestDigest`: what classification and work estimation need of a request."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
AUTHENTICATED_GROUP = "system:authenticated"


_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def _no_headers() -> Mapping[str, str]:
    return _NO_HEADERS


@dataclass(frozen=True, slots=True, init=False)
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
        final_seats: Seats for work the request causes later: it holds the wider of
            ``seats`` and ``final_seats`` until ``additional_latency`` has passed after it
            finishes.
        additional_latency: Seconds the request's seats stay held after it finishes.
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
    headers: Mapping[str, str] = field(default_factory=_no_headers, hash=False, compare=False)
    seats: int | None = None
    final_seats: int = 0
    additional_latency: float = 0.0

    def __new__(
        cls,
        user: str = ANONYMOUS_USER,
        groups: tuple[str, ...] = (),
        verb: str = "get",
        path: str = "/",
        api_group: str = "",
        resource: str = "",
        subresource: str = "",
        namespace: str = "",
        name: str = "",
        client: str = "",
        headers: Mapping[str, str] = _NO_HEADERS,
        seats: int | None = None,
        final_seats: int = 0,
        additional_latency: float = 0.0,
    ) -> RequestDigest:
        """Create a digest; the arguments are the fields, in order (see the class docs).

        Raises:
            TypeError: If ``groups`` is not a sequence of strings.
            ValueError: If ``seats`` is not an integer of at least 1, ``final_seats`` not a
                non-negative integer, or ``additional_latency`` not a finite, non-negative
                number.
        """
        if type(groups) is not tuple:
            groups = _as_groups(groups)
        # HTTP spells these in any case, Kubernetes rules in lower case: "GET" silently missed
        # a `verbs: [get]` rule and fell to catch-all, "X-Tenant" gave an empty distinguisher.
        if type(verb) is not str or not (verb.isalpha() and verb.islower()):
            verb = _normal_verb(verb)
        if type(path) is not str or path[:1] != "/":
            _check_path(path)
        if headers is not _NO_HEADERS:
            headers = _lower_case_names(headers)
        if (
            seats is not None
            or final_seats
            or additional_latency
            or type(final_seats) is not int
            or type(additional_latency) is not float
        ):
            check_estimate(seats, final_seats, additional_latency)
        return fill_digest(
            cls,
            user,
            groups,
            verb,
            path,
            api_group,
            resource,
            subresource,
            namespace,
            name,
            client,
            headers,
            seats,
            final_seats,
            additional_latency,
        )

    @property
    def is_resource_request(self) -> bool:
        """Whether this is a resource request (``resource`` is set)."""
        return bool(self.resource)

    def __repr__(self) -> str:
        """The fields, with header names but no header values (tokens, cookies).

        Only the values of headers that a ``ByHeader`` distinguisher of a configuration in
        this process uses are shown: they are what the request is classified by.
        """
        shown = [f"{name}={getattr(self, name)!r}" for name in _REPR_FIELDS]
        headers = ", ".join(
            f"{name!r}: {self.headers[name]!r}" if name in _SHOWN_HEADERS else f"{name!r}: ..."
            for name in self.headers
        )
        shown.insert(_REPR_FIELDS.index("client") + 1, f"headers={{{headers}}}")
        return f"{type(self).__name__}({', '.join(shown)})"


_REPR_FIELDS = tuple(name for name in RequestDigest.__slots__ if name != "headers")

#: Header names whose values ``repr(RequestDigest)`` shows: the ``ByHeader`` distinguishers'.
_SHOWN_HEADERS: set[str] = set()


def show_header_values(name: str) -> None:
    """Let ``repr(RequestDigest)`` show the values of header ``name`` (a ``ByHeader`` one)."""
    _SHOWN_HEADERS.add(name.lower())


def _normal_verb(verb: object) -> str:
    if not isinstance(verb, str):
        raise ValueError(f"verb must be a string such as 'get', got {verb!r}")
    if not verb or not verb.isprintable() or any(char.isspace() for char in verb):
        raise ValueError(f"verb must be one word such as 'get', got {verb!r}")
    return verb.lower()


def _check_path(path: object) -> None:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(
            f"path must be a URL path starting with '/', such as '/api/x', got {path!r}"
        )


def _lower_case_names(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` with lower-case names (the same mapping when they already are)."""
    if not isinstance(headers, Mapping):
        raise ValueError(f"headers must be a mapping of names to values, got {type(headers)!r}")
    lowered: dict[str, str] = {}
    changed = False
    for name, value in headers.items():
        if (
            not isinstance(name, str)
            or not name
            or not name.isprintable()
            or ":" in name
            or any(char.isspace() for char in name)
        ):
            raise ValueError(f"header names must be non-empty strings, got {name!r}")
        if not isinstance(value, str):
            # The value may be a secret: name its type only.
            raise ValueError(
                f"header {name!r}: values must be strings (decode bytes), got {type(value)!r}"
            )
        key = name.lower()
        if key in lowered:
            raise ValueError(f"headers {key!r} given twice, in different cases")
        changed = changed or key != name
        lowered[key] = value
    return MappingProxyType(lowered) if changed else headers


#: The most seats a work estimate may name (initial or final): a 32-bit integer, as Kubernetes'
#: API integers are. A request takes at most its level's maxSeats anyway; beyond this it is a
#: bug in the estimate, refused with its value rather than carried into 64-bit seat-seconds.
MAX_ESTIMATE_SEATS: Final = 2**31 - 1

#: The longest additional latency a work estimate may name, in seconds (one hour). Seats held
#: longer than any request may run are a bug in the estimate; and the engine's seat-seconds
#: (unsigned 64-bit, 10 ns units) hold 100 seats for 58 years at most, so an unbounded latency
#: wrapped them (or, at 1e300, raised ``OverflowError`` inside an admission).
MAX_ADDITIONAL_LATENCY: Final = 3600.0


def check_estimate(seats: int | None, final_seats: int, additional_latency: float) -> None:
    """Refuse a work estimate the engine cannot hold: seat counts must be whole numbers.

    Args:
        seats: Initial seats (``None``: 1); an ``int`` from 1 to :data:`MAX_ESTIMATE_SEATS`.
        final_seats: An ``int`` from 0 to :data:`MAX_ESTIMATE_SEATS`.
        additional_latency: A finite number of seconds, from 0 to
            :data:`MAX_ADDITIONAL_LATENCY`.

    Raises:
        ValueError: If a value is out of range or of the wrong type (a float seat count
            would corrupt its level's integer virtual clock at release).
    """
    if seats is not None and (isinstance(seats, bool) or not isinstance(seats, int) or seats < 1):
        raise ValueError(f"seats must be an integer of at least 1, got {seats!r}")
    if isinstance(final_seats, bool) or not isinstance(final_seats, int) or final_seats < 0:
        raise ValueError(f"final_seats must be a non-negative integer, got {final_seats!r}")
    for name, value in (("seats", seats), ("final_seats", final_seats)):
        if value is not None and value > MAX_ESTIMATE_SEATS:
            raise ValueError(
                f"{name} must be at most {MAX_ESTIMATE_SEATS} (a 32-bit integer; a request "
                f"takes at most its level's maxSeats), got {value!r}"
            )
    if isinstance(additional_latency, bool) or not (
        isinstance(additional_latency, int | float) and math.isfinite(additional_latency)
    ):
        raise ValueError(f"additional_latency must be a number, got {additional_latency!r}")
    if additional_latency < 0:
        raise ValueError(f"additional_latency must not be negative, got {additional_latency!r}")
    if additional_latency > MAX_ADDITIONAL_LATENCY:
        raise ValueError(
            f"additional_latency must be at most {MAX_ADDITIONAL_LATENCY:g} seconds (seats "
            f"held longer than any request runs), got {additional_latency!r}"
        )


def _as_groups(groups: object) -> tuple[str, ...]:
    # A string is a sequence too, of one-letter "groups": almost certainly a mistake.
    if isinstance(groups, str | bytes) or not isinstance(groups, Iterable):
        raise TypeError(f"groups must be a sequence of group names, got {groups!r}")
    result = tuple(groups)
    for group in result:
        if not isinstance(group, str):
            raise TypeError(f"groups must hold strings, got {group!r}")
    return result


def fill_digest(
    cls: type[RequestDigest],
    user: str,
    groups: tuple[str, ...],
    verb: str,
    path: str,
    api_group: str,
    resource: str,
    subresource: str,
    namespace: str,
    name: str,
    client: str,
    headers: Mapping[str, str],
    seats: int | None,
    final_seats: int,
    additional_latency: float,
) -> RequestDigest:
    """A digest of class ``cls`` with these fields, unchecked (callers check ``groups``).

    A frozen dataclass's generated ``__init__`` sets each field through
    ``object.__setattr__``, which made a digest cost ~1.5 µs: more than the rest of an
    admission's classification. Fill a mutable twin with the same slot layout instead, then
    give it the frozen class (~0.3 µs; see benchmarks/engine_bench.py). The middleware calls
    this directly, positionally: a compiled caller pays one call instead of 15 attribute sets
    on an interpreted object.
    """
    digest = _MutableDigest()
    digest.user = user
    digest.groups = groups
    digest.verb = verb
    digest.path = path
    digest.api_group = api_group
    digest.resource = resource
    digest.subresource = subresource
    digest.namespace = namespace
    digest.name = name
    digest.client = client
    digest.headers = headers
    digest.seats = seats
    digest.final_seats = final_seats
    digest.additional_latency = additional_latency
    digest.__class__ = cls  # type: ignore[assignment]
    return digest  # type: ignore[return-value]


class _MutableDigest:
    """Same slots, same order, not frozen: how :class:`RequestDigest` instances are built."""

    __slots__ = RequestDigest.__slots__
    user: str
    groups: tuple[str, ...]
    verb: str
    path: str
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    client: str
    headers: Mapping[str, str]
    seats: int | None
    final_seats: int
    additional_latency: float
