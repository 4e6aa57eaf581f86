"""Uploads against the emulator (and a scripted server for wire details) over real sockets."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from aiohttp import web

import sandboxkit
from sandboxkit._transfer.upload import READ_SIZE, _read_file
from sandboxkit.emulator import Emulator, EmulatorResolver, Fault

from ..conftest import Handler, ScriptServer, json_answer
from ..files_support import NO_RESUME, UPLOAD_LIMIT, Box, new_box, payload

KiB = 1024
TOKEN = "sbx-token-SECRET"


async def chunks_of(data: bytes, size: int = 100_000) -> AsyncIterator[bytes]:
    """An async iterable of `data` in pieces."""
    for offset in range(0, len(data), size):
        yield data[offset : offset + size]


class Unseekable(io.RawIOBase):
    """A binary stream that cannot seek (a pipe, a socket)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        return self._data.readinto(buffer)


@pytest.mark.parametrize(
    "kind",
    ["bytes", "bytearray", "memoryview", "str", "path", "file", "bytesio", "stream", "aiter"],
)
async def test_every_source_kind_round_trips(box: Box, tmp_path: Path, kind: str) -> None:
    """Each kind of source writes exactly its bytes and returns an UploadResult: the file
    the service reports, the bytes sent (counted where the source's size is unknown) and
    one attempt."""
    data = payload(300 * KiB + 7)
    local = tmp_path / "src.bin"
    local.write_bytes(data)
    with local.open("rb") as handle:
        source = {
            "bytes": data,
            "bytearray": bytearray(data),
            "memoryview": memoryview(data),
            "str": str(local),
            "path": local,
            "file": handle,
            "bytesio": io.BytesIO(data),
            "stream": Unseekable(data),
            "aiter": chunks_of(data),
        }[kind]
        result = await box.files.upload("/home/user/dst.bin", source)
    assert isinstance(result, sandboxkit.UploadResult) and result.elapsed >= 0
    assert (result.path, result.name, result.type) == ("/home/user/dst.bin", "dst.bin", "file")
    assert (result.size, result.attempts) == (len(data), 1)
    assert box.get("/home/user/dst.bin") == data


async def test_seekable_file_sends_from_its_current_position(emulator: Emulator, box: Box) -> None:
    """A file object positioned past its start sends the rest, and again the same on replay."""
    handle = io.BytesIO(b"header:" + b"body" * 1000)
    handle.seek(7)
    emulator.faults.script("files.upload", Fault.status(502))  # the replay is part of the claim
    result = await box.files.upload("/home/user/rest.bin", handle)
    assert box.get("/home/user/rest.bin") == b"body" * 1000
    assert (result.size, result.attempts) == (4000, 2)
    assert [r.status for r in emulator.journal_for("files.upload")] == [502, 200]


@pytest.mark.parametrize("kind", ["bytes", "path", "bytesio"])
async def test_replayable_sources_are_resent_in_full(
    emulator: Emulator, box: Box, tmp_path: Path, kind: str
) -> None:
    """A 502 and a 429 on upload resend the whole body of a replayable source."""
    data = payload(200 * KiB)
    local = tmp_path / "src.bin"
    local.write_bytes(data)
    source = {"bytes": data, "path": local, "bytesio": io.BytesIO(data)}[kind]
    emulator.faults.script("files.upload", Fault.status(502), Fault.status(429, retry_after="0"))
    result = await box.files.upload("/home/user/r.bin", source)
    assert (result.size, result.attempts) == (len(data), 3)  # every POST counted
    journal = emulator.journal_for("files.upload")
    assert [r.status for r in journal] == [502, 429, 200]
    assert box.get("/home/user/r.bin") == data
    assert journal[-1].body_size == int(journal[-1].headers["Content-Length"])


@pytest.mark.parametrize("kind", ["aiter", "stream"])
async def test_one_shot_source_is_not_retried_and_says_why(
    emulator: Emulator, box: Box, kind: str
) -> None:
    """A one-shot source meets a 502 once: BadGatewayError, naming why it was not retried."""
    data = payload(50 * KiB)
    source = chunks_of(data) if kind == "aiter" else Unseekable(data)
    emulator.faults.script("files.upload", Fault.status(502))
    with pytest.raises(sandboxkit.BadGatewayError) as caught:
        await box.files.upload("/home/user/o.bin", source)
    assert "not retried" in str(caught.value)
    assert ("async iterable" if kind == "aiter" else "cannot seek") in str(caught.value)
    assert caught.value.status == 502
    assert len(emulator.journal_for("files.upload")) == 1


async def test_too_large_is_raised_at_once(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Over the IDC's limit: PayloadTooLargeError after one request; at the limit: accepted."""
    sbx = await new_box(emulator, emulator_client, NO_RESUME)
    with pytest.raises(sandboxkit.PayloadTooLargeError):
        await sbx.files.upload("/home/user/big.bin", bytes(UPLOAD_LIMIT + 1))
    assert len(emulator.journal_for("files.upload")) == 1
    await sbx.files.upload("/home/user/big.bin", bytes(UPLOAD_LIMIT))
    assert len(sbx.get("/home/user/big.bin")) == UPLOAD_LIMIT


async def test_failing_source_raises_its_own_error(emulator: Emulator, box: Box) -> None:
    """An async iterable that raises mid-way surfaces its exception, not a network error."""

    async def broken() -> AsyncIterator[bytes]:
        yield b"x" * 100_000
        raise KeyError("local failure")

    with pytest.raises(KeyError, match="local failure"):
        await box.files.upload("/home/user/b.bin", broken())
    assert not (box.root / "home/user/b.bin").exists()


async def test_source_that_shrinks_is_refused(box: Box) -> None:
    """A seekable source whose bytes fall short of its measured size fails clearly."""

    class Liar(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            return super().read(min(size or 10, 10))[:5]

    with pytest.raises(sandboxkit.ValidationError, match="shrank"):
        await box.files.upload("/home/user/l.bin", Liar(b"0123456789" * 10))


async def test_upload_progress_counts_to_the_size(box: Box) -> None:
    """progress goes up to (size, size) for a sized source, once per piece."""
    seen: list[tuple[int, int | None]] = []
    data = payload(2 * READ_SIZE + 1)
    await box.files.upload("/home/user/p.bin", data, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(data), len(data))
    assert len(seen) == 3


async def test_upload_missing_parent_is_not_found(emulator: Emulator, box: Box) -> None:
    """A missing parent directory is NotFoundError after one request."""
    with pytest.raises(sandboxkit.NotFoundError):
        await box.files.upload("/home/user/no/such/dir/x.bin", b"x")
    assert len(emulator.journal_for("files.upload")) == 1


# --- wire details against a scripted server --------------------------------------------------


@pytest.fixture
async def scripted(
    script_server: ScriptServer,
) -> AsyncIterator[tuple[sandboxkit.Sandbox, ScriptServer]]:
    """A sandbox handle whose host is the scripted server (any `*.sandbox.test` name)."""
    port = script_server.url.rsplit(":", 1)[1]
    async with sandboxkit.Client(
        api_key="control-SECRET",
        base_url=script_server.url,
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        retry=sandboxkit.RetryPolicy.no_delay(),
    ) as c:
        yield (
            c.sandbox(sandbox_key="sbx1", domain=f"sandbox.test:{port}", access_token=TOKEN),
            script_server,
        )


async def test_multipart_body_has_exactly_one_file_part(
    scripted: tuple[sandboxkit.Sandbox, ScriptServer],
) -> None:
    """The body is one `file` part named after the remote base name, with a Content-Length."""
    sbx, server = scripted
    server.on("POST", "/files", _file_list('/home/user/q "x".bin'))
    await sbx.files.upload('/home/user/q "x".bin', b"DATA", username="alice")
    (seen,) = server.requests("POST", "/files")
    assert seen.query == {"path": '/home/user/q "x".bin', "username": "alice"}
    content_type = seen.headers["Content-Type"]
    assert content_type.startswith("multipart/form-data; boundary=")
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    assert int(seen.headers["Content-Length"]) == len(seen.body)
    assert seen.body.count(b"--" + boundary) == 2  # one part, then the closing delimiter
    assert b'Content-Disposition: form-data; name="file"; filename="q %22x%22.bin"' in seen.body
    assert b"\r\n\r\nDATA\r\n--" + boundary + b"--\r\n" in seen.body
    assert seen.headers["X-Access-Token"] == TOKEN
    assert "Authorization" not in seen.headers


async def test_unknown_size_is_sent_chunked(
    scripted: tuple[sandboxkit.Sandbox, ScriptServer],
) -> None:
    """An async iterable of unknown length goes out with chunked framing."""
    sbx, server = scripted
    server.on("POST", "/files", _file_list("/u.bin"))
    await sbx.files.upload("/u.bin", chunks_of(b"abc" * 1000))
    (seen,) = server.requests("POST", "/files")
    assert seen.headers.get("Transfer-Encoding") == "chunked"
    assert b"abc" * 1000 in seen.body


@pytest.mark.parametrize("operation", ["download", "upload"])
async def test_redirect_is_not_followed(
    scripted: tuple[sandboxkit.Sandbox, ScriptServer], operation: str, tmp_path: Path
) -> None:
    """A 3xx raises RedirectNotFollowedError(status, surface "data"); the token goes to no
    other host."""
    sbx, server = scripted
    location = server.url.replace("127.0.0.1", "evil.sandbox.test") + "/steal"

    async def redirect(_: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": location})

    method = "GET" if operation == "download" else "POST"
    server.on(method, "/files", redirect)
    with pytest.raises(sandboxkit.APIError) as caught:
        if operation == "download":
            await sbx.files.download("/f.bin", tmp_path / "f.bin")
        else:
            await sbx.files.upload("/f.bin", b"x")
    assert type(caught.value) is sandboxkit.RedirectNotFollowedError
    assert (caught.value.status, caught.value.surface) == (307, "data")
    assert TOKEN not in str(caught.value)
    assert [s.path for s in server.seen] == ["/files"]
    assert dir_listing_empty(tmp_path)


def dir_listing_empty(path: Path) -> bool:
    """Whether the directory holds nothing."""
    return not any(path.iterdir())


def _file_list(path: str) -> Handler:
    async def handler(_: web.Request) -> web.StreamResponse:
        name = path.rsplit("/", 1)[1]
        return json_answer([{"path": path, "name": name, "type": "file"}])

    return handler


async def test_unexpected_success_body_is_a_decode_error(
    scripted: tuple[sandboxkit.Sandbox, ScriptServer],
) -> None:
    """A 200 whose body is not the one-element file list raises ResponseDecodeError."""
    sbx, server = scripted

    async def wrong(_: web.Request) -> web.StreamResponse:
        return json_answer({"unexpected": True})

    server.on("POST", "/files", wrong)
    with pytest.raises(sandboxkit.ResponseDecodeError):
        await sbx.files.upload("/f.bin", b"x")


class GatedFile(io.BytesIO):
    """A file whose reads after the first wait for a gate (in the reading thread), and
    which records whether it was closed while a read was still running."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.gate = threading.Event()
        self.waiting = threading.Event()  # a read is waiting at the gate
        self.reads = 0
        self.reading = 0
        self.closed_under_a_read = False

    def read(self, size: int | None = -1) -> bytes:
        self.reads += 1
        self.reading += 1
        try:
            if self.reads > 1:
                self.waiting.set()
                self.gate.wait(10)
            return super().read(size)
        finally:
            self.reading -= 1

    def close(self) -> None:
        self.closed_under_a_read |= self.reading > 0
        super().close()


async def test_file_pieces_are_read_ahead_and_never_closed_under_a_read() -> None:
    """The next piece is being read (in a thread) while the current one is sent; a body
    closed then waits for that read before its source is closed."""
    handle = GatedFile(payload(3 * READ_SIZE))
    pieces = _read_file(handle)
    first = await pieces.__anext__()
    assert len(first) == READ_SIZE
    # The second read starts before anyone asks for the second piece.
    assert await anyio.to_thread.run_sync(handle.waiting.wait, 5)
    assert handle.reads == 2
    closing = asyncio.ensure_future(pieces.aclose())
    await anyio.wait_all_tasks_blocked()
    assert not closing.done()  # the read in flight is waited for
    handle.gate.set()
    with anyio.fail_after(5):
        await closing
    handle.close()
    assert not handle.closed_under_a_read and handle.reads == 2
