"""Bounded reads (issue 31) over real loopback sockets: `files.read_range` pages of exactly
the bytes asked for, with and without range support on the data center; `read_text` pages
that never split a character; `max_size` caps on whole reads; bad input refused before any
request. The emulator serves the usual cases; `PageServer`, a raw server of this module,
counts what it wrote before each client's close, cuts answers, and replaces its file.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio.from_thread
import attrs
import pytest

import sandboxkit
from sandboxkit import sync
from sandboxkit.emulator import Emulator, Fault

from ..conftest import hostile_client
from ..files_support import CHUNKED, NO_RESUME, RESUME, Box, new_box, payload
from ..reliability_support import LoopbackServer, read_head, started

KiB, MiB = 1 << 10, 1 << 20
PAGE = 64 * KiB
REMOTE = "/home/user/f.bin"
TOKEN = "sat-BOUNDED-TOKEN"
PIECE = 64 * KiB  # PageServer writes this much at a time, with a send buffer this small
HOLD = MiB  # how far past an ignored Range's page PageServer(hold=True) holds back
HOLD_SECONDS = 30.0  # how long it waits there for the client's close (only a failure waits)
_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


# -- a raw file server that counts what it wrote ------------------------------------------


@attrs.define
class Served:
    """One answer PageServer gave."""

    connection: int  # which connection carried it, in the order they were accepted
    range: str | None  # the request's Range header
    if_range: str | None  # the request's If-Range header
    status: int
    length: int  # the body bytes the answer declared
    sent: int = 0  # body bytes written (and drained) before the end or the client's close
    whole: bool = False  # the whole answer went out
    client_closed: bool = False  # the client closed the connection before the answer's end


class PageServer(LoopbackServer):
    """Serves `data` to every GET, over keep-alive connections, as `GET /files` would.

    With `ranges`, a Range gets a 206 (a 416 past the end) and answers show `Accept-Ranges:
    bytes`; without, every answer is a 200 of the whole file. `chunked`: a 200 has no
    Content-Length. `etag`: the file's ETag; `if_range`: honour If-Range (a tag other than
    the file's gets the whole file). Its send buffer is small (64 KiB), so a client that
    stops reading holds it back within a few hundred KiB (the client's receive buffer).
    """

    def __init__(
        self,
        data: bytes,
        *,
        ranges: bool = True,
        chunked: bool = False,
        etag: str | None = None,
        if_range: bool = True,
        hold: bool = False,
    ) -> None:
        super().__init__()
        # An ignored Range's answer stops HOLD bytes past the page it asked for, until the
        # client closes (a reader that stops there) or HOLD_SECONDS pass (one that does not).
        self.hold = hold
        self.data, self.ranges, self.chunked, self.etag = data, ranges, chunked, etag
        self.honour_if_range = if_range
        self.served: list[Served] = []
        self.connections = 0
        self._cuts: list[tuple[int, bytes | None, str | None]] = []

    @property
    def domain(self) -> str:
        return f"sandbox.test:{self.port}"

    def cut_next(self, after: int, then: bytes | None = None, etag: str | None = None) -> None:
        """Close the next answer's connection after `after` body bytes; from then on serve
        `then` (with `etag`) when given: the file replaced during the cut."""
        self._cuts.append((after, then, etag))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = self.connections
        self.connections += 1
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIECE)
        while (head := await read_head(reader)) is not None:
            if not await self._answer(connection, head, reader, writer):
                return

    async def _answer(
        self,
        connection: int,
        head: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        fields = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        asked, condition = fields.get("range"), fields.get("if-range")
        size = len(self.data)
        status, start, end = 200, 0, size
        match = _RANGE.match(asked or "")
        fresh = condition is None or condition == self.etag or not self.honour_if_range
        if self.ranges and match and fresh:
            first = int(match[1])
            if first >= size:
                status, start, end = 416, 0, 0
            else:
                last = min(int(match[2]) if match[2] else size - 1, size - 1)
                status, start, end = 206, first, last + 1
        lines = [f"HTTP/1.1 {status} X", f"Accept-Ranges: {'bytes' if self.ranges else 'none'}"]
        if self.etag is not None and status != 416:
            lines.append(f"ETag: {self.etag}")
        if status != 200:
            shown = f"*/{size}" if status == 416 else f"{start}-{end - 1}/{size}"
            lines.append(f"Content-Range: bytes {shown}")
        chunked = self.chunked and status == 200
        lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {end - start}")
        served = Served(connection, asked, condition, status, end - start)
        self.served.append(served)
        cut = self._cuts.pop(0) if self._cuts else None
        data = self.data
        held_at = None
        if self.hold and status == 200 and match:
            held_at = int(match[2]) + 1 + HOLD  # past the page's end, well within the file
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        while served.sent < end - start:
            at = start + served.sent
            piece = data[at : min(end, at + PIECE)]
            if cut is not None:
                piece = piece[: cut[0] - served.sent]
            try:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                await writer.drain()
            except ConnectionError:
                served.client_closed = True
                return False
            served.sent += len(piece)
            if held_at is not None and served.sent >= held_at:
                held_at = None
                try:  # the client's close reaches this read as the end of the stream
                    closed = await asyncio.wait_for(reader.read(1), HOLD_SECONDS) == b""
                except ConnectionError:
                    closed = True
                except TimeoutError:
                    closed = False  # still reading past its page: the test fails on it
                if closed:
                    served.client_closed = True
                    return False
            if cut is not None and served.sent >= cut[0]:
                if cut[1] is not None:
                    self.data, self.etag = cut[1], cut[2]
                return False
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        served.whole = True
        return True


def serving(data: bytes, **options: Any) -> contextlib.AbstractAsyncContextManager[PageServer]:
    """A started `PageServer` of `data`."""
    return started(PageServer(data, **options))


@contextlib.asynccontextmanager
async def files_of(server: PageServer, **options: Any) -> AsyncIterator[Any]:
    """The `files` of a sandbox on `server`, through a client retrying without delay."""
    async with hostile_client(f"http://127.0.0.1:{server.port}", **options) as client:
        yield client.sandbox(sandbox_key="sbx", domain=server.domain, access_token=TOKEN).files


def downloads(emu: Emulator) -> list[tuple[str | None, int | None]]:
    """(Range, status) of every GET /files the emulator answered, in order."""
    return [(r.headers.get("Range"), r.status) for r in emu.journal_for("files.download")]


def page_ranges(size: int, page: int) -> list[str]:
    """The Range header of each page of a `size`-byte file read `page` bytes at a time."""
    return [f"bytes={at}-{at + page - 1}" for at in range(0, size, page)]


async def read_all_pages(files: Any, remote: str, page: int) -> tuple[bytes, int]:
    """The file paged through by `next_offset` until `eof`; and the number of reads."""
    out, offset, reads = [], 0, 0
    while True:
        part = await files.read_range(remote, offset, page)
        reads += 1
        assert part.offset == offset
        out.append(part.data)
        if part.eof:
            return b"".join(out), reads
        assert len(part.data) == page
        offset = part.next_offset


# -- pages of a file, with and without range support ---------------------------------------


async def test_pages_are_range_gets_of_exactly_their_size(emulator: Emulator, box: Box) -> None:
    """Paging a 10 MiB file in 64 KiB reads sends one `Range` GET per page, each for exactly
    its page, all answered 206; the pages join into the file and the last says eof."""
    data = payload(10 * MiB, seed=1)
    box.put(REMOTE, data)
    joined, reads = await read_all_pages(box.files, REMOTE, PAGE)
    assert joined == data and reads == 160
    assert downloads(emulator) == [(r, 206) for r in page_ranges(10 * MiB, PAGE)]


async def test_pages_without_range_support_read_the_file_up_to_each_page(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """On a data center without range support every page's GET still carries its Range and
    gets the whole file (200); each page comes out right."""
    sbx = await new_box(emulator, emulator_client, NO_RESUME)
    data = payload(10 * MiB, seed=2)
    sbx.put(REMOTE, data)
    joined, reads = await read_all_pages(sbx.files, REMOTE, PAGE)
    assert joined == data and reads == 160
    assert downloads(emulator) == [(r, 200) for r in page_ranges(10 * MiB, PAGE)]


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
async def test_each_page_stops_reading_at_its_end_where_ranges_are_ignored(
    chunked: bool,
) -> None:
    """A server that ignores Range answers every page with the whole 32 MiB file: each read
    closes its connection once its page is served. The server holds its answer back 1 MiB
    past the page (what it wrote before may sit in socket buffers) until the client closes:
    every read closed by then, so none read on past its page."""
    data = payload(32 * MiB, seed=3)
    offsets = [0, 3 * MiB + 5, 16 * MiB]
    serve = serving(data, ranges=False, chunked=chunked, hold=True)
    async with serve as server, files_of(server) as files:
        for offset in offsets:
            page = await files.read_range(REMOTE, offset, PAGE)
            assert (page.data, page.offset) == (data[offset : offset + PAGE], offset)
            assert page.eof is False and page.size == (None if chunked else 32 * MiB)
    assert [s.range for s in server.served] == [f"bytes={o}-{o + PAGE - 1}" for o in offsets]
    assert [s.connection for s in server.served] == [0, 1, 2]  # each one closed after its page
    for offset, served in zip(offsets, server.served, strict=True):
        assert served.status == 200 and not served.whole and served.client_closed, served
        assert offset + PAGE <= served.sent < offset + PAGE + HOLD + PIECE, served


async def test_a_range_read_to_its_end_keeps_its_connection_for_the_next(
    emulator: Emulator,
) -> None:
    """Three pages from a server with ranges go over one connection: a 206 read to its end
    is given back to the pool; pages from a server without go over one connection each."""
    data = payload(MiB, seed=4)
    for ranges, connections in ((True, 1), (False, 3)):
        async with serving(data, ranges=ranges) as server, files_of(server) as files:
            for offset in (0, PAGE, 5 * PAGE):
                page = await files.read_range(REMOTE, offset, PAGE)
                assert page.data == data[offset : offset + PAGE]
        assert server.connections == connections
        assert [s.status for s in server.served] == [206 if ranges else 200] * 3


# -- resumes and versions ------------------------------------------------------------------


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "no-ranges"])
async def test_a_cut_mid_page_resumes_within_the_page(ranges: bool) -> None:
    """An answer cut 20,000 bytes into the page is resumed from the byte it reached, still
    bounded by the page's end, with If-Range (a server without ranges sends the whole file
    again, read up to the page's end); the page comes out right."""
    data = payload(4 * MiB, seed=5)
    offset = MiB + 7
    async with serving(data, ranges=ranges, etag='"v1"') as server, files_of(server) as files:
        server.cut_next((0 if ranges else offset) + 20_000)
        page = await files.read_range(REMOTE, offset, PAGE)
    assert page.data == data[offset : offset + PAGE]
    first, resume = server.served
    assert (first.range, first.if_range) == (f"bytes={offset}-{offset + PAGE - 1}", None)
    assert (resume.range, resume.if_range) == (
        f"bytes={offset + 20_000}-{offset + PAGE - 1}",
        '"v1"',
    )
    assert resume.status == (206 if ranges else 200)


@pytest.mark.parametrize("honoured", [True, False], ids=["if-range", "if-range-ignored"])
async def test_a_file_replaced_during_a_cut_gives_a_page_of_the_new_version(
    honoured: bool,
) -> None:
    """The file is replaced while a page's answer is cut: the resume's If-Range gets the
    new file whole (200), or, from a server that ignores If-Range, a 206 whose ETag shows
    the change, and the page starts over: it is the new version's, never a mix."""
    old, new = payload(MiB, seed=6), payload(MiB, seed=7)
    offset = 3 * PAGE
    async with (
        serving(old, etag='"old"', if_range=honoured) as server,
        files_of(server) as files,
    ):
        server.cut_next(30_000, new, '"new"')
        page = await files.read_range(REMOTE, offset, PAGE)
    assert page.data == new[offset : offset + PAGE]
    statuses = [(s.range, s.if_range, s.status) for s in server.served]
    resumed = f"bytes={offset + 30_000}-{offset + PAGE - 1}"
    whole_page = f"bytes={offset}-{offset + PAGE - 1}"
    if honoured:
        assert statuses == [(whole_page, None, 206), (resumed, '"old"', 200)]
    else:
        assert statuses == [
            (whole_page, None, 206),
            (resumed, '"old"', 206),
            (whole_page, None, 206),
        ]


async def test_emulator_cuts_mid_page_resume_with_ranges(emulator: Emulator, box: Box) -> None:
    """On the emulator a page cut twice is resumed from where each cut left it."""
    data = payload(MiB, seed=8)
    box.put(REMOTE, data)
    emulator.faults.script("files.download", Fault.cut(after_bytes=10_000), Fault.cut(5_000))
    page = await box.files.read_range(REMOTE, 100_000, PAGE)
    assert page.data == data[100_000 : 100_000 + PAGE]
    end = 100_000 + PAGE - 1
    assert downloads(emulator) == [
        (f"bytes=100000-{end}", 206),
        (f"bytes=110000-{end}", 206),
        (f"bytes=115000-{end}", 206),
    ]


# -- the end of the file -------------------------------------------------------------------


@pytest.mark.parametrize("idc", [RESUME, NO_RESUME, CHUNKED])
async def test_the_end_of_the_file(
    emulator: Emulator, emulator_client: sandboxkit.Client, idc: str
) -> None:
    """The last partial page is short with eof and the size; a page ending exactly at the
    end says eof; an offset at or past the end gives no bytes, eof, and the size (a 416's
    `bytes */N`, a 200's Content-Length)."""
    sbx = await new_box(emulator, emulator_client, idc)
    data = payload(100_000, seed=9)
    sbx.put(REMOTE, data)
    last = await sbx.files.read_range(REMOTE, 65_536, PAGE)
    assert (last.data, last.size, last.eof, last.next_offset) == (
        data[65_536:],
        100_000,
        True,
        100_000,
    )
    exact = await sbx.files.read_range(REMOTE, 100_000 - PAGE, PAGE)
    assert (exact.data, exact.size, exact.eof) == (data[-PAGE:], 100_000, True)
    for offset in (100_000, 250_000):
        past = await sbx.files.read_range(REMOTE, offset, PAGE)
        assert (past.data, past.offset, past.size, past.eof) == (b"", offset, 100_000, True)
    statuses = [status for _, status in downloads(emulator)]
    assert statuses == ([206, 206, 416, 416] if idc != NO_RESUME else [200] * 4)


async def test_an_empty_file_is_one_empty_page(emulator: Emulator, box: Box) -> None:
    """A page of an empty file is empty, with eof and size 0 (a 416 `bytes */0`)."""
    box.put(REMOTE, b"")
    page = await box.files.read_range(REMOTE)
    assert (page.data, page.size, page.eof) == (b"", 0, True)
    assert downloads(emulator) == [(f"bytes=0-{PAGE - 1}", 416)]


# -- size caps -----------------------------------------------------------------------------


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "no-ranges"])
async def test_a_cap_under_the_shown_size_fails_before_the_body(ranges: bool) -> None:
    """`read_bytes(max_size=)` of a 16 MiB file refuses it from the answer's head (a 200's
    Content-Length): the connection is closed with the body unread, so the server could
    write no more than its buffers hold; `read_text(max_size=)` counts from its offset."""
    data = payload(16 * MiB, seed=10)
    async with serving(data, ranges=ranges) as server, files_of(server) as files:
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await files.read_bytes(REMOTE, max_size=MiB)
        assert (caught.value.size, caught.value.limit) == (16 * MiB, MiB)
        assert caught.value.operation == "files.download"
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await files.read_text(REMOTE, 15 * MiB, max_size=MiB - 1)
        assert (caught.value.size, caught.value.limit) == (16 * MiB, MiB - 1)
        tail = await files.read_text(REMOTE, 15 * MiB, max_size=MiB, errors="replace")
        assert (tail.offset, tail.next_offset, tail.eof) == (15 * MiB, 16 * MiB, True)
    first, second, third = server.served
    assert first.range is None and third.range == f"bytes={15 * MiB}-{16 * MiB}"
    assert second.range == f"bytes={15 * MiB}-{16 * MiB - 1}"
    for refused in (first, second):
        # Less than the cap went out: reading the body to count it would have taken more.
        assert not refused.whole and refused.sent < MiB, refused
    assert len(server.served) == 3  # a refusal is never retried


async def test_a_cap_passed_by_counting_stops_one_byte_past_it() -> None:
    """A chunked answer shows no size: the bytes are counted, reading stops one byte past
    the cap (the connection closed, the rest unread), and the error says the size is
    unknown; a file of exactly the cap is read whole."""
    data = payload(16 * MiB, seed=11)
    async with serving(data, ranges=False, chunked=True) as server, files_of(server) as files:
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await files.read_bytes(REMOTE, max_size=100_000)
        assert (caught.value.size, caught.value.limit) == (None, 100_000)
        with pytest.raises(sandboxkit.FileTooLargeError):
            await files.read_text(REMOTE, max_size=100_000, errors="replace")
        server.data = data[:100_000]
        assert await files.read_bytes(REMOTE, max_size=100_000) == data[:100_000]
        page = await files.read_text(REMOTE, max_size=100_000, errors="replace")
        assert (page.next_offset, page.eof, page.size) == (100_000, True, 100_000)
    refused = server.served[:2]
    assert all(not s.whole and 100_000 < s.sent < 2 * MiB for s in refused), refused
    assert [s.whole for s in server.served[2:]] == [True, True]


async def test_caps_on_the_emulator(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """On each data center a file of exactly `max_size` bytes is read, one byte more is
    refused (with its size where the answer showed it: not from the chunked one), and
    nothing is retried."""
    for idc in (RESUME, NO_RESUME, CHUNKED):
        sbx = await new_box(emulator, emulator_client, idc)
        data = payload(300_001, seed=12)
        sbx.put(REMOTE, data)
        assert await sbx.files.read_bytes(REMOTE, max_size=300_001) == data
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await sbx.files.read_bytes(REMOTE, max_size=300_000)
        assert caught.value.size == (None if idc == CHUNKED else 300_001)
    assert [status for _, status in downloads(emulator)] == [200] * 6


# -- text pages ----------------------------------------------------------------------------

TEXT = "a€b😀c" * 200 + "é"  # 3- and 4-byte characters at every alignment; 2 bytes at the end


async def read_pages(files: Any, length: int, encoding: str = "utf-8") -> list[Any]:
    """The text pages of REMOTE read by `next_offset` until eof."""
    pages, offset = [], 0
    while True:
        page = await files.read_text(REMOTE, offset, length, encoding=encoding)
        pages.append(page)
        if page.eof:
            return pages
        assert page.next_offset > offset
        offset = page.next_offset


@pytest.mark.parametrize("length", [4, 5, 6, 7, 8, 9, 1000])
async def test_text_pages_never_split_a_character(
    emulator: Emulator, box: Box, length: int
) -> None:
    """Pages ending inside a 3- or 4-byte UTF-8 character leave its bytes to the next page:
    each page decodes strictly, the next starts at `next_offset`, and they join into the
    text; the last says eof at the file's size."""
    raw = TEXT.encode()
    box.put(REMOTE, raw)
    pages = await read_pages(box.files, length)
    assert "".join(p.text for p in pages) == TEXT
    assert [p.offset for p in pages[1:]] == [p.next_offset for p in pages[:-1]]
    assert all(p.next_offset - p.offset <= length for p in pages)
    # Lengths of whole 10-byte runs ("a€b😀c") never cut a character; the others do.
    assert any(p.next_offset - p.offset < length for p in pages[:-1]) == (length not in (5, 1000))
    assert (pages[-1].next_offset, pages[-1].size, pages[-1].eof) == (len(raw), len(raw), True)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "cp1252"])
async def test_text_pages_in_other_encodings(emulator: Emulator, box: Box, encoding: str) -> None:
    """UTF-16 pages ending inside a surrogate pair or a code unit, UTF-32 and cp1252 pages
    join into the text."""
    text = "a€b😀c" * 100 if encoding != "cp1252" else "a€bÿc" * 100
    box.put(REMOTE, text.encode(encoding))
    for length in (5, 7, 64):
        pages = await read_pages(box.files, length, encoding)
        assert "".join(p.text for p in pages) == text


async def test_a_utf16_file_with_a_bom_reads_whole_from_offset_0(
    emulator: Emulator, box: Box
) -> None:
    """`utf-16` takes the byte order from the BOM at byte 0 (big-endian here)."""
    box.put(REMOTE, "\ufeffa€😀".encode("utf-16-be"))
    page = await box.files.read_text(REMOTE, encoding="utf-16")
    assert (page.text, page.eof) == ("a€😀", True)


async def test_a_page_starting_inside_a_character_begins_at_the_next(
    emulator: Emulator, box: Box
) -> None:
    """An offset inside a UTF-8 character (not one from next_offset) starts the page at the
    next character; its offset says where."""
    raw = "😀€x".encode()  # 4 + 3 + 1 bytes
    box.put(REMOTE, raw)
    for offset, text, start in ((1, "€x", 4), (3, "€x", 4), (5, "x", 7), (4, "€x", 4)):
        page = await box.files.read_text(REMOTE, offset)
        assert (page.text, page.offset, page.next_offset, page.eof) == (text, start, 8, True)


async def test_undecodable_bytes_raise_or_are_replaced(emulator: Emulator, box: Box) -> None:
    """Bytes that are not UTF-8 raise ResponseDecodeError naming their offset under
    errors="strict", and become U+FFFD under "replace"; a file that ends inside a character
    decodes its last bytes as such."""
    box.put(REMOTE, b"ok\xffok\xe2\x82")
    with pytest.raises(sandboxkit.ResponseDecodeError, match="bytes 2-2 are not utf-8"):
        await box.files.read_text(REMOTE)
    page = await box.files.read_text(REMOTE, errors="replace")
    assert (page.text, page.next_offset, page.eof) == ("ok\ufffdok\ufffd", 7, True)
    head = await box.files.read_text(REMOTE, 0, 6, errors="replace")  # ends inside "€"
    assert (head.text, head.next_offset, head.eof) == ("ok\ufffdok", 5, False)


# -- bad input -----------------------------------------------------------------------------

BAD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_range", {"offset": -1}),
    ("read_range", {"offset": 1.5}),
    ("read_range", {"offset": True}),
    ("read_range", {"offset": "0"}),
    ("read_range", {"offset": None}),
    ("read_range", {"length": 0}),
    ("read_range", {"length": -5}),
    ("read_range", {"length": False}),
    ("read_range", {"length": 1.0}),
    ("read_range", {"remote": "relative/path"}),
    ("read_range", {"remote": ""}),
    ("read_range", {"remote": "/a/../b"}),
    ("read_text", {"length": 3}),
    ("read_text", {"offset": -1}),
    ("read_text", {"encoding": "no-such-codec"}),
    ("read_text", {"encoding": "base64"}),
    ("read_text", {"encoding": "utf-7"}),
    ("read_text", {"encoding": "iso-2022-jp"}),
    ("read_text", {"encoding": "utf-16", "offset": 2}),
    ("read_text", {"encoding": None}),
    ("read_text", {"errors": "no-such-handler"}),
    ("read_text", {"max_size": 0}),
    ("read_text", {"max_size": True}),
    ("read_text", {"length": 100, "max_size": 100}),
    ("read_bytes", {"max_size": 0}),
    ("read_bytes", {"max_size": -1}),
    ("read_bytes", {"max_size": 2.5}),
]


@pytest.mark.parametrize(("method", "arguments"), BAD_CALLS, ids=[repr(a) for _, a in BAD_CALLS])
async def test_bad_input_raises_before_any_request(
    emulator: Emulator, box: Box, method: str, arguments: dict[str, Any]
) -> None:
    """Each bad argument raises ValidationError and nothing is sent (the journal is empty)."""
    box.put(REMOTE, b"content")
    call = {"remote": REMOTE, **arguments}
    with pytest.raises(sandboxkit.ValidationError):
        await getattr(box.files, method)(call.pop("remote"), **call)
    assert emulator.journal_for("files.download") == []


# -- the blocking twins --------------------------------------------------------------------


def test_sync_twins_read_ranges_and_text() -> None:
    """sandboxkit.sync's Files reads a range and a text page, as the async ones do."""
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Emulator()) as emu,
    ):
        options: Any = {
            "api_key": emu.api_key,
            "base_url": emu.base_url,
            "data_plane_scheme": emu.data_plane_scheme,
            "resolver": emu.resolver,
        }
        with sync.Client(**options) as client:
            body = portal.call(emu.create_sandbox)
            sbx = client.sandbox_from_response(body)
            (emu.sandbox_root(body["data"]["sandbox_key"]) / "f.txt").write_bytes("x€y".encode())
            part = sbx.files.read_range("/f.txt", 1, 3)
            assert (part.data, part.size, part.eof) == ("€".encode(), 5, False)
            page = sbx.files.read_text("/f.txt", 1)
            assert (page.text, page.next_offset, page.eof) == ("€y", 5, True)
            with pytest.raises(sandboxkit.FileTooLargeError):
                sbx.files.read_bytes("/f.txt", max_size=4)
        assert [r.headers.get("Range") for r in emu.journal_for("files.download")] == [
            "bytes=1-3",
            "bytes=1-",
            None,
        ]
