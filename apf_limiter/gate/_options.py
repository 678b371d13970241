"""The gate's option values (protocol-neutral; the front doors re-export them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from apf_limiter._checks import check_timeout, deadline_seconds


@dataclass(frozen=True, slots=True)
class SlowClients:
    """Deadlines and the minimum body rate: what bounds a slow or stalled request.

    Kubernetes bounds every request that is not long-running with a deadline
    (``--request-timeout``, 60 s); the body rate is Kestrel's ``MinRequestBodyDataRate``.

    Attributes:
        request_timeout: Seconds from arrival (queue wait included) after which a request is
            cancelled and its seats returned (HTTP answers 504, or aborts a started
            response); a long-running one only until its response starts. ``None``: none.
        by_level: Deadlines by priority-level name (``None`` for none there), before
            ``request_timeout``; a request's own deadline (a route's) comes first.
        min_body_rate: Bytes per second a request body must keep up with, after ``grace``
            seconds of waiting for it (HTTP answers 408). ``None``: no minimum.
        grace: The grace period of ``min_body_rate``, in seconds.

    Raises:
        ValueError: If a value is out of range.
    """

    request_timeout: float | None = 60.0
    by_level: Mapping[str, float | None] | None = None
    min_body_rate: float | None = 240.0
    grace: float = 5.0

    def __post_init__(self) -> None:
        deadline_seconds("request_timeout", self.request_timeout)
        for timeout in (self.by_level or {}).values():
            deadline_seconds("request_timeout_by_level", timeout)
        if self.min_body_rate is not None:
            check_timeout("min_body_rate", self.min_body_rate)  # a positive number, like a time
        check_timeout("body_rate_grace", self.grace)

    def level_timeouts(self) -> dict[str, float]:
        """The deadlines by level, in seconds (``math.inf``: none)."""
        return {
            name: deadline_seconds("request_timeout_by_level", timeout)
            for name, timeout in (self.by_level or {}).items()
        }


#: The longest client timeout read from a header, in digits: 10 (about 115 days in
#: milliseconds). Longer values are ignored, so parsing stays bounded.
MAX_TIMEOUT_DIGITS: Final = 10


@dataclass(frozen=True, slots=True)
class ClientDeadlines:
    """Queues that respect client deadlines (opt-in): no queue wait outlasts its client.

    A request whose client deadline is known waits in its queue no longer than that: when
    the deadline is shorter than the wait limit (``requestWaitLimit``), it takes its place for
    that one request, and the wait ends as the engine's own ``time-out`` rejection (HTTP 429
    with ``Retry-After``; gRPC ``RESOURCE_EXHAUSTED`` with its pushback). Such a request is
    never dispatched after its client has given up. gRPC's deadline (``grpc-timeout``) is read
    by the gRPC interceptor itself.

    Attributes:
        header: A request header holding the client's timeout in whole milliseconds, e.g.
            Envoy's ``x-envoy-expected-rq-timeout-ms``; ``None``: none is read. A value that
            is not 1 to 10 ASCII digits (or is 0) is ignored, without an error.
        request_timeout: The request's own deadline (its route's ``request_timeout``, else the
            front door's default) bounds its queue wait too.

    Raises:
        ValueError: If ``header`` is not a valid header name.
    """

    header: str | None = None
    request_timeout: bool = True

    def __post_init__(self) -> None:
        header = self.header
        if header is not None and (
            not isinstance(header, str)
            or not 0 < len(header) <= 256
            or not header.isascii()
            or any(c not in _TOKEN for c in header)
        ):
            raise ValueError(f"ClientDeadlines.header must be a header name, got {header!r}")


_TOKEN: Final = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def header_timeout(value: str | bytes | None) -> float | None:
    """A client timeout header's value, in seconds; ``None`` if absent or not usable.

    The value is hostile input: anything but 1 to :data:`MAX_TIMEOUT_DIGITS` ASCII digits
    (surrounding spaces allowed), and 0 (no timeout, as Envoy means it), is ignored.
    """
    if value is None or len(value) > MAX_TIMEOUT_DIGITS + 8:
        return None
    text = value.strip()
    if not 0 < len(text) <= MAX_TIMEOUT_DIGITS or not text.isdigit() or not text.isascii():
        return None
    milliseconds = int(text)
    return milliseconds / 1000.0 if milliseconds else None


@dataclass(frozen=True, slots=True)
class ResponseHeaders:
    """The response headers an HTTP front door (ASGI, aiohttp) adds; each ``None`` for none.

    Attributes:
        flow_schema: Names the request's flow schema.
        priority_level: Names its priority level.
        shadow: At a priority level in shadow mode, what enforcing would have done
            (``wait=0.125``, ``rejected=queue-full; retry-after=3``, ``pending``), e.g.
            ``"X-APF-Shadow"``.
        queue_wait: An admitted request's seconds in a queue (``0.012``; ``0`` if admitted at
            once), e.g. ``"X-APF-Queue-Wait"``.
        rate_limit: Add the IETF ``RateLimit-Policy`` and ``RateLimit`` fields
            (draft-ietf-httpapi-ratelimit-headers-10): the level's current limit as a quota of
            ``concurrent-requests``, the seats left as the response starts, a partition key
            per flow; ``t``, the ``Retry-After``, on a rejection. Not at exempt levels.
    """

    flow_schema: str | None = "X-APF-Flow-Schema"
    priority_level: str | None = "X-APF-Priority-Level"
    shadow: str | None = None
    queue_wait: str | None = None
    rate_limit: bool = False


#: No response headers at all.
NO_HEADERS: Final = ResponseHeaders(None, None)
