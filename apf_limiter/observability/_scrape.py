"""The metric families read from the engine at scrape time (gauges, engine counters, samplers).

They come from the limiter's :meth:`~apf_limiter.Limiter.dump` and
:meth:`~apf_limiter.Limiter.statistics`, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from apf_limiter.engine._seat_seconds import seat_seconds_float
from apf_limiter.observability._catalog import metric
from apf_limiter.observability._cut import cut
from apf_limiter.observability._export import FamilyBuilder
from apf_limiter.observability._sampling import FlowGauges, RatioSampler, s_bounds
from apf_limiter.observability._top_flows import hide, level_flows

if TYPE_CHECKING:
    from apf_limiter.engine._dump import EngineDump
    from apf_limiter.engine._statistics import LimiterStatistics, PriorityLevelStatistics

Labels = tuple[str, ...]


def collect_engine(
    families: FamilyBuilder,
    dump: EngineDump,
    stats: LimiterStatistics,
    flows: FlowGauges,
    sampler: RatioSampler,
    seen: set[tuple[str, str]],
) -> Iterator[Any]:
    """Yield the families that come from the engine's state.

    Args:
        families: The family builder (name prefix).
        dump: A dump of the engine.
        stats: A statistics snapshot of the same engine.
        flows: The requests waiting and executing, counted by flow.
        sampler: The ratio sampler, already sampled for this scrape.
        seen: (level, schema) pairs seen so far; pairs seen once keep being exported (at 0
            when idle), as Kubernetes' gauges stay at their last value.
    """
    seen.update(flows.pairs())
    pairs = sorted(seen)
    yield families.values(metric("current_inqueue_requests"), {p: flows.waiting[p] for p in pairs})
    yield families.values(
        metric("current_inqueue_seats"), {p: flows.waiting_seats[p] for p in pairs}
    )
    yield families.values(
        metric("current_executing_requests"), {p: flows.executing[p] for p in pairs}
    )
    yield families.values(
        metric("current_executing_seats"), {p: flows.executing_seats[p] for p in pairs}
    )
    yield from _queue_set_families(families, dump)
    yield families.values(
        metric("priority_level_shadow"),
        {(level.name,): 1.0 if level.shadow else 0.0 for level in dump.levels},
    )
    yield from _limit_families(families, stats)
    yield families.histograms(
        metric("demand_seats"), [((k,), v) for k, v in _items(sampler.demand)]
    )
    yield families.histograms(
        metric("priority_level_seat_utilization"),
        [((k, "executing"), v) for k, v in _items(sampler.seat_utilization)],
    )
    yield families.histograms(
        metric("priority_level_request_utilization"), _items(sampler.request_utilization)
    )
    yield families.histograms(
        metric("read_vs_write_current_requests"), _items(sampler.read_vs_write)
    )


def _items(table: dict[Any, Any]) -> list[tuple[Any, Any]]:
    return list(table.items())


def _queue_set_families(families: FamilyBuilder, dump: EngineDump) -> Iterator[Any]:
    no_accommodation: dict[Labels, float] = {}
    epochs: dict[Labels, float] = {}
    current_r: dict[Labels, float] = {}
    dispatch_r: dict[Labels, float] = {}
    latest_s: dict[Labels, float] = {}
    next_s: dict[Labels, float] = {}
    next_discounted_s: dict[Labels, float] = {}
    for level in dump.levels:
        name = level.name
        for schema, count in level.no_accommodation_by_flow_schema.items():
            no_accommodation[(name, schema)] = count
        epochs[(name, "true")] = level.epoch_advances
        epochs[(name, "false")] = level.epoch_advance_failures
        current_r[(name,)] = seat_seconds_float(level.current_r)
        dispatch_r[(name,)] = seat_seconds_float(level.dispatch_r)
        latest_s[(name,)] = seat_seconds_float(level.latest_s)
        bounds = s_bounds(level)
        if bounds is not None:
            next_s[(name, "min")], next_s[(name, "max")] = bounds[0], bounds[1]
            next_discounted_s[(name, "min")] = bounds[2]
            next_discounted_s[(name, "max")] = bounds[3]
    yield families.values(metric("request_dispatch_no_accommodation_total"), no_accommodation)
    yield families.values(metric("epoch_advance_total"), epochs)
    yield families.values(metric("current_r"), current_r)
    yield families.values(metric("dispatch_r"), dispatch_r)
    yield families.values(metric("latest_s"), latest_s)
    yield families.values(metric("next_s_bounds"), next_s)
    yield families.values(metric("next_discounted_s_bounds"), next_discounted_s)


def _limit_families(families: FamilyBuilder, stats: LimiterStatistics) -> Iterator[Any]:
    levels = stats.priority_levels.values()
    per_level: dict[str, Callable[[PriorityLevelStatistics], float]] = {
        "nominal_limit_seats": lambda s: s.nominal_limit,
        "lower_limit_seats": lambda s: s.lower_limit,
        "upper_limit_seats": lambda s: s.upper_limit,
        "current_limit_seats": lambda s: s.current_limit,
        "demand_seats_high_watermark": lambda s: s.demand_high_watermark,
        "demand_seats_average": lambda s: s.demand_average,
        "demand_seats_stdev": lambda s: s.demand_stdev,
        "demand_seats_smoothed": lambda s: s.demand_smoothed,
        "target_seats": lambda s: s.target_limit,
    }
    for name, value_of in per_level.items():
        yield families.values(metric(name), {(level.name,): value_of(level) for level in levels})
    yield families.values(metric("seat_fair_frac"), {(): stats.fair_fraction})


def collect_top_flows(
    families: FamilyBuilder, dump: EngineDump, top: int, key: bytes | None
) -> Iterator[Any]:
    """Yield the top-flow gauges: per level and ranking, only its ``top`` flows above 0.

    Fresh families at each scrape: a flow that drops out of the top is not exported, so the
    series per level stay at most ``top`` per metric, whatever the number of flows. The
    ``distinguisher`` label is cut at :data:`~apf_limiter.observability._cut.MAX_CELL_WIDTH`
    characters, so the three families stay under ``3 x top x levels`` samples of at most
    about 1 kB each (level and schema names are at most 253 characters).

    Args:
        families: The family builder (name prefix).
        dump: A dump of the engine.
        top: How many flows of each ranking per level.
        key: The distinguisher hash key (``None``: distinguishers as they are).
    """
    seats: dict[Labels, float] = {}
    waiting: dict[Labels, float] = {}
    rejections: dict[Labels, float] = {}
    for level in dump.levels if top > 0 else ():
        counted = level_flows(level)
        for measure, samples in (
            (counted.seats, seats),
            (counted.waiting, waiting),
            (counted.rejections, rejections),
        ):
            for schema, distinguisher in counted.ranked(measure, top):
                # Client-chosen, up to the server's header limit: cut as the text dumps cut a
                # cell. Flows whose distinguishers differ only past the cut share a label:
                # the first, largest, is kept.
                labels = (level.name, schema, cut(hide(distinguisher, key)))
                samples.setdefault(labels, measure[(schema, distinguisher)])
    yield families.values(metric("top_flow_seats_in_use"), seats)
    yield families.values(metric("top_flow_waiting_requests"), waiting)
    yield families.values(metric("top_flow_rejections"), rejections)
