"""Loading a file refuses what is not a regular file, and files over the size limit, at once."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from apf_limiter import ConfigError, Limiter, load_config
from apf_limiter.config._settings import DEFAULT_MAX_FILE_SIZE
from tests.helpers import single_level_config

_TEXT = json.dumps(single_level_config(limit=3))


def _message(error: pytest.ExceptionInfo[ConfigError]) -> str:
    (problem,) = error.value.problems
    return problem.message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    os.mkfifo(path)

    # A broken build would wait in open() or read() for a writer: this one comes only then.
    def unblock() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)

    rescue = threading.Timer(10, unblock)
    rescue.start()
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError) as error:
            load_config(path)
    finally:
        rescue.cancel()
    assert time.monotonic() - started < 5
    assert "it is a named pipe, not a regular file" in _message(error)
    with pytest.raises(ConfigError, match="named pipe"):
        Limiter.from_file(path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_symbolic_link_to_a_device_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "apf.yaml"
    path.symlink_to("/dev/zero")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert "it is a character device, not a regular file" in _message(error)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    path.mkdir()
    with pytest.raises(ConfigError, match="it is a directory, not a regular file"):
        load_config(path)


def test_a_symbolic_link_to_a_regular_file_is_followed(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text(_TEXT)
    path = tmp_path / "apf.json"
    path.symlink_to(target)
    assert load_config(path).server_concurrency_limit == 3


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    path.write_text(_TEXT)
    size = len(_TEXT.encode())
    assert load_config(path, max_file_size=size).server_concurrency_limit == 3
    with pytest.raises(ConfigError) as error:
        load_config(path, max_file_size=size - 1)
    assert _message(error) == (
        f"the file is too big: {size} bytes, over the limit of {size - 1} bytes (max_file_size)"
    )
    with pytest.raises(ConfigError, match="too big"):
        Limiter.from_file(path, max_file_size=size - 1)


def test_the_default_size_limit_is_four_mebibytes(tmp_path: Path) -> None:
    assert DEFAULT_MAX_FILE_SIZE == 4 * 1024 * 1024
    path = tmp_path / "apf.yaml"
    # A comment: valid YAML however long, so only the size refuses it.
    path.write_bytes(b"{}\n#" + b"x" * DEFAULT_MAX_FILE_SIZE)
    with pytest.raises(ConfigError, match="too big"):
        load_config(path)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "4096", True])
def test_the_size_limit_must_be_a_positive_integer(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "apf.json"
    path.write_text(_TEXT)
    with pytest.raises(ValueError, match="max_file_size"):
        load_config(path, max_file_size=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_file_size"):
        Limiter.from_file(path, max_file_size=bad)
