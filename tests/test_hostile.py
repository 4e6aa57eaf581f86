"""Hostile input from callers and servers: a clear exception or correct handling, never a hang.

Callers: remote paths with relative segments, NUL, control characters, lone surrogates, odd
Unicode and extreme lengths. Servers: wrong Content-Range, lying Content-Length, odd
Retry-After, a 206 nobody asked for, redirects to other hosts and schemes, Content-Disposition
names that climb out, gigantic headers, endless bodies, answers that arrive in pieces, JSON
nested past the parser's depth. Every test runs under `anyio.fail_after`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import web

import sandboxkit
from sandboxkit.emulator import Emulator, Fault

from .conftest import ScriptServer, hostile_client, json_answer, raw
from .files_support import Box, payload
from .reliability_support import (
    RawServer,
    VirtualTime,
    close_and_check,
    exists,
    files_under,
    http_answer,
    on_virtual_time,
    part_files,
)
from .transfer.test_files_protocol import body_answer

LIMIT = 10  # seconds any one test may take
DATA = payload(100_000, seed=11)
N = len(DATA)
ORG = "9b2d5f3e-1111-4222-8333-444455556666"
Sinks = Callable[[sandboxkit.Sandbox, Path], Awaitable[bytes]]


async def _via_download(sbx: sandboxkit.Sandbox, tmp: Path) -> bytes:
    await sbx.files.download("/f.bin", tmp / "f.bin")
    return (tmp / "f.bin").read_bytes()


async def _via_read_bytes(sbx: sandboxkit.Sandbox, tmp: Path) -> bytes:
    return await sbx.files.read_bytes("/f.bin")


async def _via_iter_bytes(sbx: sandboxkit.Sandbox, tmp: Path) -> bytes:
    out = bytearray()
    async with sbx.files.iter_bytes("/f.bin", chunk_size=7000) as chunks:
        async for chunk in chunks:
            out += chunk
    return bytes(out)


SINKS: dict[str, Sinks] = {
    "download": _via_download,
    "read_bytes": _via_read_bytes,
    "iter_bytes": _via_iter_bytes,
}


@pytest.fixture
async def other() -> AsyncIterator[ScriptServer]:
    """A second server: where redirects point. It must never receive anything."""
    srv = ScriptServer()
    await srv.start()
    yield srv
    await srv.stop()


def on_server(client: sandboxkit.Client, port: int | str) -> sandboxkit.Sandbox:
    """A sandbox handle whose host is the loopback server on `port`."""
    return client.sandbox(
        sandbox_key="sbx", domain=f"sandbox.test:{port}", access_token="sat-HOSTILE-TOKEN"
    )


def ranges(server: ScriptServer) -> list[str | None]:
    """The Range header of every GET /files, in order."""
    return [s.headers.get("Range") for s in server.requests("GET", "/files")]


def whole(send: int | None = None, data: bytes = DATA) -> Any:
    """A 200 of `data` with `Accept-Ranges: bytes`, cut after `send` bytes if given."""
    return body_answer(200, data, headers={"Accept-Ranges": "bytes"}, send=send)


def part(content_range: str | None, data: bytes) -> Any:
    """A 206 carrying `Content-Range: content_range` (none when None) and `data`."""
    headers = {} if content_range is None else {"Content-Range": content_range}
    return body_answer(206, data, headers=headers)


# -- remote paths --------------------------------------------------------------------------

REFUSED_PATHS = [
    "",
    "relative/x",
    "/home/../etc/passwd",
    "/home/./x",
    "/..",
    "/.",
    "/home/user/..",
    "/home/user/\x00x",
    "/home/user/\udc80x",  # a lone surrogate: no UTF-8 form, so no URL can carry it
    "/home/user/\ud800",
]


async def _transfer(sbx: sandboxkit.Sandbox, operation: str, remote: Any, tmp: Path) -> Any:
    if operation == "download":
        return await sbx.files.download(remote, tmp / "out.bin")
    if operation == "read_bytes":
        return await sbx.files.read_bytes(remote)
    if operation == "iter_bytes":
        return [c async for c in sbx.files.iter_bytes(remote)]
    return await sbx.files.upload(remote, b"payload")


@pytest.mark.parametrize("remote", [*REFUSED_PATHS, None, 7, b"/home/user/x"])
@pytest.mark.parametrize("operation", ["download", "read_bytes", "iter_bytes", "upload"])
async def test_hostile_remote_paths_are_refused_before_any_request(
    emulator: Emulator, box: Box, tmp_path: Path, operation: str, remote: Any
) -> None:
    """A path with relative segments, NUL, a lone surrogate or the wrong type is a
    ValidationError, and nothing is sent."""
    with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.ValidationError):
        await _transfer(box.handle, operation, remote, tmp_path)
    assert emulator.journal == []
    assert files_under(tmp_path) == []


async def test_ids_that_no_url_can_carry_are_refused(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """An id with a lone surrogate is a ValidationError before any request, not a
    UnicodeEncodeError from deep inside the request."""
    bad = "id-\udc80"
    calls = [
        lambda: emulator_client.v1.containers.get(bad),
        lambda: emulator_client.v1.containers.delete(bad),
        lambda: emulator_client.v1.containers.shell(bad),
        lambda: emulator_client.v1.elastic_ips.release(bad),
        lambda: emulator_client.v1.vpcs.release(bad),
    ]
    for call in calls:
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.ValidationError):
            await call()
    assert emulator.journal == []


ODD_PATHS = [
    "/home/user//double-slash",
    "//home///user/triple",
    "/home/user/tab\tname",
    "/home/user/cr\rlf\nname",
    "/home/user/esc\x1b[31mred",
    "/home/user/del\x7f",
    "/home/user/bell\x07",
    "/home/user/quote\"and'apos",
    "/home/user/%2e%2e",
    "/home/user/pct%00",
    "/home/user/q?x=1&y=2#frag",
    "/home/user/semi;colon=1",
    "/home/user/back\\..\\slash",
    "/home/user/sp ace ",
    "/home/user/...",
    "/home/user/..x",
    "/home/user/.hidden",
    "/home/user/\u202eexe.txt",  # right-to-left override
    "/home/user/zero\u200bwidth",
    "/home/user/e\u0301-combining",
    "/home/user/emoji-\U0001f600",
    "/home/user/\ufeffbom",
    "/home/user/\uffff-nonchar",
    "/home/user/" + "n" * 255,  # the longest name a Linux directory holds
    "/home/user/" + "\u00e9" * 127,  # 254 UTF-8 bytes
]


@pytest.mark.parametrize("remote", ODD_PATHS, ids=range(len(ODD_PATHS)))
async def test_odd_but_valid_remote_paths_round_trip(
    emulator: Emulator, box: Box, remote: str
) -> None:
    """A path the interface allows, however odd, is uploaded and read back at exactly that
    path, and nowhere else."""
    data = payload(3000, seed=len(remote))
    with anyio.fail_after(LIMIT):
        entry = await box.files.upload(remote, data)
        assert await box.files.read_bytes(remote) == data
    assert entry.path == remote
    segments = [s for s in remote.split("/") if s]
    assert box.root.joinpath(*segments).read_bytes() == data
    stored = [p for p in box.root.rglob("*") if p.is_file()]
    assert stored == [box.root.joinpath(*segments)]


@pytest.mark.parametrize(
    "remote", ["/home/user/" + "n" * 300, "/home/user/" + "x" * 20_000], ids=["name", "path"]
)
async def test_overlong_remote_paths_get_a_clear_error(box: Box, remote: str) -> None:
    """A name past NAME_MAX or a path past the server's limits is the server's APIError."""
    with anyio.fail_after(LIMIT):
        with pytest.raises(sandboxkit.APIError) as caught:
            await box.files.read_bytes(remote)
        assert caught.value.status in (400, 404, 414)
        with pytest.raises(sandboxkit.APIError):
            await box.files.upload(remote, b"x")


# -- Content-Range ----------------------------------------------------------------------------

BAD_RANGES = {
    "other-start": (f"bytes 0-{N - 1}/{N}", DATA),
    "other-total": (f"bytes 1000-{N - 1}/{N + 7}", DATA[1000:] + b"x" * 7),
    "equals-sign": (f"bytes=1000-{N - 1}/{N}", DATA[1000:]),
    "open-end": (f"bytes 1000-/{N}", DATA[1000:]),
    "no-unit": (f"1000-{N - 1}/{N}", DATA[1000:]),
    "no-total": (f"bytes 1000-{N - 1}", DATA[1000:]),
    "reversed": (f"bytes {N - 1}-1000/{N}", DATA[1000:]),
    "end-at-total": (f"bytes 1000-{N}/{N}", DATA[1000:]),
    "negative": (f"bytes -1000-{N - 1}/{N}", DATA[1000:]),
    "two-ranges": (f"bytes 1000-{N - 1}/{N}, bytes 0-1/{N}", DATA[1000:]),
    "garbage": ("\u00ff" * 2000, DATA[1000:]),
    "missing": (None, DATA[1000:]),
    "length-disagrees": (f"bytes 1000-1999/{N}", DATA[1000:]),
}


@pytest.mark.parametrize("sink", list(SINKS))
@pytest.mark.parametrize("variant", list(BAD_RANGES))
async def test_a_wrong_content_range_is_distrusted(
    script_server: ScriptServer, hostile: sandboxkit.Client, tmp_path: Path, variant: str, sink: str
) -> None:
    """A 206 whose Content-Range is for other bytes, another size, or unparsable is never
    spliced in: the download starts over and ends with exactly the file, or (a stream that
    already yielded bytes of another size) raises ResponseDecodeError."""
    claimed, body = BAD_RANGES[variant]
    script_server.on("GET", "/files", whole(send=1000), part(claimed, body), whole())
    sbx = on_server(hostile, script_server.url.rsplit(":", 1)[1])
    with anyio.fail_after(LIMIT):
        if variant == "other-total" and sink == "iter_bytes":
            with pytest.raises(sandboxkit.ResponseDecodeError, match="changed"):
                await SINKS[sink](sbx, tmp_path)
            return
        assert await SINKS[sink](sbx, tmp_path) == DATA
    assert ranges(script_server) == [None, "bytes=1000-", None]
    assert part_files(tmp_path) == []


async def test_a_content_range_of_unknown_total_is_used(
    script_server: ScriptServer, hostile: sandboxkit.Client, tmp_path: Path
) -> None:
    """`bytes 1000-99999/*` is a valid answer: the download continues from it."""
    script_server.on("GET", "/files", whole(send=1000), part(f"bytes 1000-{N - 1}/*", DATA[1000:]))
    with anyio.fail_after(LIMIT):
        assert (
            await _via_download(on_server(hostile, script_server.url.rsplit(":", 1)[1]), tmp_path)
            == DATA
        )
    assert ranges(script_server) == [None, "bytes=1000-"]


# -- a 206 nobody asked for -----------------------------------------------------------------

UNASKED = {
    "whole-file": ([part(f"bytes 0-{N - 1}/{N}", DATA)], [None]),
    "first-part": (
        [
            part(f"bytes 0-39999/{N}", DATA[:40_000]),
            part(f"bytes 40000-{N - 1}/{N}", DATA[40_000:]),
        ],
        [None, "bytes=40000-"],
    ),
    "elsewhere": ([part(f"bytes 5000-{N - 1}/{N}", DATA[5000:]), whole()], [None, None]),
}


@pytest.mark.parametrize("sink", list(SINKS))
@pytest.mark.parametrize("variant", list(UNASKED))
async def test_a_206_to_a_request_without_range(
    script_server: ScriptServer, hostile: sandboxkit.Client, tmp_path: Path, variant: str, sink: str
) -> None:
    """A 206 to a whole GET is taken for what its Content-Range says: the file from zero is
    used (and continued), one starting elsewhere starts over; the bytes come out exact."""
    answers, asked = UNASKED[variant]
    script_server.on("GET", "/files", *answers)
    with anyio.fail_after(LIMIT):
        assert (
            await SINKS[sink](on_server(hostile, script_server.url.rsplit(":", 1)[1]), tmp_path)
            == DATA
        )
    assert ranges(script_server) == asked


# -- Content-Length that lies -----------------------------------------------------------------


@pytest.fixture
async def rawsrv() -> AsyncIterator[RawServer]:
    """A server that writes raw bytes, framing lies included."""
    srv = RawServer()
    await srv.start()
    yield srv
    await srv.stop()


def _ranges_of(srv: RawServer) -> list[str | None]:
    out: list[str | None] = []
    for head in srv.heads:
        found = [
            ln for ln in head.decode("latin-1").split("\r\n") if ln.lower().startswith("range:")
        ]
        out.append(found[0].split(":", 1)[1].strip() if found else None)
    return out


async def test_a_content_length_that_claims_more_is_resumed(
    rawsrv: RawServer, tmp_path: Path
) -> None:
    """A body shorter than its Content-Length is a cut: the ranged GET's 416 at the true end
    finishes it with exactly the bytes sent."""
    rawsrv.on(http_answer(200, DATA, {"Accept-Ranges": "bytes"}, length=N + 500))
    rawsrv.on(http_answer(416, b'{"message":"range"}', {"Content-Range": f"bytes */{N}"}))
    async with hostile_client(f"http://127.0.0.1:{rawsrv.port}") as c:
        with anyio.fail_after(LIMIT):
            result = await on_server(c, rawsrv.port).files.download("/f.bin", tmp_path / "f.bin")
        assert (tmp_path / "f.bin").read_bytes() == DATA and result.size == N
        assert _ranges_of(rawsrv) == [None, f"bytes={N}-"]
        await close_and_check(c, [rawsrv.port])


async def test_a_content_length_that_always_lies_fails_cleanly(
    rawsrv: RawServer, tmp_path: Path
) -> None:
    """A server that never sends what it claims exhausts the retries: APIConnectionError,
    the old dest untouched, no temporary file."""
    rawsrv.always(http_answer(200, DATA, {"Accept-Ranges": "none"}, length=N + 500))
    dest = tmp_path / "f.bin"
    dest.write_bytes(b"old")
    async with hostile_client(f"http://127.0.0.1:{rawsrv.port}") as c:
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.APIConnectionError):
            await on_server(c, rawsrv.port).files.download("/f.bin", dest)
        await close_and_check(c, [rawsrv.port])
    assert dest.read_bytes() == b"old" and part_files(tmp_path) == []
    # The first GET moved the download forward (it does not count); the five after it did not.
    assert len(rawsrv.heads) == 6


async def test_a_content_length_that_claims_less_never_splices(
    rawsrv: RawServer, tmp_path: Path
) -> None:
    """Bytes past a short Content-Length are never taken for the file: the answer is either
    the framed body or, when aiohttp sees the stray bytes as a broken answer, the honest
    retry; and the kept-alive connection they sit on is never reused."""
    rawsrv.on(http_answer(200, DATA, {"Accept-Ranges": "bytes"}, length=N - 500), close=False)
    rawsrv.always(http_answer(200, DATA, {"Accept-Ranges": "bytes"}), close=False)
    async with hostile_client(f"http://127.0.0.1:{rawsrv.port}") as c:
        sbx = on_server(c, rawsrv.port)
        with anyio.fail_after(LIMIT):
            assert await sbx.files.read_bytes("/f.bin") in (DATA[: N - 500], DATA)
            assert await sbx.files.read_bytes("/f.bin") == DATA
        await close_and_check(c, [rawsrv.port])


# -- Retry-After ----------------------------------------------------------------------------

RETRY_AFTER = {
    "negative": ("-5", "backoff"),
    "garbage": ("soon, maybe", "backoff"),
    "nan": ("NaN", "backoff"),
    "inf": ("inf", "backoff"),
    "overflow": ("1e400", "backoff"),
    "huge-digits": ("9" * 5000, "backoff"),
    "hex": ("0x10", "backoff"),
    "empty": ("", "backoff"),
    "past-date": ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    "seconds": ("30", 30.0),
    "huge": ("1e9", "raise"),
    "far-date": ("Fri, 31 Dec 9999 23:59:59 GMT", "raise"),
    "bad-date": ("Fri, 31 Dec 99999 23:59:59 GMT", "backoff"),
}


@pytest.mark.parametrize("plane", ["data", "control"])
@pytest.mark.parametrize("variant", list(RETRY_AFTER))
async def test_retry_after_from_a_hostile_server(
    emulator: Emulator, plane: str, variant: str
) -> None:
    """Negative, garbage or non-finite Retry-After falls back to backoff, a usable one is
    waited for, one past the cap raises RateLimitError at once with `retry_after` set."""
    value, expected = RETRY_AFTER[variant]
    policy = sandboxkit.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.01)
    async with emulator.client(retry=policy) as c:
        # The retry loop and the host's pause on one virtual clock: the 429 pauses the host
        # for what it says too, and the call that waited it out finds the pause over.
        on_virtual_time(c, time := VirtualTime())
        # Backoff then waits exactly 0.01 s, so a waited Retry-After of 0 cannot pass as one.
        c._calls.rand = lambda: 1.0
        body = await emulator.create_sandbox()
        key = body["data"]["sandbox_key"]
        (emulator.sandbox_root(key) / "home/user/f.bin").write_bytes(b"abc")
        route = "files.download" if plane == "data" else "v1.organizations.get"
        emulator.faults.script(route, Fault.status(429, retry_after=value))

        async def call() -> Any:
            if plane == "data":
                return await c.sandbox_from_response(body).files.read_bytes("/home/user/f.bin")
            return await c.v1.get_organization(emulator.org_id)

        with anyio.fail_after(LIMIT):
            if expected == "raise":
                with pytest.raises(sandboxkit.RateLimitError) as caught:
                    await call()
                assert caught.value.retry_after is not None and caught.value.retry_after > 60
                assert time.sleeps == [] and len(emulator.journal_for(route)) == 1
                return
            await call()
        assert len(time.sleeps) == 1
        if expected == "backoff":
            assert 0 <= time.sleeps[0] <= 0.01
        else:
            assert time.sleeps[0] == pytest.approx(expected, abs=0.001)


# -- redirects --------------------------------------------------------------------------------


def _locations(other: ScriptServer) -> list[str]:
    port = other.url.rsplit(":", 1)[1]
    return [
        f"{other.url}/files?path=/f.bin",
        f"http://evil.sandbox.test:{port}/files",
        f"https://127.0.0.1:{port}/files",
        "ftp://127.0.0.1/f.bin",
        f"//127.0.0.1:{port}/files",
        "/files?path=/elsewhere",
    ]


def _redirect(status: int, location: str) -> Any:
    async def handler(_: web.Request) -> web.StreamResponse:
        return web.Response(status=status, headers={"Location": location})

    return handler


OPERATIONS: dict[str, tuple[str, str, Callable[[sandboxkit.Client, str], Awaitable[Any]]]] = {
    "download": (
        "GET",
        "/files",
        lambda c, port: on_server(c, port).files.read_bytes("/f.bin"),
    ),
    "upload": ("POST", "/files", lambda c, port: on_server(c, port).files.upload("/f.bin", b"x")),
    "templates.create": (
        "POST",
        "/api/v2/templates",
        lambda c, _: c.templates.create(
            name="t", resources=sandboxkit.CustomResources(2, 2048, 10240)
        ),
    ),
    "builds": ("GET", "/api/v2/templates/t/builds", lambda c, _: _drain(c.templates.builds("t"))),
    "v1.get": ("GET", f"/api/v1/organizations/{ORG}", lambda c, _: c.v1.get_organization(ORG)),
    "request": ("GET", "/api/v2/products", lambda c, _: c.request("GET", "/api/v2/products")),
}


async def _drain(items: Any) -> list[Any]:
    return [item async for item in items]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("operation", list(OPERATIONS))
async def test_redirects_are_never_followed(
    script_server: ScriptServer, other: ScriptServer, operation: str, status: int
) -> None:
    """A 3xx to another host, scheme or path is a RedirectNotFollowedError (an APIError) with
    its status; the other host receives nothing, so no token reaches it."""
    method, path, run = OPERATIONS[operation]
    port = script_server.url.rsplit(":", 1)[1]
    for location in _locations(other):
        script_server.on(method, path, _redirect(status, location))
        async with hostile_client(script_server.url) as c:
            with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.APIError) as caught:
                await run(c, port)
            assert type(caught.value) is sandboxkit.RedirectNotFollowedError
            assert caught.value.status == status
            await close_and_check(c, [int(port)])
    assert other.seen == []
    assert len(script_server.seen) == len(_locations(other))


# -- Content-Disposition ----------------------------------------------------------------------

DISPOSITIONS = [
    'attachment; filename="../../escape.bin"',
    "attachment; filename*=UTF-8''..%2F..%2Fescape.bin",
    'attachment; filename="/tmp/sandboxkit-abs-escape.bin"',
    "attachment; filename=..",
    'attachment; filename="..\\\\..\\\\escape.bin"',
]


@pytest.mark.parametrize("disposition", DISPOSITIONS)
async def test_content_disposition_never_names_the_local_file(
    script_server: ScriptServer, hostile: sandboxkit.Client, tmp_path: Path, disposition: str
) -> None:
    """Whatever name Content-Disposition suggests, the bytes land in `dest` and nowhere else."""
    headers = {"Accept-Ranges": "bytes", "Content-Disposition": disposition}
    script_server.on("GET", "/files", body_answer(200, DATA, headers=headers))
    dest = tmp_path / "a" / "b" / "out.bin"
    dest.parent.mkdir(parents=True)
    with anyio.fail_after(LIMIT):
        await on_server(hostile, script_server.url.rsplit(":", 1)[1]).files.download("/f.bin", dest)
    assert files_under(tmp_path) == [dest] and dest.read_bytes() == DATA
    assert not exists(Path("/tmp/sandboxkit-abs-escape.bin"))


# -- gigantic headers, endless and piecemeal bodies, deep JSON --------------------------------


def _header_bomb(kind: str) -> Any:
    async def handler(_: web.Request) -> web.StreamResponse:
        if kind == "one-huge":
            headers = {"X-Huge": "a" * 100_000}
        else:
            headers = {f"X-Many-{i}": "v" * 50 for i in range(5000)}
        return web.Response(body=b"[]", headers=headers, content_type="application/json")

    return handler


@pytest.mark.parametrize("kind", ["one-huge", "many"])
@pytest.mark.parametrize("plane", ["data", "control"])
async def test_gigantic_answer_headers_fail_cleanly(
    script_server: ScriptServer, plane: str, kind: str, tmp_path: Path
) -> None:
    """An answer whose headers are past any sane size is a TransportError after the retries,
    with no temporary file and nothing left open."""
    port = script_server.url.rsplit(":", 1)[1]
    script_server.always("GET", "/files", _header_bomb(kind))
    script_server.always("GET", "/api/v2/templates/t/builds", _header_bomb(kind))
    async with hostile_client(script_server.url) as c:
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.TransportError):
            if plane == "data":
                await on_server(c, port).files.download("/f.bin", tmp_path / "f.bin")
            else:
                await _drain(c.templates.builds("t"))
        await close_and_check(c, [int(port)])
    assert files_under(tmp_path) == []


class Endless:
    """A handler streaming up to `limit` bytes of blanks; counts what it managed to send."""

    def __init__(self, status: int, limit: int = 128 * 2**20) -> None:
        self.status = status
        self.limit = limit
        self.sent = 0

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            status=self.status, headers={"Content-Type": "application/json"}
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        block = b" " * 2**20
        try:
            while self.sent < self.limit:
                await response.write(block)
                self.sent += len(block)
            await response.write_eof()
        except ConnectionError:
            pass  # the client hung up: what we wanted
        return response


@pytest.mark.parametrize("status", [200, 503])
async def test_an_endless_control_plane_answer_is_cut_off(
    script_server: ScriptServer, status: int
) -> None:
    """A control-plane answer that never ends is not buffered whole: a 2xx raises
    ResponseDecodeError, an error keeps its class, and the client stops reading near 32 MiB."""
    endless = Endless(status)
    script_server.always("GET", "/api/v2/templates/t/builds", endless)
    expected = (
        sandboxkit.ResponseDecodeError if status == 200 else sandboxkit.ServiceUnavailableError
    )
    async with hostile_client(script_server.url, retry=sandboxkit.RetryPolicy.no_delay(1)) as c:
        with anyio.fail_after(LIMIT), pytest.raises(expected) as caught:
            await _drain(c.templates.builds("t"))
        await close_and_check(c, [int(script_server.url.rsplit(":", 1)[1])])
    assert endless.sent < 64 * 2**20, f"the client read {endless.sent} bytes"
    if status == 200:
        assert "larger than" in str(caught.value)


def _in_pieces(status: int, *pieces: bytes) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for index, piece in enumerate(pieces):
            if index:
                await asyncio.sleep(0.05)  # the server (or a proxy) is slow: not a wait on us
            await response.write(piece)
        await response.write_eof()
        return response

    return handler


async def test_an_upload_answer_that_arrives_in_pieces_is_read_whole(
    script_server: ScriptServer, hostile: sandboxkit.Client
) -> None:
    """A success body delivered in several network reads is read to its end, not judged by
    its first piece."""
    script_server.on(
        "POST",
        "/files",
        _in_pieces(200, b'[{"path": "/f.bin", ', b'"name": "f.bin", "type": "file"}]'),
    )
    with anyio.fail_after(LIMIT):
        entry = await on_server(hostile, script_server.url.rsplit(":", 1)[1]).files.upload(
            "/f.bin", b"x"
        )
    assert (entry.path, entry.name) == ("/f.bin", "f.bin")
    assert len(script_server.requests("POST", "/files")) == 1


async def test_a_data_plane_error_body_in_pieces_keeps_its_message(
    script_server: ScriptServer, hostile: sandboxkit.Client
) -> None:
    """A `{message}` error body delivered in pieces still gives its message."""
    script_server.on("GET", "/files", _in_pieces(404, b'{"message": "no such', b' file here"}'))
    with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.NotFoundError) as caught:
        await on_server(hostile, script_server.url.rsplit(":", 1)[1]).files.read_bytes("/f.bin")
    assert caught.value.message == "no such file here"


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, sandboxkit.ResponseDecodeError),
        (404, sandboxkit.NotFoundError),
        (503, sandboxkit.ServiceUnavailableError),
    ],
)
@pytest.mark.parametrize("surface", ["v2", "v1"])
async def test_json_nested_past_the_parser_depth(
    script_server: ScriptServer,
    hostile: sandboxkit.Client,
    surface: str,
    status: int,
    expected: type[Exception],
) -> None:
    """JSON nested deeper than the parser can go is a ResponseDecodeError on a success and
    keeps the status's class on an error, never a RecursionError."""
    path = "/api/v2/templates/t/builds" if surface == "v2" else f"/api/v1/organizations/{ORG}"
    script_server.always("GET", path, raw(DEEP, status))
    with anyio.fail_after(LIMIT), pytest.raises(expected):
        if surface == "v2":
            await _drain(hostile.templates.builds("t"))
        else:
            await hostile.v1.get_organization(ORG)


async def test_hostile_json_values_are_decode_errors(
    script_server: ScriptServer, hostile: sandboxkit.Client
) -> None:
    """Non-finite numbers, 5000-digit integers, missing fields and wrong types in a page give
    ResponseDecodeError, never a crash."""
    bodies = [
        b'{"request_id": "r", "total": NaN, "page": 1, "page_size": 2, "items": []}',
        b'{"request_id": "r", "total": '
        + b"9" * 5000
        + b', "page": 1, "page_size": 2, "items": []}',
        b'{"request_id": "r", "total": 1, "page": 1, "page_size": 2, "items": [{"no_id": 1}]}',
        b'{"request_id": "r", "total": 1, "page": 1, "page_size": 2, "items": "abc"}',
        b'\xff\xfe{"not": "utf-8"}',
    ]
    for body in bodies:
        script_server.on("GET", "/api/v2/templates/t/builds", raw(body))
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.ResponseDecodeError):
            await _drain(hostile.templates.builds("t"))
    script_server.on("GET", "/api/v2/templates/t/builds", json_answer_handler())
    assert await _drain(hostile.templates.builds("t")) == []


def json_answer_handler() -> Any:
    """An honest empty page."""

    async def handler(_: web.Request) -> web.StreamResponse:
        return json_answer({"request_id": "r", "total": 0, "page": 1, "page_size": 20, "items": []})

    return handler


# -- a 429 as an untidy server writes it --------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        # Two Retry-After lines (the first is the one read), and a body cut after 10 of 100.
        b"HTTP/1.1 429 X\r\nRetry-After: 0.5\r\nRetry-After: 30\r\nContent-Length: 100\r\n\r\n"
        + b"x" * 10,
        # A head alone, then the close: no length, no body.
        b"HTTP/1.1 429 X\r\nRetry-After: 0.5\r\n\r\n",
        # Retry-After with spaces and a chunked body that never ends.
        b"HTTP/1.1 429 X\r\nRetry-After:   0.5  \r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc",
    ],
    ids=["two-retry-afters-cut-body", "head-then-close", "padded-unfinished-chunks"],
)
async def test_an_untidy_429_pauses_its_host_once_for_what_it_says(
    rawsrv: RawServer, head: bytes
) -> None:
    """However the 429's head and body come, the host is paused once, for its first
    Retry-After, on the same clock the retry loop waits on, and the retry is not sent before
    it has passed: a body cut after the head is a connection failure to the retry loop (a
    host going away: its backoff, 0.01 s), and the host's pause holds the retry for the rest.
    The call goes on with the right bytes and nothing is left open."""
    rawsrv.on(head)
    rawsrv.on(http_answer(200, DATA, {"Accept-Ranges": "bytes"}))
    policy = sandboxkit.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.01)
    async with hostile_client(f"http://127.0.0.1:{rawsrv.port}", retry=policy) as c:
        on_virtual_time(c, time := VirtualTime())
        c._calls.rand = lambda: 1.0
        paused: list[Any] = []

        def heard(origin: str, status: int, seconds: float, event: Any) -> None:
            if event is not None:
                paused.append((event.kind, event.seconds, event.reason))

        c._transport.hosts.listeners.append(heard)
        with anyio.fail_after(LIMIT):
            assert await on_server(c, rawsrv.port).files.read_bytes("/f.bin") == DATA
        await close_and_check(c, [rawsrv.port])
    assert paused == [("pause", 0.5, "429")]
    assert time.sleeps in ([0.5], [0.01, 0.49])
    assert sum(time.sleeps) == pytest.approx(0.5)
    assert len(rawsrv.heads) == 2
