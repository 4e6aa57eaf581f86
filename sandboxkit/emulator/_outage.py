"""An outage of the emulator's servers: what a client meets while the service is down.

During an outage each server's port is held by a bare listener that reads a request's head,
records it, and then closes the connection without an answer (a server that died after
accepting) or answers every request with one status (a gateway whose backend is down).
Connections open when the outage begins are cut. Nothing is lost: sandboxes, files and
builds are all there when the servers come back on the same ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import attrs

__all__ = ["DeadListener", "Outage", "OutageRequest"]

_HEAD_LIMIT = 64 * 1024


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
        status: what each request is answered with; None: the connection is closed
            unanswered.
        requests: every request head that arrived while the servers were down, in order
            (a connection that closed before sending one is not counted).
    """

    status: int | None
    requests: list[OutageRequest] = attrs.field(factory=list)


class DeadListener:
    """Holds one server's port during an outage."""

    def __init__(self, server: str, outage: Outage) -> None:
        self._server_name = server
        self._outage = outage
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._stopped = False

    async def start(self, host: str, port: int, ctx: ssl.SSLContext | None) -> None:
        """Listen on `host:port` (the port the real server just left)."""
        self._server = await asyncio.start_server(
            self._handle, host, port, ssl=ctx, reuse_address=True
        )

    async def stop(self) -> None:
        """Free the port, cutting any connection still open (or accepted but not yet
        handed to `_handle`: that one is cut when its handler starts)."""
        self._stopped = True
        if self._server is not None:
            self._server.close()
            for writer in self._open:
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._stopped:  # accepted (or its TLS handshake done) after stop(): never served
            writer.transport.abort()
            return
        self._open.add(writer)
        try:
            await self._answer(reader, writer)
        finally:
            self._open.discard(writer)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.transport.abort()
            return
        self._outage.requests.append(_parse(self._server_name, head[:_HEAD_LIMIT]))
        if self._outage.status is None:
            writer.transport.abort()  # a reset, as from a process that died
            return
        writer.write(
            f"HTTP/1.1 {self._outage.status} Service down\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()


def _parse(server: str, head: bytes) -> OutageRequest:
    lines = head.decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    target = rest.rpartition(" ")[0] or rest
    host = ""
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "host":
            host = value.strip()
    return OutageRequest(server=server, method=method, target=target, host=host)
