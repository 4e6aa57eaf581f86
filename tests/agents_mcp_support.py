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

from .reliability_support import LoopbackServer, http_answer


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
