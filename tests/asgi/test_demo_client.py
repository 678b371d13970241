"""The demo's HTTP/1.1 client: parsing, keep-alive and reconnecting (127.0.0.1 only)."""

from __future__ import annotations

import asyncio

import pytest

from apf_limiter._demo.client import Connection, Response, ResponseParser, encode_get

pytestmark = pytest.mark.timeout(10)

OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"
REJECTED = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 4\r\nRetry-After: 3\r\n\r\n{}\r\n"


class FakeTransport(asyncio.WriteTransport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def connected() -> tuple[ResponseParser, FakeTransport]:
    parser, transport = ResponseParser(), FakeTransport()
    parser.connection_made(transport)
    return parser, transport


def test_encode_get_writes_one_http11_request() -> None:
    request = encode_get("127.0.0.1", 8000, "/work", {"authorization": "Bearer mouse-1"})
    assert request == (
        b"GET /work HTTP/1.1\r\nhost: 127.0.0.1:8000\r\nauthorization: Bearer mouse-1\r\n\r\n"
    )


async def test_a_response_split_anywhere_resolves_when_complete() -> None:
    parser, transport = connected()
    for response, expected in ((REJECTED, Response(429, True)), (OK, Response(200, False))):
        waiter = parser.send(b"GET / HTTP/1.1\r\n\r\n")
        for at in range(len(response)):
            assert not waiter.done()
            parser.data_received(response[at : at + 1])
        assert waiter.result() == expected
    # Both requests went out on the one connection, which stays open.
    assert len(transport.written) == 2 and parser.usable and not transport.closed


async def test_connection_close_ends_the_connection_after_the_response() -> None:
    parser, transport = connected()
    waiter = parser.send(b"GET / HTTP/1.1\r\n\r\n")
    parser.data_received(OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    assert waiter.result() == Response(200, False)
    assert not parser.usable and transport.closed


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: two\r\n\r\nok",
        b"SSH-2.0-OpenSSH\r\n\r\n",
    ],
)
async def test_a_response_it_cannot_read_fails_the_request(response: bytes) -> None:
    parser, transport = connected()
    waiter = parser.send(b"GET / HTTP/1.1\r\n\r\n")
    parser.data_received(response)
    with pytest.raises(ConnectionError):
        waiter.result()
    assert not parser.usable and transport.closed


async def test_a_lost_connection_fails_the_request() -> None:
    parser, _ = connected()
    waiter = parser.send(b"GET / HTTP/1.1\r\n\r\n")
    parser.data_received(OK[:10])
    parser.connection_lost(None)
    with pytest.raises(ConnectionError):
        waiter.result()
    assert not parser.usable


async def test_it_keeps_the_connection_alive_and_reconnects_when_the_server_closes() -> None:
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for answered in range(1, 4):
            await reader.readuntil(b"\r\n\r\n")
            # The third answer on a connection closes it.
            close = b"connection: close\r\n" if answered == 3 else b""
            writer.write(b"HTTP/1.1 200 OK\r\n" + close + b"content-length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = Connection("127.0.0.1", port, encode_get("127.0.0.1", port, "/", {}))
    try:
        statuses = [(await connection.get()).status for _ in range(5)]
    finally:
        connection.close()
        server.close()
        await server.wait_closed()
    assert statuses == [200] * 5
    assert connections == 2


async def test_a_refused_connection_raises_oserror() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(OSError):
        await Connection("127.0.0.1", port, b"GET / HTTP/1.1\r\n\r\n").get()
