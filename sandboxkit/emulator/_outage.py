"""An outage of the emulator's servers: what a client meets while the service is down.

While an outage lasts, a gate in front of each server's middleware records every request
and then ends its connection in one of the shapes of `SHAPES` (a server that died after
accepting, one shutting down that closes what it reads, one that dies mid-answer), or
answers it with one status (a gateway whose backend is down). Connections open when the
outage begins are cut. Nothing is lost: sandboxes, files and builds are all there after it.

The servers keep their listening sockets throughout. Closing and reopening them would race
asyncio's accept: a connection accepted in the same loop turn as the close either escapes
the cut and is served during the outage, or (Python 3.11) hits an assertion in
``Server._attach`` and its socket is leaked unanswered until garbage collection.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

__all__ = ["SHAPES", "Outage", "OutageRequest", "cut_connections", "outage_gate"]

# How a connection ends when the outage has no status, after its request head is read.
SHAPES = {
    "reset": "reset (RST), as by a process that died",
    "close": "closed (FIN) unanswered, as by a server shutting down mid-restart",
    "head": "sent an answer's head (200, a declared length) and then closed, no body",
}
# The head of the "head" shape: a length no body then matches, so no client takes it whole.
_HEAD_ONLY = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
    b"Content-Length: 1048576\r\nConnection: close\r\n\r\n"
)


@attrs.frozen
class OutageRequest:
    """A request sent to a server while it was down.

    Attributes:
        server: ``"console"`` or ``"data"``.
        method, target: from the request line (the target with its query).
        host: the ``Host`` header.
    """

    server: str
    method: str
    target: str
    host: str


@attrs.define
class Outage:
    """One outage, as :meth:`Emulator.outage` yields it.

    Attributes:
        status: what each request is answered with; None: its connection ends as
            `shape` says.
        shape: one of `SHAPES`: ``"reset"``, ``"close"`` or ``"head"``.
        requests: every request head that arrived while the servers were down, in order
            (a connection that closed before sending one is not counted).
    """

    status: int | None
    shape: str = attrs.field(default="reset", validator=attrs.validators.in_(SHAPES))
    requests: list[OutageRequest] = attrs.field(factory=list)


def outage_gate(server: str, current: Callable[[], Outage | None]) -> Middleware:
    """The first middleware of `server` (``"console"`` or ``"data"``): while `current()`
    gives an outage, no request gets past it, and none reaches the journal."""

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        down = current()
        if down is None:
            return await handler(request)
        down.requests.append(
            OutageRequest(server, request.method, request.raw_path, request.headers.get("Host", ""))
        )
        if down.status is None:
            transport = request.transport
            if transport is not None:
                if down.shape == "reset":
                    transport.abort()
                else:
                    if down.shape == "head":
                        transport.write(_HEAD_ONLY)
                    transport.close()  # what is written goes out first, then the FIN
            return web.Response()  # never sent: the connection is gone
        response = web.Response(status=down.status, reason="Service down")
        response.force_close()
        return response

    return gate


def cut_connections(runner: web.BaseRunner) -> None:
    """Cut every connection `runner`'s server holds, mid-answer or idle."""
    for handler in runner.server.connections if runner.server is not None else []:
        transport = handler.transport
        handler.force_close()  # the cut a dying server's clients see
        if transport is not None:
            # force_close() only close()s, which waits to flush a body the client may never
            # read: that socket would outlive the outage, and the test.
            transport.abort()
