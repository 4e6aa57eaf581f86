"""Bodies over aiohttp: answers read as they arrive (decoded if a proxy coded them), and an
upload's `multipart/form-data` body streamed as the connection takes it. Errors stay
sandboxkit's (`translate`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping
from typing import Any, Protocol

import aiohttp

from .._core.answers import (
    DECODABLE_CODINGS,
    ContentDecoder,
    Reply,
    content_coding,
    decipher,
    error_for,
)
from .._core.protocol import CONTENT_ENCODING
from ..errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    ResponseDecodeError,
    SandboxKitError,
    TransportError,
)
from .connections import Watchdog, quiet_read_timer
from .links import LinkInfo, link_info
from .ring import RingReader
from .translate import mapped, translate

__all__ = [
    "ERROR_BODY_LIMIT",
    "RING_MIN_BODY",
    "Answer",
    "StreamingResponse",
    "multipart_file",
    "read_capped",
]

# Data-plane error bodies are `{message}`: a few KiB at most. Reading more would let a hostile
# or broken server make us buffer a file's worth of bytes.
ERROR_BODY_LIMIT = 64 * 1024
# Bodies at least this large (identity-coded, with a Content-Length) are read below aiohttp's
# parser (`ring`), which costs the connection its keep-alive: one new connection (a TCP and
# maybe a TLS handshake, a few round trips) against a saving of ~0.6 CPU s/GiB.
RING_MIN_BODY = 32 << 20
_STALL_MESSAGE = "Timeout on reading data from socket"  # aiohttp's own sock_read wording


async def read_capped(content: aiohttp.StreamReader, limit: int) -> tuple[bytes, bool]:
    """The body up to `limit` bytes, and whether that was all of it.

    `StreamReader.read(n)` returns what the connection has delivered so far, not `n` bytes:
    loop until the body ends (a cut raises) or passes the limit.
    """
    data = bytearray()
    while len(data) <= limit:
        piece = await content.read(limit + 1 - len(data))
        if not piece:
            return bytes(data), True
        data += piece
    return bytes(data[:limit]), False


class Answer(Protocol):
    """What `StreamingResponse` reads of an answer: aiohttp's `ClientResponse`, or the lean
    path's `connections.LeanAnswer`. `release` pools its connection (unless it must close),
    `close` drops it."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> aiohttp.StreamReader: ...

    @property
    def content_length(self) -> int | None: ...

    @property
    def connection(self) -> aiohttp.connector.Connection | None: ...

    def release(self) -> Any: ...

    def close(self) -> None: ...


class StreamingResponse:
    """An answer whose body is read incrementally; errors stay sandboxkit's.

    A body content-coded despite `Accept-Encoding: identity` (gzip or deflate, by a proxy) is
    handed on decoded: callers only ever see the file's bytes. `coding` says it was coded.
    """

    __slots__ = (
        "_held",
        "_operation",
        "_read_timeout",
        "_response",
        "_ring",
        "coding",
        "head_seconds",
        "headers",
        "on_body",
        "status",
    )

    def __init__(
        self,
        response: Answer,
        operation: str,
        read_timeout: float | None = None,
    ) -> None:
        self._response = response
        self._operation = operation
        self._read_timeout = read_timeout
        self._ring: RingReader | None = None
        self._held = b""
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers
        coding = response.headers.get(CONTENT_ENCODING)  # the usual answer: none
        self.coding = None if coding is None else content_coding(coding)
        self.on_body: Callable[[], None] | None = None  # called at the first body byte read
        # From the request's sending (its pool slot held) to its answer's head, in seconds:
        # with `link()`, what tells a long link (`slices.far_enough`). Its request sets it.
        self.head_seconds = 0.0

    @property
    def received(self) -> int:
        """Body bytes received so far, as they came (coded or not)."""
        ring = self._ring
        return self._response.content.total_bytes + (ring.received if ring is not None else 0)

    @property
    def content_length(self) -> int | None:
        """The declared body length, if any (of the coded bytes when `coding` is set)."""
        return self._response.content_length

    def link(self) -> LinkInfo:
        """What the kernel says of this answer's connection (its RTT, a loopback peer)."""
        connection = self._response.connection
        transport = None if connection is None else connection.transport
        return link_info(None if transport is None else transport.get_extra_info("socket"))

    def arrived_whole(self, size: int) -> bytes | None:
        """The whole body if it has all arrived already, is not coded and is at most `size`
        bytes (so it is one chunk of `iter_chunks(size)`); else None, and nothing is read."""
        content = self._response.content
        if (
            self.coding is not None
            or not content.is_eof()
            or content.exception() is not None
            or content.total_bytes > size
        ):
            return None
        return content.read_nowait(-1)

    def iter_chunks(self, size: int) -> AsyncGenerator[bytes, None]:
        """Yield the body in chunks of at most `size` bytes, decoded if it was coded."""
        if self.coding is None:
            return self._iter_raw(size)
        return self._iter_decoded(size)

    def iter_pieces(self, size: int) -> AsyncGenerator[bytes | memoryview, None]:
        """Yield the body in the largest pieces that suit a consumer that copies or writes
        them at once: a large identity body in memoryviews of up to 4 MiB, read below
        aiohttp's parser (`ring`; the consumer may keep them, they are never reused while
        it does), anything else as `iter_chunks(size)` does. Afterwards the connection is
        closed, never pooled, when the ring read it."""
        ring = self._take_over()
        if ring is None:
            return self.iter_chunks(size)
        return self._iter_ring(ring)

    def _take_over(self) -> RingReader | None:
        response = self._response
        length = response.content_length
        connection = response.connection
        content = response.content
        if (
            self.coding is not None
            or length is None
            or length < RING_MIN_BODY
            or aiohttp.hdrs.TRANSFER_ENCODING in response.headers  # chunked framing wins
            or connection is None
            or connection.transport is None
            or connection.transport.is_closing()
            or content.exception() is not None
            or content.total_bytes > length
        ):
            return None
        protocol = connection.protocol
        assert protocol is not None
        quiet_read_timer(protocol)
        self._held = content.read_nowait(-1)  # body bytes that came with the head
        self._ring = RingReader(
            connection.transport, protocol, length - content.total_bytes, self._read_timeout
        )
        return self._ring

    async def _iter_ring(self, ring: RingReader) -> AsyncGenerator[bytes | memoryview, None]:
        error: TransportError
        try:
            if self._held:
                held, self._held = self._held, b""
                yield held
            while True:
                try:
                    piece = await ring.take()
                except RingReader.Stalled:
                    error = APITimeoutError(
                        f"{self._operation}: timed out", operation=self._operation
                    )
                    break
                except RingReader.Cut as exc:
                    error = APIConnectionError(
                        f"{self._operation}: {exc}", operation=self._operation
                    )
                    break
                if piece is None:
                    return
                if (told := self.on_body) is not None:
                    self.on_body = None
                    told()
                yield piece
                del piece  # not held while waiting: the ring reuses a buffer nobody holds
        finally:
            ring.detach()
        raise error  # outside the except block: see _translate.mapped

    async def _iter_raw(self, size: int) -> AsyncGenerator[bytes, None]:
        # Pieces go on as the connection delivered them (up to 256 KiB each); only a larger
        # one is cut. Joining them into `size`-byte chunks (`iter_chunked`) copies every
        # byte once more into a freshly allocated buffer: on a 1 GiB download that was a
        # third more system time and ~50,000 minor page faults (benchmarks/run.py).
        response = self._response
        content = response.content
        # The read timeout is kept by one watchdog rather than aiohttp's timer, which is
        # cancelled and made again for every piece received (~9% of the loop's time).
        watchdog = None
        connection = response.connection
        if connection is not None and connection.protocol is not None:
            quiet_read_timer(connection.protocol)
            stalled = aiohttp.ServerTimeoutError(_STALL_MESSAGE)
            watchdog = Watchdog(
                asyncio.get_running_loop(),
                self._read_timeout,
                lambda: content.set_exception(stalled),
            )
        clock = asyncio.get_running_loop().time
        try:
            while True:
                if watchdog is not None:
                    watchdog.last = clock()
                    watchdog.active = True
                try:  # inline rather than _mapped(): this runs once per piece of every download
                    piece, end_of_http_chunk = await content.readchunk()
                except Exception as exc:
                    error = translate(exc, self._operation)
                    if error is None:
                        raise
                    break
                if watchdog is not None:
                    watchdog.active = False  # the consumer's time is not the peer's
                if not piece:
                    if end_of_http_chunk:
                        continue  # a chunked-encoding boundary, not the end of the body
                    return
                if (told := self.on_body) is not None:
                    self.on_body = None
                    told()
                if len(piece) <= size:
                    yield piece
                else:
                    for start in range(0, len(piece), size):
                        yield piece[start : start + size]
        finally:
            if watchdog is not None:
                watchdog.stop()
        raise error  # outside the except block: see _translate.mapped

    async def _iter_decoded(self, size: int) -> AsyncGenerator[bytes, None]:
        # Decoded on the loop: a rare path (a proxy that ignores `identity`), not worth a
        # thread hop per piece. Output is bounded per call, so memory stays flat.
        decoder = self._decoder()
        async for piece in self._iter_raw(size):
            try:
                for out in decoder.decode(piece, size):
                    yield out
            except ValueError as exc:
                raise ResponseDecodeError(f"{self._operation}: {exc}", status=self.status) from None
        if not decoder.complete:
            raise APIConnectionError(
                f"{self._operation}: the {self.coding}-coded body ended before its end",
                operation=self._operation,
            )

    def _decoder(self) -> ContentDecoder:
        assert self.coding is not None
        if self.coding not in DECODABLE_CODINGS:
            raise ResponseDecodeError(
                f"{self._operation}: the answer is content-coded with {self.coding!r}, which "
                "sandboxkit does not decode",
                status=self.status,
            )
        return ContentDecoder(self.coding)

    async def error(self) -> APIError:
        """The exception this (non-success) answer calls for; its body is read, capped.

        A 3xx body is not read: a redirect is never followed, whatever it says.
        """
        status = self.status
        body = b"" if 300 <= status < 400 else await self.read(ERROR_BODY_LIMIT)
        return error_for(
            status, self.headers, body, "data", operation=self._operation, now=time.time()
        )

    async def reply(self, limit: int) -> Reply:
        """The whole (JSON) answer deciphered: its payload, or the exception it calls for."""
        if not 200 <= self.status < 300:
            raise await self.error()
        body = await self.read(limit)
        return decipher(
            self.status, self.headers, body, "data", operation=self._operation, now=time.time()
        )

    async def read(self, limit: int = 1 << 20) -> bytes:
        """Read the whole (small) body; an error body is capped so a huge one cannot hurt."""
        if self.coding is None:
            data, _ = await mapped(read_capped(self._response.content, limit), self._operation)
            return data
        decoded = bytearray()
        pieces = contextlib.aclosing(self._iter_decoded(limit + 1))
        with contextlib.suppress(SandboxKitError):  # a cut or corrupt body: keep what came
            async with pieces as decoding:
                async for piece in decoding:
                    decoded += piece
                    if len(decoded) > limit:
                        break
        return bytes(decoded[:limit])


# --- an upload's body --------------------------------------------------------------------

_FORM_ESCAPES = {c: f"%{c:02X}" for c in [*range(0x20), 0x22, 0x7F]}


class _StreamedPart(aiohttp.payload.AsyncIterablePayload):
    """A part streamed from an async iterable whose length may be known up front.

    With the length known the multipart writer can compute the whole body's size, so the
    request goes out with a `Content-Length` instead of chunked framing.
    """

    def __init__(self, chunks: AsyncIterable[bytes], size: int | None) -> None:
        super().__init__(chunks, content_type="application/octet-stream")
        self._size = size


def multipart_file(filename: str, chunks: AsyncIterable[bytes], size: int | None) -> Any:
    """A `multipart/form-data` body holding exactly one part, `file`, streamed from `chunks`.

    Nothing is buffered: each chunk is written as the connection takes it. Pass the result as
    `open_stream(data=...)`; it is good for one request only (the chunks are consumed).

    Args:
        filename: the part's file name (the remote path's base name).
        chunks: the file's bytes; must yield exactly `size` bytes when `size` is given.
        size: the byte count when known (sent as `Content-Length`), else None (chunked).
    """
    part = _StreamedPart(chunks, size)
    # The file name is written the way browsers and urllib3 do (WHATWG form encoding): raw
    # UTF-8 with only quotes and control characters percent-escaped. aiohttp's own helper
    # percent-encodes every non-token byte, which servers other than aiohttp do not undo.
    escaped = filename.translate(_FORM_ESCAPES)
    part.headers[aiohttp.hdrs.CONTENT_DISPOSITION] = f'form-data; name="file"; filename="{escaped}"'
    writer = aiohttp.MultipartWriter("form-data")
    writer.append_payload(part)
    return writer
