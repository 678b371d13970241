"""``apf-limiter demo``: why APF — mice keep their latency while an elephant floods.

* :mod:`apf_limiter._demo.app` — the server side (APF or a plain semaphore of equal capacity).
* :mod:`apf_limiter._demo.server` — runs it under uvicorn in a child process.
* :mod:`apf_limiter._demo.load` — the elephant and the mice.
* :mod:`apf_limiter._demo.report` — the progress line and the side-by-side table.
* :mod:`apf_limiter._demo.command` — the command: options, both runs, the output.

The demo needs ``uvicorn`` and ``httpx`` (in the ``dev`` extra).
"""
