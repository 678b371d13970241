"""The adaptive server limit: a ServerCL learned from execution latency (pure, sans-IO).

The shell feeds :class:`AdaptiveLimit` one sample per request that ran (its level, execution
time and seats) and calls :meth:`AdaptiveLimit.update` on its housekeeping schedule; a new
limit is then applied as a new ServerCL, so APF divides whatever total is current. Each
update folds the samples into per-level baselines (``engine/_adaptive_baseline.py``: the
signal), and the algorithm moves the limit from the latency ratio alone, so one interface
serves both algorithms.

A baseline is only as true as the concurrency it was seen at: one learned while every client
arrived at once (a restart under full load) is congested, and reads ~1 at that concurrency
forever. A *probe* (:class:`_Probe`) looks below: when no baseline has evidence from under the
concurrency that runs and nothing lowers it, the limit in force is halved for a moment, step
by step while latency falls significantly, and restored.
"""

from __future__ import annotations

import math
from typing import Final, Protocol

from apf_limiter.config._model import AdaptiveConcurrency
from apf_limiter.engine._adaptive_baseline import Level, fold, required, seed

#: ServerCL moves only once the learned limit is this fraction of it (at least one seat)
#: away: every move re-plans the levels, so a limit hovering between two values must not
#: flip between them at every update.
HYSTERESIS: Final = 0.03
#: A probe (see :class:`_Probe`) lowers the limit to this fraction of the concurrency per step.
PROBE_FACTOR: Final = 0.5
#: A probe checks its step this often (a fraction of ``updateInterval``), and gives a step at
#: most ``updateInterval`` to drain, and as long to measure, before it moves on.
PROBE_CHECK: Final = 0.05
#: A probe runs when some level's baseline has no evidence from below this fraction of the
#: concurrency that runs (above :data:`PROBE_FACTOR`: a limit that saws a little around where
#: a probe confirmed its baseline does not probe again).
PROBE_TRIGGER: Final = 0.75
#: Consecutive updates a baseline must stay unseen below the concurrency, with the limit not
#: pushed down by the algorithm, before a probe: a start that builds up from an idle server
#: sees the lower concurrency by itself in that time; a server filled at once (a restart
#: under full load) never does.
PROBE_AFTER: Final = 10
#: The algorithm counts as lowering the limit (and no probe is needed) once it has fallen
#: below this fraction of where those updates began.
PROBE_FALLING: Final = 0.8
#: Updates between the end of a probe and the next one: bounds what probing costs.
PROBE_SPACING: Final = 10
#: Per update, a gradient may at most halve or double the target.
_MIN_GRADIENT: Final = 0.5
_MAX_GRADIENT: Final = 2.0


class Algorithm(Protocol):
    """What an adaptive algorithm does: the next limit from the current one and the signal."""

    def next_limit(self, limit: float, ratio: float, busy: bool) -> float:
        """The next (unclamped) limit.

        Args:
            limit: The current learned limit.
            ratio: The latency ratio of the update (about 1 when healthy).
            busy: Whether the limit is in use (requests wait, or half the seats are held):
                without that, low latency says nothing about a higher limit.
        """
        ...


class Gradient:
    """Gradient (Netflix Gradient2, Envoy): move a fraction of the way to limit × tolerance/ratio.

    The fixed point under overload is where ratio = tolerance: with latency ∝ in flight past
    the knee, about ``tolerance`` × the knee over the baseline's noise floor.
    """

    def __init__(self, settings: AdaptiveConcurrency) -> None:
        self._tolerance = settings.tolerance
        self._smoothing = settings.smoothing

    def next_limit(self, limit: float, ratio: float, busy: bool) -> float:
        """See :meth:`Algorithm.next_limit`."""
        gradient = min(max(self._tolerance / ratio, _MIN_GRADIENT), _MAX_GRADIENT)
        if gradient > 1.0 and not busy:
            return limit
        return limit + self._smoothing * (limit * gradient - limit)


class AIMD:
    """Additive increase (smoothing × √limit, at least 1), multiplicative decrease (backoff)."""

    def __init__(self, settings: AdaptiveConcurrency) -> None:
        self._tolerance = settings.tolerance
        self._smoothing = settings.smoothing
        self._backoff = settings.backoff

    def next_limit(self, limit: float, ratio: float, busy: bool) -> float:
        """See :meth:`Algorithm.next_limit`."""
        if ratio > self._tolerance:
            return limit * self._backoff
        if not busy:
            return limit
        return limit + max(1.0, self._smoothing * math.sqrt(limit))


def make_algorithm(settings: AdaptiveConcurrency) -> Algorithm:
    """The algorithm ``settings`` name."""
    if settings.algorithm == "AIMD":
        return AIMD(settings)
    return Gradient(settings)


class _Probe:
    """A probe in progress: the limit lowered, step by step, under a baseline never seen below.

    Each step holds ServerCL at ``limit`` (the concurrency it probes), waits until what is
    held drained to it, drops the samples of the requests still running then (they started
    congested) and takes one estimate per level from requests that ran at ``limit`` at most.
    A step whose estimate is significantly lower replaces the baseline and halves again;
    one that is not confirms the baseline there and ends the probe. APF queues what arrives
    meanwhile: nothing is rejected that the queues would not have held anyway.

    Attributes:
        restore: The ServerCL in force before the probe, applied again at its end.
        limit: The concurrency this step probes (the ServerCL in force).
        draining: Whether the step still waits for what is held to drain to ``limit``.
        began: When this step (or its measuring) began.
        held: The seats held at the last check (a drain that stopped is over).
    """

    __slots__ = ("began", "draining", "held", "limit", "restore")

    def __init__(self, restore: int, limit: int, now: float, held: int) -> None:
        self.restore = restore
        self.limit = limit
        self.draining = True
        self.began = now
        self.held = held


class AdaptiveLimit:
    """The learned limit, the samples since the last update and the per-level baselines.

    Args:
        settings: The ``adaptiveConcurrency`` settings.
        server_concurrency_limit: The configured ServerCL (the start, unless ``initialLimit``).
        now: The current time, in seconds.

    Attributes:
        limit: The learned limit (unrounded).
        applied: The limit in force as ServerCL (``limit`` rounded, when it moved at least
            :data:`HYSTERESIS` away).
        next_update: When the next update falls due.
        baselines: Per level, its baseline mean execution time (seconds).
        last_ratio: The latency ratio of the last update (0 before the first).
        last_latency: The execution time of the last sample (seconds).
        updates: Updates that had enough samples to run the algorithm.
        probes: Probes run so far (each lowers the limit for a moment to see the baseline).
        probing: Whether a probe holds the limit in force (``applied``) low now.
    """

    def __init__(
        self, settings: AdaptiveConcurrency, server_concurrency_limit: int, now: float
    ) -> None:
        self.settings = settings
        self._algorithm = make_algorithm(settings)
        self.applied = settings.start_limit(server_concurrency_limit)
        self.limit = float(self.applied)
        self.next_update = now + settings.update_interval
        self.baselines: dict[str, float] = {}
        self.last_ratio = 0.0
        self.last_latency = 0.0
        self.updates = 0
        self.probes = 0
        self.probing = False
        self._probe: _Probe | None = None
        self._next_probe = now
        self._skip = 0  # samples still to drop: of requests that ran before a probe drained
        self._unseen = 0  # consecutive updates that would have probed
        self._unseen_limit = 0.0  # the learned limit when they began
        self._levels: dict[str, Level] = {}
        self._started = now
        self._concurrency = 0  # at the last update

    def configure(self, settings: AdaptiveConcurrency) -> None:
        """Take reloaded settings, keeping what was learned (clamped into the new bounds)."""
        if settings == self.settings:
            return
        self.settings = settings
        self._algorithm = make_algorithm(settings)
        self.limit = min(max(self.limit, settings.min_limit), settings.max_limit)
        self.applied = _rounded(self.limit)
        self._probe = None  # a probe's low limit is not kept past a reload
        self.probing = False

    def sample(self, level: str, latency: float, seats: int) -> None:
        """Record one request that ran: its level, execution time (seconds) and seats."""
        if self._skip:
            self._skip -= 1
            return
        state = self._levels.get(level)
        if state is None:
            state = self._levels[level] = Level(self._started)
        state.latencies.append(latency)
        state.seats.append(seats)
        self.last_latency = latency

    def update(self, now: float, seats_in_use: int, waiting: int) -> int | None:
        """Run one update: fold the samples into the baselines and move the limit.

        Args:
            now: The current time, in seconds.
            seats_in_use: Seats held now at the limited levels.
            waiting: Requests waiting now.

        Returns:
            The new ServerCL when the rounded limit moved, else ``None``.
        """
        settings = self.settings
        if self._probe is not None:
            return self._probe_step(self._probe, now, seats_in_use)
        self.next_update = now + settings.update_interval
        # The concurrency the samples ran at, at most: what is held, within the limit.
        concurrency = min(self.applied, seats_in_use)
        ramping = concurrency > self._concurrency
        self._concurrency = concurrency
        weighted = 0.0
        total_seats = 0
        probe = max(settings.min_limit, math.floor(PROBE_FACTOR * concurrency))
        unseen = False  # a level's baseline has no evidence from as low as a probe would go
        for name, level in self._levels.items():
            latencies = level.latencies
            if len(latencies) < required(level):
                continue  # kept for the next update
            seeding = level.weight <= 0.0 or level.baseline <= 0.0
            if seeding:
                if not seed(level, latencies, ramping):
                    continue  # the first baseline waits until it is precise
                level.concurrency = level.seen = concurrency
            baseline = level.baseline
            # At minLimit no lower concurrency can be tried: what runs there is the baseline.
            floored = self.applied <= settings.min_limit
            estimate = fold(level, now, settings.baseline_window, concurrency, not seeding, floored)
            self.baselines[name] = level.baseline
            seats = sum(level.seats)
            latencies.clear()
            level.seats.clear()
            if baseline <= 0.0:
                continue  # instant requests say nothing about the backend
            weighted += seats * estimate / baseline
            total_seats += seats
            unseen = unseen or level.seen > PROBE_TRIGGER * concurrency
        if total_seats == 0:
            return None
        ratio = weighted / total_seats
        self.last_ratio = ratio
        self.updates += 1
        if not (unseen and probe < concurrency):
            self._unseen = 0
        elif self._unseen == 0 or self.limit < PROBE_FALLING * self._unseen_limit:
            self._unseen, self._unseen_limit = 1, self.limit  # (again) from here
        else:
            self._unseen += 1  # and the algorithm is not lowering the limit either
        if self._unseen >= PROBE_AFTER and now >= self._next_probe:
            # Nothing lowers the concurrency, and no baseline was seen below it: it may have
            # been learned congested (all clients at once after a restart). Look below.
            self.probes += 1
            self.probing = True
            self._unseen = 0
            self._probe = _Probe(self.applied, probe, now, seats_in_use)
            self.next_update = now + PROBE_CHECK * settings.update_interval
            self.applied = probe
            return probe
        busy = waiting > 0 or 2 * seats_in_use >= self.limit
        limit = self._algorithm.next_limit(self.limit, ratio, busy)
        self.limit = min(max(limit, float(settings.min_limit)), float(settings.max_limit))
        applied = self.applied
        if abs(self.limit - applied) < max(1.0, HYSTERESIS * applied):
            return None
        self.applied = applied = _rounded(self.limit)
        return applied

    def _probe_step(self, probe: _Probe, now: float, seats_in_use: int) -> int | None:
        """Run a probe's check: drain, measure, then halve again, or end it."""
        interval = self.settings.update_interval
        self.next_update = now + PROBE_CHECK * interval
        timed_out = now - probe.began >= interval
        if probe.draining:
            held, probe.held = probe.held, seats_in_use
            # Drained: down to the probe's limit, or as far as the levels' limits let it go.
            if seats_in_use > probe.limit and seats_in_use < held and not timed_out:
                return None
            # The requests running now started congested: their samples are dropped.
            probe.draining = False
            probe.began = now
            self._skip = seats_in_use
            for level in self._levels.values():
                level.latencies.clear()
                level.seats.clear()
            return None
        levels = [level for level in self._levels.values() if level.latencies]
        if not timed_out and (
            not levels or any(len(level.latencies) < required(level) for level in levels)
        ):
            return None  # every level that runs here is measured, unless that takes too long
        lower = False
        for name, level in self._levels.items():
            if len(level.latencies) < required(level) or level.baseline <= 0.0:
                continue
            baseline = level.baseline
            fold(level, now, self.settings.baseline_window, probe.limit, True, False)
            if level.baseline < baseline and level.weight == len(level.latencies):
                lower = True  # replaced: significantly lower down here
            level.concurrency = min(level.concurrency, probe.limit)
            level.seen = min(level.seen, probe.limit)
            self.baselines[name] = level.baseline
            level.latencies.clear()
            level.seats.clear()
        following = max(self.settings.min_limit, math.floor(PROBE_FACTOR * probe.limit))
        if lower and following < probe.limit:
            probe.limit = self.applied = following
            probe.draining = True
            probe.began = now
            probe.held = seats_in_use
            return following
        # Down here the baseline holds (or nothing more can be seen): back to the limit.
        self._probe = None
        self.probing = False
        self._skip = 0
        self._concurrency = probe.limit
        self._next_probe = now + PROBE_SPACING * interval
        self.next_update = now + interval
        for level in self._levels.values():
            level.latencies.clear()
            level.seats.clear()
        self.applied = probe.restore
        return probe.restore


def _rounded(limit: float) -> int:
    return max(1, math.floor(limit + 0.5))
