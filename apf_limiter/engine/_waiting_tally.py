"""The waiting requests of one queue set, counted as they join and leave their queues.

Kubernetes keeps its ``current_inqueue_*`` gauges up to date on every enqueue and dequeue
(``fc/metrics/metrics.go``, ``AddRequestsInQueues`` and ``AddSeatsInQueues``, called from
``queueset.go``), so a scrape reads numbers and walks no queue. :class:`WaitingTally` does the
same for the metrics that break waiting requests down by flow schema, by flow and by verb: a
scrape of thousands of queued requests then costs what a scrape of a few does (only the
per-flow counts, read when top flows are asked for, grow with the number of distinct flows
waiting, never with the requests of one flow).

Only the queued path updates it (joining a queue, dispatch from a queue, leaving a queue):
the arrival fast path never has a waiting request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apf_limiter.engine._dump import READ_ONLY_VERBS

if TYPE_CHECKING:
    from apf_limiter._digest import RequestDigest
    from apf_limiter.engine._request import Request


class WaitingTally:
    """Waiting requests and seats by flow schema, waiting requests by flow, read-only count.

    A key is removed when its count returns to 0, so each dictionary holds at most one entry
    per waiting request (bounded by the queues' length limits).

    Attributes:
        requests: Waiting requests by flow schema.
        seats: Seats the waiting requests ask for (``max_seats`` as they joined), by schema.
        flows: Waiting requests by flow (flow schema, distinguisher).
        read_only: Waiting requests whose verb is in :data:`READ_ONLY_VERBS`.
    """

    __slots__ = ("requests", "seats", "flows", "read_only")

    def __init__(self) -> None:
        self.requests: dict[str, int] = {}
        self.seats: dict[str, int] = {}
        self.flows: dict[tuple[str, str], int] = {}
        self.read_only = 0

    def add(self, request: Request) -> None:
        """Count ``request``, which just joined a queue."""
        schema = request.flow_schema
        requests = self.requests
        requests[schema] = requests.get(schema, 0) + 1
        seats = self.seats
        seats[schema] = seats.get(schema, 0) + request.max_seats
        flow = (schema, request.distinguisher)
        flows = self.flows
        flows[flow] = flows.get(flow, 0) + 1
        if _is_read_only(request):
            self.read_only += 1

    def remove(self, request: Request) -> None:
        """Stop counting ``request``, which left its queue (before any clamp of its seats)."""
        schema = request.flow_schema
        requests = self.requests
        left = requests[schema] - 1
        if left:
            requests[schema] = left
            self.seats[schema] -= request.max_seats
        else:
            del requests[schema]
            del self.seats[schema]
        flow = (schema, request.distinguisher)
        flows = self.flows
        left = flows[flow] - 1
        if left:
            flows[flow] = left
        else:
            del flows[flow]
        if _is_read_only(request):
            self.read_only -= 1


def _is_read_only(request: Request) -> bool:
    # The digest is a slot the controller fills in; a request built by hand may lack it.
    digest: RequestDigest | None = getattr(request, "digest", None)
    return digest is not None and digest.verb in READ_ONLY_VERBS
