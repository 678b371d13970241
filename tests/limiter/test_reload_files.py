"""Reload against hostile files: special files, oversized files, a writer that pauses, and the
classifier built off the limiter's thread.

The schedule runs on the fake clock; the worker is waited for (``_reloader.wait()``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from apf_limiter import Limiter
from tests.limiter.test_reload import _REJECTED, _check, _messages, _reloading, _text, _tick


def _replace(path: Path, text: str) -> None:
    """Replace the file atomically (a new inode, renamed over it)."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
async def test_a_named_pipe_at_the_path_is_refused_and_a_later_file_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    os.replace(pipe, path)

    # A broken build's worker waits in open() or read() for a writer; this one comes only
    # then, so that the test fails instead of hanging.
    def unblock() -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)

    rescue = threading.Timer(10, unblock)
    rescue.start()
    started = time.monotonic()
    try:
        with caplog.at_level(logging.ERROR, logger="apf_limiter"):
            for _ in range(3):
                await _tick(clock, limiter)  # a new file: seen, then quiet, then read
    finally:
        rescue.cancel()
    assert time.monotonic() - started < 5
    (message,) = _messages(caplog, _REJECTED)
    assert "it is a named pipe, not a regular file" in message
    assert limiter.config.server_concurrency_limit == 2  # the running one kept
    _replace(path, _text(7))
    await _tick(clock, limiter)
    await _tick(clock, limiter)
    assert recorder.applied == [7]
    os.remove(path)
    os.mkfifo(path)
    await _tick(clock, limiter)
    await clock.advance(1)
    limiter.run_due()  # a check that meets the pipe
    started = time.monotonic()
    limiter.close()  # waits for that check: it must not hang
    assert time.monotonic() - started < 5
    assert limiter.config.server_concurrency_limit == 7


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
async def test_a_symbolic_link_to_dev_zero_is_refused_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    link = tmp_path / "link.json"
    link.symlink_to("/dev/zero")
    os.replace(link, path)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="apf_limiter"):
        for _ in range(3):
            await _tick(clock, limiter)
    assert time.monotonic() - started < 5  # not read until memory runs out
    (message,) = _messages(caplog, _REJECTED)
    assert "it is a character device, not a regular file" in message
    assert recorder.applied == [] and limiter.config.server_concurrency_limit == 2
    assert limiter.reload() is False  # the explicit reload refuses it too


async def test_a_file_over_the_size_limit_is_refused_and_the_running_one_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "apf.json"
    path.write_text(_text(2))
    limiter = Limiter.from_file(path, reload=True, max_file_size=1000)
    assert limiter.config.server_concurrency_limit == 2
    big = _text(5).replace('"test"', '"test"' + " " * 1000, 1)
    assert len(big) > 1000
    _replace(path, big)
    with caplog.at_level(logging.ERROR, logger="apf_limiter"):
        assert limiter.reload() is False
    (message,) = _messages(caplog, _REJECTED)
    assert f"the file is too big: {len(big)} bytes, over the limit of 1000 bytes" in message
    assert limiter.config.server_concurrency_limit == 2
    _replace(path, _text(5))
    assert limiter.reload() is True
    assert limiter.config.server_concurrency_limit == 5


async def test_a_writer_pausing_longer_than_an_interval_is_not_read_half_done(
    tmp_path: Path,
) -> None:
    # Rewritten in place: the first line (a setting: alone, it would load as the built-in
    # levels), a pause of 1.5 intervals spanning a check, then the rest.
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2, name="apf.yaml")
    full = _text(9)  # JSON is YAML: the same content, in the file's format
    first_line = "serverConcurrencyLimit: 600\n"
    await clock.advance(0.2)
    path.write_text(first_line)
    await clock.advance(0.8)
    _check(limiter)  # at 1.0: sees it changed
    await clock.advance(1.0)
    _check(limiter)  # at 2.0: still the same (the writer pauses): one quiet check
    await clock.advance(0.2)
    path.write_text(full)  # at 2.2: the rest lands
    for _ in range(4):
        await _tick(clock, limiter)
        assert limiter.config.server_concurrency_limit != 600  # never the half file
    assert recorder.applied == [9]


async def test_the_classifier_is_built_on_the_worker_thread(tmp_path: Path) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    _replace(path, _text(5))
    await _tick(clock, limiter)  # seen changed
    reloader = limiter._reloader
    assert reloader is not None
    # The scheduler's timer (armed in this event loop) starts the check that reads, parses
    # and builds. No call into the limiter until it is waited for: a call could collect and
    # apply the outcome first, if the worker was quick.
    await clock.advance(1)
    assert reloader.busy
    reloader.wait()
    outcome = reloader._outcome
    assert outcome is not None and outcome.config is not None
    built = outcome.classifier
    assert built is not None  # built by the worker, before any call of the limiter's
    limiter.run_due()  # applies it
    assert recorder.applied == [5]
    assert limiter._core.controller.classifier is built  # used as built, not built again
