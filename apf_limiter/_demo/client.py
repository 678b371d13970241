"""The demo's HTTP client: one HTTP/1.1 keep-alive connection, one ``GET`` at a time.

The load generator must cost far less than the server it drives, or the demo measures the
generator. An ``httpx`` request costs a few milliseconds of CPU; this client writes a request
prepared once, reads the status line, ``content-length`` and whether ``Retry-After`` is
present, and costs tens of microseconds. It speaks only what the demo's server answers:
responses with a ``content-length`` (uvicorn closes the connection otherwise, and so does this
client).
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple


class Response(NamedTuple):
    """What the demo needs of a response.

    Attributes:
        status: The status code.
        retry_after: Whether the response carried a ``Retry-After`` header.
    """

    status: int
    retry_after: bool


def encode_get(host: str, port: int, path: str, headers: dict[str, str]) -> bytes:
    """The bytes of an HTTP/1.1 ``GET`` request with ``headers`` (sent as they are each time)."""
    lines = [f"GET {path} HTTP/1.1", f"host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class ResponseParser(asyncio.Protocol):
    """The protocol of one connection: sends a request, resolves a future with the response.

    At most one request is in flight (no pipelining). A response that says ``connection:
    close``, a malformed one or a lost connection marks the connection unusable; the
    :class:`Connection` that owns it then opens a new one.
    """

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.usable = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Response] | None = None
        self._head: tuple[int, int, bool, bool] | None = None  # (total, status, retry, close)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport."""
        assert isinstance(transport, asyncio.WriteTransport)
        self.transport = transport
        self.usable = True

    def send(self, request: bytes) -> asyncio.Future[Response]:
        """Write ``request``; the returned future resolves with the response."""
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        """Parse what arrived; resolve the waiting request once its response is complete."""
        self._buffer += data
        if self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self._head = self._parse_head(bytes(self._buffer[:end]).lower(), end + 4)
            if self._head is None:
                self._fail(ConnectionError("malformed or unsupported response"))
                return
        total, status, retry_after, close = self._head
        if len(self._buffer) < total:
            return
        del self._buffer[:total]
        self._head = None
        waiter, self._waiter = self._waiter, None
        if close or self._buffer or waiter is None:
            # The server ends the connection, or sent what nobody asked for.
            self._fail(None)
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(status, retry_after))

    @staticmethod
    def _parse_head(head: bytes, size: int) -> tuple[int, int, bool, bool] | None:
        if not head.startswith(b"http/1.1 ") or not head[9:12].isdigit():
            return None
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            return None
        value_end = head.find(b"\r\n", at + 17)
        value = head[at + 17 : value_end if value_end >= 0 else len(head)].strip()
        if not value.isdigit():
            return None
        return (
            size + int(value),
            int(head[9:12]),
            b"\r\nretry-after:" in head,
            b"\r\nconnection: close" in head,
        )

    def _fail(self, error: Exception | None) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error or ConnectionError("connection closed"))

    def connection_lost(self, exc: Exception | None) -> None:
        """Fail the waiting request, if any."""
        self._fail(exc or ConnectionError("connection closed by the server"))


class Connection:
    """A keep-alive connection to ``host:port`` that sends the same request each time.

    Args:
        host: The server's address.
        port: The server's port.
        request: The request's bytes (:func:`encode_get`).
    """

    def __init__(self, host: str, port: int, request: bytes) -> None:
        self._host = host
        self._port = port
        self._request = request
        self._protocol: ResponseParser | None = None

    async def get(self) -> Response:
        """Send the request and wait for its response, connecting first if needed.

        Raises:
            OSError: If the connection cannot be made or is lost (``ConnectionError``).
        """
        protocol = self._protocol
        if protocol is None or not protocol.usable:
            loop = asyncio.get_running_loop()
            _, protocol = await loop.create_connection(ResponseParser, self._host, self._port)
            self._protocol = protocol
        return await protocol.send(self._request)

    def close(self) -> None:
        """Close the connection (a request in flight fails)."""
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
