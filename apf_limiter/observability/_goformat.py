"""Go's text forms of durations and times, as the Kubernetes debug dumps print them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

ZERO_TIME = "0001-01-01T00:00:00Z"
"""Go's zero ``time.Time`` in RFC 3339 (a request that has not started yet)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def go_duration(nanoseconds: int) -> str:
    """Format a duration like Go's ``time.Duration.String``: ``0s``, ``5ms``, ``1m30.5s``.

    Below one second the largest unit that keeps the integer part non-zero is used (``ns``,
    ``µs``, ``ms``); from one second on, hours, minutes and seconds (with a fraction), leading
    zero units omitted. Fractions carry no trailing zeros.
    """
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    u = abs(nanoseconds)
    if u < 1_000_000_000:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            return f"{sign}{_fraction(u, 3)}µs"
        return f"{sign}{_fraction(u, 6)}ms"
    seconds = _fraction(u % 60_000_000_000, 9) + "s"
    minutes_total = u // 60_000_000_000
    if not minutes_total:
        return sign + seconds
    hours = minutes_total // 60
    text = f"{minutes_total % 60}m{seconds}"
    return f"{sign}{hours}h{text}" if hours else sign + text


def _fraction(value: int, digits: int) -> str:
    whole, frac = divmod(value, 10**digits)
    fraction = f"{frac:0{digits}d}".rstrip("0")
    return f"{whole}.{fraction}" if fraction else str(whole)


def rfc3339_nano(unix_nanoseconds: int | None) -> str:
    """Format a Unix time in nanoseconds like Go's ``t.UTC().Format(time.RFC3339Nano)``.

    The fraction of a second has no trailing zeros (none at all on a whole second); ``None``
    stands for Go's zero time and gives ``0001-01-01T00:00:00Z``.
    """
    if unix_nanoseconds is None:
        return ZERO_TIME
    seconds, nanos = divmod(unix_nanoseconds, 1_000_000_000)
    moment = _EPOCH + timedelta(seconds=seconds)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{text}.{fraction}Z" if fraction else f"{text}Z"
