"""Redraw ``docs/dashboard.png``: a headless Chromium screenshot of a live server under load.

Usage: ``.venv/bin/python -m benchmarks.dashboard_screenshot [--out docs/dashboard.png]``

Starts a real uvicorn server on 127.0.0.1 (the demo's configuration with the adaptive server
limit on, an endpoint whose latency grows with the requests it runs at once, the debug
endpoints with the top flows), floods it from one "elephant" client (48 requests in flight,
retrying each 429 at once) while 4 "mice" send a request every ~0.25 s, lets the adaptive limit
learn for a few seconds, then takes the screenshot with Chromium (``chromium`` or
``chromium-browser`` on the PATH) while the load goes on. Nothing is left running: the load
and the server stop with the script.

The load runs in a process of its own, as the demo's does, so that the server's numbers are
the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from apf_limiter import Limiter
from apf_limiter._demo.app import bearer_identity, demo_config
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Receive, Scope, Send

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = "/debug/api_priority_and_fairness/dashboard?interval=100"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def screenshot_config() -> dict[str, Any]:
    """The demo's level (8 seats, fair per user), with the adaptive server limit learning."""
    config = demo_config(8)
    config["adaptiveConcurrency"] = {"minLimit": 4, "maxLimit": 32, "updateInterval": 0.5}
    return config


class Backend:
    """An endpoint whose latency grows with the requests it runs at once (as a database's)."""

    def __init__(self, base: float = 0.05, knee: int = 8) -> None:
        self.base = base
        self.knee = knee
        self.running = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer after ``base`` seconds, longer past ``knee`` requests at once."""
        if scope["type"] != "http":
            return
        self.running += 1
        try:
            await asyncio.sleep(self.base * max(1.0, self.running / self.knee))
        finally:
            self.running -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _allow_local(scope: Scope) -> bool:
    client = scope.get("client")
    return bool(client and client[0] == "127.0.0.1")


async def _client(url: str, name: str, stop: Any, in_flight: int, pause: float) -> None:
    headers = {"Authorization": f"Bearer {name}"}
    limits = httpx.Limits(max_connections=in_flight)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits) as http:

        async def loop() -> None:
            jitter = random.Random(name)
            while not stop.is_set():
                try:
                    await http.get("/work", timeout=20)
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
                if pause:
                    await asyncio.sleep(pause * jitter.uniform(0.5, 1.5))

        await asyncio.gather(*(loop() for _ in range(in_flight)))


def _load(url: str, stop: Any) -> None:
    """The load, in a process of its own (so that it does not share the server's core)."""

    async def run() -> None:
        clients = [_client(url, "elephant", stop, 48, 0.0)]
        clients += [_client(url, f"mouse-{i}", stop, 1, 0.25) for i in range(1, 5)]
        await asyncio.gather(*clients)

    asyncio.run(run())


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("chromium is not installed (apt-get install chromium)")


def take(out: Path, *, learn: float = 6.0, width: int = 1500, height: int = 480) -> None:
    """Serve, load, wait ``learn`` seconds, and save the screenshot to ``out``."""
    limiter = Limiter(screenshot_config())
    app = APFMiddleware(
        Backend(),
        limiter=limiter,
        identify=bearer_identity,
        debug_endpoints={"top_flows": 3},
        authorize=_allow_local,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    serving = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    serving.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not serving.is_alive():
            raise SystemExit("uvicorn did not start")
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    loading = spawn.Process(target=_load, args=(url, stop), daemon=True)
    loading.start()
    try:
        time.sleep(learn)
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [
                    _chromium(),
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={profile}",
                    f"--screenshot={out.resolve()}",
                    f"--window-size={width},{height}",
                    # Real time, not virtual: the page polls a live feed every 100 ms.
                    "--run-all-compositor-stages-before-draw",
                    "--virtual-time-budget=12000",
                    url + DASHBOARD,
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
        adaptive = limiter.adaptive_concurrency
        print(
            f"{out}: {width}x{height}; adaptive limit "
            f"{adaptive.applied_limit if adaptive else '-'}, "
            f"{limiter.statistics().priority_levels['demo'].rejected} rejected at demo"
        )
    finally:
        stop.set()
        loading.join(30)
        if loading.is_alive():
            loading.kill()
        server.should_exit = True
        serving.join(15)
        sock.close()


def main(argv: list[str] | None = None) -> int:
    """Parse the options and take the screenshot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--learn", type=float, default=6.0, help="seconds of load first")
    args = parser.parse_args(argv)
    take(args.out, learn=args.learn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
