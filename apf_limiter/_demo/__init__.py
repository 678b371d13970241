"""``apf-limiter demo``: why APF — mice keep their latency while an elephant floods.

* :mod:`apf_limiter._demo.app` — the server side (APF or a plain semaphore of equal capacity).
* :mod:`apf_limiter._demo.server` — runs it under uvicorn in a child process.
* :mod:`apf_limiter._demo.load` — the load's options and results; starts the generator.
* :mod:`apf_limiter._demo.generator` — the elephant and the mice, in a process of their own.
* :mod:`apf_limiter._demo.client` — their HTTP/1.1 keep-alive client, cheap in CPU.
* :mod:`apf_limiter._demo.report` — the progress line and the side-by-side table.
* :mod:`apf_limiter._demo.verdict` — the closing sentences, from the measured numbers.
* :mod:`apf_limiter._demo.command` — the command: options, both runs, the output.

The demo needs ``uvicorn`` (the ``demo`` extra); its load generator speaks HTTP itself.
"""
