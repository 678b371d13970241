"""The shell's side of the adaptive server limit: sampling, updating, applying and logging.

The learning is pure (``engine/_adaptive.py``). Here a request that ran gives a sample as it
finishes, and an update that falls due (:class:`AdaptiveJob`, run by the shell's scheduler)
applies a moved limit
through the controller's ``apply`` with the configuration's ServerCL replaced, exactly as a
reload with that ServerCL would: levels are re-planned, queued requests stay queued, and a
level that shrank dispatches nothing until it is under its new limit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Final

from apf_limiter.config._model import AdaptiveConcurrency, Configuration
from apf_limiter.engine._adaptive import AdaptiveLimit
from apf_limiter.engine._controller import Controller
from apf_limiter.engine._effects import Effects
from apf_limiter.engine._statistics import AdaptiveStatistics
from apf_limiter.limiter._scheduler import NEVER, Scheduler

logger = logging.getLogger("apf_limiter")

#: A move of the applied limit by more than this fraction since the last one logged is logged.
_LOGGED_MOVE: Final = 0.1


class Adapter:
    """One limiter's adaptive server limit.

    Args:
        settings: The ``adaptiveConcurrency`` settings.
        server_concurrency_limit: The configured ServerCL.
        now: The current time, in seconds.
    """

    def __init__(
        self, settings: AdaptiveConcurrency, server_concurrency_limit: int, now: float
    ) -> None:
        self.learned = AdaptiveLimit(settings, server_concurrency_limit, now)
        self._logged = self.learned.applied

    @property
    def next_update(self) -> float:
        """When the next update falls due."""
        return self.learned.next_update

    def configure(self, settings: AdaptiveConcurrency) -> None:
        """Take reloaded settings; what was learned carries over."""
        self.learned.configure(settings)

    def effective(self, config: Configuration) -> Configuration:
        """``config`` with the learned limit as its ServerCL."""
        applied = self.learned.applied
        if config.server_concurrency_limit == applied:
            return config
        return replace(config, server_concurrency_limit=applied)

    def run_due(
        self,
        now: float,
        controller: Controller,
        config: Configuration,
        settle: Callable[[Effects], None],
    ) -> None:
        """Run the update due and act on it (``settle``).

        It runs inside whichever call came due (a release, say): a failure is logged and the
        limit in force kept, rather than stop that call and leak its seats.
        """
        try:
            effects = self.update(now, controller, config)
        except Exception:
            logger.exception(
                "adaptive concurrency: the update failed; the server limit stays %d",
                self.learned.applied,
            )
            return
        if effects is not None:
            settle(effects)

    def update(self, now: float, controller: Controller, config: Configuration) -> Effects | None:
        """Run the update due; what applying a moved limit changed, else ``None``."""
        statistics = controller.statistics()
        moved = self.learned.update(now, statistics.executing_seats, statistics.waiting_requests)
        if moved is None:
            return None
        learned = self.learned
        if learned.probing:
            # A probe's low limit is a moment's measurement, not a move of the learned limit
            # (its end restores the limit logged last, so that is not logged either).
            logger.debug("adaptive concurrency: probing at a server limit of %d", moved)
        elif abs(moved - self._logged) > _LOGGED_MOVE * self._logged:
            logger.info(
                "adaptive concurrency: server limit %d -> %d (latency ratio %.2f, %s)",
                self._logged,
                moved,
                learned.last_ratio,
                learned.settings.algorithm,
            )
            self._logged = moved
        return controller.apply(self.effective(config), now)

    def statistics(self) -> AdaptiveStatistics:
        """A frozen snapshot of the learned limit and its signal."""
        learned = self.learned
        settings = learned.settings
        return AdaptiveStatistics(
            algorithm=settings.algorithm,
            limit=learned.limit,
            applied_limit=learned.applied,
            min_limit=settings.min_limit,
            max_limit=settings.max_limit,
            baselines=dict(learned.baselines),
            last_ratio=learned.last_ratio,
            last_latency=learned.last_latency,
            updates=learned.updates,
            probes=learned.probes,
            probing=learned.probing,
        )


def adapter_for(config: Configuration, adapter: Adapter | None, now: float) -> Adapter | None:
    """The adapter for ``config``: ``None`` when off; the running one, reconfigured, if any."""
    settings = config.adaptive_concurrency
    if settings is None:
        return None
    if adapter is None:
        return Adapter(settings, config.server_concurrency_limit, now)
    adapter.configure(settings)
    return adapter


class AdaptiveJob:
    """The adaptive limit's updates, as a scheduler job: never due while the limit is off.

    It registers itself with ``scheduler``.

    Args:
        adapter: The adaptive limit, or ``None`` when it is off.
        config: The configuration as given (its ServerCL the configured one).
        controller: The engine, whose limit a moved update applies.
        settle: Acts on what applying a moved limit changed.
        scheduler: Runs the job when its update falls due.

    Attributes:
        adapter: The adaptive limit, or ``None`` when it is off.
        next_run: When the next update falls due.
    """

    __slots__ = ("adapter", "_config", "_controller", "_settle", "_scheduler", "next_run")

    def __init__(
        self,
        adapter: Adapter | None,
        config: Configuration,
        controller: Controller,
        settle: Callable[[Effects], None],
        scheduler: Scheduler,
    ) -> None:
        self.adapter = adapter
        self._config = config
        self._controller = controller
        self._settle = settle
        self._scheduler = scheduler
        self.next_run = NEVER if adapter is None else adapter.next_update
        scheduler.add(self)

    def configure(self, adapter: Adapter | None, config: Configuration) -> None:
        """Take a new configuration and its adapter (``adapter_for``); reschedule."""
        self.adapter = adapter
        self._config = config
        self._scheduler.schedule(self, NEVER if adapter is None else adapter.next_update)

    def run(self, now: float) -> None:
        """Run the update that fell due and schedule the next one."""
        adapter = self.adapter
        if adapter is not None:
            adapter.run_due(now, self._controller, self._config, self._settle)
            self._scheduler.schedule(self, adapter.next_update)
