"""The text of the response metadata the gate gives: seconds, and the shadow outcome.

At a priority level in shadow mode (``enforcement: Shadow``) every request runs at once, and
``Admission.shadow`` tells its would-be outcome; :func:`shadow_value` writes it as text:

* ``wait=0.125`` — it would have waited that many seconds in a queue (``wait=0``: it would
  have run at once);
* ``rejected=queue-full; retry-after=3`` — it would have been rejected (the reason, and the
  ``Retry-After`` the 429 would have carried);
* ``pending; waited=0.1`` — its virtual twin still waits in its queue as the response starts
  (a response faster than the wait enforcing would have imposed): it would have waited at
  least that long (``waited``: seconds since its admission), and the outcome comes later, to
  observers. Under overload this is most of a flooding client's responses: enforced, they
  would still be queued when the real ones are done;
* ``dropped`` — its twin was dropped (``max_shadow_twins``) before the outcome was known.

A front door reads it as the response starts, not at admission: the twin's outcome may be
decided in between.
"""

from __future__ import annotations

from apf_limiter.limiter import ShadowOutcome


def seconds_value(seconds: float) -> str:
    """Seconds as text: microseconds at most, trailing zeros dropped (``0``: none).

    Microseconds, so that a short real wait never shows as the "at once" of ``0``.
    """
    return f"{seconds:.6f}".rstrip("0").rstrip(".") or "0"


def shadow_value(outcome: ShadowOutcome, waited: float | None = None) -> str:
    """The text describing a would-be outcome.

    Args:
        outcome: What enforcing would have done (``Admission.shadow``).
        waited: Seconds since the request's admission, told with ``pending`` (the would-be
            wait is at least this long); ``None``: unknown.

    Returns:
        ``wait=<seconds>``, ``rejected=<reason>; retry-after=<seconds>``, ``pending`` (with
        ``; waited=<seconds>`` when ``waited`` is given) or ``dropped``.
    """
    reason = outcome.reject_reason
    if reason == "dropped":
        return "dropped"
    if reason is not None:
        if outcome.retry_after is None:
            return f"rejected={reason}"
        return f"rejected={reason}; retry-after={outcome.retry_after}"
    wait = outcome.queue_wait
    if not outcome.decided or wait is None:
        return "pending" if waited is None else "pending; waited=" + seconds_value(waited)
    return "wait=" + seconds_value(wait)
