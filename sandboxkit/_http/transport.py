"""Where requests meet aiohttp: the sessions, one request on a host's pool, and the bodies that
go out and come back (with `translate`, the boundary).

`Transport` owns one `ClientSession` for the console (v1 and v2) and the per-sandbox-host
sessions in `HostPools`. `send` carries a control-plane request and deciphers its answer;
`open` sends a data-plane request on its host's pool and hands back the unread answer. Every
aiohttp exception is translated (`translate`); nothing above sees an aiohttp object.

`HostRequest` is `open`'s context: it leases a slot of the host's pool (`hosts`), sends,
moves the host's window and circuit by the answer, and hands back the unread answer; on
leaving it pools or drops the connection and gives the slot back. A plain GET goes the lean
way (`connections.Route`), anything else through aiohttp's `ClientSession.request`; both
answers read the same (`StreamingResponse`).

Bodies: an answer is read as it arrives (`StreamingResponse`: decoded if a proxy coded it,
its errors sandboxkit's), and an upload's `multipart/form-data` body is streamed as the
connection takes it (`multipart_file`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl as ssl_module
import time
import warnings
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from types import AsyncGeneratorType
from typing import Any, Protocol, TypeVar, cast

import aiohttp

from .._core.answers import (
    DECODABLE_CODINGS,
    ContentDecoder,
    Reply,
    content_coding,
    decipher,
    error_for,
)
from .._core.events import origin_of
from .._core.options import Bearer, Budgets, Limits, RetryPolicy, Timeout
from .._core.protocol import (
    ACCEPT_ENCODING,
    ACCESS_TOKEN,
    AUTHORIZATION,
    CONTENT_ENCODING,
    REQUEST_ID,
    RETRY_AFTER,
    ApiRequest,
    DataRequest,
    query_string,
)
from .._core.proxy_rules import ProxyRoutes
from .._core.retry import is_outage
from .._version import __version__
from ..errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    ClientStateError,
    ResponseDecodeError,
    SandboxKitError,
    TransportError,
)
from .connections import Head, LazyReadTimer, Route, Watchdog, quiet_read_timer, route
from .forks import restart_in_child
from .hosts import Circuits, HostKey, HostPool, HostPools
from .links import LinkInfo, link_info
from .resolver import LoopbackResolver
from .ring import RingReader
from .telemetry import Exchange, watching
from .throttle import Direction, Throttle
from .translate import mapped, translate

__all__ = [
    "CONTROL_BODY_LIMIT",
    "ERROR_BODY_LIMIT",
    "RING_MIN_BODY",
    "Answer",
    "HostRequest",
    "StreamingResponse",
    "Transport",
    "client_timeout",
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
_Piece = TypeVar("_Piece", bytes, memoryview)


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
        "origin",
        "status",
        "throttle",
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
        # The client's budgets, drawn from as the body is read (its request sets them).
        self.throttle: Throttle | None = None
        self.origin = ""

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
        throttle = self.throttle
        if (
            self.coding is not None
            or (throttle is not None and throttle.downloads)  # read in paced pieces instead
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
        throttle = self.throttle
        if (
            self.coding is not None
            # Under a download limit the ring's gain (CPU at full speed) is nothing, and it
            # reads up to 16 MiB ahead: aiohttp's reader pauses the socket at 128 KiB.
            or (throttle is not None and throttle.downloads)
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
                throttle = self.throttle
                if throttle is not None and throttle.downloads:  # a limit set since it began
                    async for part in self._paced(piece, throttle, len(piece)):
                        yield part
                        del part
                else:
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
        throttle = self.throttle
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
                if throttle is not None and throttle.downloads:
                    async for grain in self._paced(piece, throttle, size):
                        yield grain
                elif len(piece) <= size:
                    yield piece
                else:
                    for start in range(0, len(piece), size):
                        yield piece[start : start + size]
        finally:
            if watchdog is not None:
                watchdog.stop()
        raise error  # outside the except block: see _translate.mapped

    async def _paced(
        self, piece: _Piece, throttle: Throttle, size: int
    ) -> AsyncGenerator[_Piece, None]:
        """`piece` in grains (at most `size` bytes each), each drawn from the download
        budget before it is handed on."""
        start = 0
        while start < len(piece):
            # The grain is read again for every draw: a limit changed mid-piece applies at once.
            part = piece[start : start + min(size, throttle.grain(Direction.DOWN))]
            if throttle.downloads:
                await throttle.draw(self.origin, Direction.DOWN, len(part))
            start += len(part)
            yield part

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


USER_AGENT = f"sandboxkit/{__version__} aiohttp/{aiohttp.__version__}"
SSLOption = ssl_module.SSLContext | bool
# A control-plane answer is JSON of a few KiB; past this size it is not one the interface
# shows, and reading on would let a broken or hostile server fill memory (or never stop).
CONTROL_BODY_LIMIT = 32 << 20


def _uncounted_resends_off(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """Stop aiohttp from re-sending an idempotent request on its own.

    When a pooled keep-alive connection dies before the answer's head, aiohttp (>= 3.11)
    sends the request once more by itself: a request missing from `attempts`, the retry log
    and the retry budget. With this off, that failure reaches the one retry loop like any
    other and is counted there. aiohttp offers no public switch; the attribute is in its
    declared set, and tests/http/test_transport_failures.py fails if it stops having this effect.
    """
    session._retry_connection = False
    return session


class Transport:
    """Sessions, created lazily inside the running loop and bound to it."""

    def __init__(
        self,
        *,
        base_url: str,
        limits: Limits,
        ssl: SSLOption,
        resolver: aiohttp.abc.AbstractResolver | None,
        proxies: ProxyRoutes | None = None,
        clock: Callable[[], float] = time.monotonic,
        created_at: tuple[str, int],
        budgets: Budgets | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.base_url = base_url
        self.created_at = created_at  # the file and line of the code that made the client
        self.limits = limits
        self._ssl = ssl
        self.proxies = proxies if proxies is not None else ProxyRoutes()
        self.tunnel_headers = self.proxies.tunnel_headers()
        self._callers_resolver = resolver
        self.clock = clock  # the pools', the circuits' and the answers' (`head_seconds`)
        self.retry = retry  # the client's: how long a 429 pauses its host (`HostPools`)
        self._closed = False
        # The budgets every request and body draws from (`throttle`); kept across a fork.
        self.throttle = Throttle(budgets if budgets is not None else Budgets(), clock)
        self._start_afresh()
        restart_in_child(self, Transport._start_afresh)

    def _start_afresh(self) -> None:
        """What is bound to one loop: made again in a child after `os.fork()` (`forks`)."""
        # Without a resolver of the caller's, `*.localhost` is loopback (a standalone
        # emulator's sandbox hosts) and every other name resolves as aiohttp's default does.
        self._own_resolver = LoopbackResolver() if self._callers_resolver is None else None
        self._resolver = self._callers_resolver or self._own_resolver
        self._loop: asyncio.AbstractEventLoop | None = None
        self._forgotten: AsyncGeneratorType[None, None] | None = None
        self._control: aiohttp.ClientSession | None = None
        self.hosts: HostPools[aiohttp.ClientSession] = HostPools(
            self.limits, self._make_host_session, self.clock, pause_policy=self.retry
        )
        # What each request met, by host: `Calls` waits on a host whose circuit is open.
        self.circuits = Circuits(self.clock, console=self.base_url)
        # Answers whose body is being read; `aclose()` ends them first (see there).
        self.reading: set[Answer] = set()
        # Its waiters belong to the parent's loop: a child starts with the same budgets, full.
        self.throttle = Throttle(self.throttle.budgets, self.clock)

    @property
    def closed(self) -> bool:
        """Whether `aclose()` has run."""
        return self._closed

    def check_loop(self) -> None:
        """Bind to the running loop on first use; refuse any other loop afterwards.

        `Calls.run` asks once per operation; sessions are only ever made inside one.
        """
        self.check_open()
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._forgotten = _closed_by_the_loop_if_forgotten(self)
        elif self._loop is not loop:
            raise ClientStateError(
                "this sandboxkit.Client was first used on another event loop; create one "
                "Client per event loop (or use sandboxkit.sync.Client from threads)"
            )

    def _connector(self, limit: int) -> aiohttp.TCPConnector:
        connector = aiohttp.TCPConnector(
            limit=limit,
            limit_per_host=limit,
            ssl=self._ssl,
            resolver=self._resolver,
            enable_cleanup_closed=False,
        )
        factory = functools.partial(LazyReadTimer, loop=asyncio.get_running_loop())
        connector._factory = factory  # type: ignore[assignment]  # a subclass: same protocol
        return connector

    def check_open(self) -> None:
        if self._closed:
            raise ClientStateError("this sandboxkit.Client is closed; create a new one")

    def _control_session(self) -> aiohttp.ClientSession:
        if self._control is None:
            self._control = _uncounted_resends_off(
                aiohttp.ClientSession(
                    connector=self._connector(self.limits.control_plane_connections),
                    # Responses are JSON we decode ourselves; nothing is ever auto-redirected.
                    auto_decompress=True,
                    trust_env=False,
                    **self.proxies.session_options(self.base_url, {"User-Agent": USER_AGENT}),
                )
            )
        return self._control

    def _make_host_session(self, host: HostKey) -> aiohttp.ClientSession:
        # `identity`: the body is the file's raw bytes, and Range offsets count them (an
        # answer coded anyway is decoded by StreamingResponse, never written as the file).
        # No token here: aiohttp sends a session's headers in its CONNECT to a proxy too, in
        # clear; `open` adds it to each request (on this host's session only).
        headers = {"User-Agent": USER_AGENT, ACCEPT_ENCODING: "identity"}
        session = aiohttp.ClientSession(
            base_url=host.origin,
            connector=self._connector(self.limits.per_host_connections),
            auto_decompress=False,
            trust_env=False,
            **self.proxies.session_options(host.origin, headers),
        )
        return _uncounted_resends_off(session)

    async def send(self, request: ApiRequest, timeout: Timeout, bearer: Bearer | None) -> Reply:
        """Send one control-plane request (with `bearer`), read its answer, and decipher it.

        Raises:
            APIError: the status's subclass; ResponseDecodeError: a 2xx that is not JSON
                or too large; TransportError: no usable answer.
        """
        # Calls.run checked the loop for this operation already; a retry may find the client
        # closed since (its pooled connection was closed under it).
        self.check_open()
        if self.throttle.requests:  # a token before the request goes (`Budgets`)
            await self.throttle.draw(self.base_url, Direction.REQUESTS, 1)
        session = self._control or self._control_session()
        # The query is written here rather than passed as `params=`: yarl's merging of params
        # into a URL cost more than the rest of this method together (measured: ~30k
        # instructions a call of ~800k).
        url = self.base_url + request.path
        if request.params:
            url += "?" + query_string(request.params)
        watch = watching.get()  # None unless a span, a hook or a DEBUG line wants this request
        exchange = (
            None if watch is None else Exchange(watch, request.method, origin_of(self.base_url))
        )
        unreported = True  # to the console's circuit
        sent_at = self.circuits.clock()
        try:
            async with session.request(
                request.method,
                url,
                json=request.json,
                # Built inline, the key held by a Bearer that hides it: tracebacks with
                # locals (Sentry) must not find the API key in this frame.
                headers=self._headers(request, exchange, bearer),
                proxy_headers=self.tunnel_headers,
                timeout=client_timeout(timeout),
                allow_redirects=False,
            ) as response:
                unreported = bool(self.circuits.headed(self.base_url, response.status, sent_at))
                if exchange is not None:
                    exchange.answered(response.status, response.headers)
                self.refuse_if_closed(response)
                self.reading.add(response)
                try:
                    length = response.content_length
                    if length is not None and length <= CONTROL_BODY_LIMIT:
                        # The usual answer: its size is declared and small, one read takes it.
                        body, whole = await response.read(), True
                    else:
                        body, whole = await read_capped(response.content, CONTROL_BODY_LIMIT)
                finally:
                    self.reading.discard(response)
                if unreported:  # only now: a head whose body then dies is a host going away
                    self.circuits.answered(self.base_url, response.status, sent_at)
                    unreported = False
                if not whole and 200 <= response.status < 300:
                    raise ResponseDecodeError(
                        f"{request.operation}: the {response.status} answer is larger than "
                        f"{CONTROL_BODY_LIMIT} bytes",
                        status=response.status,
                        request_id=response.headers.get(REQUEST_ID),
                    )
                # An error body past the limit is cut: its status still gives its class.
                reply = decipher(
                    response.status,
                    response.headers,
                    body,
                    request.surface,
                    operation=request.operation,
                    now=time.time(),
                )
        except Exception as exc:  # _translate.mapped, inlined: one coroutine less on every call
            error = translate(exc, request.operation)
            if error is None:
                if exchange is not None:
                    exchange.end(exc)
                raise
        except BaseException as exc:  # a cancellation: the request's span ends all the same
            if exchange is not None:
                exchange.end(exc)
            raise
        else:
            if exchange is not None:
                exchange.end(None)
            return reply
        if unreported and is_outage(error):  # no answer, or a head and no body: going away
            self.circuits.failed(self.base_url, str(error), sent_at)
        if exchange is not None:
            exchange.end(error)
        raise error  # outside the except block: see _translate.mapped

    def _headers(
        self, request: ApiRequest, exchange: Exchange | None, bearer: Bearer | None
    ) -> dict[str, str]:
        headers = dict(request.headers)
        if exchange is not None:  # before the key is added: only the request's own are shown
            headers = exchange.sending(headers) or headers
        if bearer is not None:
            headers[AUTHORIZATION] = bearer.header
        return headers

    def open(
        self, host: HostKey, request: DataRequest
    ) -> AbstractAsyncContextManager[StreamingResponse]:
        """Send one data-plane request on the host's own pool; the body stays unread.

        The request holds one of the host's slots while it lasts, and the answer's status
        moves the host's window (a 429 halves it, a success grows it): callers never touch
        the pool. Only aiohttp's own calls are inside the error mapping: what the caller does
        with the body (a disk write that fails, say) keeps its own exception.
        """
        return HostRequest(self, host, request)

    def refuse_if_closed(self, response: Answer) -> None:
        # `aclose()` ran while this answer's head arrived: its body can never be read.
        if self._closed:
            response.close()
            raise ClientStateError("this sandboxkit.Client was closed during the request")

    async def aclose(self) -> None:
        """Close every session; the transport is unusable afterwards."""
        if self._closed:
            return
        self._closed = True
        forgotten, self._forgotten = self._forgotten, None
        if forgotten is not None and not forgotten.ag_running:  # else it is what closes us
            await forgotten.aclose()  # told: it now has nothing to close, nor to say
        # Closing a session detaches each connection from the body being read on it, so a
        # read waiting for more bytes would wait forever: end those bodies first (their
        # readers then raise, and the retry loop finds the client closed).
        for response in list(self.reading):
            response.close()
        await self.hosts.aclose()
        if self._control is not None:
            await self._control.close()
            self._control = None
        if self._own_resolver is not None:  # a caller's resolver is the caller's to close
            await self._own_resolver.close()


def _closed_by_the_loop_if_forgotten(transport: Transport) -> AsyncGeneratorType[None, None]:
    """A started async generator that closes `transport`, with a warning, if nothing else does.

    The running loop keeps track of every async generator started in it, and closes each in
    a task: at its end (`asyncio.run`'s `shutdown_asyncgens`, which uvloop has too), or when
    it is garbage collected, whichever comes first. Either way the loop still runs, so the
    sessions close as `aclose()` closes them: one warning of ours, naming where the client
    was made, instead of aiohttp's (an unclosed connector, its transports and sockets, with
    their tracebacks) from finalizers that run after the loop is gone.

    Collected while the loop runs, the transport and its sessions go in the same collection
    (each holds the other), and aiohttp's finalizers may warn first.
    """

    async def closes() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if not transport.closed:
                try:
                    await transport.aclose()
                finally:  # closed first: under `-W error` the warning raises
                    filename, line = transport.created_at
                    warnings.warn_explicit(
                        "sandboxkit.Client was never closed; use `async with` or "
                        "`await client.aclose()`",
                        ResourceWarning,
                        filename,  # shown as the line that made the client
                        line,
                    )

    forgotten = cast("AsyncGeneratorType[None, None]", closes())  # what `closes()` makes
    # Started at once, to its `yield`, which awaits nothing: `asend` is what tells the
    # running loop of a new async generator (its first-iteration hook).
    step = forgotten.asend(None)
    try:
        step.send(None)
    except StopIteration:
        return forgotten
    raise AssertionError("an async generator that awaits before its first yield")  # never


@functools.lru_cache(maxsize=64)  # a handful of Timeout values per process; saves a build per call
def client_timeout(timeout: Timeout) -> aiohttp.ClientTimeout:
    # `total` bounds the whole logical call (retries included) one level up, not one request.
    return aiohttp.ClientTimeout(total=None, sock_connect=timeout.connect, sock_read=timeout.read)


class HostRequest:
    """`Transport.open`'s context: one request on its host's pool, its answer, its end.

    A class rather than an `asynccontextmanager`: every download and upload passes here,
    and the generator machinery cost more than the rest of this code (10,000 small
    downloads, benchmarks/run.py --case hosts). The object itself is the lease's borrower.
    """

    __slots__ = (
        "_begun",
        "_exchange",
        "_headed",
        "_host",
        "_pool",
        "_request",
        "_response",
        "_sent_at",
        "_streaming",
        "_transport",
    )

    def __init__(self, transport: Transport, host: HostKey, request: DataRequest) -> None:
        self._transport = transport
        self._host = host
        self._request = request
        self._pool: HostPool[aiohttp.ClientSession] | None = None
        self._exchange: Exchange | None = None
        self._response: Answer | None = None
        self._streaming: StreamingResponse | None = None
        self._headed = 0  # the status of a head whose end the host's circuit awaits
        self._sent_at: float | None = None  # on the circuits' clock, once sent
        # On the pauses' clock, once sent, if its host's concurrency is found (None: not).
        self._begun: float | None = None

    async def __aenter__(self) -> StreamingResponse:
        transport = self._transport
        transport.check_open()  # a retry may find the client closed since the call began
        host = self._host
        throttle = transport.throttle
        if throttle.requests:  # a token before the request goes, before it holds a slot
            await throttle.draw(host.origin, Direction.REQUESTS, 1)
        pools = transport.hosts
        pool = pools.lease_now(host, self) or await pools.lease_wait(host, self)
        self._pool = pool
        request = self._request
        timeout = request.timeout
        try:
            if pool.pause.until and pool.pause.remaining(pools.pause_clock()):
                await pools.wait_paused(pool)  # a 429 paused the host: no request goes
            # Begun once the host's slot is held: its elapsed time is the request's own.
            watch = watching.get()
            exchange = None
            headers = request.headers
            if watch is not None:
                exchange = self._exchange = Exchange(watch, request.method, origin_of(host.origin))
                headers = exchange.sending(dict(headers) if headers else None)
            lean = self._lean(pool, headers)
            if pool.found is not None:
                self._begun = pools.pause_clock()
            sent = transport.clock()
            self._sent_at = transport.circuits.clock()  # the circuit's clock (tests' virtual)
            try:
                response: Answer
                if lean is not None:
                    response = await pool.route.get(lean, client_timeout(timeout), timeout.read)
                else:
                    response = await pool.session.request(
                        request.method,
                        request.target,
                        # Inline, as in send(): the token rides inside the tunnel only.
                        headers={**(headers or {}), ACCESS_TOKEN: host.token},
                        proxy_headers=transport.tunnel_headers,
                        data=request.data,
                        timeout=client_timeout(timeout),
                        allow_redirects=False,
                    )
            except Exception as exc:  # _translate.mapped, inlined: as in send()
                error: SandboxKitError | None = (
                    exc if isinstance(exc, SandboxKitError) else translate(exc, request.operation)
                )
                if error is None:
                    raise
            else:
                error = None
            if error is not None:
                if is_outage(error):
                    transport.circuits.failed(host.origin, str(error), self._sent_at)
                raise error  # outside the except block: see _translate.mapped
            self._response = response  # from here on, whatever happens, `_end` ends it
            self._streaming = StreamingResponse(response, request.operation, timeout.read)
            head = self._streaming.head_seconds = transport.clock() - sent
            self._streaming.throttle = throttle
            self._streaming.origin = host.origin
            status = response.status
            retry_after = response.headers.get(RETRY_AFTER) if status in (429, 503) else None
            paused = pools.headed(pool, status, retry_after, head)
            if paused is not None and watch is not None:
                watch.paced(paused)
            self._headed = transport.circuits.headed(host.origin, response.status, self._sent_at)
            if exchange is not None:
                exchange.answered(response.status, response.headers)
            transport.refuse_if_closed(response)
            transport.reading.add(response)
            self._streaming.on_body = transport.circuits.on_body(host.origin, self._headed)
            return self._streaming
        except BaseException as exc:
            await self._end(exc)
            raise

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        await self._end(exc)

    def _lean(
        self, pool: HostPool[aiohttp.ClientSession], headers: Mapping[str, str] | None
    ) -> Head | None:
        """The head of a GET the lean path (`connections.Route`) can carry; None: aiohttp's path."""
        request = self._request
        if request.method != "GET" or request.data is not None:
            return None
        lean = pool.route
        if lean is None:  # the host's first GET: is there a lean route to it?
            host = self._host
            proxied = self._transport.proxies.for_origin(host.origin) is not None
            lean = pool.route = route(pool.session, host.origin, host.token, proxied) or False
        return lean.head(request.target, headers) if isinstance(lean, Route) else None

    async def _end(self, exc: BaseException | None) -> None:
        # Each step runs even if one before it raised (a bug, an aiohttp unlike the one we
        # know): a connection or a pool slot never given back is one that every later
        # request to this host waits for, once the host's limit of them is held.
        received = None
        try:
            received = self._drop_response()
        finally:
            try:
                if self._headed:  # the circuit hears how an answer whose head came ended
                    origin = self._host.origin
                    circuits = self._transport.circuits
                    circuits.ended(origin, self._headed, exc, received or 0, self._sent_at)
                if self._exchange is not None:
                    self._exchange.end(exc, received)
                if self._begun is not None:
                    self._transferred(exc, received or 0, self._begun)
            finally:
                pool, self._pool = self._pool, None
                if pool is not None and self._transport.hosts.release(pool, self):
                    await self._transport.hosts.close_released(pool)

    def _transferred(self, exc: BaseException | None, received: int, begun: float) -> None:
        """Tell the host's found concurrency how this request ended: the bytes it moved
        both ways and its time, or a failure that says the host is busy or going away."""
        pool = self._pool
        if pool is None:
            return
        hosts = self._transport.hosts
        seconds = hosts.pause_clock() - begun
        if exc is None and 200 <= self._headed < 300:
            sent = getattr(self._request.data, "size", None)  # an upload's body, if it says
            size: int | None = received + (sent if isinstance(sent, int) else 0)
        elif isinstance(exc, SandboxKitError) and is_outage(exc):
            size = None
        else:
            return  # cancelled, or an answer about the request (a 404): nothing of the host
        event = hosts.transferred(pool, size, seconds)
        if event is not None and self._exchange is not None:
            self._exchange.watch.paced(event)

    def _drop_response(self) -> int | None:
        """Give the answer's connection back (or close it); the bytes it received, if any."""
        response, self._response = self._response, None
        if response is None:
            return None
        self._transport.reading.discard(response)
        try:
            assert self._streaming is not None
            return self._streaming.received  # as they came, coded or not
        finally:
            # An unread body means the connection cannot be reused: drop it at once rather
            # than leave it half-read (cancellation included). A body read below the parser
            # (`ring`) never leaves aiohttp's reader at its end.
            if response.content.at_eof():
                response.release()
            else:
                response.close()
