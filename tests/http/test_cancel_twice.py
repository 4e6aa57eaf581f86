"""Cleanup that survives repeated cancellation: a transfer cancelled again while it cleans up.

A plain `Task.cancel()` gets through `anyio.CancelScope(shield=True)`, so a second one used
to cut cleanup short: a download left its `.part` file and an open handle behind, and
`async with Client` left sessions open. The transfer tests hold a transfer mid-flight on a
loopback server that stops sending (or stops reading), cancel it, let one loop turn pass (the
cleanup is then under way) and cancel again; the task must end cancelled with nothing left.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import web

import sandboxkit
from sandboxkit._http.cancel import raise_held, wait_through_cancels
from sandboxkit.emulator import EmulatorResolver

from ..conftest import ScriptServer
from ..reliability_support import (
    LoopbackServer,
    busy_connections,
    fd_targets,
    part_files,
    read_head,
    sessions_of,
    settle,
    started,
)

pytestmark = pytest.mark.usefixtures("loop_reports")

LIMIT = 10
MiB = 1 << 20
TOTAL = 8 * MiB
# More than one write batch (4 MiB): when the server stops, a batch has gone to a writer
# thread, the case whose cleanup waits (and used to be cut short there).
SENT = 6 * MiB
HIGH_WATER = 64 * 1024  # asyncio's default: past it, aiohttp's body writer waits to drain


class HoldingServer(LoopbackServer):
    """A loopback HTTP server that holds every transfer midway.

    A GET is answered with `SENT` of `TOTAL` bytes, then nothing more until the client
    closes the connection; a POST's body is never read, so the client's writer soon waits
    for the socket to drain. `holding` is set once either has happened.
    """

    def __init__(self) -> None:
        super().__init__()
        self.data = os.urandom(TOTAL)
        self.holding = asyncio.Event()
        self._stopping = asyncio.Event()

    async def stop(self) -> None:
        self._stopping.set()  # a held upload's handler ends; a held GET's read ends at its close
        await super().stop()

    def client(self) -> sandboxkit.Client:
        """A client for this server's data plane (no retries)."""
        return sandboxkit.Client(
            api_key="sk-unused",
            base_url=f"http://127.0.0.1:{self.port}",
            data_plane_scheme="http",
            resolver=EmulatorResolver(),
            retry=sandboxkit.RetryPolicy.no_delay(max_attempts=1),
        )

    def domain(self) -> str:
        """The sandbox domain that reaches this server."""
        return f"sandbox.test:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        if head is None:
            return  # the client went away early
        if head.startswith(b"GET "):
            writer.write(
                b"HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\n"
                + f"Content-Length: {TOTAL}\r\n\r\n".encode()
                + self.data[:SENT]
            )
            await writer.drain()
            self.holding.set()
            await reader.read()  # a GET has no body: this ends when the connection does
        else:
            self.holding.set()
            await self._stopping.wait()  # the upload's body stays unread


@pytest.fixture
async def holding() -> AsyncIterator[HoldingServer]:
    """A started HoldingServer, stopped after the test."""
    async with started(HoldingServer()) as server:
        yield server


def open_files_under(directory: Path) -> int:
    """File descriptors of this process open on a file below `directory`."""
    return sum(target.startswith(f"{directory}{os.sep}") for target in fd_targets())


def unsent_bytes(client: sandboxkit.Client) -> int:
    """Bytes the client's connections hold back because their server stopped reading."""
    total = 0
    for session in sessions_of(client):
        connector = session.connector
        for protocol in connector._acquired if connector is not None else ():
            if protocol.transport is not None:
                total += protocol.transport.get_write_buffer_size()
    return total


async def cancel_repeatedly(task: asyncio.Task[Any], times: int) -> None:
    """Cancel `task` `times` times, one loop turn apart, then wait for it to end."""
    for turn in range(times):
        if turn:
            await asyncio.sleep(0)  # one loop turn: the task is now inside its cleanup
        task.cancel()
    await asyncio.wait([task], timeout=LIMIT)
    assert task.done(), "the cancelled task did not end"


# --- the helper -------------------------------------------------------------------------


async def test_a_cleanup_is_awaited_through_every_cancellation() -> None:
    """A cleanup awaited through three cancellations runs to its end, and the first of them
    comes back to be raised."""
    gate = asyncio.Event()
    finished: list[bool] = []

    async def cleanup() -> None:
        await gate.wait()
        finished.append(True)

    future = asyncio.ensure_future(cleanup())
    waiter = asyncio.create_task(wait_through_cancels(future))
    await asyncio.sleep(0)
    for n in range(3):
        waiter.cancel(f"cancel {n}")
        await asyncio.sleep(0)
    assert not waiter.done() and not future.done()
    gate.set()
    held = await waiter
    assert finished == [True]
    assert isinstance(held, asyncio.CancelledError) and held.args == ("cancel 0",)


async def test_a_cleanup_inside_a_cancelled_anyio_scope_is_awaited_too() -> None:
    """Inside an anyio scope that keeps re-delivering its cancellation, plus a plain one, the
    cleanup still runs to its end."""
    gate = asyncio.Event()
    future = asyncio.ensure_future(gate.wait())
    held: list[asyncio.CancelledError | None] = []

    async def clean_up_when_cancelled() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            try:
                await anyio.sleep_forever()
            except asyncio.CancelledError as exc:
                held.append(await wait_through_cancels(future))
                raise_held(held[0], exc)
                raise

    task = asyncio.create_task(clean_up_when_cancelled())
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    gate.set()
    await asyncio.wait([task], timeout=LIMIT)
    assert future.done() and task.cancelled()
    assert len(held) == 1 and held[0] is not None


@pytest.mark.parametrize(
    ("held", "handling", "raised"),
    [
        (None, None, False),
        (None, ValueError("x"), False),
        (asyncio.CancelledError("held"), None, True),
        (asyncio.CancelledError("held"), ValueError("x"), True),
        (asyncio.CancelledError("held"), asyncio.CancelledError("first"), False),
    ],
)
def test_a_held_cancellation_is_raised_unless_one_is_already_on_its_way(
    held: asyncio.CancelledError | None, handling: BaseException | None, raised: bool
) -> None:
    """The held cancellation is raised after a cleanup for an error or for none, never on
    top of the cancellation the cleanup ran for."""
    if raised:
        with pytest.raises(asyncio.CancelledError) as caught:
            raise_held(held, handling)
        assert caught.value is held
    else:
        raise_held(held, handling)


# --- transfers and clients ----------------------------------------------------------------


@pytest.mark.parametrize("cancels", [2, 5])
async def test_a_download_cancelled_again_while_it_cleans_up_leaves_nothing(
    holding: HoldingServer, tmp_path: Path, cancels: int
) -> None:
    """A download held midway and cancelled again one loop turn later (and more) ends
    cancelled with no temporary file, no dest and no open file."""
    arrived = asyncio.Event()

    def progress(done: int, total: int | None) -> None:
        if done >= SENT:
            arrived.set()  # the client has everything sent; it now waits for more

    dest = tmp_path / "dest.bin"
    async with holding.client() as client:
        sbx = client.sandbox(sandbox_key="s", domain=holding.domain(), access_token="t")
        task = asyncio.create_task(sbx.files.download("/f.bin", dest, progress=progress))
        with anyio.fail_after(LIMIT):
            await arrived.wait()
        assert len(part_files(tmp_path)) == 2  # the part and its sidecar
        await cancel_repeatedly(task, cancels)
        assert task.cancelled()
        assert part_files(tmp_path) == [] and not dest.exists()
        assert open_files_under(tmp_path) == 0
        assert busy_connections(client) == 0


@pytest.mark.parametrize("cancels", [1, 2])
async def test_an_upload_cancelled_while_its_server_stops_reading_closes_its_source(
    holding: HoldingServer, tmp_path: Path, cancels: int
) -> None:
    """An upload whose server stopped reading, cancelled once or twice, ends cancelled with
    its source file closed (aiohttp never closes a body it stops sending)."""
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(64 * MiB))  # more than the socket buffers take
    async with holding.client() as client:
        sbx = client.sandbox(sandbox_key="s", domain=holding.domain(), access_token="t")
        task = asyncio.create_task(sbx.files.upload("/up.bin", source))
        with anyio.fail_after(LIMIT):
            await holding.holding.wait()
            # Until the socket is full, the body's reader may be mid-read; past the high-water
            # mark aiohttp's writer waits to drain, with the source suspended between chunks.
            assert await settle(lambda: unsent_bytes(client) > HIGH_WATER, rounds=10**7)
        assert open_files_under(tmp_path) == 1
        await cancel_repeatedly(task, cancels)
        assert task.cancelled()
        assert open_files_under(tmp_path) == 0
        assert busy_connections(client) == 0


async def test_a_client_closed_by_a_task_cancelled_twice_closes_every_session(
    script_server: ScriptServer,
) -> None:
    """`async with Client` whose task is cancelled again while it closes its pools still
    closes every session."""
    release = asyncio.Event()
    holding = asyncio.Event()

    async def download(request: web.Request) -> web.StreamResponse:
        if request.query.get("path") == "/small.bin":
            return web.Response(body=b"x" * 100)
        response = web.StreamResponse()
        response.content_length = 2 * MiB
        await response.prepare(request)
        await response.write(b"y" * MiB)
        holding.set()
        await release.wait()
        return response

    script_server.always("GET", "/files", download)
    port = script_server.url.rsplit(":", 1)[1]
    client = sandboxkit.Client(
        api_key="sk-unused",
        base_url=script_server.url,
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        retry=sandboxkit.RetryPolicy.no_delay(max_attempts=1),
    )
    boxes = [
        client.sandbox(sandbox_key=f"s{n}", domain=f"sandbox.test:{port}", access_token="t")
        for n in range(3)
    ]
    for idle in boxes[1:]:  # pools holding an idle connection: closing them takes a turn
        await idle.files.read_bytes("/small.bin")
    sessions = sessions_of(client)

    async def work() -> None:
        async with client:
            await boxes[0].files.read_bytes("/big.bin")

    task = asyncio.create_task(work())
    try:
        with anyio.fail_after(LIMIT):
            await holding.wait()
        await cancel_repeatedly(task, 2)
    finally:
        release.set()
    assert task.cancelled()
    assert len(sessions) == 2 and all(session.closed for session in sessions)
    assert client.closed and sessions_of(client) == []
