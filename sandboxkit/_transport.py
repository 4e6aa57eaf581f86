"""The pools and the one boundary where aiohttp meets the rest of sandboxkit.

`Transport` owns one `ClientSession` for the console (v1 and v2) and an LRU of per-sandbox-host
sessions (`HostPools`). Every aiohttp exception is mapped here, once, to a sandboxkit one with
`raise ... from exc`; nothing above this module sees an aiohttp object.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl as ssl_module
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from typing import Any, TypeVar

import aiohttp

from ._answers import (
    DECODABLE_CODINGS,
    ContentDecoder,
    Reply,
    content_coding,
    decipher,
    error_for,
)
from ._config import Limits, Timeout
from ._pools import HostKey, HostPools
from ._protocol import (
    ACCEPT_ENCODING,
    ACCESS_TOKEN,
    AUTHORIZATION,
    CONTENT_ENCODING,
    REQUEST_ID,
    ApiRequest,
    query_string,
)
from ._version import __version__
from .errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    CertificateVerificationError,
    ClientStateError,
    HostNotFoundError,
    RemoteProtocolError,
    ResponseDecodeError,
    SandboxKitError,
    TLSHandshakeError,
    TransportError,
)

__all__ = [
    "CONTROL_BODY_LIMIT",
    "ERROR_BODY_LIMIT",
    "StreamingResponse",
    "Transport",
    "multipart_file",
]

T = TypeVar("T")
USER_AGENT = f"sandboxkit/{__version__} aiohttp/{aiohttp.__version__}"
SSLOption = ssl_module.SSLContext | bool
# A control-plane answer is JSON of a few KiB; past this size it is not one the interface
# shows, and reading on would let a broken or hostile server fill memory (or never stop).
CONTROL_BODY_LIMIT = 32 << 20
# Data-plane error bodies are `{message}`: a few KiB at most. Reading more would let a hostile
# or broken server make us buffer a file's worth of bytes.
ERROR_BODY_LIMIT = 64 * 1024


async def _mapped(awaitable: Awaitable[T], operation: str) -> T:
    """Await one aiohttp call; a failure becomes sandboxkit's exception.

    Raised outside the `except` block on purpose: aiohttp's exception must not stay reachable
    as `__cause__` or `__context__`, because it holds the request's headers (the API key or
    the sandbox token) and its repr prints them, into error trackers and logged tracebacks.
    """
    try:
        return await awaitable
    except Exception as exc:
        error = _translate(exc, operation)
        if error is None:
            raise
    raise error


# getaddrinfo's "try again": the one resolver failure that a retry may fix.
_TEMPORARY_DNS_ERRORS = frozenset({socket.EAI_AGAIN})
# OpenSSL's reasons for a handshake that cannot succeed with this peer whatever the retry:
# mostly TLS spoken to a plain-HTTP port, or no protocol version in common.
_TLS_MISMATCH_REASONS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "PACKET_LENGTH_TOO_LONG",
        "UNSUPPORTED_PROTOCOL",
        "NO_PROTOCOLS_AVAILABLE",
        "TLSV1_ALERT_PROTOCOL_VERSION",
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
    }
)


def _translate(exc: Exception, operation: str) -> TransportError | None:
    """The sandboxkit error for an aiohttp or socket failure; None for anything else.

    Messages are built from parts known to hold no secret (host, port, OS reason); never from
    the aiohttp exception's own text, which may carry the URL with its query.
    """
    if isinstance(exc, TransportError):
        return None  # already ours
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return APITimeoutError(f"{operation}: timed out", operation=operation)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return CertificateVerificationError(
            f"{operation}: TLS certificate verification failed for {exc.host}: pass ssl= a "
            "context that trusts the server's CA",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientConnectorDNSError) and (
        getattr(exc.os_error, "errno", None) not in _TEMPORARY_DNS_ERRORS
    ):
        return HostNotFoundError(
            f"{operation}: the host name {exc.host!r} does not resolve "
            f"({exc.strerror or 'no such name'}): check base_url, the sandbox's domain, or "
            "the resolver= option",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientConnectorSSLError) and (
        getattr(exc.os_error, "reason", None) in _TLS_MISMATCH_REASONS
    ):
        return TLSHandshakeError(
            f"{operation}: no TLS handshake with {exc.host}:{exc.port} "
            f"({getattr(exc.os_error, 'reason', '')}): the port may speak plain HTTP; check "
            "the scheme of base_url or data_plane_scheme",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return APIConnectionError(
            f"{operation}: cannot connect to {exc.host}:{exc.port} ({exc.strerror or exc})",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return APIConnectionError(f"{operation}: server closed the connection", operation=operation)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return APIConnectionError(
            f"{operation}: the answer's body was cut short or malformed", operation=operation
        )
    if isinstance(exc, aiohttp.ClientResponseError):
        # sandboxkit never calls raise_for_status and never follows redirects: this is the
        # response parser refusing the answer's head. The server will answer the same again.
        reason = exc.message.split(":", 1)[0].strip()[:100]
        return RemoteProtocolError(
            f"{operation}: the answer from {exc.request_info.url.host} is not valid HTTP "
            f"({reason or exc.status}): check that the URL's scheme and port reach the service",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientError | OSError):
        return APIConnectionError(f"{operation}: {type(exc).__name__}: {exc}", operation=operation)
    return None


@functools.lru_cache(maxsize=64)  # a handful of Timeout values per process; saves a build per call
def _client_timeout(timeout: Timeout) -> aiohttp.ClientTimeout:
    # `total` bounds the whole logical call (retries included) one level up, not one request.
    return aiohttp.ClientTimeout(total=None, sock_connect=timeout.connect, sock_read=timeout.read)


async def _read_capped(content: aiohttp.StreamReader, limit: int) -> tuple[bytes, bool]:
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


class StreamingResponse:
    """An answer whose body is read incrementally; errors stay sandboxkit's.

    A body content-coded despite `Accept-Encoding: identity` (gzip or deflate, by a proxy) is
    handed on decoded: callers only ever see the file's bytes. `coding` says it was coded.
    """

    def __init__(self, response: aiohttp.ClientResponse, operation: str) -> None:
        self._response = response
        self._operation = operation
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers
        self.coding = content_coding(response.headers.get(CONTENT_ENCODING))

    @property
    def content_length(self) -> int | None:
        """The declared body length, if any (of the coded bytes when `coding` is set)."""
        return self._response.content_length

    def iter_chunks(self, size: int) -> AsyncGenerator[bytes, None]:
        """Yield the body in chunks of at most `size` bytes, decoded if it was coded."""
        if self.coding is None:
            return self._iter_raw(size)
        return self._iter_decoded(size)

    async def _iter_raw(self, size: int) -> AsyncGenerator[bytes, None]:
        # Pieces go on as the connection delivered them (up to 256 KiB each); only a larger
        # one is cut. Joining them into `size`-byte chunks (`iter_chunked`) copies every
        # byte once more into a freshly allocated buffer: on a 1 GiB download that was a
        # third more system time and ~50,000 minor page faults (benchmarks/run.py).
        content = self._response.content
        while True:
            try:  # inline rather than _mapped(): this runs once per piece of every download
                piece, end_of_http_chunk = await content.readchunk()
            except Exception as exc:
                error = _translate(exc, self._operation)
                if error is None:
                    raise
                break
            if not piece:
                if end_of_http_chunk:
                    continue  # a chunked-encoding boundary, not the end of the body
                return
            if len(piece) <= size:
                yield piece
            else:
                for start in range(0, len(piece), size):
                    yield piece[start : start + size]
        raise error  # outside the except block: see _mapped

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
            data, _ = await _mapped(_read_capped(self._response.content, limit), self._operation)
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


def _uncounted_resends_off(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """Stop aiohttp from re-sending an idempotent request on its own.

    When a pooled keep-alive connection dies before the answer's head, aiohttp (>= 3.11)
    sends the request once more by itself: a request missing from `attempts`, the retry log
    and the retry budget. With this off, that failure reaches the one retry loop like any
    other and is counted there. aiohttp offers no public switch; the attribute is in its
    declared set, and tests/test_accounting.py fails if it stops having this effect.
    """
    session._retry_connection = False
    return session


class Transport:
    """Sessions, created lazily inside the running loop and bound to it."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        limits: Limits,
        ssl: SSLOption,
        resolver: aiohttp.abc.AbstractResolver | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url
        self._authorization = f"Bearer {api_key}"
        self.limits = limits
        self._ssl = ssl
        self._resolver = resolver
        self._loop: asyncio.AbstractEventLoop | None = None
        self._control: aiohttp.ClientSession | None = None
        self._closed = False
        self.hosts: HostPools[aiohttp.ClientSession] = HostPools(
            limits, self._make_host_session, clock
        )
        # Answers whose body is being read; `aclose()` ends them first (see there).
        self._reading: set[aiohttp.ClientResponse] = set()

    @property
    def closed(self) -> bool:
        """Whether `aclose()` has run."""
        return self._closed

    def check_loop(self) -> None:
        """Bind to the running loop on first use; refuse any other loop afterwards.

        `Calls.run` asks once per operation; sessions are only ever made inside one.
        """
        self._check_open()
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise ClientStateError(
                "this sandboxkit.Client was first used on another event loop; create one "
                "Client per event loop (or use sandboxkit.sync.Client from threads)"
            )

    def _connector(self, limit: int) -> aiohttp.TCPConnector:
        return aiohttp.TCPConnector(
            limit=limit,
            limit_per_host=limit,
            ssl=self._ssl,
            resolver=self._resolver,
            enable_cleanup_closed=False,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise ClientStateError("this sandboxkit.Client is closed; create a new one")

    def _control_session(self) -> aiohttp.ClientSession:
        if self._control is None:
            self._control = _uncounted_resends_off(
                aiohttp.ClientSession(
                    connector=self._connector(self.limits.control_plane_connections),
                    headers={"User-Agent": USER_AGENT},
                    # Responses are JSON we decode ourselves; nothing is ever auto-redirected.
                    auto_decompress=True,
                    trust_env=False,
                )
            )
        return self._control

    def _make_host_session(self, host: HostKey) -> aiohttp.ClientSession:
        session = aiohttp.ClientSession(
            base_url=host.origin,
            connector=self._connector(self.limits.per_host_connections),
            # The sandbox token rides on this host's session only; it never goes elsewhere.
            # `identity`: the body is the file's raw bytes, and Range offsets count them (an
            # answer coded anyway is decoded by StreamingResponse, never written as the file).
            headers={
                "User-Agent": USER_AGENT,
                ACCESS_TOKEN: host.token,
                ACCEPT_ENCODING: "identity",
            },
            auto_decompress=False,
            trust_env=False,
        )
        return _uncounted_resends_off(session)

    async def send(self, request: ApiRequest, timeout: Timeout) -> Reply:
        """Send one control-plane request, read its whole answer, and decipher it.

        Raises:
            APIError: the status's subclass; ResponseDecodeError: a 2xx that is not JSON
                or too large; TransportError: no usable answer.
        """
        # Calls.run checked the loop for this operation already; a retry may find the client
        # closed since (its pooled connection was closed under it).
        self._check_open()
        session = self._control or self._control_session()
        # The query is written here rather than passed as `params=`: yarl's merging of params
        # into a URL cost more than the rest of this method together (measured: ~30k
        # instructions a call of ~800k).
        url = self.base_url + request.path
        if request.params:
            url += "?" + query_string(request.params)
        try:
            async with session.request(
                request.method,
                url,
                json=request.json,
                # Built inline, never a local of this frame: tracebacks with locals (Sentry)
                # must not find the API key here.
                headers=self._headers(request),
                timeout=_client_timeout(timeout),
                allow_redirects=False,
            ) as response:
                self._refuse_if_closed(response)
                self._reading.add(response)
                try:
                    length = response.content_length
                    if length is not None and length <= CONTROL_BODY_LIMIT:
                        # The usual answer: its size is declared and small, one read takes it.
                        body, whole = await response.read(), True
                    else:
                        body, whole = await _read_capped(response.content, CONTROL_BODY_LIMIT)
                finally:
                    self._reading.discard(response)
                if not whole and 200 <= response.status < 300:
                    raise ResponseDecodeError(
                        f"{request.operation}: the {response.status} answer is larger than "
                        f"{CONTROL_BODY_LIMIT} bytes",
                        status=response.status,
                        request_id=response.headers.get(REQUEST_ID),
                    )
                # An error body past the limit is cut: its status still gives its class.
                return decipher(
                    response.status,
                    response.headers,
                    body,
                    request.surface,
                    operation=request.operation,
                    now=time.time(),
                )
        except Exception as exc:  # _mapped, inlined: one coroutine less on every call
            error = _translate(exc, request.operation)
            if error is None:
                raise
        raise error  # outside the except block: see _mapped

    def _headers(self, request: ApiRequest) -> dict[str, str]:
        headers = dict(request.headers)
        if request.authenticated:
            headers[AUTHORIZATION] = self._authorization
        return headers

    @contextlib.asynccontextmanager
    async def open(
        self,
        host: HostKey,
        method: str,
        path: str,
        *,
        operation: str,
        timeout: Timeout,
        params: Sequence[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        data: Any = None,
    ) -> AsyncIterator[StreamingResponse]:
        """Send one data-plane request on the host's own pool; the body stays unread.

        The request holds one of the host's slots while it lasts, and the answer's status
        moves the host's window (a 429 halves it, a success grows it): callers never touch
        the pool. Only aiohttp's own calls are inside the error mapping: what the caller does
        with the body (a disk write that fails, say) keeps its own exception.
        """
        self._check_open()  # a retry may find the client closed since the call began
        async with self.hosts.lease(host) as pool:
            response = await _mapped(
                pool.session.request(
                    method,
                    f"{path}?{query_string(params)}" if params else path,  # as in send()
                    headers=headers,
                    data=data,
                    timeout=_client_timeout(timeout),
                    allow_redirects=False,
                ),
                operation,
            )
            pool.observe(response.status)
            self._refuse_if_closed(response)
            self._reading.add(response)
            try:
                yield StreamingResponse(response, operation)
            finally:
                self._reading.discard(response)
                # An unread body means the connection cannot be reused: drop it at once
                # rather than leave it half-read (cancellation included).
                if response.content.at_eof():
                    response.release()
                else:
                    response.close()

    def _refuse_if_closed(self, response: aiohttp.ClientResponse) -> None:
        # `aclose()` ran while this answer's head arrived: its body can never be read.
        if self._closed:
            response.close()
            raise ClientStateError("this sandboxkit.Client was closed during the request")

    async def aclose(self) -> None:
        """Close every session; the transport is unusable afterwards."""
        if self._closed:
            return
        self._closed = True
        # Closing a session detaches each connection from the body being read on it, so a
        # read waiting for more bytes would wait forever: end those bodies first (their
        # readers then raise, and the retry loop finds the client closed).
        for response in list(self._reading):
            response.close()
        await self.hosts.aclose()
        if self._control is not None:
            await self._control.close()
            self._control = None
