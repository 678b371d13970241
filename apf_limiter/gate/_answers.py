"""What every front door answers alike: the rejection and expiry texts, statuses, header names.

A rejected HTTP request gets ``429 Too Many Requests`` with ``Retry-After`` and the JSON body
``{"detail": "Too many requests, please try again later."}`` (Kubernetes' wording); a request
whose deadline passed before its response started gets ``504`` with :data:`DEADLINE_DETAIL`
(Kubernetes' timeout filter), one whose body came in too slowly ``408`` with
:data:`BODY_RATE_DETAIL`, and one whose client left while it was queued ``499``. The ASGI and
aiohttp front doors send these; they live here so that neither imports the other.
"""

from __future__ import annotations

import json
from typing import Final

#: The rejection message (Kubernetes' wording).
REJECTION_DETAIL: Final = "Too many requests, please try again later."
#: The body of the 504 answered when a request's deadline passed.
DEADLINE_DETAIL: Final = "The request did not complete within its deadline."
#: The body of the 408 answered when a request's body came in too slowly.
BODY_RATE_DETAIL: Final = "The request body arrived too slowly."
#: nginx's "client closed request": the status an access log shows for a request whose client
#: left while it waited in a queue.
CLIENT_CLOSED_REQUEST: Final = 499


def json_detail(detail: str) -> bytes:
    """The compact JSON body ``{"detail": ...}`` of an answer the front door sends itself."""
    return json.dumps({"detail": detail}, separators=(",", ":")).encode()


def header_name(name: str | None) -> bytes | None:
    """A response header name, checked and encoded lower-case (``None`` stays ``None``).

    Raises:
        ValueError: If ``name`` cannot be a header name.
    """
    if name is None:
        return None
    if not name or not name.isascii() or any(c in name for c in " \t\r\n:"):
        raise ValueError(f"invalid header name {name!r}")
    return name.lower().encode("ascii")
