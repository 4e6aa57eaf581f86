"""A connection as sandboxkit runs it: aiohttp's connection protocol with our read timer
(`LazyReadTimer`), the `Watchdog` of a body read below the parser, and the plain GET written
straight on a connection (`Route`).

`LazyReadTimer`: one read timer moved lazily, bytes past an answer refused, and a drain left
behind by a cancelled writer retrieved. Every session's connector makes its connections with
it (`transport`); `StreamingResponse` quiets its timer for a body a `Watchdog` times
instead (one timer per read timeout, for a body read piece by piece or below the parser,
`ring`).

`Route`, a data-plane GET below aiohttp's request machinery, on the connections its connector
gives. `ClientSession.request` builds a URL, merges headers into multidicts, makes a
`ClientRequest`, a `ClientResponse` and a writer, and runs trace and timer contexts: with
10,000 small reads over 1,000 hosts it was over half of the client's CPU (benchmarks/run.py
--case smallfiles). A plain GET to a sandbox host needs none of it: the connection key, the
`Host` header and the session's headers are the same for every request to that host. `Route`
writes them once per host; `Route.get` takes a connection from the session's own connector
(its keep-alive pool, limits, resolver and TLS), writes the request's head as bytes, and
reads the answer with aiohttp's own parser on the connection's protocol (`LazyReadTimer`,
which also refuses stray bytes). The answer is handed on as a `LeanAnswer`, which
`StreamingResponse` reads as it reads aiohttp's `ClientResponse`: bodies, chunked framing,
content codings, cuts and the 4 MiB ring are the same code on either path.

Not taken (`route` answers None, or `head` does, and aiohttp's full path runs instead):

* a request with a body, or any method but GET: an upload's body writer is aiohttp's;
* an origin reached through a proxy: the request line, the proxy's headers and a CONNECT
  tunnel's set-up differ, and are aiohttp's to get right;
* a request whose target or header values HTTP/1.1 cannot carry as they are (a CR or LF, a
  byte outside printable ASCII): aiohttp refuses or encodes those itself;
* an aiohttp whose connection protocol lacks one of the calls `get` makes (`_PROTOCOL_CALLS`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from aiohttp.http import RawResponseMessage
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from .._core.protocol import ACCESS_TOKEN

__all__ = [
    "Head",
    "LazyReadTimer",
    "LeanAnswer",
    "Route",
    "Watchdog",
    "quiet_read_timer",
    "route",
]


# LazyReadTimer calls its base's methods as `_Handler.method(self, ...)`: they run for
# every read and answer, and `super()` costs ~75 ns more a call (a lookup on the class at
# call time still sees a test's monkeypatch, which an alias made at import would not).
_Handler = aiohttp.client_proto.ResponseHandler
_NO_PARSER = object()  # what no connection's parser is


class LazyReadTimer(_Handler):
    """aiohttp's connection protocol, its `sock_read` timer moved lazily.

    aiohttp cancels its read timer and makes a new one for every piece received: three
    timer handles (and as many cancelled ones left in the loop's heap) for a small answer
    whose head and body come in two pieces, about 5% of the client's time with 10,000 small
    downloads (benchmarks/run.py --case hosts, py-spy). Here a piece only moves the due
    time; the one timer, when it fires early, sets itself again for the due time. The
    timeout keeps aiohttp's meaning (the longest wait for the peer between two pieces).
    tests/http/test_read_timer.py fails if aiohttp stops calling `_reschedule_timeout`.

    It also closes a connection that gets bytes past its answer (`_refuse_stray`), and on
    aiohttp before 3.14 retrieves what a cancelled writer's drain leaves (`connection_lost`).
    """

    _read_due = 0.0
    # The parser of the request whose final answer has ended: while it is the connection's
    # parser, a byte is one nobody asked for. aiohttp pools a connection when its answer's
    # body ends, inside the parser's call, and keeps the queue of parsed answers across
    # requests: an answer after the end (same read, or while pooled) was the next one's.
    # aiohttp makes a parser per request (`set_response_params`): that resets this (were
    # one kept, every reuse would be refused: loud, never a wrong answer).
    _ended: object = _NO_PARSER

    def feed_data(
        self, data: tuple[RawResponseMessage, aiohttp.StreamReader], size: int = 0
    ) -> None:
        # Every answer the parser completes passes here on its way to the reader's queue.
        if self._ended is self._parser:
            self._refuse_stray()
            return
        if data[0].code >= 200:  # a 1xx is informational: the final answer follows
            data[1].on_eof(self._answer_ended)
        _Handler.feed_data(self, data, size)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        ended = self._ended is parser
        if ended and data:  # (empty: aiohttp resuming its parser on bytes it holds)
            self._refuse_stray()
            return
        _Handler.data_received(self, data)
        if not ended and self._ended is parser:
            # The answer ended in this read. A whole answer after it went to feed_data; the
            # start of one (or garbage the parser let pass) only the parser knows: ask it
            # as aiohttp does when a connection is lost (it is never fed again).
            try:
                started = parser is not None and parser.feed_eof() is not None
            except Exception:  # it began something that is no valid head
                started = True
            if started:
                self._refuse_stray()

    def connection_lost(self, exc: BaseException | None) -> None:
        # aiohttp before 3.14 waits for the socket to drain under `asyncio.shield`: a writer
        # cancelled meanwhile (an upload cancelled while its server stopped reading) leaves
        # the waiter behind, and the connection's loss sets on it an exception nobody
        # retrieves (asyncio logs "Future exception was never retrieved"). Retrieving it
        # changes nothing else: a writer still waiting gets it through its shield.
        waiter: asyncio.Future[None] | None = getattr(self, "_drain_waiter", None)
        _Handler.connection_lost(self, exc)
        if waiter is not None and waiter.done() and not waiter.cancelled():
            waiter.exception()

    def _answer_ended(self) -> None:
        self._ended = self._parser

    def _refuse_stray(self) -> None:
        """Close the connection: which request stray bytes answer, HTTP/1.1 cannot say.

        The pool then drops it: `BaseConnector._get` reuses only a protocol that
        `is_connected()` (its transport not closing) and `_release` closes one that
        `should_close`. The stray bytes are dropped unparsed, an answer parsed from them
        kept from the reader's queue.
        """
        self.force_close()
        transport = self.transport
        if transport is not None:
            transport.close()

    def _reschedule_timeout(self) -> None:
        timeout = self._read_timeout
        if not timeout:
            self._drop_timeout()
            return
        self._read_due = self._loop.time() + timeout
        if self._read_timeout_handle is None:
            self._read_timeout_handle = self._loop.call_at(self._read_due, self._read_due_check)

    def _read_due_check(self) -> None:
        if self._loop.time() < self._read_due:  # a piece came since: wait for the new due time
            self._read_timeout_handle = self._loop.call_at(self._read_due, self._read_due_check)
            return
        self._read_timeout_handle = None
        self._on_read_timeout()


def quiet_read_timer(protocol: Any) -> None:
    """Stop aiohttp re-arming its `sock_read` timer per piece of this body: a `Watchdog`
    keeps the read timeout instead. `read_timeout` is the protocol's public setter; the
    armed handle is dropped too (else it would fire once more, harmlessly late)."""
    protocol.read_timeout = None
    drop = getattr(protocol, "_drop_timeout", None)
    if drop is not None:
        drop()


class Watchdog:
    """Calls `on_stall` once `active` has been true for `limit` seconds without a `touch`.

    The read timeout's meaning (the longest wait for the peer between two reads) for the
    price of one timer per `limit` seconds: aiohttp's `sock_read` cancels and re-creates a
    timer handle on every received piece (~4,000 per GiB). Time while `active` is false
    (the consumer is busy, or reading paused for it) is not the peer's and does not count.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, limit: float | None, on_stall: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._limit = limit
        self._on_stall = on_stall
        self.last = loop.time()
        self.active = True
        self._handle: asyncio.TimerHandle | None = None
        if limit is not None:
            self._handle = loop.call_at(self.last + limit, self._check)

    def _check(self) -> None:
        assert self._limit is not None
        now = self._loop.time()
        if not self.active:  # not waiting for the peer: its clock starts when we wait again
            self.last = now
        due = self.last + self._limit
        if now >= due:
            self._handle = None
            self._on_stall()
        else:
            self._handle = self._loop.call_at(due, self._check)

    def stop(self) -> None:
        """No more checks."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


# A request target as `query_string` writes it: visible ASCII, nothing to quote.
_PLAIN_TARGET = re.compile(r"[!-~]+")
# A header value sent as it is: printable ASCII and tabs, so no CR or LF can split the head.
_PLAIN_VALUE = re.compile(r"[\t -~]*")
_PLAIN_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's token
# What `Route.get` calls on aiohttp's connection protocol beyond its documented API
# (`BaseConnector.connect`, `Connection`): an aiohttp without one of these gets no lean
# route, and its requests take aiohttp's own path.
_PROTOCOL_CALLS = ("set_response_params", "start_timeout", "read")


class Head(bytes):
    """A request's head as sent: it carries the sandbox token, so its repr (in a traceback's
    locals, as error trackers record them) shows only its size."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<request head, {len(self)} bytes>"


class LeanAnswer:
    """An answer's head and unread body, read by `Route.get`: what `StreamingResponse` reads
    of aiohttp's `ClientResponse`, and its end (`release` pools the connection, unless its
    protocol says it must close; `close` drops it)."""

    __slots__ = ("connection", "content", "content_length", "headers", "status")

    def __init__(
        self,
        status: int,
        headers: Mapping[str, str],
        content: aiohttp.StreamReader,
        connection: aiohttp.connector.Connection,
    ) -> None:
        self.status = status
        self.headers = headers
        self.content = content
        self.connection: aiohttp.connector.Connection | None = connection
        # Digits only (aiohttp's parser refuses any other Content-Length).
        length = headers.get(aiohttp.hdrs.CONTENT_LENGTH)
        self.content_length = None if length is None else int(length)

    def __del__(self) -> None:
        # As aiohttp's `ClientResponse`: an answer dropped unended (its task destroyed before
        # its cleanup ran) gives its connection back, closed unless its body was all read.
        connection = self.connection
        if connection is not None and not connection._loop.is_closed():
            self.connection = None
            connection.release()

    def release(self) -> None:
        connection = self._let_go()
        if connection is not None:
            connection.release()

    def close(self) -> None:
        connection = self._let_go()
        if connection is not None:
            connection.close()

    def _let_go(self) -> aiohttp.connector.Connection | None:
        # As `ClientResponse` does: a read of the body still waiting (or yet to come) fails
        # as a closed connection, rather than wait on a connection that is gone.
        content = self.content
        if content.exception() is None and not content.is_eof():
            content.set_exception(aiohttp.ClientConnectionError("Connection closed"))
        connection, self.connection = self.connection, None
        return connection


class Route:
    """One sandbox host's GETs, written once: the connection key aiohttp's connector pools
    by (a `ClientRequest` made once, never sent) and the head's fixed lines."""

    __slots__ = ("_connector", "_lines", "_request", "_threshold")

    def __repr__(self) -> str:  # its lines carry the token
        return f"Route({self._request.url.origin()})"

    def __init__(self, session: aiohttp.ClientSession, origin: str, token: str) -> None:
        connector = session.connector
        assert connector is not None
        # The same key as the session's own requests to this origin: the two paths share
        # one pool of connections (and its limits).
        self._request = aiohttp.ClientRequest(
            "GET", URL(origin), loop=connector._loop, session=session
        )
        self._connector = connector
        self._threshold = connector._timeout_ceil_threshold
        # What aiohttp would send: its Host, its default Accept, the session's headers.
        fixed = {
            "Host": self._request.headers["Host"],
            "Accept": "*/*",
            **session.headers,
            ACCESS_TOKEN: token,
        }
        self._lines = _lines(fixed) or b""

    @property
    def usable(self) -> bool:
        """False when the host's fixed headers cannot go as they are (aiohttp's path then)."""
        return bool(self._lines)

    def head(self, target: str, headers: Mapping[str, str] | None) -> Head | None:
        """The request's head as bytes; None if the target or a header cannot go as it is."""
        if _PLAIN_TARGET.fullmatch(target) is None:
            return None
        extra = b""
        if headers:
            lines = _lines(headers)
            if lines is None:
                return None
            extra = lines
        return Head(
            b"".join((b"GET ", target.encode(), b" HTTP/1.1\r\n", self._lines, extra, b"\r\n"))
        )

    async def get(
        self, head: Head, timeout: aiohttp.ClientTimeout, read_timeout: float | None
    ) -> LeanAnswer:
        """Send `head` on a connection of the host's pool; the final answer's head, its body
        unread. aiohttp's exceptions are raised as its own path raises them (`translate`)."""
        connection = await self._connector.connect(self._request, [], timeout)
        try:
            protocol = connection.protocol
            transport = connection.transport
            assert protocol is not None and transport is not None
            # A parser for this answer (aiohttp makes one per request; `LazyReadTimer` reads
            # a byte after its answer's end as stray).
            protocol.set_response_params(
                read_timeout=read_timeout,
                auto_decompress=False,  # StreamingResponse decodes, and counts coded bytes
                # A body framed by neither a length nor chunks ends at the close (HTTP/1.0,
                # `Connection: close`): without this the parser reads it as empty.
                read_until_eof=True,
                timeout_ceil_threshold=self._threshold,
            )
            transport.write(head)
            protocol.start_timeout()
            while True:
                try:
                    message, payload = await protocol.read()
                except HttpProcessingError as exc:  # the head is no valid HTTP (as aiohttp)
                    raise aiohttp.ClientResponseError(
                        self._request.request_info, (), status=exc.code, message=exc.message
                    ) from None
                # Informational answers precede the final one (101 is final: a switch).
                if not 100 <= message.code < 200 or message.code == 101:
                    break
        except BaseException:
            connection.close()  # unsent, or its answer unread: never pooled
            raise
        return LeanAnswer(message.code, message.headers, payload, connection)


def route(session: aiohttp.ClientSession, origin: str, token: str, proxied: bool) -> Route | None:
    """The lean route to `origin`, or None where aiohttp's own path must carry its GETs."""
    handler = aiohttp.client_proto.ResponseHandler
    if proxied or not all(callable(getattr(handler, name, None)) for name in _PROTOCOL_CALLS):
        return None
    lean = Route(session, origin, token)
    return lean if lean.usable else None


def _lines(headers: Mapping[str, Any]) -> bytes | None:
    """`Name: value\\r\\n` for each header; None if one cannot go as it is."""
    lines = []
    for name, value in headers.items():
        if (
            not isinstance(value, str)
            or _PLAIN_NAME.fullmatch(name) is None
            or _PLAIN_VALUE.fullmatch(value) is None
        ):
            return None
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode()
