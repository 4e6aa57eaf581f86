"""The agent toolkit served over the Model Context Protocol (`sandboxkit mcp`; the `mcp` extra).

`build_server(toolkit)` makes a low-level `mcp` server: the low-level API, because it takes
each tool's JSON Schema as we wrote it (FastMCP would derive one from a signature). Every
`Tool` is listed with its input and output schemas unchanged and its hints as annotations; a
call runs `toolkit.call` and answers its dict as `structuredContent` (valid against the
`outputSchema`) and as the same JSON in a text block (clients such as the OpenAI Agents SDK
show the model the text). A `ToolError` is a tool result with `isError` and the error's JSON
(`code`, `message`, `retryable`) as text only: it is no result of the tool's schema, and
clients that check `structuredContent` against it whatever `isError` says would refuse it.
It is logged at WARNING (tool name and code: never the message, which quotes model input)
on the `sandboxkit.agents.mcp` logger, so the operator sees every failure.

A copy's progress becomes `notifications/progress` when the client sent a `progressToken`;
a `notifications/cancelled` cancels the handler's task, and with it the transfer, whose own
cleanup leaves no partial file. With the toolkit's `CopyHandles` (as `sandboxkit mcp` sets
them up) a copy still running after a second answers a `copy_id` instead: a client that
gives up on a call idle for 300 s never waits that long.

This module imports `mcp`: only `sandboxkit mcp` and code that asks for it load it, never
`import sandboxkit` or `import sandboxkit.agents`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import mcp_types as types
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from .._version import __version__
from ._errors import ErrorCode, ToolError, where_raised
from ._tool import Progress, Tool

__all__ = [
    "INSTRUCTIONS",
    "SERVER_NAME",
    "OperatorToken",
    "ToolSource",
    "build_server",
    "describe_tool",
    "serve_http",
    "serve_stdio",
    "worth_sending",
]

SERVER_NAME = "sandboxkit"
INSTRUCTIONS = (
    "Tools for the sandboxes this server was set up with: call list_sandboxes to learn their "
    "names, then read and write files under each sandbox's root, copy files between a sandbox "
    "and the local workspace, and work with templates and builds when those tools are "
    "listed. A failed call answers JSON {code, message, retryable}: try again only when "
    "retryable is true."
)
# Unknown total: at most one progress notification per this many bytes.
_UNKNOWN_TOTAL_STEP = 1 << 20

logger = logging.getLogger("sandboxkit.agents.mcp")


class ToolSource(Protocol):
    """What the server serves: a `Toolkit`, or anything with its `tools` and `call`."""

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The tools to list."""
        ...

    async def call(
        self, name: str, arguments: Mapping[str, Any], *, progress: Progress | None = None
    ) -> dict[str, Any]:
        """Run one tool; raises only `ToolError` (cancellation passes)."""
        ...


def describe_tool(tool: Tool) -> types.Tool:
    """A `Tool` as MCP lists it: its schema as written, its hints as annotations."""
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=_plain(tool.input_schema),
        output_schema=_plain(tool.output_schema),
        annotations=types.ToolAnnotations(
            title=tool.title,
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            idempotent_hint=tool.idempotent,
            open_world_hint=tool.open_world,
        ),
    )


def build_server(toolkit: ToolSource) -> Server[Any]:
    """An MCP server offering `toolkit`'s tools.

    Args:
        toolkit: what to serve (a `sandboxkit.agents.Toolkit`).

    Returns:
        A low-level `mcp.server.lowlevel.Server`: run it with `serve_stdio` or `serve_http`,
        or hand it to `mcp.Client(server)` in a test.
    """
    listed = [describe_tool(tool) for tool in toolkit.tools]
    schemas = {tool.name: tool.input_schema for tool in listed}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in schemas:
            # The spec's answer to an unknown tool is a protocol error, not a tool result.
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        return await _run(toolkit, params.name, params.arguments or {}, ctx.session.report_progress)

    return Server(
        SERVER_NAME,
        version=__version__,
        title="sandboxkit",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def _run(
    toolkit: ToolSource,
    name: str,
    arguments: Mapping[str, Any],
    report: Callable[[float, float | None], Awaitable[None]],
) -> types.CallToolResult:
    relay = _Relay(report)
    pump = asyncio.ensure_future(relay.pump())
    try:
        value = await toolkit.call(name, arguments, progress=relay.update)
    except ToolError as exc:
        logger.warning(
            "tool %s failed: %s (retryable: %s)", name, exc.code.value, str(exc.retryable).lower()
        )
        return _result(exc.to_json(), error=True)
    except Exception as exc:
        # Not the toolkit's contract; where it was raised goes to the operator's log (not its
        # text, which could quote a credential), nothing of it to the model.
        logger.error("tool %s failed unexpectedly: internal %s", name, where_raised(exc))
        failure = {"code": str(ErrorCode.INTERNAL), "message": "internal error", "retryable": False}
        return _result(failure, error=True)
    finally:
        pump.cancel()
        await asyncio.wait([pump])
    await relay.flush()  # the last count (a finished copy's total) before the answer
    return _result(value, error=False)


def _result(value: Mapping[str, Any], *, error: bool) -> types.CallToolResult:
    # The text block carries the same JSON for clients that ignore structuredContent; an
    # error has only the text (see the module's docstring).
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    content: list[types.ContentBlock] = [types.TextContent(text=text)]
    if error:
        return types.CallToolResult(content=content, is_error=True)
    return types.CallToolResult(content=content, structured_content=dict(value), is_error=False)


def worth_sending(done: int, total: int | None, sent: int | None) -> bool:
    """Whether a count of `done` bytes deserves a notification after one of `sent`.

    Counts only grow (MCP requires it; a restarted download counts again from 0, and is
    not told until it passes what was sent), and a copy sends about a hundred at most: one
    per 1 % of a known total (and the total itself), one per MiB of an unknown one.
    """
    if sent is not None and done <= sent:
        return False
    if total is not None and done >= total:
        return True
    step = max(total // 100, 1) if total else _UNKNOWN_TOTAL_STEP
    return done - (sent or 0) >= step


class _Relay:
    """The toolkit's synchronous progress calls as MCP notifications, one in flight at a
    time: the latest count wins, and the pump task sends it while the copy goes on."""

    def __init__(self, report: Callable[[float, float | None], Awaitable[None]]) -> None:
        self._report = report
        self._latest: tuple[int, int | None] | None = None
        self._sent: int | None = None
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def update(self, done: int, total: int | None) -> None:
        """The toolkit's progress callback; safe from a worker thread too."""
        self._latest = (done, total)
        if not worth_sending(done, total, self._sent):
            return
        if threading.get_ident() == self._thread:
            self._wake.set()
        else:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            latest = self._latest
            if latest is not None and worth_sending(*latest, self._sent):
                await self._send(*latest)

    async def flush(self) -> None:
        latest = self._latest
        if latest is not None and (self._sent is None or latest[0] > self._sent):
            await self._send(*latest)

    async def _send(self, done: int, total: int | None) -> None:
        self._sent = done
        await self._report(done, total)


def _plain(value: Any) -> Any:
    """A schema as plain dicts and lists (the toolkit may hold read-only mappings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


async def serve_stdio(server: Server[Any]) -> None:
    """Serve `server` on stdin and stdout until the client closes stdin.

    While it serves, file descriptor 1 points at stderr (the `mcp` transport's doing), so a
    stray print cannot corrupt the protocol.
    """
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class OperatorToken:
    """The `mcp` package's `TokenVerifier` for the one bearer token the operator configured:
    compared in constant time, so a wrong guess learns nothing from how long it took."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def __repr__(self) -> str:
        return "OperatorToken(<hidden>)"

    async def verify_token(self, token: str) -> AccessToken | None:
        """The caller's access if `token` is the operator's, else None (a 401)."""
        if not hmac.compare_digest(token.encode("utf-8", "replace"), self._token):
            return None
        # The record keeps no copy of the secret: nothing downstream needs it.
        return AccessToken(token="operator-token", client_id="operator", scopes=[])


async def serve_http(
    server: Server[Any], *, host: str, port: int, token: str | None = None
) -> None:
    """Serve `server` as streamable HTTP on `http://host:port/mcp` until cancelled.

    With `token`, a request without `Authorization: Bearer <token>` is answered 401 with
    `WWW-Authenticate: Bearer` (the `mcp` package's resource-server middleware, over
    `OperatorToken`). No protected-resource metadata is served: a static token has no
    authorization server a client could be sent to. On a loopback host the `mcp` transport
    also refuses other `Host` and `Origin` headers (DNS rebinding), token or not.
    """
    import uvicorn
    from pydantic import AnyHttpUrl

    auth, verifier = None, None
    if token is not None:
        # `issuer_url` is required, but read only for an authorization server's routes and
        # the resource metadata, neither of which is served: no issuer is announced.
        where = f"[{host}]" if ":" in host else host
        auth = AuthSettings(
            issuer_url=AnyHttpUrl(f"http://{where}:{port}"), resource_server_url=None
        )
        verifier = OperatorToken(token)
    app = server.streamable_http_app(host=host, auth=auth, token_verifier=verifier)
    config = uvicorn.Config(app, host=host, port=port, log_level="info", access_log=False)
    await uvicorn.Server(config).serve()
