"""The IETF ``RateLimit-Policy`` and ``RateLimit`` header fields of a response (opt-in).

draft-ietf-httpapi-ratelimit-headers-10: both fields are Structured Field Lists (RFC 9651) of
one Item each, a String naming the policy: here the request's priority level. The policy says
the quota, ``q``: the level's current concurrency limit in seats, in the unit
``qu="concurrent-requests"``, and ``pk``, a partition key (a Byte Sequence) naming the
request's flow: the first 9 bytes of a BLAKE2b hash of its flow schema and distinguisher, keyed
per gate (so per process, as the limit is), which names the flow without exposing a user name
or an address. ``RateLimit`` says the remaining quota, ``r``: the limit minus the seats in use
as the response starts (never negative), with the same ``pk``, and on a rejection ``t``, the
``Retry-After`` seconds. A seat is one request unless a work estimate says otherwise. No window
(``w``): a concurrency quota is given back as requests end, not on a schedule. Exempt levels
have no limit, so their responses carry neither field.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import Final

from apf_limiter.limiter import Limiter

#: The field names, as sent (HTTP/2 and HTTP/3 want lower case).
POLICY_FIELD: Final = "ratelimit-policy"
LIMIT_FIELD: Final = "ratelimit"
#: The quota unit of a concurrency limit (the draft's registry).
QUOTA_UNIT: Final = "concurrent-requests"


def sf_string(value: str) -> str:
    """``value`` as a Structured Field String: quoted, backslashes and quotes escaped.

    Priority-level names are DNS subdomains, so this is their quoting alone; any other
    character a String cannot hold (outside printable ASCII) is replaced by ``?``.
    """
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    if not all(" " <= c <= "~" for c in escaped):
        escaped = "".join(c if " " <= c <= "~" else "?" for c in escaped)
    return f'"{escaped}"'


class RateLimitFields:
    """Computes a response's ``RateLimit-Policy`` and ``RateLimit`` values.

    Args:
        limiter: The limiter whose levels' limits and seats in use are read.
        key: The partition keys' hash key (random by default: per process).
    """

    __slots__ = ("_limiter", "_key", "_names", "_keys")

    def __init__(self, limiter: Limiter, key: bytes | None = None) -> None:
        self._limiter = limiter
        self._key = secrets.token_bytes(16) if key is None else key
        self._names: dict[str, str] = {}  # level name -> its String; bounded by the levels
        self._keys: dict[tuple[str, str], str] = {}  # flow -> its pk; bounded below

    def fields(
        self,
        priority_level: str,
        flow_schema: str,
        distinguisher: str,
        reset: int | None = None,
    ) -> tuple[str, str] | None:
        """The two field values, or ``None`` at an exempt (or vanished) level.

        Args:
            priority_level: The request's priority level (the policy's name).
            flow_schema: Its flow schema.
            distinguisher: Its flow distinguisher.
            reset: On a rejection, the ``Retry-After`` seconds (the ``t`` parameter).
        """
        usage = self._limiter.level_usage(priority_level)
        if usage is None:
            return None
        limit, in_use = usage
        name = self._names.get(priority_level)
        if name is None:
            if len(self._names) >= 1024:
                self._names.clear()
            name = self._names[priority_level] = sf_string(priority_level)
        pk = self.partition_key(flow_schema, distinguisher)
        remaining = limit - in_use if limit > in_use else 0
        policy = f'{name};q={limit};qu="{QUOTA_UNIT}";pk={pk}'
        current = f"{name};r={remaining};pk={pk}"
        if reset is not None:
            current += f";t={reset}"
        return policy, current

    def partition_key(self, flow_schema: str, distinguisher: str) -> str:
        """The flow's partition key, a Structured Field Byte Sequence (``:base64:``)."""
        flow = (flow_schema, distinguisher)
        pk = self._keys.get(flow)
        if pk is None:
            digest = hashlib.blake2b(
                f"{flow_schema}\0{distinguisher}".encode(errors="surrogatepass"),
                digest_size=9,
                key=self._key,
            ).digest()
            pk = f":{base64.b64encode(digest).decode('ascii')}:"
            if len(self._keys) >= 4096:  # distinguishers come from clients: stay bounded
                self._keys.clear()
            self._keys[flow] = pk
        return pk
