"""The data plane behind a compressing reverse proxy: the file's raw bytes, whatever happens.

The proxy is a real aiohttp.web server on 127.0.0.1 that forwards to the emulator's data plane
and gzips `application/octet-stream` answers, as nginx with `gzip_types` or a CDN may: either
only when the request allows it (the standard) or whatever the request says (a broken ingress).
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import hdrs, web
from aiohttp.web_response import ContentCoding

import sandboxkit
from sandboxkit.emulator import Emulator, Fault

from ..conftest import Handler, ScriptServer
from ..files_support import NO_RESUME, RESUME, dir_listing, payload, sha
from ..test_hostile import SINKS, on_server

MiB = 1 << 20
# Hop-by-hop headers and the ones the proxy recomputes when it re-codes the body.
_NOT_FORWARDED = {
    hdrs.CONNECTION,
    hdrs.CONTENT_LENGTH,
    hdrs.TRANSFER_ENCODING,
    hdrs.CONTENT_ENCODING,
    hdrs.KEEP_ALIVE,
}


class CompressingProxy:
    """A reverse proxy that gzips octet-stream answers; `always=True` ignores Accept-Encoding."""

    def __init__(self, upstream_port: int, *, always: bool) -> None:
        self.upstream = f"http://127.0.0.1:{upstream_port}"
        self.always = always
        self.accept_encodings: list[str | None] = []
        self.compressed = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        self.accept_encodings.append(request.headers.get(hdrs.ACCEPT_ENCODING))
        headers = {k: v for k, v in request.headers.items() if k not in _NOT_FORWARDED}
        async with self._session.request(
            request.method,
            self.upstream + str(request.rel_url),
            headers=headers,  # Host included: the emulator finds the sandbox by it
            data=await request.read() if request.can_read_body else None,
            allow_redirects=False,
        ) as upstream:
            answer = web.StreamResponse(status=upstream.status)
            for name, value in upstream.headers.items():
                if name not in _NOT_FORWARDED:
                    answer.headers.add(name, value)
            if upstream.content_type == "application/octet-stream":
                # Without force, aiohttp honours the request's Accept-Encoding (identity: none).
                answer.enable_compression(force=ContentCoding.gzip if self.always else None)
            elif upstream.content_length is not None:
                answer.content_length = upstream.content_length
            await answer.prepare(request)
            if hdrs.CONTENT_ENCODING in answer.headers:
                self.compressed += 1
            try:
                async for piece in upstream.content.iter_chunked(64 << 10):
                    await answer.write(piece)
            except aiohttp.ClientPayloadError:
                # The upstream body was cut: a proxy cannot finish what it did not get.
                assert request.transport is not None
                request.transport.close()
                return answer
            await answer.write_eof()
            return answer


@pytest.fixture(params=[False, True], ids=["honours-accept-encoding", "always-gzips"])
async def proxy(
    request: pytest.FixtureRequest, emulator: Emulator
) -> AsyncIterator[CompressingProxy]:
    """A compressing proxy in front of the emulator's data plane, in both modes."""
    data_port = int(emulator.domain.rsplit(":", 1)[1])
    running = CompressingProxy(data_port, always=request.param)
    await running.start()
    yield running
    await running.stop()


async def behind(
    emu: Emulator, client: sandboxkit.Client, proxy: CompressingProxy, idc: str
) -> tuple[sandboxkit.Sandbox, Path]:
    """A sandbox reached through the proxy (its domain names the proxy's port)."""
    body = await emu.create_sandbox(idc)
    data = body["data"]
    domain = data["domain"].rsplit(":", 1)[0] + f":{proxy.port}"
    handle = client.sandbox(
        sandbox_key=data["sandbox_key"], domain=domain, access_token=data["sandbox_access_token"]
    )
    return handle, emu.sandbox_root(data["sandbox_key"])


@pytest.mark.parametrize("idc", [RESUME, NO_RESUME])
async def test_download_writes_the_raw_bytes_behind_a_compressing_proxy(
    emulator: Emulator,
    emulator_client: sandboxkit.Client,
    proxy: CompressingProxy,
    tmp_path: Path,
    idc: str,
) -> None:
    """Every data-plane GET asks for identity, and what lands is the file, never its gzip."""
    sbx, root = await behind(emulator, emulator_client, proxy, idc)
    data = payload(3 * MiB, seed=3)
    (root / "home/user/big.bin").write_bytes(data)
    result = await sbx.files.download("/home/user/big.bin", tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data
    assert (result.size, result.sha256) == (len(data), sha(data))
    assert await sbx.files.read_bytes("/home/user/big.bin") == data
    streamed = b"".join([c async for c in sbx.files.iter_bytes("/home/user/big.bin")])
    assert streamed == data
    assert proxy.accept_encodings == ["identity"] * 3
    assert proxy.compressed == (3 if proxy.always else 0)


@pytest.mark.parametrize("idc", [RESUME, NO_RESUME])
async def test_a_cut_behind_a_compressing_proxy_never_mixes_coded_offsets(
    emulator: Emulator,
    emulator_client: sandboxkit.Client,
    proxy: CompressingProxy,
    tmp_path: Path,
    idc: str,
) -> None:
    """A coded answer cut mid-body is fetched whole again; an identity one resumes by Range."""
    sbx, root = await behind(emulator, emulator_client, proxy, idc)
    data = payload(2 * MiB, seed=5)
    (root / "home/user/cut.bin").write_bytes(data)
    emulator.faults.script("files.download", Fault.cut(after_bytes=700_000))
    result = await sbx.files.download("/home/user/cut.bin", tmp_path / "cut.bin")
    assert (tmp_path / "cut.bin").read_bytes() == data
    assert result.sha256 == sha(data)
    ranges = [r.headers.get("Range") for r in emulator.journal_for("files.download")]
    if proxy.always or idc == NO_RESUME:
        # Offsets in a gzip stream are not offsets in the file: no Range after a coded answer.
        assert (ranges, result.attempts, result.resumes) == ([None, None], 2, 0)
    else:
        assert ranges == [None, "bytes=700000-"]
        assert (result.attempts, result.resumes) == (2, 1)
    assert dir_listing(tmp_path) == ["cut.bin"]


async def test_upload_reply_and_error_bodies_are_read_through_the_proxy(
    emulator: Emulator, emulator_client: sandboxkit.Client, proxy: CompressingProxy, tmp_path: Path
) -> None:
    """An upload's JSON reply and a 404's message come through, asked for as identity."""
    sbx, root = await behind(emulator, emulator_client, proxy, RESUME)
    entry = await sbx.files.upload("/home/user/up.bin", b"uploaded")
    assert (entry.path, (root / "home/user/up.bin").read_bytes()) == (
        "/home/user/up.bin",
        b"uploaded",
    )
    with pytest.raises(sandboxkit.NotFoundError):
        await sbx.files.read_bytes("/home/user/missing.bin")
    assert proxy.accept_encodings == ["identity", "identity"]


def _gzip(data: bytes) -> bytes:
    coder = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    return coder.compress(data) + coder.flush()


def _raw_deflate(data: bytes) -> bytes:
    coder = zlib.compressobj(wbits=-zlib.MAX_WBITS)  # no zlib header, as IIS sends it
    return coder.compress(data) + coder.flush()


def coded_answer(encoding: str, body: bytes) -> Handler:
    """A 200 that claims range support and sends `body` with this Content-Encoding."""

    async def handler(_: web.Request) -> web.StreamResponse:
        return web.Response(
            body=body,
            headers={hdrs.CONTENT_ENCODING: encoding, hdrs.ACCEPT_RANGES: "bytes"},
            content_type="application/octet-stream",
        )

    return handler


CODED = payload(300_000, seed=9) * 3  # compressible: repeated


@pytest.mark.parametrize(
    ("encoding", "code"),
    [("gzip", _gzip), ("x-gzip", _gzip), ("deflate", zlib.compress), ("deflate", _raw_deflate)],
)
@pytest.mark.parametrize("operation", ["download", "read_bytes", "iter_bytes"])
async def test_each_coding_a_server_sends_anyway_is_decoded(
    script_server: ScriptServer,
    hostile: sandboxkit.Client,
    tmp_path: Path,
    encoding: str,
    code: Callable[[bytes], bytes],
    operation: str,
) -> None:
    """gzip, x-gzip and both deflate forms, sent despite `identity`, decode to the file."""
    script_server.always("GET", "/files", coded_answer(encoding, code(CODED)))
    sbx = on_server(hostile, script_server.url.rsplit(":", 1)[1])
    assert await SINKS[operation](sbx, tmp_path) == CODED
    assert [s.headers.get("Accept-Encoding") for s in script_server.requests()] == ["identity"]


async def test_a_coded_body_that_ends_early_is_fetched_again_whole(
    script_server: ScriptServer, hostile: sandboxkit.Client, tmp_path: Path
) -> None:
    """A gzip stream missing its end, in a body that ended cleanly, is a cut: no Range after."""
    whole_stream = _gzip(CODED)
    script_server.on("GET", "/files", coded_answer("gzip", whole_stream[: len(whole_stream) // 2]))
    script_server.always("GET", "/files", coded_answer("gzip", whole_stream))
    sbx = on_server(hostile, script_server.url.rsplit(":", 1)[1])
    result = await sbx.files.download("/f.bin", tmp_path / "f.bin")
    assert (tmp_path / "f.bin").read_bytes() == CODED
    assert (result.attempts, result.resumes) == (2, 0)
    assert [s.headers.get("Range") for s in script_server.requests()] == [None, None]


async def test_a_coding_sandboxkit_cannot_decode_fails_at_once_and_writes_nothing(
    script_server: ScriptServer, hostile: sandboxkit.Client, tmp_path: Path
) -> None:
    """A `br` answer raises ResponseDecodeError naming the coding, after one request."""
    script_server.always("GET", "/files", coded_answer("br", b"\x0b\x02\x80hello\x03"))
    sbx = on_server(hostile, script_server.url.rsplit(":", 1)[1])
    with pytest.raises(sandboxkit.ResponseDecodeError, match="'br'"):
        await sbx.files.download("/f.bin", tmp_path / "f.bin")
    assert len(script_server.requests()) == 1
    assert dir_listing(tmp_path) == []
