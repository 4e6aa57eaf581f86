"""The lean body path: large bodies read below aiohttp's parser (`_ring`), the read-timeout
watchdog, and the file sink's parallel write and hash (`_transfer/sinks.py`)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import web

import sandboxkit
from sandboxkit._http import ring as _ring
from sandboxkit._http import transport as _bodies
from sandboxkit._transfer import sinks as _sinks
from sandboxkit._transfer.sinks import WRITE_BATCH, FileSink
from sandboxkit.emulator import Emulator, EmulatorResolver, Fault

from ..files_support import CHUNKED, RESUME, Box, new_box, payload, sha
from ..reliability_support import busy_connections, part_files

MiB = 1 << 20
LIMIT = 30.0
BIG = payload(2 * _ring.RING_BUFFER + 12345, seed=18)


@pytest.fixture
def rings(monkeypatch: pytest.MonkeyPatch) -> list[_ring.RingReader]:
    """Every body of 1 byte or more goes below the parser; the readers made are listed."""
    made: list[_ring.RingReader] = []

    class Counted(_ring.RingReader):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(_bodies, "RING_MIN_BODY", 1)
    monkeypatch.setattr(_bodies, "RingReader", Counted)
    return made


@pytest.mark.parametrize("idc", [RESUME, CHUNKED])
async def test_large_bodies_land_whole_below_the_parser(
    emulator: Emulator,
    emulator_client: sandboxkit.Client,
    rings: list[_ring.RingReader],
    tmp_path: Path,
    idc: str,
) -> None:
    """Bodies with a Content-Length are read by the ring (a chunked one by aiohttp's parser),
    byte-exact whatever their size against the 4 MiB buffers, and no connection is left
    held; `read_bytes` and `iter_bytes` (bytes objects, chunk_size respected) still work."""
    sbx = await new_box(emulator, emulator_client, idc)
    sizes = [1, _ring.RING_BUFFER - 1, _ring.RING_BUFFER, len(BIG)]
    with anyio.fail_after(LIMIT):
        for size in sizes:
            sbx.put(f"/home/user/{size}.bin", BIG[:size])
            result = await sbx.files.download(f"/home/user/{size}.bin", tmp_path / f"{size}")
            assert (result.size, result.sha256) == (size, sha(BIG[:size]))
            assert sha((tmp_path / f"{size}").read_bytes()) == sha(BIG[:size])
        assert await sbx.files.read_bytes(f"/home/user/{len(BIG)}.bin") == BIG
        async with sbx.files.iter_bytes(f"/home/user/{len(BIG)}.bin", chunk_size=MiB) as it:
            chunks = [chunk async for chunk in it]
    assert all(type(chunk) is bytes and len(chunk) <= MiB for chunk in chunks)
    assert b"".join(chunks) == BIG
    # Downloads and read_bytes go below the parser; iter_bytes keeps aiohttp's bytes.
    assert len(rings) == (0 if idc == CHUNKED else len(sizes) + 1)
    assert busy_connections(emulator_client) == 0


async def test_a_cut_below_the_parser_resumes_where_it_stopped(
    emulator: Emulator, box: Box, rings: list[_ring.RingReader], tmp_path: Path
) -> None:
    """A cut mid-buffer keeps the bytes that came (a partly filled buffer is handed on) and
    the next GET asks for the rest with Range."""
    box.put("/home/user/big.bin", BIG)
    cut = _ring.RING_BUFFER + 777
    emulator.faults.script("files.download", Fault.cut(after_bytes=cut))
    with anyio.fail_after(LIMIT):
        result = await box.files.download("/home/user/big.bin", tmp_path / "big.bin")
    journal = emulator.journal_for("files.download")
    assert [r.headers.get("Range") for r in journal] == [None, f"bytes={cut}-"]
    assert (result.resumes, result.sha256) == (1, sha(BIG))
    assert len(rings) == 2


async def test_cancelled_below_the_parser_leaves_nothing_held(
    emulator: Emulator,
    emulator_client: sandboxkit.Client,
    box: Box,
    rings: list[_ring.RingReader],
    tmp_path: Path,
) -> None:
    """Cancelled after its first piece: no partial file, no held connection, and the host
    serves the next download at once (its pooled connection was closed, not reused)."""
    box.put("/home/user/big.bin", BIG)
    with anyio.fail_after(LIMIT):
        with anyio.CancelScope() as scope:
            await box.files.download(
                "/home/user/big.bin", tmp_path / "big.bin", progress=lambda *_: scope.cancel()
            )
        assert scope.cancelled_caught
        assert part_files(tmp_path) == []
        assert busy_connections(emulator_client) == 0
        assert await box.files.read_bytes("/home/user/big.bin") == BIG
    assert rings[0].received < len(BIG)


class StallingServer:
    """Serves BIG; a GET stops after the next of `stalls` body bytes and never sends more
    (while `stalls` lasts), and answers `Range` with the rest."""

    STALL_AT = MiB

    def __init__(self) -> None:
        self.ranges: list[str | None] = []
        self.stalls = [self.STALL_AT]
        self.release = asyncio.Event()
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        asked = request.headers.get("Range")
        self.ranges.append(asked)
        start = int(asked[6:-1]) if asked else 0
        response = web.StreamResponse(status=206 if asked else 200)
        response.headers["Accept-Ranges"] = "bytes"
        response.content_length = len(BIG) - start
        if asked:
            response.headers["Content-Range"] = f"bytes {start}-{len(BIG) - 1}/{len(BIG)}"
        await response.prepare(request)
        if self.stalls:
            await response.write(BIG[start : start + self.stalls.pop(0)])
            await self.release.wait()  # the stall: the client must give up on its own
            return response
        await response.write(BIG[start:])
        return response


@pytest.fixture
async def stalling() -> AsyncIterator[StallingServer]:
    server = StallingServer()
    app = web.Application()
    app.router.add_get("/files", server.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = int(runner.addresses[0][1])
    try:
        yield server
    finally:
        server.release.set()
        await runner.cleanup()


def _stalling_client(server: StallingServer, read: float) -> sandboxkit.Client:
    return sandboxkit.Client(
        api_key="k",
        base_url="http://127.0.0.1:9",
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        timeout=sandboxkit.Timeout(connect=5.0, read=read),
    )


@pytest.mark.parametrize("below", [True, False], ids=["ring", "parser"])
async def test_a_stalled_body_times_out_and_resumes(
    stalling: StallingServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, below: bool
) -> None:
    """No byte for `Timeout.read` mid-body is APITimeoutError (the watchdog's, aiohttp's
    per-piece timer being off), retried with Range from what arrived; a try that moved no
    byte with one attempt allowed reaches the caller."""
    monkeypatch.setattr(_bodies, "RING_MIN_BODY", 1 if below else 1 << 40)
    async with _stalling_client(stalling, read=0.2) as client:
        sbx = client.sandbox(
            sandbox_key="s", domain=f"sandbox.test:{stalling.port}", access_token="t"
        )
        with anyio.fail_after(LIMIT):
            result = await sbx.files.download("/f", tmp_path / "f")
        assert (result.sha256, result.resumes) == (sha(BIG), 1)
        assert stalling.ranges == [None, f"bytes={StallingServer.STALL_AT}-"]
        stalling.ranges.clear()
        stalling.stalls = [0]  # the head, then nothing: no byte moves, the one try is spent
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.APITimeoutError):
            await sbx.files.download(
                "/f", tmp_path / "g", retry=sandboxkit.RetryPolicy.no_delay(max_attempts=1)
            )
        assert stalling.ranges == [None]


async def test_a_slow_consumer_is_not_a_stalled_peer(
    emulator: Emulator, emulator_client: sandboxkit.Client, box: Box
) -> None:
    """The read timeout counts only time spent waiting for the peer: a consumer that takes
    longer than it between two chunks does not make the download time out."""
    box.put("/home/user/big.bin", BIG)
    timeout = sandboxkit.Timeout(connect=5.0, read=0.05)
    got = bytearray()
    with anyio.fail_after(LIMIT):
        async with box.files.iter_bytes(
            "/home/user/big.bin", chunk_size=MiB, timeout=timeout
        ) as it:
            async for chunk in it:
                if not got:
                    await asyncio.sleep(0.3)  # the consumer's own work, 6x the read timeout
                got += chunk
    assert bytes(got) == BIG
    assert len(emulator.journal_for("files.download")) == 1


@pytest.mark.parametrize("below", [True, False], ids=["ring", "parser"])
async def test_no_timer_is_made_per_received_piece(
    emulator: Emulator, box: Box, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, below: bool
) -> None:
    """aiohttp's sock_read re-arms a timer for every piece received (~4,000 per GiB); the
    watchdog makes one per read timeout, and the ring one per 4 MiB at most."""
    monkeypatch.setattr(_bodies, "RING_MIN_BODY", 1 if below else 1 << 40)
    data = payload(24 * MiB, seed=3)
    box.put("/home/user/big.bin", data)
    loop = asyncio.get_running_loop()
    timers = 0
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        nonlocal timers
        timers += 1
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counted)  # call_later goes through call_at
    pieces = 0

    def progress(done: int, total: int | None) -> None:
        nonlocal pieces
        pieces += 1

    with anyio.fail_after(LIMIT):
        result = await box.files.download(
            "/home/user/big.bin", tmp_path / "big.bin", chunk_size=64 * 1024, progress=progress
        )
    assert result.sha256 == sha(data)
    assert timers < 30, (timers, pieces)
    if not below:
        assert pieces >= 24 * MiB // (64 * 1024)


@pytest.fixture
def blocked_writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The sink's writer thread waits on `go`; each thread's work is recorded."""
    seen: dict[str, Any] = {"go": threading.Event(), "hashed": threading.Event(), "log": []}
    write_all, hash_all = _sinks._write_all, _sinks._hash_all

    def write(fd: int, pieces: list[Any]) -> None:
        seen["go"].wait(LIMIT)
        seen["log"].append(("write", threading.get_ident()))
        write_all(fd, pieces)

    def hash_(digest: Any, pieces: list[Any]) -> None:
        hash_all(digest, pieces)
        seen["log"].append(("hash", threading.get_ident()))
        seen["hashed"].set()

    monkeypatch.setattr(_sinks, "_write_all", write)
    monkeypatch.setattr(_sinks, "_hash_all", hash_)
    yield seen
    seen["go"].set()


async def test_batches_are_handed_over_before_the_previous_is_written(
    blocked_writes: dict[str, Any], tmp_path: Path
) -> None:
    """With the first batch's write held up, its hash still runs (another thread), a second
    batch is handed over at once, and a third waits: at most IN_FLIGHT batches are out."""
    batches = [payload(WRITE_BATCH, seed=n) for n in range(3)]
    path = tmp_path / "f.bin"
    with path.open("w+b") as handle:
        sink = FileSink(handle, checksum=True)
        with anyio.fail_after(LIMIT):
            await sink.write(batches[0])
            await anyio.to_thread.run_sync(blocked_writes["hashed"].wait, LIMIT)
            await sink.write(memoryview(batches[1]))  # handed over while the first is blocked
            third = asyncio.create_task(sink.write(batches[2]))
            for _ in range(20):
                await asyncio.sleep(0)
            assert not third.done(), "a third batch must wait for the first"
            blocked_writes["go"].set()
            await third
            await sink.flush()
        assert sink.hexdigest() == hashlib.sha256(b"".join(batches)).hexdigest()
        await sink.quiesce()
    assert path.read_bytes() == b"".join(batches)
    threads = {
        kind: {t for k, t in blocked_writes["log"] if k == kind} for kind in ("write", "hash")
    }
    assert len(threads["write"]) == len(threads["hash"]) == 1
    assert threads["write"] != threads["hash"]


async def test_a_download_fills_no_more_than_four_receive_buffers(
    box: Box,
    rings: list[_ring.RingReader],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """With the disk behind, the file sink's pipeline (two batches with its threads, one
    waiting, one ready in the ring, reading paused) holds four 4 MiB buffers, as many as the
    ceiling benchmark's ring, and the rest of the file reuses them: a buffer taken before
    reading resumed, or one a thread's arguments still held, made it five or six."""
    made: list[int] = []

    def counted(size: int) -> bytearray:
        if size == _ring.RING_BUFFER:
            made.append(size)
        return bytearray(size)

    # Reading paused with a fourth buffer ready (it resumes only when one is taken, so the
    # sink has the first three: two with its threads, the third waiting for the first).
    full = threading.Event()
    pause = _ring.RingReader._pause

    def paused(reader: _ring.RingReader) -> None:
        if reader._left and reader.received >= 4 * _ring.RING_BUFFER:
            full.set()
        pause(reader)

    write_all = _sinks._write_all

    def behind(fd: int, pieces: list[Any]) -> None:
        full.wait(LIMIT)  # the disk is behind until the pipeline is full
        write_all(fd, pieces)

    monkeypatch.setattr(_ring, "bytearray", counted, raising=False)
    monkeypatch.setattr(_ring.RingReader, "_pause", paused)
    monkeypatch.setattr(_sinks, "_write_all", behind)
    # No partly filled buffer handed on because a slow machine paused: each piece is a
    # whole buffer and a whole batch, as on a link that keeps up.
    monkeypatch.setattr(_ring, "_SETTLE", LIMIT)
    body = payload(6 * _ring.RING_BUFFER + 5, seed=4)
    box.put("/home/user/six.bin", body)
    with anyio.fail_after(LIMIT):
        result = await box.files.download("/home/user/six.bin", tmp_path / "six.bin")
    assert result.sha256 == sha(body)
    assert full.is_set()
    assert len(rings) == 1
    assert len(made) == 4


async def test_a_batch_lets_go_of_its_pieces_before_it_counts_as_done(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """When the second of a batch's two thread calls (write, hash) is reported done, no view
    of its receive buffer is left: the ring may refill that buffer at once. (The executor
    drops a call's arguments only after reporting it done.)"""
    buffer = bytearray(payload(WRITE_BATCH, seed=5))
    gate = threading.Event()
    lock = threading.Lock()
    reports: list[str] = []

    def reported(_: object) -> None:
        with lock:  # the write and the hash end in two threads
            last = len(reports) == 1
            reports.append("held" if not last or _ring._in_use(buffer) else "let go")

    class Watched(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            def gated(*given: Any) -> None:
                gate.wait(LIMIT)  # until the test holds no view of the buffer itself
                fn(*given)

            future = super().submit(gated, *args)
            future.add_done_callback(reported)
            return future

    monkeypatch.setattr(_sinks, "ThreadPoolExecutor", Watched)
    with (tmp_path / "f.bin").open("w+b") as handle:
        sink = FileSink(handle, checksum=True)
        with anyio.fail_after(LIMIT):
            await sink.write(memoryview(buffer))  # a whole batch: handed over at once
            gate.set()
            await sink.flush()
        await sink.quiesce()
    assert reports == ["held", "let go"]  # the first: the other call still has it
    assert (tmp_path / "f.bin").read_bytes() == buffer
    assert sink.hexdigest() == sha(bytes(buffer))
