"""Helpers for the MCP server's tests: a data plane that stalls mid-body, a toolkit wrapper
that tells when a call has ended, a tool result's JSON, and a walk of everything a client
was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any

import mcp_types as types

from sandboxkit.agents import Tool, Toolkit

from .reliability_support import LoopbackServer, Relay, http_answer


class StallingDataPlane(LoopbackServer):
    """A sandbox data plane that answers a download with a head announcing `size` bytes and
    the first `sent` of them, then holds the rest until the client goes away: a transfer
    cancelled once `stalled` is set is cancelled mid-body, whatever the timing."""

    def __init__(self, size: int, sent: int) -> None:
        super().__init__()
        self.size, self.sent = size, sent
        self.heads: list[bytes] = []
        self.stalled = asyncio.Event()
        self.closed = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            kind = {"Content-Type": "application/octet-stream"}
            writer.write(http_answer(200, b"x" * self.sent, kind, length=self.size))
            await writer.drain()
            self.stalled.set()
            await reader.read()  # b"" once the client closes: the rest never comes
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.set()
            writer.close()


class GatedDataPlane(LoopbackServer):
    """A sandbox data plane that answers a download of `data` with its first `sent` bytes,
    then holds the rest until `release` is set (or the client goes away): a copy that is
    still running when its call answers, and that ends when the test says."""

    def __init__(self, data: bytes, sent: int) -> None:
        super().__init__()
        self.data, self.sent = data, sent
        self.stalled = asyncio.Event()
        self.release = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        kind = {"Content-Type": "application/octet-stream"}
        writer.write(http_answer(200, self.data[: self.sent], kind, length=len(self.data)))
        await writer.drain()
        self.stalled.set()
        gone = asyncio.ensure_future(reader.read())
        released = asyncio.ensure_future(self.release.wait())
        await asyncio.wait([gone, released], return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        released.cancel()
        if self.release.is_set():
            writer.write(self.data[self.sent :])
            await writer.drain()


class ChokedRelay(Relay):
    """A relay to the emulator's data server that passes a request's first `allowed` bytes,
    then reads no more from the client (`choked` is set): an upload on a link that stopped,
    which the emulator waits on with its body half there until `refuse()` ends it all."""

    def __init__(self, target_port: int, allowed: int) -> None:
        super().__init__(target_port)
        self.allowed = allowed
        self.choked = asyncio.Event()

    async def _relay(self, connection: Any) -> None:
        reader, writer = await asyncio.open_connection(sock=connection)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            try:
                await asyncio.gather(self._choke(reader, up_writer), self._pipe(up_reader, writer))
            finally:
                up_writer.transport.abort()
        finally:
            writer.transport.abort()

    async def _choke(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        passed = 0
        while passed < self.allowed and (data := await source.read(self.allowed - passed)):
            sink.write(data)
            await sink.drain()
            passed += len(data)
        self.choked.set()
        await asyncio.Event().wait()  # the link is stalled until refuse() cancels this


class Watched:
    """A `Toolkit` whose calls are watched: `ended` is set when a call has returned or
    raised (its cleanup done), and `outcomes` holds what each raised, if anything."""

    def __init__(self, toolkit: Toolkit) -> None:
        self.toolkit = toolkit
        self.ended = asyncio.Event()
        self.outcomes: list[type[BaseException] | None] = []

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The toolkit's tools."""
        return self.toolkit.tools

    async def call(self, name: str, arguments: Mapping[str, Any], *, progress: Any = None) -> Any:
        """The toolkit's call, recorded."""
        try:
            value = await self.toolkit.call(name, arguments, progress=progress)
        except BaseException as exc:
            self.outcomes.append(type(exc))
            raise
        finally:
            self.ended.set()
        self.outcomes.append(None)
        return value


def answer(result: types.CallToolResult) -> Any:
    """The result's JSON text, checked to be its structuredContent too (an error has none:
    it is no result of the tool's outputSchema)."""
    [block] = result.content
    assert isinstance(block, types.TextContent)
    value = json.loads(block.text)
    assert result.structured_content == (None if result.is_error else value)
    return value


def leaks(texts: Iterable[str], secrets: Iterable[str]) -> list[str]:
    """The secrets found in any of `texts`."""
    joined = "\n".join(texts)
    return [secret for secret in secrets if secret and secret in joined]


def dumped(values: Iterable[Any]) -> list[str]:
    """MCP results and notifications as the JSON a client reads."""
    out = []
    for value in values:
        dump = getattr(value, "model_dump", None)
        out.append(json.dumps(dump(by_alias=True, mode="json") if dump else value, default=str))
    return out
