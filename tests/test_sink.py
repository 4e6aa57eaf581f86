"""The upload benchmark's lean receiver counts every body as it came, however it is split.

`benchmarks/_sink.py` parses just enough HTTP/1.1 to drop a body and say its length; a
miscount would make case 2 measure a broken exchange (or hang), so it is checked here over
a real loopback socket, with the head, bodies and chunk-size lines split across writes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _sink import BUFFER, start_sink

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@pytest.fixture
async def connection() -> AsyncIterator[Connection]:
    server = await start_sink("127.0.0.1")
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    yield reader, writer
    writer.close()
    server.close()
    await server.wait_closed()


@pytest.fixture
def sink_in_a_thread() -> Iterator[int]:
    """A receiver on its own loop in a thread (its port): one that spins on its input fails
    the test on a timeout instead of stopping the test's own loop for good."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(start_sink("127.0.0.1"))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield server.sockets[0].getsockname()[1]
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    if not thread.is_alive():
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()


async def send_in_pieces(writer: asyncio.StreamWriter, data: bytes, sizes: list[int]) -> None:
    """Write `data` in pieces of the given sizes (cycled), each read on its own."""
    offset = 0
    index = 0
    while offset < len(data):
        size = sizes[index % len(sizes)]
        writer.write(data[offset : offset + size])
        await writer.drain()
        # Two turns of the loop: the receiver's socket polls readable and is read before
        # the next piece goes out (drain() alone does not yield, and the pieces would merge).
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        offset += size
        index += 1


async def answer(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes]:
    # A miscounted body leaves the receiver waiting for bytes that never come: fail, not hang.
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    fields = {
        n.lower(): v.strip() for n, _, v in (line.partition(":") for line in lines[1:] if line)
    }
    body = await asyncio.wait_for(reader.readexactly(int(fields["content-length"])), 10)
    return lines[0].encode(), fields, body


def request(path: str, fields: str, token: bool = True) -> bytes:
    auth = "X-Access-Token: t\r\n" if token else ""
    return (
        f"POST /files?path={path} HTTP/1.1\r\nHost: k.sandbox.test\r\n{auth}{fields}\r\n".encode()
    )


def chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    framed = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces)
    return framed + b"0\r\n\r\n"


async def test_content_length_bodies_on_one_connection(connection: Connection) -> None:
    reader, writer = connection
    body = bytes(range(256)) * (3 * BUFFER // 256 + 7)
    message = request("/home/user/a.bin", f"Content-Length: {len(body)}\r\n") + body
    await send_in_pieces(writer, message, [5, 70_001, BUFFER + 3])
    status, fields, reply = await answer(reader)
    assert status == b"HTTP/1.1 200 OK"
    assert int(fields["x-bench-received"]) == len(body)
    assert json.loads(reply) == [{"path": "/home/user/a.bin", "name": "a.bin", "type": "file"}]
    # Keep-alive: the next request on the same connection, its head in one piece with an
    # empty body, is answered on its own.
    writer.write(request("/b", "Content-Length: 0\r\n"))
    status, fields, reply = await answer(reader)
    assert (status, fields["x-bench-received"]) == (b"HTTP/1.1 200 OK", "0")
    assert json.loads(reply)[0]["name"] == "b"


@pytest.mark.parametrize("pieces", [[1], [3, 11], [4096], [1 << 16, 17]])
async def test_chunked_bodies_split_anywhere(connection: Connection, pieces: list[int]) -> None:
    reader, writer = connection
    body = b"0123456789abcdef\r\n" * 2000  # CRLFs inside the data are data
    message = request("/c", "Transfer-Encoding: chunked\r\n") + chunked(body, 1000)
    message += request("/d", "Content-Length: 3\r\n") + b"xyz"
    await send_in_pieces(writer, message, pieces)
    _, fields, reply = await answer(reader)
    assert int(fields["x-bench-received"]) == len(body)
    _, fields, reply = await answer(reader)
    assert fields["x-bench-received"] == "3"
    assert json.loads(reply)[0]["path"] == "/d"


async def test_a_request_without_a_token_is_refused(sink_in_a_thread: int) -> None:
    """Refused, and the connection closed: bytes after the refused body are never read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", sink_in_a_thread)
    refused = request("/e", "Content-Length: 2\r\n", token=False) + b"hi"
    writer.write(refused + request("/f", "Content-Length: 0\r\n"))
    status, fields, _ = await answer(reader)
    assert status == b"HTTP/1.1 401 Unauthorized"
    assert fields["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
