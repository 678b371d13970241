"""The ASGI applications the HTTP benchmarks serve under uvicorn (application factories).

Run by the benchmark scripts as ``python -m uvicorn --factory benchmarks.bench_app:<factory>``;
the variant and its numbers come from environment variables, so that every variant is the same
command line apart from the factory name (and uvicorn's ``--limit-concurrency``):

* ``hello_bare`` / ``hello_apf`` / ``hello_semaphore`` — a hello-world Starlette app, bare,
  behind :class:`~apf_limiter.asgi.APFMiddleware` with the built-in configuration, or behind a
  semaphore of ``APF_BENCH_CAPACITY`` slots (default: the built-in server concurrency limit);
  ``hello_apf_no_headers`` is APF without its two response headers.
* ``work_apf`` / ``work_semaphore`` — ``GET /work?ms=N`` sleeps N ms; one level of
  ``APF_BENCH_CAPACITY`` seats fair per user (the bearer token) or a FIFO semaphore of the same
  size. The response header ``x-queue-wait`` says how long the request waited for its seat.
* ``pool_apf`` — ``GET /work?ms=N`` holds one of the 20 connections of a simulated database
  pool (an :class:`asyncio.Semaphore`) for N ms, behind one APF level of
  ``APF_BENCH_CAPACITY`` seats; with ``APF_BENCH_ADAPTIVE=1`` ServerCL is learned
  (``adaptiveConcurrency``, starting there); ``pool_bare`` and ``pool_semaphore`` are the same
  pool with no limiter and behind a FIFO semaphore of 20.
* ``soak`` — the long-run app: APF in front of an endpoint that answers at once, sleeps, or
  raises (before or after the response started).

Every variant serves ``/_bench/info`` (the build measured, the event loop) and
``/_bench/stats`` (the limiter's executing and waiting counts) *outside* the limiter, so
asking never changes what is measured.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import os
import subprocess
import sys
import time
from importlib import import_module
from importlib.metadata import version
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from apf_limiter import Limiter
from apf_limiter._demo.app import SemaphoreMiddleware, bearer_identity, demo_config
from apf_limiter.asgi import APFMiddleware, IdentityHooks
from apf_limiter.asgi._types import ASGIApp, Receive, Scope, Send
from apf_limiter.config._defaults import default_configuration
from apf_limiter.gate import ClientDeadlines

__all__ = [
    "build_info",
    "hello_bare",
    "hello_apf",
    "hello_apf_no_headers",
    "hello_semaphore",
    "work_apf",
    "work_semaphore",
    "pool_apf",
    "pool_apf_config",
    "pool_bare",
    "pool_semaphore",
    "soak",
    "soak_config",
    "source_revision",
    "BUILD_MODULES",
]

#: Modules whose file tells which build runs (``.py`` source or a compiled extension).
BUILD_MODULES = (
    "apf_limiter.engine._queueset",
    "apf_limiter.engine._controller",
    "apf_limiter.limiter",
    "apf_limiter.asgi._middleware",
)


def build_info() -> dict[str, Any]:
    """Which apf_limiter build this process imported, and the interpreter."""
    files = {name: getattr(import_module(name), "__file__", "") or "" for name in BUILD_MODULES}
    compiled = sorted(name for name, path in files.items() if not path.endswith(".py"))
    return {
        "build": "compiled" if compiled else "pure Python",
        "compiled_modules": compiled,
        "queueset_file": files["apf_limiter.engine._queueset"],
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "uvicorn": version("uvicorn"),
        "starlette": version("starlette"),
        **source_revision(Path(files["apf_limiter.engine._queueset"]).parent.parent),
    }


def source_revision(package: Path) -> dict[str, Any]:
    """The git commit of the apf_limiter sources at ``package``, and whether they differ from it.

    ``commit`` is ``None`` outside a git checkout. ``dirty`` covers the package directory only.
    A compiled tree (``make compile``, under the git-ignored ``build/``) is a copy of the
    sources: its ``SOURCE_REVISION`` file says what it was compiled from.
    """
    stamp = package.parent / "SOURCE_REVISION"
    if stamp.is_file():
        commit_text, _, state = stamp.read_text().strip().partition(" ")
        return {
            "commit": None if commit_text == "unknown" else commit_text,
            "dirty": state == "dirty",
        }

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(package), *args],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except OSError:  # no git here
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", ".") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _capacity() -> int:
    text = os.environ.get("APF_BENCH_CAPACITY")
    return int(text) if text else default_configuration().server_concurrency_limit


async def _send_json(send: Send, payload: dict[str, Any], status: int = 200) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _BenchRoutes:
    """Serves ``/_bench/*`` itself and passes everything else to the measured app."""

    def __init__(self, app: ASGIApp, limiter: Limiter | None) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/_bench/"):
            if scope["path"] == "/_bench/info":
                info = build_info()
                info["loop"] = type(asyncio.get_running_loop()).__module__
                info["pid"] = os.getpid()
                await _send_json(send, info)
            elif scope["path"] == "/_bench/stats":
                await _send_json(send, self._stats(b"gc=1" in scope["query_string"]))
            else:
                await _send_json(send, {"detail": "not found"}, 404)
            return
        await self.app(scope, receive, send)

    def _stats(self, count_objects: bool) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "pid": os.getpid(),
            "monotonic": time.monotonic(),
            "pool": dict(POOL_STATS),
        }
        if count_objects:
            gc.collect()
            stats["gc_objects"] = len(gc.get_objects())
        if self.limiter is None:
            return stats
        snapshot = self.limiter.statistics()
        levels = snapshot.priority_levels.values()
        stats.update(
            server_concurrency_limit=snapshot.server_concurrency_limit,
            executing_requests=snapshot.executing_requests,
            executing_seats=snapshot.executing_seats,
            waiting_requests=snapshot.waiting_requests,
            waiting_seats=sum(level.waiting_seats for level in levels),
            dispatched=sum(level.dispatched for level in levels),
            rejected=sum(sum(level.rejected.values()) for level in levels),
            timed_out=sum(level.timed_out for level in levels),
            cancelled=sum(level.cancelled for level in levels),
            levels={
                level.name: {
                    "current_limit": level.current_limit,
                    "executing_requests": level.executing_requests,
                    "waiting_requests": level.waiting_requests,
                    "dispatched": level.dispatched,
                }
                for level in levels
                if level.type != "Exempt"
            },
        )
        adaptive = self.limiter.adaptive_concurrency
        if adaptive is not None:
            stats["adaptive"] = {
                "limit": adaptive.limit,
                "last_ratio": adaptive.last_ratio,
                "baselines": adaptive.baselines,
                "updates": adaptive.updates,
            }
        return stats


# --- hello world (throughput) ---------------------------------------------------------------


def _hello_app() -> Starlette:
    """Hello world; ``APF_BENCH_HANDLER_US`` > 0 makes it burn that much CPU first (a handler
    that does some work, instead of the limiter's worst case)."""
    work = float(os.environ.get("APF_BENCH_HANDLER_US") or 0) / 1e6

    async def hello(request: Request) -> PlainTextResponse:
        if work:
            until = time.perf_counter() + work
            while time.perf_counter() < until:
                pass
        return PlainTextResponse("Hello, world!")

    return Starlette(routes=[Route("/", hello)])


def hello_bare() -> ASGIApp:
    """The hello-world app, bare (also the ``--limit-concurrency`` variant)."""
    return _BenchRoutes(_hello_app(), None)


def hello_apf() -> ASGIApp:
    """The hello-world app behind APFMiddleware with the built-in configuration."""
    middleware = APFMiddleware(_hello_app())
    return _BenchRoutes(middleware, middleware.limiter)


def hello_apf_no_headers() -> ASGIApp:
    """The hello-world app behind APFMiddleware, built-in configuration, no APF headers."""
    middleware = APFMiddleware(_hello_app(), headers=None)
    return _BenchRoutes(middleware, middleware.limiter)


def hello_semaphore() -> ASGIApp:
    """The hello-world app behind a semaphore of ``APF_BENCH_CAPACITY`` slots."""
    return _BenchRoutes(SemaphoreMiddleware(_hello_app(), capacity=_capacity()), None)


# --- slow endpoint (fairness over HTTP) -----------------------------------------------------


def _query_int(scope: Scope, key: bytes, default: int) -> int:
    for pair in scope["query_string"].split(b"&"):
        name, _, value = pair.partition(b"=")
        if name == key and value.isdigit():
            return int(value)
    return default


async def _plain(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain"),
                (b"content-length", b"%d" % len(body)),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _Arrival:
    """Stamps each request's arrival, so the endpoint can tell how long it waited."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})["bench_arrival"] = time.perf_counter()
        await self.app(scope, receive, send)


async def _work(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    started = time.perf_counter()
    waited = started - scope["state"]["bench_arrival"]
    await asyncio.sleep(_query_int(scope, b"ms", 100) / 1000)
    # The handler's start and end on the monotonic clock, which on Linux the client shares:
    # the seat-seconds each flow was given, and the utilization of the seats, server-side.
    stamps = [(b"x-start", b"%.6f" % started), (b"x-end", b"%.6f" % time.perf_counter())]
    await _plain(send, 200, b"ok", [(b"x-queue-wait", b"%.6f" % waited), *stamps])


def work_apf() -> ASGIApp:
    """``/work`` behind one APF level of ``APF_BENCH_CAPACITY`` seats, fair per user."""
    config = demo_config(_capacity(), queue_length_limit=50)
    config["requestWaitLimit"] = 60
    middleware = APFMiddleware(
        _work, config=config, identity=IdentityHooks(identify=bearer_identity)
    )
    return _BenchRoutes(_Arrival(middleware), middleware.limiter)


def work_semaphore() -> ASGIApp:
    """``/work`` behind a FIFO semaphore of ``APF_BENCH_CAPACITY`` slots."""
    return _BenchRoutes(_Arrival(SemaphoreMiddleware(_work, capacity=_capacity())), None)


#: The simulated database pool's connections (``pool_apf``).
POOL_SIZE = 20


#: What the pool did, since the process started (``/_bench/stats``'s ``pool``): requests
#: served, slot-seconds held, seconds the holds ran over what they asked (a busy event loop
#: wakes them late), seconds waited in the pool's own line, and the responses sent after the
#: client's own deadline (header ``x-bench-deadline``, on the monotonic clock the benchmark
#: shares on Linux): work done for a client that had already given up. ``handoff_gap_s``: from
#: a connection's release to its next acquire (FIFO), the time the pool sat idle between two
#: requests (under overload: the time the limiter in front took to hand the next one over).
POOL_STATS: dict[str, float] = {
    "served": 0,
    "held_s": 0.0,
    "handoff_gap_s": 0.0,
    "overrun_s": 0.0,
    "line_wait_s": 0.0,
    "answered_after_deadline": 0,
}


def _bench_deadline(scope: Scope) -> float | None:
    for name, value in scope["headers"]:
        if name == b"x-bench-deadline":
            try:
                return float(value)
            except ValueError:
                return None
    return None


def _pool_work() -> ASGIApp:
    """``/work?ms=N``: hold one of the :data:`POOL_SIZE` connections of the pool for N ms."""
    pool: list[asyncio.Semaphore] = []
    stats = POOL_STATS
    released: collections.deque[float] = collections.deque(maxlen=POOL_SIZE)

    async def work(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not pool:
            pool.append(asyncio.Semaphore(POOL_SIZE))  # in the server's event loop
        hold = _query_int(scope, b"ms", 50) / 1000
        queued = time.monotonic()
        async with pool[0]:
            started = time.monotonic()
            if released:
                stats["handoff_gap_s"] += started - released.popleft()
            await asyncio.sleep(hold)
            ended = time.monotonic()
            released.append(ended)
        stats["served"] += 1
        stats["held_s"] += ended - started
        stats["overrun_s"] += ended - started - hold
        stats["line_wait_s"] += started - queued
        deadline = _bench_deadline(scope)
        if deadline is not None and ended > deadline:
            stats["answered_after_deadline"] += 1
        await _plain(send, 200, b"ok", [])

    return work


def pool_apf_config() -> dict[str, Any]:
    """``pool_apf``'s configuration: one level of ``APF_BENCH_CAPACITY`` seats, fair per user.

    64 queues of ``APF_BENCH_QUEUE_LENGTH`` requests (default 200) and a ``requestWaitLimit``
    of ``APF_BENCH_WAIT_LIMIT`` seconds (default 60); ``APF_BENCH_ADAPTIVE=1`` learns ServerCL.
    """
    config = demo_config(
        _capacity(), queue_length_limit=int(os.environ.get("APF_BENCH_QUEUE_LENGTH") or 200)
    )
    config["requestWaitLimit"] = float(os.environ.get("APF_BENCH_WAIT_LIMIT") or 60)
    if os.environ.get("APF_BENCH_ADAPTIVE") == "1":
        config["adaptiveConcurrency"] = {"minLimit": 2, "maxLimit": 1000}
    return config


def pool_apf() -> ASGIApp:
    """``/work`` holding a connection of a 20-connection pool, behind APF (maybe adaptive).

    ``APF_BENCH_DEADLINE_HEADER`` names a client timeout header (in milliseconds, such as
    Envoy's ``x-envoy-expected-rq-timeout-ms``) that bounds each request's queue wait
    (:class:`~apf_limiter.gate.ClientDeadlines`); unset, the option is off.
    """
    header = os.environ.get("APF_BENCH_DEADLINE_HEADER")
    middleware = APFMiddleware(
        _pool_work(),
        config=pool_apf_config(),
        identity=IdentityHooks(identify=bearer_identity),
        client_deadlines=ClientDeadlines(header=header) if header else None,
    )
    return _BenchRoutes(middleware, middleware.limiter)


def pool_bare() -> ASGIApp:
    """``/work`` holding a connection of the pool, no limiter: the pool's own FIFO line."""
    return _BenchRoutes(_pool_work(), None)


def pool_semaphore() -> ASGIApp:
    """``/work`` holding a connection of the pool, behind a FIFO semaphore of ``POOL_SIZE``."""
    return _BenchRoutes(SemaphoreMiddleware(_pool_work(), capacity=POOL_SIZE), None)


# --- the long run ---------------------------------------------------------------------------


def soak_config(capacity: int, wait_limit: float) -> dict[str, Any]:
    """The long run's configuration: one level, fair per user, short queues and wait limit.

    Short queues (2 requests) and a short wait limit make the run go through every outcome:
    immediate admission, queuing, ``queue-full`` and ``time-out`` rejections.
    """
    config = demo_config(capacity, queue_length_limit=2)
    config["requestWaitLimit"] = wait_limit
    return config


class SoakError(RuntimeError):
    """What the long run's handler raises on purpose."""


async def _soak_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/sleep":
        await asyncio.sleep(_query_int(scope, b"us", 1000) / 1e6)
    elif path == "/boom":
        raise SoakError("raised before the response started")
    elif path == "/boom-mid":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"10")],
            }
        )
        await send({"type": "http.response.body", "body": b"half", "more_body": True})
        raise SoakError("raised after the response started")
    await _plain(send, 200, b"ok", [])


def soak() -> ASGIApp:
    """The long-run app: APF in front of ``/ok``, ``/sleep?us=N``, ``/boom``, ``/boom-mid``.

    ``APF_BENCH_CAPACITY`` seats (default 4), ``APF_BENCH_WAIT_LIMIT`` seconds (default 0.05).
    """
    capacity = int(os.environ.get("APF_BENCH_CAPACITY") or 4)
    wait_limit = float(os.environ.get("APF_BENCH_WAIT_LIMIT") or 0.05)
    config = soak_config(capacity, wait_limit)
    middleware = APFMiddleware(
        _soak_endpoint, config=config, identity=IdentityHooks(identify=bearer_identity)
    )
    return _BenchRoutes(middleware, middleware.limiter)
