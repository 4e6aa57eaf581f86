"""The MCP server (`sandboxkit.agents._mcp`) driven by the `mcp` package's own client, in
memory: over JSON-RPC (`legacy`, the wire a stdio or HTTP client speaks) and over the direct
in-process dispatcher (`auto`), against the emulator on loopback sockets."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import mcp
import mcp_types as types
import pytest

import sandboxkit
from sandboxkit.agents import Toolkit
from sandboxkit.agents._mcp import build_server, worth_sending
from sandboxkit.emulator import Emulator

from ..agents_mcp_support import StallingDataPlane, Watched, answer, dumped, leaks
from ..reliability_support import settle

SIZE = 2 * 2**20
DATA = random.Random(31).randbytes(SIZE)
# No real wait: a bound on a wait for an event that a working server sets at once.
PATIENCE = 30


@attrs.frozen
class Kit:
    emulator: Emulator
    toolkit: Toolkit
    workspace: Path
    home: Path  # the sandbox's /home/user on the emulator's disk
    key: str
    token: str


@pytest.fixture
async def mcp_kit(emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path) -> Kit:
    """A toolkit over one emulator sandbox (`dev`) with a local workspace."""
    body = await emulator.create_sandbox()
    data = body["data"]
    token = data["sandbox_access_token"]
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sandboxes = {"dev": emulator_client.sandbox_from_response(body)}
    toolkit = Toolkit(emulator_client, sandboxes, workspace=workspace)
    home = emulator.sandbox_root(data["sandbox_key"]) / "home/user"
    return Kit(emulator, toolkit, workspace, home, data["sandbox_key"], token)


def connect(source: Any, mode: str = "legacy", **options: Any) -> mcp.Client:
    """The `mcp` client of a server over `source`, in memory (JSON-RPC unless `mode`).

    Entered in each test's own body: the client's task group must be left by the task that
    entered it, which a pytest-asyncio fixture does not promise."""
    return mcp.Client(build_server(source), mode=mode, **options)


class Progress:
    """The progress notifications of one call, as the client's callback gets them."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None]] = []
        self.first = asyncio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total))
        self.first.set()

    async def reaches(self, size: int, *, at_least: int = 1) -> None:
        # Over JSON-RPC the client runs each callback in a task of its own, so the last
        # may come just after the result: let the loop turn, no wall-clock wait.
        assert await settle(lambda: bool(self.seen) and self.seen[-1][0] == size), self.seen
        counts = [done for done, _ in self.seen]
        assert counts == sorted(set(counts)), "progress must only grow"
        assert {total for _, total in self.seen} == {size}
        assert len(counts) >= at_least, counts


async def test_every_tool_is_listed_with_its_schema_and_hints(mcp_kit: Kit) -> None:
    """tools/list shows each toolkit tool with its title, description, inputSchema exactly as
    written, and its four hints as annotations."""
    async with connect(mcp_kit.toolkit) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert list(listed) == [tool.name for tool in mcp_kit.toolkit.tools]
        assert {
            "read_file",
            "write_file",
            "upload_file",
            "download_file",
            "create_template",
        } <= set(listed)
        for tool in mcp_kit.toolkit.tools:
            shown = listed[tool.name]
            assert (shown.title, shown.description) == (tool.title, tool.description)
            assert shown.input_schema == json.loads(json.dumps(tool.input_schema))
            assert shown.annotations == types.ToolAnnotations(
                title=tool.title,
                read_only_hint=tool.read_only,
                destructive_hint=tool.destructive,
                idempotent_hint=tool.idempotent,
                open_world_hint=tool.open_world,
            )
        assert listed["read_file"].annotations.read_only_hint is True  # type: ignore[union-attr]


async def test_a_write_then_a_read_answer_json(mcp_kit: Kit) -> None:
    """write_file puts the bytes in the sandbox (one upload request); read_file answers them
    as JSON text that is also the structuredContent."""
    async with connect(mcp_kit.toolkit) as session:
        text = "héllo, sandbox\n"
        written = await session.call_tool(
            "write_file", {"sandbox": "dev", "remote": "notes.txt", "content": text}
        )
        assert not written.is_error
        assert answer(written)["bytes_written"] == len(text.encode())
        assert (mcp_kit.home / "notes.txt").read_bytes() == text.encode()
        assert len(mcp_kit.emulator.journal_for("files.upload")) == 1
        read = await session.call_tool("read_file", {"sandbox": "dev", "remote": "notes.txt"})
        assert not read.is_error
        page = answer(read)
        assert (page["content"], page["eof"], page["remote"]) == (
            text,
            True,
            "/home/user/notes.txt",
        )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_copies_send_progress_notifications(mcp_kit: Kit, mode: str) -> None:
    """upload_file and download_file move 2 MiB each way, and the client's progressToken
    gets growing counts that end at the file's size."""
    (mcp_kit.workspace / "in.bin").write_bytes(DATA)
    async with connect(mcp_kit.toolkit, mode) as client:
        up = Progress()
        sent = await client.call_tool(
            "upload_file",
            {"sandbox": "dev", "source": "in.bin", "remote": "copy.bin"},
            progress_callback=up,
        )
        assert answer(sent)["bytes"] == SIZE
        await up.reaches(SIZE)  # the SDK reads 4 MiB at once: one count, the end
        assert (mcp_kit.home / "copy.bin").read_bytes() == DATA

        (mcp_kit.home / "remote.bin").write_bytes(DATA[::-1])
        down = Progress()
        got = await client.call_tool(
            "download_file",
            {"sandbox": "dev", "remote": "remote.bin", "dest": "out/remote.bin"},
            progress_callback=down,
        )
        result = answer(got)
        await down.reaches(SIZE, at_least=2)  # the SDK tells each piece that comes
    assert (mcp_kit.workspace / "out/remote.bin").read_bytes() == DATA[::-1]
    assert result["sha256"] == hashlib.sha256(DATA[::-1]).hexdigest()


@pytest.mark.usefixtures("loop_reports")
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_cancelled_download_stops_mid_body_and_leaves_no_partial_file(
    mcp_kit: Kit, emulator_client: sandboxkit.Client, mode: str
) -> None:
    """Cancelling the request while the body is half there cancels the transfer's task on
    the server, and the workspace holds nothing afterwards (no file, no partial)."""
    plane = StallingDataPlane(size=SIZE, sent=SIZE // 4)
    await plane.start()
    try:
        slow = emulator_client.sandbox(
            sandbox_key="slow", domain=f"localhost:{plane.port}", access_token="t"
        )
        toolkit = Watched(Toolkit(emulator_client, {"slow": slow}, workspace=mcp_kit.workspace))
        async with connect(toolkit, mode) as client:
            progress = Progress()
            call = asyncio.create_task(
                client.call_tool(
                    "download_file",
                    {"sandbox": "slow", "remote": "big.bin", "dest": "big.bin"},
                    progress_callback=progress,
                )
            )
            with anyio.fail_after(PATIENCE):
                await plane.stalled.wait()
                await progress.first.wait()
            # Mid-body: the SDK's partial file is there, the file is not.
            assert [p.name for p in mcp_kit.workspace.iterdir()] != []
            assert not (mcp_kit.workspace / "big.bin").exists()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            with anyio.fail_after(PATIENCE):
                await toolkit.ended.wait()
                await plane.closed.wait()
        assert toolkit.outcomes == [asyncio.CancelledError]
        assert list(mcp_kit.workspace.iterdir()) == []
        assert len(plane.heads) == 1 and plane.heads[0].startswith(b"GET /files?")
        assert 0 < progress.seen[-1][0] < SIZE
    finally:
        await plane.stop()


async def test_a_tool_error_is_a_result_with_is_error_and_its_code(mcp_kit: Kit) -> None:
    """A ToolError is a tool result (isError, the error's JSON as text and structured), not a
    protocol error: the model reads the code and whether to retry."""
    async with connect(mcp_kit.toolkit) as session:
        cases = [
            ({"sandbox": "dev", "remote": "missing.txt"}, "not_found"),
            ({"sandbox": "prod", "remote": "a.txt"}, "unknown_sandbox"),
            ({"sandbox": "dev", "remote": "../../etc/passwd"}, "invalid_path"),
            ({"sandbox": "dev", "remote": "a.txt", "offset": -1}, "invalid_argument"),
        ]
        for arguments, code in cases:
            result = await session.call_tool("read_file", arguments)
            assert result.is_error, arguments
            error = answer(result)
            assert set(error) == {"code", "message", "retryable"}
            assert (error["code"], error["retryable"]) == (code, False), error


async def test_an_unknown_tool_is_a_protocol_error(mcp_kit: Kit) -> None:
    """A tool name the server never listed is JSON-RPC's invalid params, as MCP says."""
    async with connect(mcp_kit.toolkit) as session:
        with pytest.raises(mcp.MCPError) as caught:
            await session.call_tool("rm_rf", {})
        assert caught.value.code == types.INVALID_PARAMS
        assert "rm_rf" in caught.value.message


async def test_an_unexpected_exception_is_an_internal_result_logged(
    mcp_kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception outside the toolkit's contract is an `internal` result with a generic
    message; the server's log names its type and where it was raised, never its text (which
    may quote a credential), as the toolkit's own log does."""

    class Broken:
        tools = mcp_kit.toolkit.tools

        async def call(self, name: str, arguments: Mapping[str, Any], *, progress: Any) -> Any:
            raise RuntimeError(f"detail that quotes {secret}")

    secret = "sat-" + "secret"  # the log's source lines show the name, never the value

    with caplog.at_level(logging.ERROR, logger="sandboxkit.agents.mcp"):
        async with connect(Broken()) as client:
            result = await client.call_tool("list_sandboxes", {})
    error = answer(result)
    assert result.is_error and error["code"] == "internal"
    assert "detail" not in json.dumps(error)
    assert "builtins.RuntimeError" in caplog.text and "in call" in caplog.text
    assert "sat-secret" not in caplog.text


async def test_no_result_or_notification_shows_a_credential(mcp_kit: Kit) -> None:
    """Whatever the server sends (results, errors after a refused token, progress) carries
    neither the sandbox's token nor the API key."""
    received: list[Any] = []

    async def keep(message: Any) -> None:
        received.append(message)

    (mcp_kit.workspace / "in.bin").write_bytes(DATA)
    async with connect(mcp_kit.toolkit, message_handler=keep) as client:
        received.append(await client.list_tools())
        calls: list[tuple[str, dict[str, Any]]] = [
            ("list_sandboxes", {}),
            ("write_file", {"sandbox": "dev", "remote": "a.txt", "content": "x"}),
            ("read_file", {"sandbox": "dev", "remote": "a.txt"}),
            ("upload_file", {"sandbox": "dev", "source": "in.bin", "remote": "b.bin"}),
            ("create_template", {"name": "x"}),
        ]
        for name, arguments in calls:
            received.append(await client.call_tool(name, arguments, progress_callback=Progress()))
        mcp_kit.emulator.expire_token(mcp_kit.key)
        refused = await client.call_tool("read_file", {"sandbox": "dev", "remote": "a.txt"})
        assert answer(refused)["code"] == "authentication_failed"
        received.append(refused)
    assert any(isinstance(m, types.ServerNotification) for m in received)
    secrets = [mcp_kit.token, mcp_kit.emulator.api_key]
    assert leaks(dumped(received), secrets) == []


WORTH_SENDING = [
    # done, total, sent, worth it
    (0, 100, None, False),  # nothing moved
    (1, 100, None, True),  # 1 % of 100
    (5, 1000, None, False),  # under 1 %
    (10, 1000, None, True),
    (15, 1000, 10, False),  # 0.5 % more
    (20, 1000, 10, True),
    (1000, 1000, 995, True),  # the end is always told
    (0, 0, None, True),  # an empty file's end
    (5, 1000, 900, False),  # a restart counts from 0 again: never told going back
    (900, 1000, 900, False),  # the same count twice
    (2**20 - 1, None, None, False),  # unknown total: one per MiB
    (2**20, None, None, True),
    (2**21, None, 2**20, True),
]


@pytest.mark.parametrize(("done", "total", "sent", "worth"), WORTH_SENDING)
def test_progress_is_sent_growing_and_about_a_hundred_times_at_most(
    done: int, total: int | None, sent: int | None, worth: bool
) -> None:
    """A count is told when it grows by 1 % of the total (1 MiB when unknown) or ends it."""
    assert worth_sending(done, total, sent) is worth
