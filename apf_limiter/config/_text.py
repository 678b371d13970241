"""Reading configuration documents from YAML or JSON text and files.

YAML may hold several documents (``---``); JSON holds one. PyYAML is an optional dependency
(the ``yaml`` extra): without it, reading YAML raises a :class:`ConfigError` saying how to
install it. Any failure to read or parse is a :class:`ConfigError` whose problem path is the file
name (empty for text), with the parser's line and column when it gives them. A key given twice in
one mapping is a problem too, since the parsers would otherwise silently keep the last value.
So is a file that holds no document (empty, or only comments): most often a file caught
half-written, never a configuration someone meant.

Files are read with :func:`read_file_bytes`: regular files only (a symbolic link to one is
followed), of at most :data:`DEFAULT_MAX_FILE_SIZE` bytes unless told otherwise, so that a path
that names a named pipe, a device (``/dev/zero``, ``/dev/stdin``) or a directory, or a file far
bigger than any configuration, is refused at once instead of blocking or exhausting memory.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apf_limiter._errors import ConfigError, ConfigProblem
from apf_limiter.config._settings import DEFAULT_MAX_FILE_SIZE

FORMATS: tuple[str, ...] = ("yaml", "json")
_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json"}
_INSTALL_HINT = "reading YAML needs PyYAML: pip install 'apf_limiter[yaml]'"
#: The problem of a file that holds no document.
NO_DOCUMENT = (
    "the file holds no configuration: it is empty, or only blank lines, comments, document "
    "markers or null (write {} for a deliberately empty configuration)"
)
#: The problem of text (``load_config_text``) that holds no document, as for a file.
NO_TEXT_DOCUMENT = (
    "the text holds no configuration: it is empty, or only blank lines, comments, document "
    "markers or null (pass {} for a deliberately empty configuration)"
)


# Not blocking on open: a named pipe swapped in between the stat and the open must not wait for
# a writer. No controlling terminal from a terminal device either. Both are refused at once.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_CHUNK = 1 << 20


def read_documents(
    path: str | os.PathLike[str], max_size: int = DEFAULT_MAX_FILE_SIZE
) -> list[object]:
    """Read the documents of a ``.yaml``/``.yml``/``.json`` file.

    Raises:
        ConfigError: If the file has another suffix, is not a regular file, is bigger than
            ``max_size`` bytes, cannot be read or parsed, or holds no document
            (:func:`read_file_bytes`, :func:`parse_file`).
    """
    name = os.fspath(path)
    file_format(name)  # an unsupported name is refused before the file is opened
    return parse_file(read_file_bytes(name, max_size), name)


def read_file_bytes(name: str, max_size: int = DEFAULT_MAX_FILE_SIZE) -> bytes:
    """Read a regular file of at most ``max_size`` bytes, never blocking on what it is.

    The path is stat'ed first (following symbolic links) and refused unless it is a regular
    file no bigger than ``max_size``; then it is opened without blocking and checked again on
    the open descriptor, since the path may have been replaced in between; then at most
    ``max_size + 1`` bytes are read, so that a file growing meanwhile is refused too.

    Raises:
        ConfigError: If the file cannot be read, is not a regular file (a directory, a named
            pipe, a device, a socket) or holds more than ``max_size`` bytes.
    """
    try:
        before = os.stat(name)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the name
        raise unreadable(name, error) from error
    _check_kind(name, before, max_size)
    try:
        fd = os.open(name, _OPEN_FLAGS)
    except OSError as error:
        raise unreadable(name, error) from error
    try:
        _check_kind(name, os.fstat(fd), max_size)
        data = _read_at_most(fd, max_size + 1)
    except OSError as error:
        raise unreadable(name, error) from error
    finally:
        os.close(fd)
    if len(data) > max_size:
        raise _too_big(name, max_size, f"more than {max_size} bytes")
    return data


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _check_kind(name: str, result: os.stat_result, max_size: int) -> None:
    mode = result.st_mode
    if not stat.S_ISREG(mode):
        raise ConfigError(
            [
                ConfigProblem(
                    name,
                    f"cannot read the file: it is {_kind(mode)}, not a regular file "
                    "(only regular files are read, or symbolic links to one)",
                )
            ]
        )
    if result.st_size > max_size:
        raise _too_big(name, max_size, f"{result.st_size} bytes")


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "a special file"


def _too_big(name: str, max_size: int, size: str) -> ConfigError:
    message = f"the file is too big: {size}, over the limit of {max_size} bytes (max_file_size)"
    return ConfigError([ConfigProblem(name, message)])


def file_format(name: str) -> str:
    """The text format (``"yaml"`` or ``"json"``) of a file, from its name's suffix.

    Raises:
        ConfigError: If the name does not end in ``.yaml``, ``.yml`` or ``.json``.
    """
    text_format = _SUFFIXES.get(Path(name).suffix.lower())
    if text_format is None:
        raise ConfigError(
            [
                ConfigProblem(
                    name,
                    "unsupported file type: the name must end in .yaml, .yml or .json "
                    "(for YAML or JSON text, use load_config_text())",
                )
            ]
        )
    return text_format


def unreadable(name: str, error: OSError | ValueError) -> ConfigError:
    """The error for a file that cannot be read (``error`` is what opening or reading raised)."""
    detail = (error.strerror if isinstance(error, OSError) else None) or error
    if isinstance(error, FileNotFoundError):
        # A relative path resolves against the working directory, which is often not the
        # one the user thinks of (a service manager, a container, a test runner): name both.
        where = os.path.abspath(name)
        detail = f"{detail} (looked for {where}; the working directory is {os.getcwd()})"
    return ConfigError([ConfigProblem(name, f"cannot read the file: {detail}")])


def parse_file(data: bytes, name: str) -> list[object]:
    """Parse a file's content (UTF-8) into its documents; the name gives the format.

    A file that holds no document is refused: empty, or only blank lines, comments, document
    markers (``---``, ``...``) or ``null``. Such a file is most often one caught half-written
    (truncated, not yet rewritten), and loading it would give the mandatory objects alone;
    a deliberately empty configuration is written ``{}``.

    Raises:
        ConfigError: If the name has an unsupported suffix, the content is not UTF-8, cannot
            be parsed, or holds no document.
    """
    text_format = file_format(name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise unreadable(name, error) from error
    if "\r" in text:
        # What reading the file in text mode did (universal newlines): the parsers' line and
        # column numbers, and the strings, stay as they were.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    # isspace(), not strip(): no copy of a big file's text.
    blank = not text or text.isspace()
    documents = [] if blank else parse_documents(text, text_format, source=name)
    if all(document is None for document in documents):
        raise ConfigError([ConfigProblem(name, NO_DOCUMENT)])
    return documents


def parse_documents(text: str, text_format: str = "yaml", *, source: str = "") -> list[object]:
    """Parse ``text`` into its documents.

    Args:
        text: YAML (possibly several documents) or JSON text.
        text_format: ``"yaml"`` or ``"json"``.
        source: The file name used as the path of problems (empty for text).

    Raises:
        ConfigError: If the text cannot be parsed, or PyYAML is missing for YAML.
        ValueError: If ``text_format`` is not one of :data:`FORMATS`.
    """
    if text_format == "json":
        return [_parse_json(text, source)]
    if text_format == "yaml":
        return _parse_yaml(text, source)
    raise ValueError(f"format must be 'yaml' or 'json', not {text_format!r}")


def _parse_json(text: str, source: str) -> object:
    duplicates: list[str] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                duplicates.append(key)
            result[key] = value
        return result

    try:
        document: object = json.loads(text, object_pairs_hook=pairs_hook)
    except json.JSONDecodeError as error:
        message = f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        raise ConfigError([ConfigProblem(source, message)]) from error
    except (ValueError, RecursionError) as error:
        raise ConfigError([ConfigProblem(source, f"invalid JSON: {_unparsable(error)}")]) from error
    if duplicates:
        raise ConfigError(
            [ConfigProblem(source, f'invalid JSON: duplicate key "{key}"') for key in duplicates]
        )
    return document


def _parse_yaml(text: str, source: str) -> list[object]:
    try:
        import yaml
    except ImportError as error:
        raise ConfigError([ConfigProblem(source, _INSTALL_HINT)]) from error

    duplicates: list[str] = []
    loader_class = _duplicate_checking_loader(yaml, duplicates.append)
    try:
        documents = [
            document
            for document in yaml.load_all(text, Loader=loader_class)
            if document is not None
        ]
    except yaml.MarkedYAMLError as error:
        raise ConfigError([ConfigProblem(source, _yaml_message(error, text))]) from error
    except yaml.YAMLError as error:
        raise ConfigError([ConfigProblem(source, f"invalid YAML: {error}")]) from error
    except (ValueError, RecursionError) as error:
        raise ConfigError([ConfigProblem(source, f"invalid YAML: {_unparsable(error)}")]) from error
    except (KeyError, IndexError, AttributeError, TypeError) as error:
        # PyYAML's constructors fail this way on explicit tags they cannot build from the
        # value (!!bool x, !!int '', !!timestamp x): the text is invalid all the same.
        raise ConfigError(
            [ConfigProblem(source, f"invalid YAML: a tagged value cannot be built ({error!r})")]
        ) from error
    if duplicates:
        raise ConfigError([ConfigProblem(source, message) for message in duplicates])
    return documents


def _unparsable(error: ValueError | RecursionError) -> str:
    # What the parsers raise beyond their own errors: Python's limit on the digits of an
    # integer (a ValueError) and nesting deeper than the recursion limit.
    if isinstance(error, RecursionError):
        return "nested too deeply"
    return str(error)


#: Said when a tab sits where YAML wants indentation: PyYAML's own words ("found character
#: that cannot start any token") do not name it, and a tab looks like spaces in most editors.
TAB_HINT = "a tab character: YAML indents with spaces only"


def _yaml_message(error: Any, text: str) -> str:
    mark = error.problem_mark or error.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    detail = error.problem or error.context or "syntax error"
    if mark is not None and "tab" not in detail and _tab_at(text, mark.line, mark.column):
        detail = f"{detail} ({TAB_HINT})"
    return f"invalid YAML{where}: {detail}"


def _tab_at(text: str, line: int, column: int) -> bool:
    """Whether the marked place is a tab, or follows one in its line's indentation."""
    lines = text.splitlines()
    if not 0 <= line < len(lines):
        return False
    content = lines[line]
    indentation = content[: len(content) - len(content.lstrip(" \t"))]
    return "\t" in indentation[: column + 1] or content[column : column + 1] == "\t"


def _duplicate_checking_loader(yaml: Any, report: Callable[[str], None]) -> Any:
    # libyaml's parser is several times faster; the constructor stays the Python one.
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class DuplicateCheckingLoader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if not isinstance(node, yaml.MappingNode):
                # A scalar or sequence tagged !!map or !!set: PyYAML's own check reports it.
                return super().construct_mapping(node, deep=deep)
            seen: set[object] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool):
                    continue
                if key in seen:
                    mark = key_node.start_mark
                    report(
                        f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: "
                        f'duplicate key "{key}"'
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return DuplicateCheckingLoader
