"""A data-plane GET below aiohttp's request machinery, on the connections its connector gives.

`ClientSession.request` builds a URL, merges headers into multidicts, makes a `ClientRequest`,
a `ClientResponse` and a writer, and runs trace and timer contexts: with 10,000 small reads
over 1,000 hosts it was over half of the client's CPU (benchmarks/run.py --case smallfiles).
A plain GET to a sandbox host needs none of it: the connection key, the `Host` header and the
session's headers are the same for every request to that host. `Route` writes them once per
host; `Route.get` takes a connection from the session's own connector (its keep-alive pool,
limits, resolver and TLS), writes the request's head as bytes, and reads the answer with
aiohttp's own parser on the connection's protocol (`connections.LazyReadTimer`, which also
refuses stray bytes). The answer is handed on as a `LeanAnswer`, which `StreamingResponse`
reads as it reads aiohttp's `ClientResponse`: bodies, chunked framing, content codings, cuts
and the 4 MiB ring are the same code on either path.

Not taken (`route` answers None, or `head` does, and aiohttp's full path runs instead):

* a request with a body, or any method but GET: an upload's body writer is aiohttp's;
* an origin reached through a proxy: the request line, the proxy's headers and a CONNECT
  tunnel's set-up differ, and are aiohttp's to get right;
* a request whose target or header values HTTP/1.1 cannot carry as they are (a CR or LF, a
  byte outside printable ASCII): aiohttp refuses or encodes those itself;
* an aiohttp whose connection protocol lacks one of the calls `get` makes (`_PROTOCOL_CALLS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from .._core.protocol import ACCESS_TOKEN

__all__ = ["Head", "LeanAnswer", "Route", "route"]

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
