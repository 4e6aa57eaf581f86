"""Bytes a server writes past its answer never become the next call's result (issue 28).

A server (or a broken middlebox) that writes more than the answer to a request on a
kept-alive connection (a whole unsolicited `HTTP/1.1 200` answer, or garbage) leaves bytes
on a connection that would otherwise go back to the pool, where the next request on it
would be answered by them: a stray body returned as a file, as a success. These tests prove
such a connection is closed and never reused, on both planes (a sandbox file read or
download; a control-plane GET), with the stray bytes in the same write as a 1 MiB answer or
arriving while the connection idles in the pool, and with garbage after a small answer:
each call returns its own bytes, the first call's too, and the second request arrives on a
second connection (the server's journal says which connection each request came on).

Some cases guard what already held: a body of RING_MIN_BODY or more is read below the
parser and its connection closed; garbage aiohttp's parser rejects closes the connection
(in the answer's own read it costs that try, which is tried again).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import attrs
import pytest

import sandboxkit
from sandboxkit._http.transport import RING_MIN_BODY

from ..conftest import hostile_client
from ..files_support import payload
from ..reliability_support import (
    HAS_PROC,
    LoopbackServer,
    close_and_check,
    http_answer,
    read_head,
    settle,
)

LIMIT = 10.0  # seconds any one test may take


class StrayServer(LoopbackServer):
    """A loopback HTTP/1.1 server that keeps its connections open and answers each request
    with `answers[name]` for the first name its request line holds. After the very first
    answer it writes `stray`: in the same write (`later=False`), or once the test sets
    `release` (`later=True`), so that the bytes reach a connection idling in the client's
    pool. `stray_written` is set once they are sent; `journal` holds (connection number,
    name) per request."""

    def __init__(self, answers: dict[str, bytes], stray: bytes, *, later: bool) -> None:
        super().__init__()
        self._answers = answers
        self._stray = stray
        self._later = later
        self.release = asyncio.Event()
        self.stray_written = asyncio.Event()
        self.journal: list[tuple[int, str]] = []
        self.connections = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        while (head := await read_head(reader)) is not None:
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            name = next((n for n in self._answers if n in line), "?")
            self.journal.append((number, name))
            first = len(self.journal) == 1
            answer = self._answers.get(name, http_answer(404))
            writer.write(answer + (self._stray if first and not self._later else b""))
            await writer.drain()
            if first and self._later:
                await self.release.wait()  # the client's first call has returned
                writer.write(self._stray)
                await writer.drain()
            if first:
                self.stray_written.set()


def wire_quiet(port: int) -> bool:
    """Whether every byte on the TCP connections to `port` was received and read: no socket
    of either end holds unacknowledged bytes (tx_queue) or unread ones (rx_queue)."""
    end = f"0100007F:{port:04X}"  # 127.0.0.1:port as the kernel writes it
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state, queues = line.split()[1:5]
        listening = state == "0A"
        if end in (local, remote) and not listening and queues != "00000000:00000000":
            return False
    return True


def on_server(client: sandboxkit.Client, port: int) -> sandboxkit.Sandbox:
    """A sandbox handle whose host is the loopback server on `port`."""
    return client.sandbox(
        sandbox_key="sbx", domain=f"sandbox.test:{port}", access_token="sat-STRAY-TOKEN"
    )


# -- what each plane asks and what it answers --------------------------------------------

# A call of one plane: the client, the server's port, a directory, and the name of what it
# asks for ("first" or "second"); it returns what the caller gets.
Call = Callable[[sandboxkit.Client, int, Path, str], Awaitable[object]]


async def _read_bytes(client: sandboxkit.Client, port: int, tmp: Path, name: str) -> object:
    return await on_server(client, port).files.read_bytes(f"/{name}.bin")


async def _download(client: sandboxkit.Client, port: int, tmp: Path, name: str) -> object:
    dest = tmp / f"{name}.bin"
    await on_server(client, port).files.download(f"/{name}.bin", dest)
    return dest.read_bytes()


async def _builds_page(client: sandboxkit.Client, port: int, tmp: Path, name: str) -> object:
    page = await client.templates.builds_page(name)
    return [build.id for build in page.items]


def file_answer(body: bytes) -> bytes:
    return http_answer(200, body, {"Content-Type": "application/octet-stream"})


def page_body(build_id: str, pad: int = 0) -> bytes:
    """A page of one Build; `pad` bytes of JSON whitespace make it that much longer."""
    page = {"request_id": "r", "total": 1, "page": 1, "page_size": 20, "items": [{"id": build_id}]}
    return json.dumps(page).encode() + b" " * pad


def page_answer(body: bytes) -> bytes:
    return http_answer(200, body, {"Content-Type": "application/json"})


@attrs.frozen
class Plane:
    """One plane's call and its answers: the server sends `answer(bodies[name])` to the
    call asking for `name`, which returns `results[name]`; `stray` answers nobody."""

    call: Call
    answer: Callable[[bytes], bytes]
    bodies: dict[str, bytes]
    results: dict[str, object]
    stray: bytes

    def answers(self) -> dict[str, bytes]:
        return {name: self.answer(body) for name, body in self.bodies.items()}


def file_plane(call: Call, size: int) -> Plane:
    if size <= 10:
        bodies = {"first": b"0123456789"[:size], "second": b"abcdefghij"[:size]}
    else:
        bodies = {"first": payload(size, seed=1), "second": payload(size, seed=2)}
    return Plane(call, file_answer, bodies, dict(bodies), file_answer(b"STRAY: never a file"))


def control_plane(pad: int) -> Plane:
    return Plane(
        _builds_page,
        page_answer,
        {"first": page_body("b-first", pad), "second": page_body("b-second", pad)},
        {"first": ["b-first"], "second": ["b-second"]},
        page_answer(page_body("b-STRAY")),
    )


BIG = 1 << 20  # below RING_MIN_BODY: read through aiohttp's parser, the connection kept alive
LARGE = {
    "read_bytes": file_plane(_read_bytes, BIG),
    "download": file_plane(_download, BIG),
    "builds_page": control_plane(BIG),
}
SMALL = {
    "read_bytes": file_plane(_read_bytes, 10),
    "download": file_plane(_download, 10),
    "builds_page": control_plane(0),
}
GARBAGE = {
    # A TLS alert record, as a confused middlebox might send: the parser rejects it.
    "binary": b"\x15\x03\x03\x00\x02\x02\x28",
    # The start of an answer that never ends: the parser takes it without complaint.
    "partial-head": b"HTTP/1.1 200 OK\r\nContent-Le",
}
TIMINGS = {"same-write": False, "while-pooled": True}


@pytest.fixture
async def servers() -> AsyncIterator[list[StrayServer]]:
    """Servers a test starts; stopped afterwards."""
    started: list[StrayServer] = []
    yield started
    for server in started:
        await server.stop()


async def two_calls(
    servers: list[StrayServer], plane: Plane, stray: bytes, later: bool, tmp: Path
) -> StrayServer:
    """The first call; the stray bytes sent, and read by the client; the second call. Both
    must return their own answers. The server, for its journal."""
    server = StrayServer(plane.answers(), stray, later=later)
    await server.start()
    servers.append(server)
    # Two tries a call: an answer the parser rejects is tried again (it shows in the journal).
    retry = sandboxkit.RetryPolicy.no_delay(2)
    async with hostile_client(f"http://127.0.0.1:{server.port}", retry=retry) as client:
        with anyio.fail_after(LIMIT):
            first = await plane.call(client, server.port, tmp, "first")
            server.release.set()
            await server.stray_written.wait()
            # The bytes must be in the pooled connection before the second request leaves:
            # bytes still on their way when a connection is reused cannot be told from its
            # answer (HTTP/1.1 has no request ids). Loop turns until the client read them.
            assert await settle(lambda: wire_quiet(server.port)), "stray bytes left unread"
            second = await plane.call(client, server.port, tmp, "second")
        await close_and_check(client, [server.port])
    assert first == plane.results["first"]
    assert second == plane.results["second"]
    return server


pytestmark = pytest.mark.skipif(not HAS_PROC, reason="needs /proc/net/tcp to see the wire")


@pytest.mark.parametrize("timing", list(TIMINGS))
@pytest.mark.parametrize("plane", list(LARGE))
async def test_a_stray_answer_after_a_large_body_is_never_the_next_result(
    servers: list[StrayServer], tmp_path: Path, plane: str, timing: str
) -> None:
    """A whole unsolicited 200 after a 1 MiB answer (in its write, or once the connection is
    pooled): both calls return their own answers, and the second request goes out on a new
    connection, never on the one that holds the stray answer."""
    chosen = LARGE[plane]
    server = await two_calls(servers, chosen, chosen.stray, TIMINGS[timing], tmp_path)
    assert server.journal == [(1, "first"), (2, "second")]


@pytest.mark.parametrize("plane", ["read_bytes", "download"])
async def test_a_stray_answer_after_a_ring_read_body_is_dropped(
    servers: list[StrayServer], tmp_path: Path, plane: str
) -> None:
    """A body read below the parser (`_ring`, RING_MIN_BODY and up) never sees what follows
    it: the stray answer in the same write is dropped with the connection."""
    chosen = file_plane(LARGE[plane].call, RING_MIN_BODY)
    server = await two_calls(servers, chosen, chosen.stray, False, tmp_path)
    assert server.journal == [(1, "first"), (2, "second")]


@pytest.mark.parametrize("garbage", list(GARBAGE))
@pytest.mark.parametrize("timing", list(TIMINGS))
@pytest.mark.parametrize("plane", list(SMALL))
async def test_garbage_after_a_small_answer_is_never_reused(
    servers: list[StrayServer], tmp_path: Path, plane: str, timing: str, garbage: str
) -> None:
    """Garbage (no HTTP answer) after a small answer: no call returns a wrong result, and the
    connection that got the garbage carries no other request. Binary garbage in the same
    read as the answer makes aiohttp's parser reject the read, answer included: that try
    fails as any broken answer does and is tried again, on a new connection."""
    later = TIMINGS[timing]
    server = await two_calls(servers, SMALL[plane], GARBAGE[garbage], later, tmp_path)
    if garbage == "binary" and not later:
        assert server.journal == [(1, "first"), (2, "first"), (2, "second")]
    else:
        assert server.journal == [(1, "first"), (2, "second")]
