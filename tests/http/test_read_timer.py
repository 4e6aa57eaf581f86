"""An answer's head coming in pieces: one read timer moved by each piece, and a small body
that came with its head taken without a reader.

aiohttp re-arms its `sock_read` timer for every received piece; sandboxkit's connection
protocol (`_connections.LazyReadTimer`) keeps one timer and only moves its due time. The server
here is a raw socket on 127.0.0.1 that writes an answer in paced pieces, so the client
receives them one by one (or, with no gap, all at once).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from aiohttp.client_proto import ResponseHandler

import sandboxkit
from sandboxkit._http.transport import StreamingResponse
from sandboxkit.emulator._resolver import EmulatorResolver

BODY = b"x" * 1000
PIECES = [
    b"HTTP/1.1 200 OK\r\n",
    b"Content-Type: application/octet-stream\r\n",
    b"X-One: 1\r\n",
    b"X-Two: 2\r\n",
    b"Content-Length: %d\r\n\r\n" % len(BODY),
    BODY,
]
LIMIT = 20.0


class PacedServer:
    """Answers each request with `PIECES`, `gap` seconds apart (in one write when 0); only
    the first `stop_after` of them, then silence (the connection stays open), when set."""

    def __init__(self, gap: float, stop_after: int | None = None) -> None:
        self.gap = gap
        self.stop_after = stop_after
        self.port = 0
        self.release = asyncio.Event()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if not self.gap:
                writer.write(b"".join(PIECES[: self.stop_after]))
                await writer.drain()
            for index, piece in enumerate(PIECES if self.gap else ()):
                if index == self.stop_after:
                    break
                writer.write(piece)
                await writer.drain()
                # Paces the answer (it is the scenario, not a wait for something to happen).
                await asyncio.sleep(self.gap)
            if self.stop_after is not None:
                await self.release.wait()
        finally:
            writer.close()


@pytest.fixture
async def paced(request: pytest.FixtureRequest) -> AsyncIterator[PacedServer]:
    server = PacedServer(*request.param)
    listener = await asyncio.start_server(server._answer, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        server.release.set()
        listener.close()
        await listener.wait_closed()


def _client(read: float) -> sandboxkit.Client:
    return sandboxkit.Client(
        api_key="k",
        base_url="http://127.0.0.1:9",
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        timeout=sandboxkit.Timeout(connect=5.0, read=read),
        retry=sandboxkit.RetryPolicy.no_delay(max_attempts=1),
    )


@pytest.mark.parametrize("paced", [(0.02,)], indirect=True)
async def test_pieces_of_a_head_move_one_timer_rather_than_make_one_each(
    paced: PacedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    protocol_timers = 0
    received = 0
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        nonlocal protocol_timers
        if isinstance(getattr(callback, "__self__", None), ResponseHandler):
            protocol_timers += 1
        return call_at(when, callback, *args, **kwargs)

    data_received = ResponseHandler.data_received

    def counting(self: ResponseHandler, data: bytes) -> None:
        nonlocal received
        received += 1
        data_received(self, data)

    monkeypatch.setattr(loop, "call_at", counted)  # call_later goes through call_at
    monkeypatch.setattr(ResponseHandler, "data_received", counting)
    async with _client(read=10.0) as client:
        sbx = client.sandbox(sandbox_key="s", domain=f"sandbox.test:{paced.port}", access_token="t")
        with anyio.fail_after(LIMIT):
            assert await sbx.files.read_bytes("/f") == BODY
    assert received >= 4, "the pieces must arrive one by one for this test to mean anything"
    assert protocol_timers == 1, (protocol_timers, received)


@pytest.mark.parametrize("paced", [(0.25,)], indirect=True)
async def test_a_head_slower_than_the_timeout_but_never_silent_that_long_arrives(
    paced: PacedServer,
) -> None:
    """Six pieces 0.25 s apart (1.5 s in all) against a 1 s read timeout: each piece moves
    the due time, so the one timer never fires."""
    async with _client(read=1.0) as client:
        sbx = client.sandbox(sandbox_key="s", domain=f"sandbox.test:{paced.port}", access_token="t")
        with anyio.fail_after(LIMIT):
            assert await sbx.files.read_bytes("/f") == BODY


@pytest.mark.parametrize("paced", [(0.0, 2)], indirect=True)
async def test_a_head_that_stops_coming_times_out(paced: PacedServer) -> None:
    async with _client(read=0.3) as client:
        sbx = client.sandbox(sandbox_key="s", domain=f"sandbox.test:{paced.port}", access_token="t")
        started = asyncio.get_running_loop().time()
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.APITimeoutError):
            await sbx.files.read_bytes("/f")
        assert asyncio.get_running_loop().time() - started < LIMIT / 2


@pytest.mark.parametrize(("paced", "readers"), [((0.0,), 0), ((0.02,), 1)], indirect=["paced"])
async def test_a_small_body_that_came_with_its_head_is_taken_without_a_reader(
    paced: PacedServer, monkeypatch: pytest.MonkeyPatch, readers: int
) -> None:
    """Sent in one write, the answer is whole when its head is read: no body reader (an async
    generator and its clean-up) is started. Sent in pieces, the body is read as it comes."""
    started = 0
    iter_pieces = StreamingResponse.iter_pieces

    def counting(self: StreamingResponse, size: int) -> Any:
        nonlocal started
        started += 1
        return iter_pieces(self, size)

    monkeypatch.setattr(StreamingResponse, "iter_pieces", counting)
    async with _client(read=10.0) as client:
        sbx = client.sandbox(sandbox_key="s", domain=f"sandbox.test:{paced.port}", access_token="t")
        with anyio.fail_after(LIMIT):
            assert await sbx.files.read_bytes("/f") == BODY
    assert started == readers
