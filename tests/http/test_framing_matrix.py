"""The framing matrix (issue 38): real servers, not written for this SDK, each started here.

Every framing each server can produce, every read path, on both GET paths (the plain one,
`_http/connections.py`, and aiohttp's own request path): each cell is one case of the one
parametrized test below. Its result is the file's bytes, checked byte for byte against the
source (and a download's sha256), or else a typed `sandboxkit` error; the answers the SDK
read are checked to be the framing the cell names, so a server that changes its framing
fails its cells rather than silently test another one. The servers and their shims are in
`framing_support`; each runs in a process of its own, started once for the module.

Framings: `length` (a Content-Length), `chunked`, `close` (neither: the body ends at the
connection's close), `200` to a Range (a server that ignores Range answers with the whole
file, in its own framing), `206` (the range asked) and `416` (a range past the end).

    server, response         | length | chunked | close | 200 to a Range | 206 | 416
    -------------------------+--------+---------+-------+----------------+-----+---------
    http.server (stock)      | yes *  |         |       | length         |     |
    aiohttp FileResponse     | yes    |         |       |                | yes | chunked
    aiohttp StreamResponse   |        | yes     |       | chunked        |     |
    uvicorn FileResponse     | yes    |         |       |                | yes | length
    uvicorn StreamingResp.   |        | yes     |       | chunked        |     |
    hypercorn FileResponse   | yes    |         |       |                | yes | length
    hypercorn StreamingResp. |        | yes     |       | chunked        |     |
    nginx static             | yes    |         |       |                | yes | length
    nginx SSI filter         |        | yes     |       | chunked        |     |
    nginx SSI, unchunked     |        |         | yes   | close          |     |

    * HTTP/1.0 with a Content-Length, the connection closed after each answer.
    uvicorn runs its httptools protocol, hypercorn h11; both serve Starlette's responses.

An empty box is a framing that server cannot produce for this SDK's requests, so it has no
cell: http.server implements no Range and always sends a length; a file response knows its
length and honours Range; a streamed one has no length, so it is chunked and ignores Range
(h11, httptools and aiohttp chunk a body of unknown length for every HTTP/1.1 request: a
close-delimited body from them needs an HTTP/1.0 request, which this SDK never sends; only
nginx, with `chunked_transfer_encoding off`, sends one to an HTTP/1.1 client).

The cells, and what each gave on both GET paths (lean, aiohttp's): `ok` is the file's
bytes exactly. Columns: `read_bytes`; `iter_bytes` (64 KiB chunks); `download` on one
stream (parts=1); `download` in slices (parts=4, a 3 MiB file: 206 slices where the server
shows `Accept-Ranges: bytes` and a length, else the one stream); `read_range`, a page inside
the file and the page at its end (size and eof checked); `read_range` at the end of the
file (an empty page at eof: a 416, or the whole file read through).

    server              | read_bytes | iter_bytes | download | sliced     | read_range | past end
    --------------------+------------+------------+----------+------------+------------+-----------
    http.server         | len ok     | len ok     | len ok   | len ok     | 200 len ok | 200 len ok
    aiohttp file        | len ok     | len ok     | len ok   | len+206 ok | 206 ok     | 416 ok
    aiohttp stream      | chk ok     | chk ok     | chk ok   | chk ok     | 200 chk ok | 200 chk ok
    uvicorn file        | len ok     | len ok     | len ok   | len+206 ok | 206 ok     | 416 ok **
    uvicorn stream      | chk ok     | chk ok     | chk ok   | chk ok     | 200 chk ok | 200 chk ok
    hypercorn file      | len ok     | len ok     | len ok   | len+206 ok | 206 ok     | 416 ok **
    hypercorn stream    | chk ok     | chk ok     | chk ok   | chk ok     | 200 chk ok | 200 chk ok
    nginx static        | len ok     | len ok     | len ok   | len+206 ok | 206 ok     | 416 ok
    nginx SSI           | chk ok     | chk ok     | chk ok   | chk ok     | 200 chk ok | 200 chk ok
    nginx SSI unchunked | cls ok     | cls ok     | cls ok   | cls ok     | 200 cls ok | 200 cls ok

    len, chk, cls: the framing of a 200 (length, chunked, close); 200 x: a 200 of the whole
    file to a Range, framed x; len+206: a 200 with its length, then 206 slices; ok: the
    file's bytes exactly, on the lean path and on aiohttp's.
    ** Starlette before 1.0 sends its 416 with `Content-Range: */N`, no unit: the page is
    empty at eof all the same, its size unknown (None) rather than read from a malformed
    header.

All 10 x 6 x 2 = 120 cells give the right bytes; none is a typed error, none retried.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

import sandboxkit
from sandboxkit._http import transport as _transport
from sandboxkit._http.connections import Route
from sandboxkit._http.transport import StreamingResponse

from ..conftest import hostile_client
from ..framing_support import NGINX, Served, http_server, module, nginx
from ..reliability_support import close_and_check

LIMIT = 30.0  # seconds for one cell: a hang fails it
SMALL = random.Random(38).randbytes(300_007)  # several reads of the socket, no round size
BIG = random.Random(39).randbytes((3 << 20) + 7)  # for slices: 12 of 256 KiB
FILES = {"small.bin": SMALL, "big.bin": BIG}
# Slices on loopback: any file of 1 MiB or more, whatever the round trip.
PARALLEL = sandboxkit.ParallelDownloads(threshold=1 << 20, parts=4, min_latency=0.0)
PIECE = 64 * 1024  # iter_bytes' chunk_size: several chunks of the small file
STARLETTE = ("uvicorn_ports", "hypercorn_ports")  # the servers of Starlette's responses
OLD_416 = int(version("starlette").split(".")[0]) < 1


@dataclass(frozen=True)
class Endpoint:
    """A server and the path its shim answers with one kind of response."""

    key: str  # the cell's id
    server: str  # the module fixture that runs it
    prefix: str  # the remote path's first segment, which picks the response
    whole: str  # the framing of its 200: length, chunked or close
    # Where it honours Range (206s, and shows `Accept-Ranges: bytes`): the framing of its
    # 416 to a range past the end. None: it ignores Range.
    refusal: str | None = None

    @property
    def ranges(self) -> bool:
        return self.refusal is not None


ENDPOINTS = (
    Endpoint("http.server", "http_server_ports", "any", "length"),
    Endpoint("aiohttp.FileResponse", "aiohttp_ports", "file", "length", refusal="chunked"),
    Endpoint("aiohttp.StreamResponse", "aiohttp_ports", "stream", "chunked"),
    Endpoint("uvicorn.FileResponse", "uvicorn_ports", "file", "length", refusal="length"),
    Endpoint("uvicorn.StreamingResponse", "uvicorn_ports", "stream", "chunked"),
    Endpoint("hypercorn.FileResponse", "hypercorn_ports", "file", "length", refusal="length"),
    Endpoint("hypercorn.StreamingResponse", "hypercorn_ports", "stream", "chunked"),
    Endpoint("nginx.static", "nginx_ports", "static", "length", refusal="length"),
    Endpoint("nginx.ssi", "nginx_ports", "ssi", "chunked"),
    Endpoint("nginx.ssi-unchunked", "nginx_ports", "close", "close"),
)
READS = (
    "read_bytes",
    "iter_bytes",
    "download",
    "download-sliced",
    "read_range",
    "read_range-past-end",
)
GET_PATHS = ("lean", "aiohttp")


def framing(endpoint: Endpoint, read: str) -> str:
    """The framing of the answers `endpoint` gives `read`: the cell's column."""
    if read == "download-sliced" and endpoint.ranges:
        return f"{endpoint.whole}+206"
    if read.startswith("read_range"):
        if endpoint.ranges:
            return "206" if read == "read_range" else "416"
        return f"200-to-range({endpoint.whole})"
    return endpoint.whole


CELLS = [
    pytest.param(endpoint, read, path, id=f"{endpoint.key}-{framing(endpoint, read)}-{read}-{path}")
    for endpoint in ENDPOINTS
    for read in READS
    for path in GET_PATHS
]


# -- the servers, each started once for the module --------------------------------------------


@pytest.fixture(scope="module")
def served_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("framing-files")
    for name, data in FILES.items():
        # nginx's SSI filter would run a `<!--#` command: the files hold none.
        assert b"<!--#" not in data
        (root / name).write_bytes(data)
    return root


def one_port(server: Served) -> dict[str, int]:
    return dict.fromkeys(FILES, server.port)


@pytest.fixture(scope="module")
def http_server_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Two stock http.servers: it ignores the query, so each serves one file, as `files`."""
    folder = tmp_path_factory.mktemp("http.server")
    with contextlib.ExitStack() as stack:
        ports = {}
        for name, data in FILES.items():
            directory = folder / name.replace(".", "-")
            directory.mkdir()
            (directory / "files").write_bytes(data)
            server = stack.enter_context(Served(http_server(directory), folder / "log"))
            ports[name] = server.port
        yield ports


@pytest.fixture(scope="module")
def aiohttp_ports(
    served_files: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, int]]:
    log = tmp_path_factory.mktemp("aiohttp") / "log"
    with Served(module("aiohttp", served_files), log) as server:
        yield one_port(server)


@pytest.fixture(scope="module")
def uvicorn_ports(
    served_files: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, int]]:
    log = tmp_path_factory.mktemp("uvicorn") / "log"
    with Served(module("uvicorn", served_files), log) as server:
        yield one_port(server)


@pytest.fixture(scope="module")
def hypercorn_ports(
    served_files: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, int]]:
    log = tmp_path_factory.mktemp("hypercorn") / "log"
    with Served(module("hypercorn", served_files), log) as server:
        yield one_port(server)


@pytest.fixture(scope="module")
def nginx_ports(
    served_files: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, int]]:
    """nginx when installed; CI installs it (.ci/run), so there its absence fails."""
    if NGINX is None:
        reason = "nginx is not installed (apt-get install nginx-light): its cells need it"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI installs it in .ci/run")
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("nginx")
    with Served(nginx(folder, served_files), folder / "log") as server:
        yield one_port(server)


@pytest.fixture
def matrix_ports(request: pytest.FixtureRequest, endpoint: Endpoint) -> dict[str, int]:
    """The cell's server, started on first use."""
    found: dict[str, int] = request.getfixturevalue(endpoint.server)
    return found


# -- what each cell saw -----------------------------------------------------------------------


def framed(headers: Any) -> str:
    """How an answer's body is delimited, by its head."""
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        return "chunked"
    return "length" if "Content-Length" in headers else "close"


@dataclass
class Seen:
    """The answers the SDK read, as (status, framing), and the GETs each path carried."""

    answers: list[tuple[int, str]]
    content_ranges: list[str | None]
    lean: int = 0
    aiohttp: int = 0


@pytest.fixture
def answers_seen(monkeypatch: pytest.MonkeyPatch) -> Seen:
    """Every answer's head, as the SDK's reader (`StreamingResponse`) gets it on either path,
    and a count of each path's GETs."""
    record = Seen([], [])
    real_init = StreamingResponse.__init__
    real_get = Route.get
    real_request = aiohttp.ClientSession._request

    def recorded(self: StreamingResponse, response: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, response, *args, **kwargs)
        record.answers.append((response.status, framed(response.headers)))
        record.content_ranges.append(response.headers.get("Content-Range"))

    async def lean(self: Route, *args: Any, **kwargs: Any) -> Any:
        record.lean += 1
        return await real_get(self, *args, **kwargs)

    async def full(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> Any:
        record.aiohttp += 1
        return await real_request(self, *args, **kwargs)

    monkeypatch.setattr(StreamingResponse, "__init__", recorded)
    monkeypatch.setattr(Route, "get", lean)
    monkeypatch.setattr(aiohttp.ClientSession, "_request", full)
    return record


# -- the read paths: each checks its bytes; returns the GETs it expects, as (status, framing) --

Reader = Callable[[Any, str, Endpoint, Path, Seen], Awaitable[list[tuple[int, str]]]]


def size_shown(status: int, framing: str, eof: bool) -> int | None:
    """What `FileRange.size` is: the size an answer showed (a 206's or a 416's total, a
    length), or that a body read to its end did."""
    return len(SMALL) if status in (206, 416) or framing == "length" or eof else None


async def read_bytes(files: Any, remote: str, end: Endpoint, tmp: Path, seen: Seen) -> Any:
    assert await files.read_bytes(remote) == SMALL
    return [(200, end.whole)]


async def iter_bytes(files: Any, remote: str, end: Endpoint, tmp: Path, seen: Seen) -> Any:
    async with files.iter_bytes(remote, chunk_size=PIECE) as stream:
        chunks = [chunk async for chunk in stream]
    assert b"".join(chunks) == SMALL
    assert len(chunks) > 1 and max(map(len, chunks)) <= PIECE
    return [(200, end.whole)]


async def download(files: Any, remote: str, end: Endpoint, tmp: Path, seen: Seen) -> Any:
    result = await files.download(remote, tmp / "out.bin", parts=1)
    assert (tmp / "out.bin").read_bytes() == SMALL
    assert (result.size, result.sha256) == (len(SMALL), hashlib.sha256(SMALL).hexdigest())
    assert (result.attempts, result.resumes) == (1, 0)
    return [(200, end.whole)]


async def sliced(files: Any, remote: str, end: Endpoint, tmp: Path, seen: Seen) -> Any:
    result = await files.download(remote, tmp / "out.bin")  # the client's parts=4
    assert (tmp / "out.bin").read_bytes() == BIG
    assert (result.size, result.sha256) == (len(BIG), hashlib.sha256(BIG).hexdigest())
    assert result.resumes == 0 and result.attempts == len(seen.answers)
    if not end.ranges:  # no range support shown, or no length: one stream
        return [(200, end.whole)]
    assert result.attempts >= 3, "the file was not sliced"
    return [(200, end.whole)] + [(206, "length")] * (result.attempts - 1)


async def read_range(files: Any, remote: str, end: Endpoint, tmp: Path, seen: Seen) -> Any:
    answer = (206, "length") if end.ranges else (200, end.whole)
    page = await files.read_range(remote, 100_003, 150_001)
    assert (page.data, page.offset, page.size, page.eof) == (
        SMALL[100_003:250_004],
        100_003,
        size_shown(*answer, eof=False),
        False,
    )
    tail = len(SMALL) - 50_000
    page = await files.read_range(remote, tail, 150_001)
    size = size_shown(*answer, eof=True)
    assert (page.data, page.offset, page.size, page.eof) == (SMALL[tail:], tail, size, True)
    return [answer, answer]


async def past_end(files: Any, remote: str, end: Endpoint, tmp: Path, seen: Seen) -> Any:
    page = await files.read_range(remote, len(SMALL), 1000)
    if end.refusal is None:
        answer = (200, end.whole)
        size = size_shown(*answer, eof=True)
    else:
        answer = (416, end.refusal)
        # Starlette before 1.0 writes a 416's Content-Range without its unit (`*/N`): that
        # shows no size, and the page is empty at the end all the same.
        old = end.server in STARLETTE and OLD_416
        shown = f"{'' if old else 'bytes '}*/{len(SMALL)}"
        assert seen.content_ranges == [shown]
        size = None if old else len(SMALL)
    assert (page.data, page.size, page.eof) == (b"", size, True)
    return [answer]


READERS: dict[str, Reader] = {
    "read_bytes": read_bytes,
    "iter_bytes": iter_bytes,
    "download": download,
    "download-sliced": sliced,
    "read_range": read_range,
    "read_range-past-end": past_end,
}


@pytest.mark.parametrize(("endpoint", "read", "get_path"), CELLS)
async def test_framing_matrix(
    endpoint: Endpoint,
    read: str,
    get_path: str,
    matrix_ports: dict[str, int],
    answers_seen: Seen,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """One cell: `read` of a file from `endpoint`'s real server, its GETs on `get_path`.
    The file's bytes, exactly; each answer read of the framing the cell names; every GET
    on the cell's path; no connection left open."""
    if get_path == "aiohttp":
        monkeypatch.setattr(_transport, "route", lambda *args: None)
    name = "big.bin" if read == "download-sliced" else "small.bin"
    port = matrix_ports[name]
    async with hostile_client(f"http://127.0.0.1:{port}", parallel_downloads=PARALLEL) as client:
        files = client.sandbox(
            sandbox_key="sbx", domain=f"sandbox.test:{port}", access_token="sat-FRAMING"
        ).files
        with anyio.fail_after(LIMIT):
            expected = await READERS[read](
                files, f"/{endpoint.prefix}/{name}", endpoint, tmp_path, answers_seen
            )
        await close_and_check(client, [port])
    assert answers_seen.answers == expected
    carried = (answers_seen.lean, answers_seen.aiohttp)
    assert carried == ((len(expected), 0) if get_path == "lean" else (0, len(expected)))
