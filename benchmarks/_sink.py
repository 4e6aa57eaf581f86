"""A lean upload receiver: HTTP/1.1 read just enough to count a body and drop it.

Case 2 measured uploads against aiohttp.web, whose parser and `StreamReader` cost about
one CPU second per wall second on loopback: the server set the pace, and a leaner client
showed only in its own CPU column. This receiver reads each connection's bytes into one
reused 1 MiB buffer (`asyncio.BufferedProtocol`: no bytes object per read), parses the
head, counts a `Content-Length` or chunked body down, and answers what `POST /files`
answers (one `FileEntry` in a JSON list, `X-Bench-Received` with the body's length).
It checks only that a token was sent: the minimal server's routes check them properly.
"""

from __future__ import annotations

import asyncio
import json
from typing import cast
from urllib.parse import parse_qs, urlsplit

BUFFER = 1 << 20
HEAD_LIMIT = 64 << 10


def upload_answer(path: str) -> list[dict[str, str]]:
    """What `POST /files` answers for `path` (one `FileEntry`), here and in `_server.py`."""
    return [{"path": path, "name": path.rsplit("/", 1)[-1], "type": "file"}]


class _Receiver(asyncio.BufferedProtocol):
    """One connection: a head, then a body counted down, then the answer, and again."""

    def __init__(self) -> None:
        self.buffer = memoryview(bytearray(BUFFER))
        self.transport: asyncio.Transport | None = None
        self.head = bytearray()  # bytes of a head not yet complete, then of a chunk line
        self.remaining = -1  # body bytes still to come: -1 reading a head, -2 chunked
        self.chunk_data = 0  # chunked: data bytes left in this chunk
        self.chunk_crlf = 0  # chunked: bytes left of the CRLF that ends it
        self.last_chunk = False
        self.received = 0
        self.path = ""
        self.authorized = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, but not always an asyncio.Transport: uvloop's do not subclass
        # asyncio's classes, so isinstance() would refuse them.
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        data = self.buffer[:nbytes]
        assert self.transport is not None
        # After a refusal the connection is closing: what follows it is not read.
        while data and not self.transport.is_closing():
            if self.remaining == -1:
                data = self._head(data)
            elif self.remaining == -2:
                data = self._chunked(data)
            else:
                taken = min(self.remaining, len(data))
                self.received += taken
                self.remaining -= taken
                data = data[taken:]
                if self.remaining == 0:
                    self._answer()

    def _head(self, data: memoryview) -> memoryview:
        start = max(0, len(self.head) - 3)
        self.head += data
        end = self.head.find(b"\r\n\r\n", start)
        if end < 0:
            if len(self.head) > HEAD_LIMIT:
                self._fail(b"431 Request Header Fields Too Large")
            return data[:0]
        rest = len(self.head) - (end + 4)
        lines = bytes(self.head[:end]).decode("latin-1").split("\r\n")
        self.head.clear()
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        target = lines[0].split(" ")[1] if lines[0].count(" ") >= 2 else "/"
        self.path = parse_qs(urlsplit(target).query).get("path", [""])[0]
        self.authorized = bool(fields.get("x-access-token"))
        self.received = 0
        if fields.get("expect", "").lower() == "100-continue":
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if "chunked" in fields.get("transfer-encoding", "").lower():
            self.remaining, self.chunk_data, self.chunk_crlf = -2, 0, 0
        else:
            self.remaining = int(fields.get("content-length", "0"))
            if self.remaining == 0:
                self._answer()
        return data[len(data) - rest :]

    def _chunked(self, data: memoryview) -> memoryview:
        if self.chunk_data:
            taken = min(self.chunk_data, len(data))
            self.chunk_data -= taken
            self.received += taken
            return data[taken:]
        if self.chunk_crlf:  # the CRLF after a chunk's data
            taken = min(self.chunk_crlf, len(data))
            self.chunk_crlf -= taken
            if self.chunk_crlf == 0 and self.last_chunk:
                self._answer()
            return data[taken:]
        self.head += data[:64]
        end = self.head.find(b"\r\n")
        if end < 0:  # a chunk-size line split across reads
            return data[min(64, len(data)) :]
        used = len(data[:64]) - (len(self.head) - end - 2)
        size = int(bytes(self.head[:end]).split(b";")[0], 16)
        self.head.clear()
        # The last chunk (size 0) ends with an empty trailer line: one more CRLF.
        self.chunk_data, self.chunk_crlf, self.last_chunk = size, 2, size == 0
        return data[used:]

    def _answer(self) -> None:
        assert self.transport is not None
        if not self.authorized:
            self._fail(b"401 Unauthorized")
            return
        body = json.dumps(upload_answer(self.path)).encode()
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"X-Bench-Received: %d\r\nContent-Length: %d\r\n\r\n%s"
            % (self.received, len(body), body)
        )
        self.remaining = -1

    def _fail(self, status: bytes) -> None:
        assert self.transport is not None
        head = b"HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        self.transport.write(head % status)
        self.transport.close()


async def start_sink(host: str) -> asyncio.Server:
    """Listen on an ephemeral port of `host`; the caller reads the port from the server."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(_Receiver, host, 0, backlog=4096)
