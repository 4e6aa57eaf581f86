"""Resume corner cases a conforming emulator never produces, played by a scripted server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

import sandboxkit
from sandboxkit.emulator import EmulatorResolver

from ..conftest import ScriptServer
from ..files_support import dir_listing, payload, sha

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DATA = payload(100_000, seed=3)


def body_answer(
    status: int,
    data: bytes,
    *,
    headers: dict[str, str] | None = None,
    send: int | None = None,
    chunked: bool = False,
    cut: bool = False,
) -> Handler:
    """Answer `data` (with Content-Length unless chunked); send only `send` bytes if given;
    with `cut` (or `send`) close the connection instead of ending the body properly."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers=headers or {})
        if chunked:
            response.enable_chunked_encoding()
        else:
            response.content_length = len(data)
        await response.prepare(request)
        await response.write(data[:send] if send is not None else data)
        if cut or send is not None:
            assert request.transport is not None
            request.transport.close()  # a short body, or a chunked one without its last chunk
            return response
        await response.write_eof()
        return response

    return handler


def whole(send: int | None = None, chunked: bool = False, cut: bool = False) -> Handler:
    """A 200 of DATA with `Accept-Ranges: bytes`."""
    headers = {"Accept-Ranges": "bytes"}
    return body_answer(200, DATA, headers=headers, send=send, chunked=chunked, cut=cut)


def part(claimed: str, data: bytes) -> Handler:
    """A 206 claiming `Content-Range: bytes {claimed}` with `data` as its body."""
    return body_answer(206, data, headers={"Content-Range": f"bytes {claimed}"})


@pytest.fixture
async def sbx(script_server: ScriptServer) -> AsyncIterator[sandboxkit.Sandbox]:
    """A sandbox handle whose host is the scripted server."""
    port = script_server.url.rsplit(":", 1)[1]
    async with sandboxkit.Client(
        api_key="control-key",
        base_url=script_server.url,
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        retry=sandboxkit.RetryPolicy.no_delay(),
    ) as c:
        yield c.sandbox(sandbox_key="sbx", domain=f"sandbox.test:{port}", access_token="tok")


def ranges(server: ScriptServer) -> list[str | None]:
    """The Range header of every GET /files, in order."""
    return [s.headers.get("Range") for s in server.requests("GET", "/files")]


async def test_416_at_the_end_of_a_chunked_body_is_done(
    sbx: sandboxkit.Sandbox, script_server: ScriptServer, tmp_path: Path
) -> None:
    """All bytes of a chunked body arrive but its end is cut: the Range GET's 416 means done."""
    unsatisfiable = web.Response(
        status=416, body=b'{"message":"range"}', headers={"Content-Range": f"bytes */{len(DATA)}"}
    )

    async def answer_416(_: web.Request) -> web.StreamResponse:
        return unsatisfiable

    script_server.on("GET", "/files", whole(chunked=True, cut=True), answer_416)
    result = await sbx.files.download("/f.bin", tmp_path / "f.bin")
    assert ranges(script_server) == [None, f"bytes={len(DATA)}-"]
    assert (result.sha256, result.attempts, result.resumes) == (sha(DATA), 2, 1)


async def test_content_range_at_the_wrong_offset_starts_over(
    sbx: sandboxkit.Sandbox, script_server: ScriptServer, tmp_path: Path
) -> None:
    """A 206 that does not start at the bytes held is distrusted: a whole GET starts over."""
    script_server.on(
        "GET",
        "/files",
        whole(send=40_000),
        part(f"30000-99999/{len(DATA)}", DATA[30_000:]),
        whole(),
    )
    result = await sbx.files.download("/f.bin", tmp_path / "f.bin")
    assert ranges(script_server) == [None, "bytes=40000-", None]
    assert (tmp_path / "f.bin").read_bytes() == DATA
    assert result.attempts == 3


async def test_a_200_to_a_range_request_truncates_and_restarts(
    sbx: sandboxkit.Sandbox, script_server: ScriptServer, tmp_path: Path
) -> None:
    """A server that ignores Range (200) has its whole answer written from byte zero."""
    script_server.on("GET", "/files", whole(send=40_000), whole())
    result = await sbx.files.download("/f.bin", tmp_path / "f.bin")
    assert ranges(script_server) == [None, "bytes=40000-"]
    assert (tmp_path / "f.bin").read_bytes() == DATA
    assert result.size == len(DATA)


async def test_stream_fails_when_the_file_changes_size(
    sbx: sandboxkit.Sandbox, script_server: ScriptServer
) -> None:
    """iter_bytes raises instead of splicing two versions once the size changes mid-stream."""
    grown = DATA + b"more"
    script_server.on(
        "GET",
        "/files",
        whole(send=40_000),
        part(f"40000-{len(grown) - 1}/{len(grown)}", grown[40_000:]),
    )
    seen = b""
    with pytest.raises(sandboxkit.ResponseDecodeError, match="changed during the transfer"):
        async for chunk in sbx.files.iter_bytes("/f.bin"):
            seen += chunk
    assert seen == DATA[:40_000]


async def test_download_restarts_when_the_file_changes_size(
    sbx: sandboxkit.Sandbox, script_server: ScriptServer, tmp_path: Path
) -> None:
    """A file sink starts over on a size change and ends with the new version only."""
    grown = DATA + b"more"
    script_server.on(
        "GET",
        "/files",
        whole(send=40_000),
        part(f"40000-{len(grown) - 1}/{len(grown)}", grown[40_000:]),
        body_answer(200, grown, headers={"Accept-Ranges": "bytes"}),
    )
    result = await sbx.files.download("/f.bin", tmp_path / "f.bin")
    assert (tmp_path / "f.bin").read_bytes() == grown
    assert (result.size, ranges(script_server)) == (len(grown), [None, "bytes=40000-", None])


async def test_protocol_errors_that_persist_fail_cleanly(
    sbx: sandboxkit.Sandbox, script_server: ScriptServer, tmp_path: Path
) -> None:
    """A server that keeps answering a bad Content-Range exhausts the retries; nothing lands."""
    dest = tmp_path / "f.bin"
    dest.write_bytes(b"old")
    bad = part("0-10/5", DATA)  # end beyond total: unusable
    script_server.on("GET", "/files", *[bad] * 5)
    with pytest.raises(sandboxkit.APIConnectionError, match="Content-Range"):
        await sbx.files.download("/f.bin", dest)
    assert dest.read_bytes() == b"old" and dir_listing(tmp_path) == ["f.bin"]
    assert len(script_server.requests("GET", "/files")) == 5
