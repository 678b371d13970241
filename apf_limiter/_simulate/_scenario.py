"""The traffic scenario of ``apf-limiter simulate``: a small YAML (or JSON) document, checked.

Every problem is reported with its field path (``flows[1].service.mean: ...``), all at once, as
:class:`~apf_limiter.ConfigError` does for configurations. The schema is documented in
``docs/simulate.md``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

#: Largest scenario file read, in bytes (it is a description of traffic, not the traffic).
MAX_SCENARIO_BYTES: Final = 1 << 20
#: Most flows a scenario may name.
MAX_FLOWS: Final = 1000
#: Longest simulated traffic, in seconds (a day).
MAX_DURATION: Final = 86_400.0
#: Most closed-loop clients of one flow, and most distinct users of one flow.
MAX_CLIENTS: Final = 100_000

DISTRIBUTIONS: Final = ("constant", "exponential", "lognormal", "uniform")


class ScenarioError(ValueError):
    """A scenario failed to load.

    ``problems`` lists every ``path: message`` of its fields, or the one problem of the file
    itself (unreadable, too large, not YAML or JSON) without the file's name: the caller names it.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Distribution:
    """A distribution of seconds.

    ``kind`` is ``constant`` (``a``: the value), ``exponential`` (``a``: the mean),
    ``lognormal`` (``a``: the median, ``b``: sigma) or ``uniform`` (``a`` to ``b``).

    ``per_request``: with it, a service time is multiplied by ``1 + per_request * n``, where
    ``n`` is the number of requests executing (server-wide) when it is dispatched: a server
    that slows down with load.
    """

    kind: str
    a: float
    b: float = 0.0
    per_request: float = 0.0


@dataclass(frozen=True)
class Burst:
    """``requests`` extra arrivals spread evenly over ``over`` seconds from ``at``."""

    at: float
    requests: int
    over: float = 0.0


@dataclass(frozen=True)
class Flow:
    """One kind of traffic: who sends it, what it asks for, how often and how long it runs."""

    name: str
    user: str
    groups: tuple[str, ...]
    verb: str
    path: str
    users: int  # distinct users: ``{i}`` in ``user`` takes 0..users-1
    seats: int
    final_seats: int
    additional_latency: float
    rate: float  # open loop, requests per second (0: none)
    arrivals: str  # "poisson" or "constant"
    clients: int  # closed loop: clients each sending one request at a time (0: none)
    think: Distribution | None
    start: float
    stop: float
    bursts: tuple[Burst, ...]
    service: Distribution


@dataclass(frozen=True)
class Scenario:
    """A whole scenario: its flows, how long traffic is sent, and the seed of its randomness."""

    duration: float
    seed: int
    flows: tuple[Flow, ...]
    sample_period: float | None = None  # borrowing samples; None: the borrowingPeriod
    name: str = field(default="")


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file (``.yaml``/``.yml`` needs PyYAML; ``.json`` does not).

    Raises:
        ScenarioError: With every problem found, or why the file cannot be read.
    """
    path = Path(path)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_SCENARIO_BYTES + 1)
    except OSError as error:
        raise ScenarioError([f"cannot read: {error.strerror or error}"]) from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError([f"larger than {MAX_SCENARIO_BYTES} bytes"])
    text = raw.decode("utf-8", errors="replace")
    if path.suffix == ".json":
        try:
            document = json.loads(text)
        except ValueError as error:
            raise ScenarioError([f"not JSON: {error}"]) from None
    else:
        try:
            import yaml
        except ImportError:
            raise ScenarioError(
                ["reading YAML needs PyYAML (pip install 'apf_limiter[yaml]')"]
            ) from None
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ScenarioError([f"not YAML: {error}"]) from None
    return parse_scenario(document, name=path.name)


def parse_scenario(document: object, *, name: str = "") -> Scenario:
    """Check a scenario document (a mapping) and build it.

    Raises:
        ScenarioError: With every problem found.
    """
    reader = _Reader()
    scenario = reader.scenario(document, name)
    if reader.problems or scenario is None:
        raise ScenarioError(reader.problems)
    return scenario


class _Reader:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def mapping(self, value: object, path: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(path, f"must be a mapping, got {_kind(value)}")
            return {}
        for key in value:
            if key not in keys:
                self.fail(f"{path}.{key}" if path else str(key), "unknown field")
        return value

    def number(
        self,
        m: Mapping[str, Any],
        key: str,
        path: str,
        default: float,
        *,
        low: float = 0.0,
        positive: bool = False,
        high: float = math.inf,
    ) -> float:
        value = m.get(key, default)
        where = f"{path}.{key}" if path else key
        if type(value) is bool or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail(where, f"must be a number, got {value!r}")
            return default
        if value < low or (positive and value <= 0) or value > high:
            bound = "greater than 0" if positive else f"at least {low:g}"
            limit = f" and at most {high:g}" if high != math.inf else ""
            self.fail(where, f"must be {bound}{limit}, got {value!r}")
            return default
        return float(value)

    def integer(
        self, m: Mapping[str, Any], key: str, path: str, default: int, low: int, high: int
    ) -> int:
        value = m.get(key, default)
        where = f"{path}.{key}" if path else key
        if type(value) is not int or not low <= value <= high:
            self.fail(where, f"must be an integer between {low} and {high}, got {value!r}")
            return default
        return value

    def text(self, m: Mapping[str, Any], key: str, path: str, default: str) -> str:
        value = m.get(key, default)
        if not isinstance(value, str) or len(value) > 1000:
            self.fail(
                f"{path}.{key}", f"must be a string of at most 1000 characters, got {value!r}"
            )
            return default
        return value

    def scenario(self, document: object, name: str) -> Scenario | None:
        m = self.mapping(document, "", ("duration", "seed", "flows", "samplePeriod"))
        if not m:
            return None
        duration = self.number(m, "duration", "", 60.0, positive=True, high=MAX_DURATION)
        seed = self.integer(m, "seed", "", 1, 0, 2**63 - 1)
        sample = m.get("samplePeriod")
        sample_period = (
            None if sample is None else self.number(m, "samplePeriod", "", 1.0, positive=True)
        )
        flows_value = m.get("flows")
        if not isinstance(flows_value, list) or not flows_value:
            self.fail("flows", f"must be a non-empty list, got {_kind(flows_value)}")
            return None
        if len(flows_value) > MAX_FLOWS:
            self.fail("flows", f"at most {MAX_FLOWS} flows, got {len(flows_value)}")
            return None
        flows = [
            self.flow(value, f"flows[{i}]", i, duration) for i, value in enumerate(flows_value)
        ]
        names = [flow.name for flow in flows]
        for i, flow_name in enumerate(names):
            if flow_name in names[:i]:
                self.fail(f"flows[{i}].name", f"duplicate flow name {flow_name!r}")
        return Scenario(duration, seed, tuple(flows), sample_period, name)

    def flow(self, value: object, path: str, index: int, duration: float) -> Flow:
        m = self.mapping(
            value,
            path,
            (
                "name",
                "user",
                "users",
                "groups",
                "verb",
                "path",
                "job",
                "seats",
                "finalSeats",
                "additionalLatency",
                "rate",
                "arrivals",
                "clients",
                "think",
                "start",
                "stop",
                "bursts",
                "service",
            ),
        )
        name = self.text(m, "name", path, f"flow-{index}")
        user = self.text(m, "user", path, name)
        users = self.integer(m, "users", path, 1, 1, MAX_CLIENTS)
        groups_value = m.get("groups", ["system:authenticated"])
        if not isinstance(groups_value, list) or not all(isinstance(g, str) for g in groups_value):
            self.fail(f"{path}.groups", f"must be a list of strings, got {groups_value!r}")
            groups_value = []
        verb = self.text(m, "verb", path, "get").lower()
        if not verb.isalpha():
            self.fail(f"{path}.verb", f"must be letters only, got {verb!r}")
            verb = "get"
        request_path = self.text(m, "path", path, "/")
        if "job" in m:
            # A job kind, as a worker pool admits jobs (examples/worker_pool.py).
            if "path" in m:
                self.fail(f"{path}.job", "give either path or job, not both")
            request_path = f"/jobs/{self.text(m, 'job', path, 'job')}"
            if "verb" not in m:
                verb = "post"
        if not request_path.startswith("/"):
            self.fail(f"{path}.path", f"must start with '/', got {request_path!r}")
            request_path = "/"
        seats = self.integer(m, "seats", path, 1, 1, 1_000_000)
        final_seats = self.integer(m, "finalSeats", path, 0, 0, 1_000_000)
        latency = self.number(m, "additionalLatency", path, 0.0, high=3600.0)
        rate = self.number(m, "rate", path, 0.0, high=1e7)
        arrivals = self.text(m, "arrivals", path, "poisson")
        if arrivals not in ("poisson", "constant"):
            self.fail(f"{path}.arrivals", f"must be poisson or constant, got {arrivals!r}")
        clients = self.integer(m, "clients", path, 0, 0, MAX_CLIENTS)
        think = self.distribution(m["think"], f"{path}.think") if "think" in m else None
        if think is not None and not clients:
            self.fail(f"{path}.think", "only a closed-loop flow (clients) has a think time")
        start = self.number(m, "start", path, 0.0, high=duration)
        stop = self.number(m, "stop", path, duration, high=duration)
        if stop < start:
            self.fail(f"{path}.stop", f"must not be before start ({start:g}), got {stop:g}")
        bursts = self.bursts(m.get("bursts", []), f"{path}.bursts", duration)
        if not rate and not clients and not bursts:
            self.fail(path, "sends nothing: give rate, clients or bursts")
        if "service" not in m:
            self.fail(f"{path}.service", "required (how long a request runs)")
            service = Distribution("constant", 0.0)
        else:
            service = self.distribution(m["service"], f"{path}.service", load=True)
        groups = tuple(groups_value)
        return Flow(
            name,
            user,
            groups,
            verb,
            request_path,
            users,
            seats,
            final_seats,
            latency,
            rate,
            arrivals,
            clients,
            think,
            start,
            stop,
            bursts,
            service,
        )

    def bursts(self, value: object, path: str, duration: float) -> tuple[Burst, ...]:
        if not isinstance(value, list):
            self.fail(path, f"must be a list, got {_kind(value)}")
            return ()
        if len(value) > 10_000:
            self.fail(path, f"at most 10000 bursts, got {len(value)}")
            return ()
        bursts = []
        for i, item in enumerate(value):
            where = f"{path}[{i}]"
            m = self.mapping(item, where, ("at", "requests", "over"))
            at = self.number(m, "at", where, 0.0, high=duration)
            requests = self.integer(m, "requests", where, 1, 1, 10_000_000)
            over = self.number(m, "over", where, 0.0, high=duration)
            bursts.append(Burst(at, requests, over))
        return tuple(bursts)

    def distribution(self, value: object, path: str, *, load: bool = False) -> Distribution:
        if type(value) is not bool and isinstance(value, int | float):
            return self.distribution({"distribution": "constant", "value": value}, path, load=load)
        keys = ("distribution", "value", "mean", "median", "sigma", "min", "max")
        m = self.mapping(value, path, (*keys, "perRequest") if load else keys)
        kind = m.get("distribution", "constant")
        if kind not in DISTRIBUTIONS:
            self.fail(
                f"{path}.distribution", f"must be one of {', '.join(DISTRIBUTIONS)}, got {kind!r}"
            )
            return Distribution("constant", 0.0)
        per_request = self.number(m, "perRequest", path, 0.0, high=1e6) if load else 0.0
        if kind == "constant":
            return Distribution(
                kind, self.number(m, "value", path, 0.0, high=1e6), 0.0, per_request
            )
        if kind == "exponential":
            return Distribution(
                kind, self.number(m, "mean", path, 1.0, positive=True, high=1e6), 0.0, per_request
            )
        if kind == "lognormal":
            median = self.number(m, "median", path, 1.0, positive=True, high=1e6)
            return Distribution(
                kind, median, self.number(m, "sigma", path, 0.5, high=10.0), per_request
            )
        low = self.number(m, "min", path, 0.0, high=1e6)
        high = self.number(m, "max", path, low, high=1e6)
        if high < low:
            self.fail(f"{path}.max", f"must not be below min ({low:g}), got {high:g}")
        return Distribution(kind, low, high, per_request)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else repr(value)
