"""``apf-limiter demo``: why APF — mice keep their latency while an elephant floods.

* :mod:`apf_limiter.demo.app` — the server side (APF or a plain semaphore of equal capacity).
* :mod:`apf_limiter.demo.server` — runs it under uvicorn in a child process.
* :mod:`apf_limiter.demo.load` — the elephant and the mice.
* :mod:`apf_limiter.demo.report` — the progress line and the side-by-side table.
* :mod:`apf_limiter.demo.command` — the command: options, both runs, the output.

The demo needs ``uvicorn`` and ``httpx`` (in the ``dev`` extra).
"""

from apf_limiter.demo.command import DemoOptions, add_arguments, run, run_demo

__all__ = ["DemoOptions", "add_arguments", "run", "run_demo"]
