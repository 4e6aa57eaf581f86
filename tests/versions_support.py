"""A file server that was not written for sandboxkit, and a cut in front of it (no tests here).

`FileServer` answers `GET /files?path=` from a directory with aiohttp's own static file answer
(`web.FileResponse`): a strong ETag and a Last-Modified on every answer, Range, and an
If-Range that holds a date. In its modes it stands for the servers a data plane may have in
front of it: `rfc` also honours an If-Range that holds an entity tag (RFC 9110 13.1.5, as
nginx does), `aiohttp` is FileResponse as it is (it takes an entity-tag If-Range for no
If-Range and serves the range of whatever file is there now), `last-modified` sends no ETag,
`none` sends no validator at all. With `strip_ranges` it stands behind a proxy or CDN that
drops Range and If-Range from every request (and passes `Accept-Ranges: bytes` on): each GET
gets the whole file. `CutProxy` relays TCP to it and cuts an answer mid-body.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import attrs
from aiohttp import web
from multidict import CIMultiDict

from sandboxkit.emulator._core import request_key

from .reliability_support import LoopbackServer, pump

Mode = Literal["rfc", "aiohttp", "last-modified", "none"]

# Whole seconds apart, in the past: the Last-Modified of each is strong (RFC 9110 8.8.2.2),
# and no two versions share an mtime, whatever the file system's timestamp granularity.
OLD_MTIME = 1_704_067_200  # 2024-01-01 00:00:00 UTC
NEW_MTIME = OLD_MTIME + 86_400


@attrs.define
class Exchange:
    """One GET the server answered: what it was asked, what it said."""

    range: str | None
    if_range: str | None
    status: int = 0
    etag: str | None = None
    last_modified: str | None = None


EXCHANGE = request_key("exchange", Exchange)


def place(path: Path, data: bytes, mtime: int) -> None:
    """Put `data` at `path` atomically, modified at `mtime`: an answer in flight goes on
    reading the version it opened, as on any POSIX server."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".new")
    scratch.write_bytes(data)
    os.utime(scratch, (mtime, mtime))
    os.replace(scratch, path)


class FileServer:
    """`web.FileResponse` over `root` on loopback; `seen` holds every exchange, in order.

    `before_answer`, if set, is called with each request's index (0 first) before it is
    answered: where a test replaces the file between two requests of one download.
    `strip_ranges`: Range and If-Range are dropped before the file server sees them (the
    exchange still records what the client sent).
    """

    def __init__(self, root: Path, mode: Mode, *, strip_ranges: bool = False) -> None:
        self.root, self.mode, self.strip_ranges = root, mode, strip_ranges
        self.seen: list[Exchange] = []
        self.before_answer: Callable[[int], None] | None = None
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def domain(self) -> str:
        """The data-plane domain whose sandboxes are this server (`*.sandbox.test` is
        loopback to the emulator's resolver)."""
        return f"sandbox.test:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/files", self._files)
        app.on_response_prepare.append(self._on_prepare)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _files(self, request: web.Request) -> web.StreamResponse:
        exchange = Exchange(request.headers.get("Range"), request.headers.get("If-Range"))
        self.seen.append(exchange)
        if self.before_answer is not None:
            self.before_answer(len(self.seen) - 1)
        target = self.root / request.query["path"].lstrip("/")
        if self.strip_ranges:
            headers = CIMultiDict(request.headers)
            headers.popall("Range", None)
            headers.popall("If-Range", None)
            request = request.clone(headers=headers)
        tag = "" if self.strip_ranges else exchange.if_range or ""
        if self.mode == "rfc" and tag.startswith(('"', "W/")):
            # RFC 9110 13.1.5, which FileResponse does for dates only: the range is served
            # only if the tag is the file's current ETag (aiohttp's, from its stat), compared
            # strongly; else the whole file.
            st = target.stat()
            headers = CIMultiDict(request.headers)
            del headers["If-Range"]
            if tag != f'"{st.st_mtime_ns:x}-{st.st_size:x}"':
                headers.popall("Range", None)
            request = request.clone(headers=headers)
        request[EXCHANGE] = exchange
        return _AnswerTo(request, target)

    async def _on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        if self.mode in ("last-modified", "none"):
            response.headers.popall("ETag", None)
        if self.mode == "none":
            response.headers.popall("Last-Modified", None)
        exchange = request.get(EXCHANGE)
        if exchange is not None:
            exchange.status = response.status
            exchange.etag = response.headers.get("ETag")
            exchange.last_modified = response.headers.get("Last-Modified")


class _AnswerTo(web.FileResponse):
    """A FileResponse to `request` (a clone with other headers, maybe), prepared by aiohttp
    itself, so a client that goes away mid-body is its ordinary premature disconnection."""

    def __init__(self, request: web.Request, path: Path) -> None:
        super().__init__(path)
        self._request = request

    async def prepare(self, request: web.BaseRequest) -> Any:
        return await super().prepare(self._request)


class CutProxy(LoopbackServer):
    """A loopback TCP relay to `port`. `cut_next(after, then)` arms a cut of the next
    connection: after `after` bytes of answer (its head counted) reach the client, `then()`
    runs and both sides are closed: a network cut mid-body, whatever the server."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.backend = port
        self.cuts = 0
        self._armed: list[tuple[int, Callable[[], None]]] = []

    @property
    def domain(self) -> str:
        return f"sandbox.test:{self.port}"

    def cut_next(self, after: int, then: Callable[[], None]) -> None:
        self._armed.append((after, then))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cut = self._armed.pop(0) if self._armed else None
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.backend)
        self._writers.add(up_writer)  # closed by `stop` too
        ask = asyncio.ensure_future(pump(reader, up_writer))
        try:
            sent = 0
            while data := await up_reader.read(1 << 16):
                if cut is not None and sent + len(data) >= cut[0]:
                    writer.write(data[: cut[0] - sent])
                    await writer.drain()
                    self.cuts += 1
                    cut[1]()  # before the client can see the cut and ask again
                    break
                sent += len(data)
                writer.write(data)
                await writer.drain()
        finally:
            ask.cancel()
            await asyncio.gather(ask, return_exceptions=True)
            for side in (writer, up_writer):
                self._writers.discard(side)
                side.close()
                with contextlib.suppress(Exception):
                    await side.wait_closed()
