"""The dashboard in a real headless Chromium against a real uvicorn server.

The limiter holds requests (running, waiting, rejected for every reason, cancelled) so the
numbers are not zero; the page must render exactly those live numbers after its script has
fetched the feed; with a level in shadow mode, a banner and that level's row say so. With
``APF_DASHBOARD_SCREENSHOT=<path>`` the test also saves a screenshot of these held numbers;
``docs/dashboard.png`` is drawn from a live server under load by
``benchmarks/dashboard_screenshot.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from apf_limiter import Limiter
from apf_limiter.observability import DEBUG_PREFIX, debug_app
from apf_limiter.observability._asgi import Scope
from apf_limiter.testing import FakeClock
from tests.observability.scenario import (
    ADMIN,
    Holder,
    adaptive_config,
    scenario_config,
    user,
    wave,
)

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=3000",
)


def allow_local(scope: Scope) -> bool:
    client = scope.get("client")
    return bool(client and client[0] == "127.0.0.1")


def traffic_app(limiter: Limiter) -> Starlette:
    """The debug endpoints, plus held requests started on the server's own event loop."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        holders = [Holder(limiter, user(f"user-{i}")) for i in range(20)]  # queued: 20 seats
        holders += [Holder(limiter, user(f"rita-{i}", "rejecters")) for i in range(12)]
        holders.append(Holder(limiter, ADMIN))
        await asyncio.sleep(0)
        holders.append(Holder(limiter, user("trent"), wait_limit=0))  # times out at once
        victor = Holder(limiter, user("victor"))
        await asyncio.sleep(0.05)
        victor.task.cancel()  # leaves its queue: cancelled
        await asyncio.sleep(0)
        # One flow fills both queues of its hand (2 x 5), then is rejected twice.
        holders += [Holder(limiter, user("mallory")) for _ in range(12)]
        await asyncio.sleep(0.05)
        yield
        for holder in holders:
            holder.release.set()
        await asyncio.gather(*(h.task for h in (*holders, victor)), return_exceptions=True)

    routes = [Mount(DEBUG_PREFIX, app=debug_app(limiter, authorize=allow_local))]
    return Starlette(routes=routes, lifespan=lifespan)


@contextlib.contextmanager
def serve(app: Starlette) -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def run_chromium(chromium: str, profile: Path, *args: str) -> str:
    result = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


class DashboardDom(HTMLParser):
    """Collects the text of every ``data-field`` element, per ``data-level`` row, and by id.

    Also the attributes of elements with an id (``attributes``), the ``data-label`` of the
    cells of each row (``labels``), each row's classes (``row_classes``), and the rows of the
    top-flows table under each level (``flows``: per level, one mapping per flow) with the
    attributes of that table's row (``flows_rows``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.levels: dict[str, dict[str, str]] = {}
        self.ids: dict[str, str] = {}
        self.attributes: dict[str, dict[str, str | None]] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.row_classes: dict[str, set[str]] = {}
        self.flows: dict[str, list[dict[str, str]]] = {}
        self.flows_rows: dict[str, dict[str, str | None]] = {}
        self._flow: dict[str, str] | None = None
        self._level: str | None = None
        self._open: list[tuple[str, str | None, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "tr" and attributes.get("data-flows-of"):
            self.flows_rows[attributes["data-flows-of"] or ""] = attributes
        if tag == "tr" and attributes.get("data-flow"):
            self._flow = {}
            self.flows.setdefault(attributes["data-flow"] or "", []).append(self._flow)
        if tag == "tr" and attributes.get("data-level"):
            self._level = attributes["data-level"]
            self.levels[self._level or ""] = {}
            self.labels[self._level or ""] = {}
            self.row_classes[self._level or ""] = set((attributes.get("class") or "").split())
        if attributes.get("id"):
            self.attributes[attributes["id"] or ""] = attributes
        field, label = attributes.get("data-field"), attributes.get("data-label")
        if self._level is not None and field and label:
            self.labels[self._level][field] = label
        self._open.append((tag, attributes.get("data-field"), attributes.get("id")))
        for key in ("data-field", "id"):
            if attributes.get(key):
                self._text(key, attributes[key] or "", "")

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()[0] == tag:
                break
        if tag == "tr":
            self._level = None
            self._flow = None

    def handle_data(self, data: str) -> None:
        for _, field, element_id in self._open:
            if field:
                self._text("data-field", field, data)
            if element_id:
                self._text("id", element_id, data)

    def _text(self, kind: str, name: str, data: str) -> None:
        if kind == "data-field" and self._flow is not None:
            self._flow[name] = self._flow.get(name, "") + data
        elif kind == "id":
            self.ids[name] = self.ids.get(name, "") + data
        elif self._level is not None:
            row = self.levels[self._level]
            row[name] = row.get(name, "") + data


def test_dashboard_renders_the_live_numbers(chromium: str, tmp_path: Path) -> None:
    config = scenario_config(
        queues=8,
        hand_size=2,
        distinguisher=True,
        wait_limit=60,
        queue_length_limit=5,
        server_limit=30,
    )
    limiter = Limiter(config, hash_seed=7)
    with serve(traffic_app(limiter)) as port:
        url = f"http://127.0.0.1:{port}{DEBUG_PREFIX}/dashboard"
        html = run_chromium(chromium, tmp_path / "profile", "--dump-dom", url)
        screenshot = os.environ.get("APF_DASHBOARD_SCREENSHOT")
        if screenshot:
            run_chromium(
                chromium,
                tmp_path / "profile2",
                f"--screenshot={Path(screenshot).resolve()}",
                "--window-size=1560,300",
                "--hide-scrollbars",
                url,
            )
    dom = DashboardDom()
    dom.feed(html)
    assert dom.ids["status"].startswith("updated"), dom.ids.get("status")
    assert (dom.ids["server_limit"], dom.ids["total_seats"], dom.ids["total_waiting"]) == (
        "30",
        "31",
        "10",
    )
    assert list(dom.levels) == ["exempt", "queued", "rejecting", "catch-all"]
    queued = dom.levels["queued"]
    # Nothing is in shadow mode: no banner, no would-be labels; no adaptive limit, no panel.
    assert "hidden" in dom.attributes["shadow_banner"]
    assert "hidden" in dom.attributes["adaptive"]
    assert dom.attributes["adaptive_spark_applied"]["points"] == ""
    assert {level["mode"] for level in dom.levels.values()} == {"Enforce"}
    assert all(not labels for labels in dom.labels.values())
    assert {
        field: queued[field]
        for field in (
            "type",
            "nominal_limit",
            "lower_limit",
            "upper_limit",
            "current_limit",
            "seats_text",
            "executing_requests",
            "waiting_requests",
            "rejected_queue-full",
            "rejected_concurrency-limit",
            "rejected_time-out",
            "cancelled",
            "dispatched",
        )
    } == {
        "type": "Queue",
        "nominal_limit": "20",
        "lower_limit": "20",
        "upper_limit": "50",
        "current_limit": "20",
        "seats_text": "20 / 20",
        "executing_requests": "20",
        "waiting_requests": "10",
        "rejected_queue-full": "2",
        "rejected_concurrency-limit": "0",
        "rejected_time-out": "1",
        "cancelled": "1",
        "dispatched": "20",
    }
    assert queued["queues_text"] == "2/8 active, longest 5"
    rejecting = dom.levels["rejecting"]
    assert (rejecting["seats_text"], rejecting["rejected_concurrency-limit"]) == ("10 / 10", "2")
    assert rejecting["queue_lengths"] == "no queues"
    exempt = dom.levels["exempt"]
    assert (exempt["executing_requests"], exempt["seats_text"]) == ("1", "1 / \u221e")
    # Who is flooding: a table of top flows under each busy level, none under idle ones.
    assert set(dom.flows) == set(dom.flows_rows) == {"exempt", "queued", "rejecting"}
    assert all("hidden" not in row for row in dom.flows_rows.values())
    columns = ("distinguisher", "seats_in_use", "waiting_requests", "rejections")
    assert [tuple(flow[c] for c in columns) for flow in dom.flows["queued"]] == [
        *((f"user-{i}", "1", "0", "0") for i in (0, 1, 10, 11, 12)),  # top 5 by seats
        ("mallory", "0", "10", "2"),  # fills her hand's queues, then rejected twice
        ("trent", "0", "0", "1"),  # timed out
        ("victor", "0", "0", "1"),  # left his queue
    ]
    # A Reject level does not hash flows: the flow is its schema, with no distinguisher.
    assert [
        (flow["flow_schema"], flow["distinguisher"], flow["seats_in_use"], flow["rejections"])
        for flow in dom.flows["rejecting"]
    ] == [("rejecters", "\u2014", "10", "2")]


def shadow_traffic_app(limiter: Limiter) -> Starlette:
    """25 requests at ``queued``, in shadow mode: all run; enforced, 20 would, 3 would wait
    and 2 would find the queue full."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        holders = [Holder(limiter, user(f"user-{i}")) for i in range(25)]
        await asyncio.sleep(0.05)
        assert all(holder.entered for holder in holders)
        yield
        for holder in holders:
            holder.release.set()
        await asyncio.gather(*(h.task for h in holders), return_exceptions=True)

    routes = [Mount(DEBUG_PREFIX, app=debug_app(limiter, authorize=allow_local))]
    return Starlette(routes=routes, lifespan=lifespan)


def test_a_shadow_level_has_a_banner_and_would_be_columns(chromium: str, tmp_path: Path) -> None:
    config = {
        **scenario_config(queue_length_limit=3, wait_limit=60, server_limit=30),
        "priorityLevelEnforcement": {"queued": "Shadow"},
    }
    limiter = Limiter(config)
    with serve(shadow_traffic_app(limiter)) as port:
        html = run_chromium(
            chromium,
            tmp_path / "profile",
            "--dump-dom",
            f"http://127.0.0.1:{port}{DEBUG_PREFIX}/dashboard",
        )
    dom = DashboardDom()
    dom.feed(html)
    assert dom.ids["status"].startswith("updated"), dom.ids.get("status")
    banner = dom.attributes["shadow_banner"]
    assert "hidden" not in banner
    assert dom.ids["shadow_levels"] == "queued"
    text = " ".join(dom.ids["shadow_banner"].split())
    assert "Shadow mode at queued" in text
    assert "nothing there is being held or rejected" in text
    assert "what enforcing would do" in text
    queued = dom.levels["queued"]
    assert (queued["mode"], dom.levels["rejecting"]["mode"]) == ("Shadow", "Enforce")
    assert "shadow" in dom.row_classes["queued"]
    assert "shadow" not in dom.row_classes["rejecting"]
    # The numbers are the twins': what enforcing would do to these 25 running requests.
    assert (queued["executing_requests"], queued["waiting_requests"]) == ("20", "3")
    assert queued["rejected_queue-full"] == "2"
    assert dom.labels["queued"] == {
        "waiting_requests": "would wait",
        "rejected_queue-full": "would reject",
        "rejected_concurrency-limit": "would reject",
        "rejected_time-out": "would reject",
        "cancelled": "dropped",
    }
    assert dom.labels["rejecting"] == {}


def test_the_adaptive_limit_has_a_panel_and_a_sparkline(chromium: str, tmp_path: Path) -> None:
    # Learned in fake time first (the first update grows 10 to 12), then served: the page
    # only reads, so the limit stays put while it polls.
    clock = FakeClock()
    limiter = Limiter(adaptive_config(), clock=clock)

    async def learn() -> None:
        await wave(limiter, clock, 30, 0.1)
        await clock.advance_to(0.95)
        await wave(limiter, clock, 30, 0.1)

    asyncio.run(learn())
    adaptive = limiter.adaptive_concurrency
    assert adaptive is not None and adaptive.applied_limit == 12
    app = Starlette(routes=[Mount(DEBUG_PREFIX, app=debug_app(limiter, authorize=allow_local))])
    with serve(app) as port:
        html = run_chromium(
            chromium,
            tmp_path / "profile",
            "--dump-dom",
            f"http://127.0.0.1:{port}{DEBUG_PREFIX}/dashboard?interval=250",
        )
    dom = DashboardDom()
    dom.feed(html)
    assert dom.ids["status"].startswith("updated"), dom.ids.get("status")
    assert "hidden" not in dom.attributes["adaptive"]
    assert {
        name: dom.ids[f"adaptive_{name}"]
        for name in (
            "algorithm",
            "limit",
            "applied",
            "bounds",
            "ratio",
            "updates",
            "probes",
            "baselines",
        )
    } == {
        "algorithm": "Gradient",
        "limit": f"{adaptive.limit:.1f}",
        "applied": "12",
        "bounds": "2\u201340",
        "ratio": f"{adaptive.last_ratio:.2f}",
        "updates": "1",
        "probes": "0",
        "baselines": "test 100.0 ms",
    }
    assert dom.ids["server_limit"] == "12"
    # One point per poll, on both lines; the limit did not move, so the line is flat.
    samples = int(dom.attributes["adaptive_spark"]["data-samples"] or "0")
    assert samples >= 1
    applied = (dom.attributes["adaptive_spark_applied"]["points"] or "").split()
    learned = (dom.attributes["adaptive_spark_learned"]["points"] or "").split()
    assert len(applied) == len(learned) == samples
    assert len({point.split(",")[1] for point in applied}) == 1
    # The latency ratio over the same polls (one update: a value at each), against 1.0.
    ratio_points = (dom.attributes["adaptive_ratio_line"]["points"] or "").split()
    assert int(dom.attributes["adaptive_ratio_spark"]["data-samples"] or "0") == samples
    assert len(ratio_points) == samples
    top = max(2.0, adaptive.last_ratio)
    assert {point.split(",")[1] for point in ratio_points} == {
        f"{46 - 44 * adaptive.last_ratio / top:.1f}"
    }
    one = dom.attributes["adaptive_ratio_one"]
    assert one["y1"] == one["y2"] == f"{46 - 44 / top:.1f}"


def test_the_page_reports_a_denied_feed(chromium: str, tmp_path: Path) -> None:
    # The page loads (allowed) but its feed is denied: the page says so instead of numbers.
    state = {"calls": 0}

    def page_only(scope: Scope) -> bool:
        state["calls"] += 1
        return "format=json" not in scope.get("query_string", b"").decode()

    limiter = Limiter(scenario_config())
    app = Starlette(routes=[Mount(DEBUG_PREFIX, app=debug_app(limiter, authorize=page_only))])
    with serve(app) as port:
        html = run_chromium(
            chromium,
            tmp_path / "profile",
            "--dump-dom",
            f"http://127.0.0.1:{port}{DEBUG_PREFIX}/dashboard",
        )
    dom = DashboardDom()
    dom.feed(html)
    assert dom.ids["status"] == "feed unavailable: HTTP 403"
    assert dom.levels == {}
    assert state["calls"] >= 2


@pytest.mark.parametrize("interval", ["Infinity", "4294967296"])
def test_a_huge_interval_does_not_flood_the_feed(
    chromium: str, tmp_path: Path, interval: str
) -> None:
    # Browsers keep timer delays in 32 bits: an unclamped ?interval= fired at once, every
    # time (hundreds of feed requests a second from one tab).
    feeds = {"calls": 0}

    def counting(scope: Scope) -> bool:
        if "format=json" in scope.get("query_string", b"").decode():
            feeds["calls"] += 1
        return True

    limiter = Limiter(scenario_config())
    app = Starlette(routes=[Mount(DEBUG_PREFIX, app=debug_app(limiter, authorize=counting))])
    with serve(app) as port:
        run_chromium(
            chromium,
            tmp_path / "profile",
            "--dump-dom",
            f"http://127.0.0.1:{port}{DEBUG_PREFIX}/dashboard?interval={interval}",
        )
    assert 1 <= feeds["calls"] <= 2  # the first poll; the next is a minute away


def test_uvicorn_serves_the_text_dump() -> None:
    import urllib.request

    limiter = Limiter(scenario_config())
    app = Starlette(routes=[Mount(DEBUG_PREFIX, app=debug_app(limiter, authorize=allow_local))])
    with (
        serve(app) as port,
        urllib.request.urlopen(
            f"http://127.0.0.1:{port}{DEBUG_PREFIX}/dump_priority_levels", timeout=10
        ) as response,
    ):
        body = response.read().decode()
    assert body.splitlines()[0].startswith("PriorityLevelName, ActiveQueues,")
    assert len(body.splitlines()) == 5
