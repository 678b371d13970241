"""Hot reload of a configuration file: stable files only, off the request path, never twice.

Checks run on a worker thread; the tests wait for it (``_reloader.wait()``) and move time with
the fake clock, so every step is deterministic.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest

import apf_limiter.config._sources
import apf_limiter.config._text
from apf_limiter import ConfigError, ConfigProblem, Limiter, RequestDigest
from apf_limiter.config._model import Configuration
from apf_limiter.config._text import NO_DOCUMENT
from apf_limiter.observability import Observer
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config

_APPLIED = "configuration applied"
_REJECTED = "configuration rejected"


class _Recorder(Observer):
    """Records each configuration applied (its server limit) and each one refused."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        self.rejected: list[tuple[ConfigProblem, ...]] = []

    def configuration_applied(self, config: Configuration) -> None:
        self.applied.append(config.server_concurrency_limit)

    def configuration_rejected(self, problems: tuple[ConfigProblem, ...]) -> None:
        self.rejected.append(problems)


def _text(limit: int) -> str:
    return json.dumps(single_level_config(limit=limit))


def _reloading(
    tmp_path: Path, limit: int, name: str = "apf.json"
) -> tuple[Path, FakeClock, Limiter, _Recorder]:
    """A limiter on ``name`` (one level of ``limit`` seats), checked every second."""
    path = tmp_path / name
    path.write_text(_text(limit))
    clock = FakeClock()
    recorder = _Recorder()
    limiter = Limiter.from_file(
        path, reload=True, reload_interval=1.0, clock=clock, observer=recorder
    )
    recorder.applied.clear()  # the first configuration, at start
    return path, clock, limiter, recorder


def _check(limiter: Limiter) -> None:
    """Run a check that fell due to its end: start it, wait for the worker, apply its outcome."""
    limiter.run_due()
    limiter._reloader.wait()  # type: ignore[union-attr]
    limiter.run_due()


async def _tick(clock: FakeClock, limiter: Limiter) -> None:
    """One interval on, and the check it brings."""
    await clock.advance(1)
    _check(limiter)


def _limit(limiter: Limiter) -> int:
    return limiter.statistics().priority_levels["test"].current_limit


def _reads(limiter: Limiter) -> int:
    return limiter._reloader.file.reads  # type: ignore[union-attr]


def _messages(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


async def test_a_change_is_applied_at_the_second_check_that_sees_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    path.write_text(_text(5))
    async with limiter.admit(RequestDigest(user="u")):
        pass
    assert _limit(limiter) == 2  # checked at most once per interval: not yet
    await _tick(clock, limiter)
    assert _limit(limiter) == 2  # seen changed: its writer may not be done
    with caplog.at_level(logging.INFO, logger="apf_limiter"):
        await _tick(clock, limiter)
        await _tick(clock, limiter)
    assert _limit(limiter) == 5
    assert recorder.applied == [5]
    assert len(_messages(caplog, _APPLIED)) == 1  # applied once, logged at INFO once


async def test_a_file_still_changing_at_the_next_check_waits(tmp_path: Path) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    reads = _reads(limiter)
    path.write_text(_text(3))
    await _tick(clock, limiter)
    path.write_text(_text(4))  # changed again between the two checks
    await _tick(clock, limiter)
    assert recorder.applied == [] and _reads(limiter) == reads  # not even read
    await _tick(clock, limiter)  # held still for one check: written in place, not enough
    assert recorder.applied == [] and _reads(limiter) == reads
    await _tick(clock, limiter)  # held still for two
    assert recorder.applied == [4]
    assert _reads(limiter) == reads + 1


async def test_a_bad_file_is_refused_once_and_the_running_configuration_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    bad = single_level_config(limit=5)
    bad["priorityLevels"][0]["limited"]["lendablePercent"] = -1
    bad["serverConcurrencyLimit"] = 0
    path.write_text(json.dumps(bad))
    with caplog.at_level(logging.ERROR, logger="apf_limiter"):
        for _ in range(4):
            await _tick(clock, limiter)
        os.utime(path)  # a touch: the stat moves, the content does not
        for _ in range(3):
            await _tick(clock, limiter)
    assert _limit(limiter) == 2
    (record,) = [r for r in caplog.records if r.getMessage().startswith(_REJECTED)]
    assert record.levelno == logging.ERROR
    assert "lendablePercent" in record.getMessage()
    assert "serverConcurrencyLimit" in record.getMessage()
    assert len(record.problems) == 2  # type: ignore[attr-defined]
    assert len(recorder.rejected) == 1
    # An explicit reload reads the file again, and says again why it is refused.
    assert limiter.reload() is False
    assert len(recorder.rejected) == 2


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("apf.yaml", ""),
        ("apf.yaml", " \n\n\t\n"),
        ("apf.yaml", "# serverConcurrencyLimit: 100\n# (being rewritten)\n"),
        ("apf.yaml", "---\n"),
        ("apf.yaml", "---\n...\n---\n# nothing\n"),
        ("apf.yaml", "--- null\n"),
        ("apf.json", ""),
        ("apf.json", "  \n"),
        ("apf.json", "null"),
    ],
)
async def test_a_file_with_no_document_is_refused_and_the_running_configuration_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, content: str
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2, name=name)
    path.write_text(content)
    with caplog.at_level(logging.INFO, logger="apf_limiter"):
        await _tick(clock, limiter)
        await _tick(clock, limiter)
        await _tick(clock, limiter)  # written in place: two checks of quiet
    assert _limit(limiter) == 2
    assert limiter.config.server_concurrency_limit == 2
    assert recorder.applied == []
    (message,) = _messages(caplog, _REJECTED)
    assert f"{path}: {NO_DOCUMENT}" in message
    assert [r.levelno for r in caplog.records if r.getMessage() == message] == [logging.ERROR]
    assert _messages(caplog, _APPLIED) == []
    assert limiter.reload() is False
    assert limiter.config.server_concurrency_limit == 2


async def test_truncate_pause_write_rewrites_never_apply_a_half_written_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 40 in-place rewrites (truncate, pause 30 ms, write), one every 4 s (in place, a
    # change is read after two quiet checks), at varying phases against checks every
    # second; in every other one a check falls inside the pause and finds the file empty.
    # The file's times are set from the fake clock, so that every step moves the stat
    # however coarse the file system's own timestamps are.
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    base_ns = path.stat().st_mtime_ns

    def stamp(at: float) -> None:
        ns = base_ns + round(at * 1e9)
        os.utime(path, ns=(ns, ns))

    events: list[tuple[float, str, int]] = []
    for i in range(40):
        # Even: the pause spans a check (at a whole second); odd: anywhere in the second.
        phase = 1.0 - 0.03 * (i + 1) / 41 if i % 2 == 0 else (0.137 * i) % 0.96
        start = 2 + 4 * i + phase
        events += [(start, "truncate", i), (start + 0.03, "write", i)]
    end = int(events[-1][0]) + 4
    events += [(float(second), "check", 0) for second in range(1, end + 1)]
    events.sort()
    inside = sum(
        1 for start, kind, _ in events if kind == "truncate" and int(start) < int(start + 0.03)
    )
    assert inside == 20  # the checks that find the file empty

    with caplog.at_level(logging.INFO, logger="apf_limiter"):
        for at, kind, i in events:
            await clock.advance_to(at)
            if kind == "check":
                _check(limiter)
                assert limiter.config.server_concurrency_limit != 600  # the empty file's
            elif kind == "truncate":
                path.write_bytes(b"")
                stamp(at)
            else:
                path.write_text(_text(10 + i))
                stamp(at)
    assert recorder.applied == [10 + i for i in range(40)]  # each rewrite, once, in order
    assert recorder.rejected == []  # the empty file was never even read
    assert len(_messages(caplog, _APPLIED)) == 40
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_file_written_while_it_is_read_is_not_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The read itself writes the file (in place, a new size): the stat after the read then
    # disagrees with the stat before, and what was read is not taken.
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    reader = apf_limiter.config._text.read_file_bytes
    writes: list[int] = []

    def overlapped(name: str, max_size: int) -> bytes:
        data = reader(name, max_size)
        if not writes:
            writes.append(1)
            path.write_text(_text(30))  # lands while the worker reads
        return data

    monkeypatch.setattr(apf_limiter.config._text, "read_file_bytes", overlapped)
    path.write_text(_text(3))
    for _ in range(3):
        await _tick(clock, limiter)  # seen, quiet once, quiet twice: read, overlapped
    assert writes and recorder.applied == []  # valid content, but written while it was read
    for _ in range(3):
        await _tick(clock, limiter)  # what the write left holds still: read again
    assert recorder.applied == [30]


async def test_an_unchanged_file_is_not_read_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    reads = _reads(limiter)
    for _ in range(10):
        await _tick(clock, limiter)
    assert _reads(limiter) == reads  # a stat per check, no read

    # Touched, or the same content renamed over it: read once, not applied again.
    os.utime(path)
    with caplog.at_level(logging.INFO, logger="apf_limiter"):
        for _ in range(5):
            await _tick(clock, limiter)
        replacement = tmp_path / "apf.json.tmp"
        replacement.write_text(_text(2))
        os.replace(replacement, path)
        for _ in range(5):
            await _tick(clock, limiter)
    assert _reads(limiter) == reads + 2
    assert recorder.applied == []
    assert _messages(caplog, _APPLIED) == []


async def test_an_atomic_replacement_with_the_old_size_and_time_is_applied(
    tmp_path: Path,
) -> None:
    # Written to a temporary file in the same directory, then renamed over the file: only the
    # inode tells, when size and modification time are the same (cp -p, rsync -t).
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    before = path.stat()
    replacement = tmp_path / "apf.json.tmp"
    replacement.write_text(_text(3))
    assert replacement.stat().st_size == before.st_size
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replacement, path)
    await _tick(clock, limiter)
    await _tick(clock, limiter)
    assert recorder.applied == [3]


async def test_a_same_size_rewrite_with_the_old_timestamp_is_applied(tmp_path: Path) -> None:
    # Rewritten in place, then its modification time set back: the change time still moves.
    path, clock, limiter, _ = _reloading(tmp_path, limit=2)
    before = path.stat()
    changed = _text(3)
    assert len(changed) == before.st_size
    path.write_text(changed)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    await _tick(clock, limiter)
    await _tick(clock, limiter)
    await _tick(clock, limiter)  # written in place: two checks of quiet
    assert _limit(limiter) == 3


async def test_the_file_is_read_and_parsed_on_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, clock, limiter, _ = _reloading(tmp_path, limit=2)
    loader = apf_limiter.config._sources.load_file_content
    gate = threading.Event()
    parsed_on: list[int] = []

    def slow(data: bytes, name: str) -> Configuration:
        parsed_on.append(threading.get_ident())
        # A parse that takes as long as the test wants. The timeout only keeps a broken
        # build (parsing on the caller's thread) from hanging the test.
        gate.wait(timeout=10)
        return loader(data, name)

    monkeypatch.setattr(apf_limiter.config._sources, "load_file_content", slow)
    path.write_text(_text(5))
    await _tick(clock, limiter)  # seen changed
    await _tick(clock, limiter)  # held still once: written in place, it waits for another
    await clock.advance(1)
    # The check falls due inside this admission and its release: both return while the
    # parse is held, and the running configuration serves them.
    async with limiter.admit(RequestDigest(user="u")):
        assert not gate.is_set()
        assert _limit(limiter) == 2
    assert not gate.is_set()
    assert limiter._reloader.busy  # type: ignore[union-attr]
    gate.set()
    limiter._reloader.wait()  # type: ignore[union-attr]
    assert _limit(limiter) == 2  # handed back, applied by the next call
    async with limiter.admit(RequestDigest(user="u")):
        pass
    assert _limit(limiter) == 5
    assert parsed_on and threading.get_ident() not in parsed_on


async def test_close_waits_for_the_worker_and_starts_no_more_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    loader = apf_limiter.config._sources.load_file_content
    gate = threading.Event()
    finished: list[Configuration] = []

    def gated(data: bytes, name: str) -> Configuration:
        gate.wait(timeout=10)
        config = loader(data, name)
        finished.append(config)
        return config

    monkeypatch.setattr(apf_limiter.config._sources, "load_file_content", gated)
    path.write_text(_text(5))
    await _tick(clock, limiter)
    await _tick(clock, limiter)  # held still once: written in place, it waits for another
    await clock.advance(1)
    limiter.run_due()  # starts the check that reads and parses
    threads = threading.active_count()
    gate.set()
    limiter.close()
    assert len(finished) == 1  # close() returned after the worker had done its work
    assert not limiter._reloader.busy  # type: ignore[union-attr]
    path.write_text(_text(6))
    for _ in range(3):
        await clock.advance(1)
        limiter.run_due()
        assert not limiter._reloader.busy  # type: ignore[union-attr]
    assert threading.active_count() <= threads
    assert recorder.applied == []  # the outcome of the check closed on is dropped
    assert limiter.reload() is True  # on demand, on this thread
    assert recorder.applied == [6]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
async def test_a_process_forked_during_a_check_does_not_wait_for_the_parents_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    loader = apf_limiter.config._sources.load_file_content
    gate = threading.Event()

    def gated(data: bytes, name: str) -> Configuration:
        gate.wait(timeout=10)
        return loader(data, name)

    monkeypatch.setattr(apf_limiter.config._sources, "load_file_content", gated)
    path.write_text(_text(5))
    await _tick(clock, limiter)
    await _tick(clock, limiter)  # held still once: written in place, it waits for another
    await clock.advance(1)
    limiter.run_due()  # the parent's worker holds the check, gated
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through its exit status)
        status = 1
        try:
            gate.set()  # the child's own copy: the parent's worker is not in this process
            limiter.run_due()  # does not wait for a thread it does not have
            collected = not limiter._reloader.busy  # type: ignore[union-attr]
            if collected and limiter.reload() and _limit(limiter) == 5:
                status = 0
        finally:
            os._exit(status)
    gate.set()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    limiter._reloader.wait()  # type: ignore[union-attr]
    limiter.run_due()
    assert recorder.applied == [5]


async def test_an_explicit_reload_reads_at_once_and_waits_for_the_check_in_flight(
    tmp_path: Path,
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    path.write_text(_text(3))
    assert limiter.reload() is True  # no stability wait: the caller says it is done
    assert limiter.reload() is False  # the same content again
    path.write_text(_text(4))
    await _tick(clock, limiter)
    await _tick(clock, limiter)  # held still once: written in place, it waits for another
    await clock.advance(1)
    limiter.run_due()  # a check, which finds 4: not yet applied
    limiter._reloader.wait()  # type: ignore[union-attr]
    path.write_text(_text(5))
    assert limiter.reload() is True
    assert recorder.applied == [3, 4, 5]
    assert not limiter._reloader.busy  # type: ignore[union-attr]


async def test_a_missing_file_is_reported_once_then_taken_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock, limiter, recorder = _reloading(tmp_path, limit=2)
    path.unlink()
    with caplog.at_level(logging.ERROR, logger="apf_limiter"):
        for _ in range(5):
            await _tick(clock, limiter)
    (message,) = _messages(caplog, _REJECTED)
    assert "cannot read the file: No such file or directory" in message
    path.write_text(_text(4))
    await _tick(clock, limiter)
    await _tick(clock, limiter)
    assert recorder.applied == [4]


async def test_an_unexpected_failure_of_a_check_is_logged_and_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, clock, limiter, _ = _reloading(tmp_path, limit=2)

    def broken(data: bytes, name: str) -> Configuration:
        raise RuntimeError("a bug somewhere in loading")

    monkeypatch.setattr(apf_limiter.config._sources, "load_file_content", broken)
    path.write_text(_text(3))
    with caplog.at_level(logging.ERROR, logger="apf_limiter"):
        await _tick(clock, limiter)
        await _tick(clock, limiter)
        await _tick(clock, limiter)  # written in place: two checks of quiet
    assert _limit(limiter) == 2
    (record,) = [r for r in caplog.records if r.getMessage() == f"reloading {path} failed"]
    assert record.exc_info is not None and "a bug somewhere" in str(record.exc_info[1])


async def test_a_reload_that_fails_unexpectedly_inside_a_release_releases_the_seats(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, clock, limiter, _ = _reloading(tmp_path, limit=1)

    def broken(config: object) -> Configuration:
        raise RuntimeError("a bug somewhere in reconfiguration")

    # Parsed on the worker, applied (reconfigure loads its source) in the release.
    monkeypatch.setattr(apf_limiter.config._sources, "load_source", broken)
    path.write_text(_text(2))
    await _tick(clock, limiter)
    await _tick(clock, limiter)  # held still once: written in place, it waits for another
    with caplog.at_level(logging.ERROR, logger="apf_limiter"):
        async with limiter.admit(RequestDigest(user="u")):
            # The scheduler's timer starts the check; no call into the limiter before the
            # release, which must be the one to collect and apply it.
            await clock.advance(1.0)
            limiter._reloader.wait()  # type: ignore[union-attr]
            assert limiter._reloader.busy  # type: ignore[union-attr]
    assert not limiter._reloader.busy  # type: ignore[union-attr]
    assert limiter.statistics().priority_levels["test"].executing_seats == 0
    assert limiter.config.server_concurrency_limit == 1
    (record,) = [r for r in caplog.records if r.getMessage() == f"reloading {path} failed"]
    assert "a bug somewhere" in str(record.exc_info[1])  # type: ignore[index]


async def test_a_check_moves_the_next_check_on(tmp_path: Path) -> None:
    # After a check that changes nothing, the fast path must not do housekeeping on every
    # call until the next borrowing adjustment.
    _, clock, limiter, _ = _reloading(tmp_path, limit=2)
    await clock.advance(1.5)
    async with limiter.admit(RequestDigest(user="u")):
        pass
    limiter._reloader.wait()  # type: ignore[union-attr]
    async with limiter.admit(RequestDigest(user="u")):
        pass
    # The scheduler's timer started the check at 1.0 (the loop runs): the next one is at 2.0.
    assert limiter._core.scheduler.next_check == pytest.approx(2.0)


def test_reload_needs_a_file() -> None:
    limiter = Limiter(single_level_config(), clock=FakeClock())
    with pytest.raises(RuntimeError, match="from_file"):
        limiter.reload()


def test_reload_interval_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    path.write_text(_text(2))
    with pytest.raises(ValueError, match="reload_interval"):
        Limiter.from_file(path, reload=True, reload_interval=0)


def test_from_file_refuses_a_file_with_no_document(tmp_path: Path) -> None:
    path = tmp_path / "apf.yaml"
    path.write_text("# to be written\n")
    with pytest.raises(ConfigError) as caught:
        Limiter.from_file(path, reload=True, clock=FakeClock())
    assert [str(p) for p in caught.value.problems] == [f"{path}: {NO_DOCUMENT}"]
