"""The plain data-plane GET (`connections.Route`): what it sends, what it refuses, where it
falls back.

A plain GET to a sandbox host is written as bytes on a connection of the host's aiohttp
connector and read with aiohttp's parser, skipping `ClientSession.request`. These tests run
it against a raw server that writes exactly the bytes a misbehaving server would, and check
on every one that the lean path carried every GET (`lean_only`: aiohttp's request path
fails the test if called) and that the result is the file's bytes, or the honest error:

* a chunked answer, a gzip-coded one, an answer with a 1xx before it: read as aiohttp reads
  them, the connection kept alive where it may be;
* a body longer than its Content-Length (stray bytes after it): the file is the framed body
  and the connection is never reused;
* a cut mid-body: resumed with a Range GET at the cut;
* an error status, a head that is no HTTP: the same exceptions as aiohttp's path.

Then the wire: the lean head carries the same headers as aiohttp's request would, and the
cases the lean path leaves to aiohttp (a target or header that cannot go as it is, a proxied
origin, a method with a body) are refused by `Route`/`route` before any byte is written.
"""

from __future__ import annotations

import gc
import gzip
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import pytest

import sandboxkit
from sandboxkit._core.resume import ResumeState
from sandboxkit._http import transport as _transport
from sandboxkit._http.connections import Route, route

from ..conftest import hostile_client
from ..reliability_support import RawServer, close_and_check, http_answer, started

LIMIT = 10.0
DATA = bytes(range(256)) * 64  # 16 KiB


@pytest.fixture
async def server() -> AsyncIterator[RawServer]:
    async with started(RawServer()) as raw:
        yield raw


class Calls:
    """How many GETs each path carried."""

    def __init__(self) -> None:
        self.lean = 0
        self.aiohttp = 0


@pytest.fixture
def lean_calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Count the requests the lean path carries (in `lean`)."""
    calls = Calls()
    real = Route.get

    async def counted(self: Route, *args: Any, **kwargs: Any) -> Any:
        calls.lean += 1
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(Route, "get", counted)
    return calls


@pytest.fixture
def lean_only(lean_calls: Calls, monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Count the lean path's GETs; fail the test if aiohttp's request path is taken."""

    async def refused(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> Any:
        lean_calls.aiohttp += 1
        raise AssertionError("aiohttp's request path carried a plain GET")

    monkeypatch.setattr(aiohttp.ClientSession, "_request", refused)
    return lean_calls


def files(client: sandboxkit.Client, port: int) -> Any:
    return client.sandbox(
        sandbox_key="sbx", domain=f"sandbox.test:{port}", access_token="sat-LEAN-TOKEN"
    ).files


def chunked(body: bytes, headers: str = "") -> bytes:
    pieces = [body[:1000], body[1000:5000], body[5000:]]
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{headers}\r\n".encode() + framed


async def reads(
    server: RawServer, times: int = 1, expected: bytes = DATA, remote: str = "/x.bin"
) -> None:
    """`times` reads of `remote` from `server`, each `expected`; then nothing left open."""
    async with hostile_client(f"http://127.0.0.1:{server.port}") as client:
        with anyio.fail_after(LIMIT):
            for _ in range(times):
                assert await files(client, server.port).read_bytes(remote) == expected
        await close_and_check(client, [server.port])


def header(head: bytes, name: str) -> str | None:
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.lower() == name.lower():
            return value.strip()
    return None


async def test_a_plain_get_goes_the_lean_way_and_keeps_its_connection(
    server: RawServer, lean_only: Calls
) -> None:
    """Two reads of one host: both lean, on one kept-alive connection, their bytes right."""
    server.always(http_answer(200, DATA), close=False)
    await reads(server, 2, remote="/a b/ü.bin")
    assert (lean_only.lean, lean_only.aiohttp, server.connections) == (2, 0, 1)
    line = server.heads[0].split(b"\r\n", 1)[0]
    assert line == b"GET /files?path=/a%20b/%C3%BC.bin HTTP/1.1"
    assert header(server.heads[0], "X-Access-Token") == "sat-LEAN-TOKEN"


async def test_the_lean_head_carries_what_aiohttps_would(
    server: RawServer, monkeypatch: pytest.MonkeyPatch, lean_calls: Calls
) -> None:
    """The same request line and the same headers (names, values) on either path."""
    server.always(http_answer(200, DATA), close=False)
    async with hostile_client(f"http://127.0.0.1:{server.port}") as client:
        with anyio.fail_after(LIMIT):
            await files(client, server.port).read_bytes("/x.bin")
    monkeypatch.setattr(_transport, "route", lambda *args: None)  # aiohttp's path only
    async with hostile_client(f"http://127.0.0.1:{server.port}") as client:
        with anyio.fail_after(LIMIT):
            await files(client, server.port).read_bytes("/x.bin")
    assert lean_calls.lean == 1  # the first head was the lean path's, the second aiohttp's
    lean, full = (sorted(head.lower().split(b"\r\n")) for head in server.heads)
    assert lean == full
    assert (
        b"accept-encoding: identity" in lean
        and b"host: sbx.sandbox.test:%d" % (server.port) in lean
    )


async def test_a_chunked_answer_is_read_whole(server: RawServer, lean_only: Calls) -> None:
    server.always(chunked(DATA), close=False)
    await reads(server, 2)
    assert (lean_only.lean, server.connections) == (2, 1)


async def test_a_content_coded_answer_is_decoded(server: RawServer, lean_only: Calls) -> None:
    """A proxy that gzips despite `identity`: the file's bytes, never the coded ones."""
    server.always(http_answer(200, gzip.compress(DATA), {"Content-Encoding": "gzip"}))
    await reads(server)
    assert lean_only.lean == 1


async def test_an_informational_answer_before_the_final_one_is_skipped(
    server: RawServer, lean_only: Calls
) -> None:
    server.always(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + http_answer(200, DATA))
    await reads(server)
    assert lean_only.lean == 1


async def test_bytes_past_the_content_length_are_never_read_or_reused(
    server: RawServer, lean_only: Calls
) -> None:
    """A body longer than its Content-Length, in one write: the parser refuses what follows
    the body as no answer, so that try fails and its connection is dropped; the retry on a
    new connection reads the file, and that clean connection is kept."""
    server.on(http_answer(200, DATA + b"STRAY BYTES", length=len(DATA)), close=False)
    server.always(http_answer(200, DATA), close=False)
    await reads(server, 2)
    assert (lean_only.lean, len(server.heads), server.connections) == (3, 3, 2)


async def test_a_body_longer_than_its_length_every_time_is_an_honest_error(
    server: RawServer, lean_only: Calls
) -> None:
    server.always(http_answer(200, DATA + b"STRAY BYTES", length=len(DATA)), close=False)
    async with hostile_client(f"http://127.0.0.1:{server.port}") as client:
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.RemoteProtocolError):
            await files(client, server.port).read_bytes("/x.bin")
        await close_and_check(client, [server.port])
    assert lean_only.lean == server.connections == 2  # tried once more, on a new connection


async def test_a_whole_stray_answer_after_the_body_is_never_a_result(
    server: RawServer, lean_only: Calls
) -> None:
    """An unsolicited second answer in the same write is dropped with its connection."""
    evil = http_answer(200, b"E" * len(DATA))
    server.always(http_answer(200, DATA) + evil, close=False)
    await reads(server, 2)
    assert (lean_only.lean, server.connections) == (2, 2)


async def test_a_cut_mid_body_is_resumed_where_it_stopped(
    server: RawServer, lean_only: Calls
) -> None:
    half = len(DATA) // 2
    server.on(http_answer(200, DATA[:half], {"Accept-Ranges": "bytes"}, length=len(DATA)))
    rest = {"Content-Range": f"bytes {half}-{len(DATA) - 1}/{len(DATA)}"}
    server.on(http_answer(206, DATA[half:], rest))
    await reads(server)
    assert [header(head, "Range") for head in server.heads] == [None, f"bytes={half}-"]
    assert lean_only.lean == 2


async def test_an_error_status_is_the_same_exception(server: RawServer, lean_only: Calls) -> None:
    server.always(http_answer(404, b'{"message": "no such file"}'))
    async with hostile_client(f"http://127.0.0.1:{server.port}") as client:
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.NotFoundError, match="no such"):
            await files(client, server.port).read_bytes("/x.bin")
        await close_and_check(client, [server.port])
    assert lean_only.lean == 1


async def test_a_head_that_is_no_http_is_a_protocol_error(
    server: RawServer, lean_only: Calls
) -> None:
    server.always(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    async with hostile_client(f"http://127.0.0.1:{server.port}") as client:
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.RemoteProtocolError) as caught:
            await files(client, server.port).read_bytes("/x.bin")
        await close_and_check(client, [server.port])
    assert "is not valid HTTP" in str(caught.value) and "sbx.sandbox.test" in str(caught.value)
    assert lean_only.aiohttp == 0 and lean_only.lean >= 1


async def test_an_upload_goes_aiohttps_way(server: RawServer, lean_calls: Calls) -> None:
    """A request with a body is never lean (its writer is aiohttp's)."""
    server.always(http_answer(200, b'[{"path": "/x.bin", "name": "x.bin", "type": "file"}]'))
    async with hostile_client(f"http://127.0.0.1:{server.port}") as client:
        with anyio.fail_after(LIMIT):
            await files(client, server.port).upload("/x.bin", b"payload")
        await close_and_check(client, [server.port])
    assert server.heads[0].startswith(b"POST /files?") and lean_calls.lean == 0


# -- what the lean path leaves to aiohttp, decided before a byte is written ------------------


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers={"User-Agent": "t"}) as made:
        yield made


async def test_a_proxied_origin_has_no_lean_route(session: aiohttp.ClientSession) -> None:
    assert route(session, "http://sbx.sandbox.test", "tok", proxied=True) is None
    assert route(session, "http://sbx.sandbox.test", "tok", proxied=False) is not None


@pytest.mark.parametrize("token", ["tok\r\nX-Evil: 1", "tok\nx", "tök"])
async def test_a_token_that_cannot_go_as_it_is_has_no_lean_route(
    session: aiohttp.ClientSession, token: str
) -> None:
    assert route(session, "http://sbx.sandbox.test", token, proxied=False) is None


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/files?path=a b", None),
        ("/files?path=ü", None),
        ("/files?path=x\r\nX-Evil: 1", None),
        ("", None),
        ("/files", {"If-Range": '"v1"\r\nX-Evil: 1'}),
        ("/files", {"If-Range": 'W/"ü"'}),
        ("/files", {"Bad Name": "x"}),
    ],
)
async def test_what_cannot_go_as_it_is_gets_no_lean_head(
    session: aiohttp.ClientSession, target: str, headers: dict[str, str] | None
) -> None:
    lean = route(session, "http://sbx.sandbox.test", "tok", proxied=False)
    assert lean is not None
    assert lean.head(target, headers) is None
    assert lean.head("/files?path=%2Fx", {"Range": "bytes=5-"}) == (
        b"GET /files?path=%2Fx HTTP/1.1\r\nHost: sbx.sandbox.test\r\nAccept: */*\r\n"
        b"User-Agent: t\r\nX-Access-Token: tok\r\nRange: bytes=5-\r\n\r\n"
    )


async def test_a_head_and_its_route_never_show_the_token(session: aiohttp.ClientSession) -> None:
    """Both sit in frames' locals, which error trackers record with a traceback."""
    lean = route(session, "http://sbx.sandbox.test", "sat-SECRET", proxied=False)
    assert lean is not None
    head = lean.head("/files?path=/x", None)
    assert head is not None and b"X-Access-Token: sat-SECRET\r\n" in head
    assert "SECRET" not in repr(head) and "SECRET" not in repr(lean)
    assert repr(lean) == "Route(http://sbx.sandbox.test)"


async def test_an_answer_dropped_unended_gives_its_connection_back(server: RawServer) -> None:
    """As aiohttp's ClientResponse does: no connection stays counted (or warns) forever."""
    server.always(http_answer(200, DATA), close=False)
    origin = f"http://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession() as session:
        lean = route(session, origin, "tok", proxied=False)
        assert lean is not None and session.connector is not None
        head = lean.head("/files?path=/x", None)
        assert head is not None
        answer = await lean.get(head, aiohttp.ClientTimeout(), None)
        assert answer.status == 200 and len(session.connector._acquired) == 1
        del answer
        gc.collect()
        assert len(session.connector._acquired) == 0


# -- read_bytes: a first answer that is the whole file skips the resume machine -------------

HALF = len(DATA) // 2
QUICK_OR_NOT = {
    "whole, with its length": ([http_answer(200, DATA)], True),
    "chunked": ([chunked(DATA)], False),
    "gzip": ([http_answer(200, gzip.compress(DATA), {"Content-Encoding": "gzip"})], False),
    "cut mid-body, then resumed": (
        [
            http_answer(200, DATA[:HALF], {"Accept-Ranges": "bytes"}, length=len(DATA)),
            http_answer(206, DATA[HALF:], {"Content-Range": f"bytes {HALF}-{len(DATA) - 1}/*"}),
        ],
        False,
    ),
}


@pytest.mark.parametrize(("answers", "quick"), QUICK_OR_NOT.values(), ids=QUICK_OR_NOT.keys())
async def test_read_bytes_takes_a_whole_first_answer_as_the_file_and_judges_the_rest(
    server: RawServer, monkeypatch: pytest.MonkeyPatch, answers: list[bytes], quick: bool
) -> None:
    """The file's bytes either way; the resume machine judges every answer that is not a
    200 of exactly its Content-Length, all here (and only those)."""
    judged: list[int] = []
    real = ResumeState.on_response

    def counted(self: ResumeState, info: Any) -> Any:
        judged.append(info.status)
        return real(self, info)

    monkeypatch.setattr(ResumeState, "on_response", counted)
    for answer in answers:
        server.on(answer, close=True)
    await reads(server)
    assert judged == ([] if quick else [200, 206][: len(answers)])


async def test_a_whole_answer_after_a_restart_is_judged(
    server: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file replaced mid-read: the held bytes are dropped and the new whole answer goes
    through the machine (the quick way is for a first answer into an empty sink only)."""
    new = DATA[::-1]
    server.on(
        http_answer(200, DATA[:HALF], {"Accept-Ranges": "bytes", "ETag": '"v1"'}, length=len(DATA))
    )
    server.on(http_answer(200, new, {"ETag": '"v2"'}))  # If-Range failed: the whole new file
    await reads(server, expected=new)
    assert [header(head, "If-Range") for head in server.heads] == [None, '"v1"']


@pytest.mark.parametrize("missing", ["set_response_params", "start_timeout", "read"])
async def test_an_aiohttp_without_the_protocol_calls_it_needs_gets_no_lean_route(
    session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    """A future aiohttp 3.x that renames one: its requests take aiohttp's own path."""
    monkeypatch.setattr(aiohttp.client_proto.ResponseHandler, missing, None)
    assert route(session, "http://sbx.sandbox.test", "tok", proxied=False) is None


CLOSE_DELIMITED = {
    "HTTP/1.0": b"HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n",
    "Connection: close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
}
BIG = bytes(range(256)) * 1172  # 300,032 bytes: more than one read of the socket


@pytest.mark.parametrize("path", ["lean", "aiohttp's"])
@pytest.mark.parametrize("framing", list(CLOSE_DELIMITED))
async def test_a_body_that_ends_at_the_close_is_read_whole(
    server: RawServer,
    lean_calls: Calls,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    path: str,
    framing: str,
) -> None:
    """No Content-Length, no chunks: the body ends when the server closes (legal HTTP from
    HTTP/1.0 proxies, CGI gateways, simple servers). Every read gets every byte: the plain
    GET's parser once read such a body as empty, and gave an empty file without an error."""
    if path != "lean":
        monkeypatch.setattr(_transport, "route", lambda *args: None)
    server.always(CLOSE_DELIMITED[framing] + BIG, close=True)
    async with hostile_client(f"http://127.0.0.1:{server.port}") as client:
        remote = files(client, server.port)
        with anyio.fail_after(LIMIT):
            assert await remote.read_bytes("/x.bin") == BIG
            async with remote.iter_bytes("/x.bin") as chunks:
                assert b"".join([chunk async for chunk in chunks]) == BIG
            result = await remote.download("/x.bin", tmp_path / "x.bin")
            assert (tmp_path / "x.bin").read_bytes() == BIG and result.size == len(BIG)
            page = await remote.read_range("/x.bin", 1000, 5000)
            assert (page.data, page.offset) == (BIG[1000:6000], 1000)
        await close_and_check(client, [server.port])
    assert lean_calls.lean == (4 if path == "lean" else 0)
