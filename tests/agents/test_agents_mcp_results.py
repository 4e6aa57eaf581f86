"""What the MCP server answers at the 2026-07-28 revision: every tool's real result valid
against the `outputSchema` it lists (and the same JSON as text), errors as text only,
every failure logged for the operator, and clients of earlier revisions still served."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import jsonschema
import mcp
import mcp_types as types
import pytest
from mcp.client._memory import InMemoryTransport
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import JSONRPCNotification, JSONRPCRequest

import sandboxkit
from sandboxkit.agents import CopyHandles, Toolkit
from sandboxkit.agents._mcp import build_server
from sandboxkit.emulator import Emulator, ManualClock

from ..agents_mcp_support import GatedDataPlane, answer

# No real wait: a bound on waits for events a working server sets at once.
PATIENCE = 30
DATA = bytes(range(256)) * 64  # 16 KiB


@attrs.frozen
class Kit:
    toolkit: Toolkit
    workspace: Path
    home: Path


@pytest.fixture
async def every_kit(
    clocked_emulator: Emulator, manual_clock: ManualClock, tmp_path: Path
) -> AsyncIterator[Kit]:
    """Every tool over one sandboxed emulator whose client's sleeps move its clock (a build
    is waited for at once), with copy handles that a copy this small never needs."""

    async def clocked_sleep(delay: float) -> None:
        manual_clock.advance(delay)

    async with clocked_emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        client._calls.sleep = clocked_sleep
        client._calls.clock = manual_clock
        body = await clocked_emulator.create_sandbox()
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        sandboxes = {"dev": client.sandbox_from_response(body)}
        handles = CopyHandles(answer_within=PATIENCE)
        async with Toolkit(client, sandboxes, workspace=workspace, copy_handles=handles) as kit:
            home = clocked_emulator.sandbox_root(body["data"]["sandbox_key"]) / "home/user"
            yield Kit(kit, workspace, home)


async def finished(toolkit: Toolkit, copy_id: str) -> None:
    """Wait for the copy `copy_id` (a task of the toolkit's) to end."""
    task = toolkit._copies._copies[copy_id].task  # type: ignore[union-attr]
    assert task is not None
    with anyio.fail_after(PATIENCE):
        await asyncio.wait([task])


async def handle_results(
    client: sandboxkit.Client, workspace: Path
) -> list[tuple[str, dict[str, Any]]]:
    """The results of a copy answered by handle: the handle, its status running, done and
    cancelled, and cancel_copy's; over a data plane that holds the file's end."""
    plane = GatedDataPlane(DATA, sent=len(DATA) // 2)
    await plane.start()
    slow = client.sandbox(sandbox_key="slow", domain=f"localhost:{plane.port}", access_token="t")
    handles = CopyHandles(answer_within=0.001)
    seen: list[tuple[str, dict[str, Any]]] = []
    try:
        async with (
            Toolkit(client, {"slow": slow}, workspace=workspace, copy_handles=handles) as kit,
            mcp.Client(build_server(kit), mode="legacy") as session,
        ):

            async def call(name: str, **arguments: Any) -> dict[str, Any]:
                got = await session.call_tool(name, arguments)
                assert not got.is_error, got
                seen.append((name, answer(got)))
                return seen[-1][1]

            copy = {"sandbox": "slow", "remote": "a.bin", "dest": "slow/a.bin"}
            handle = await call("download_file", **copy)
            assert handle["state"] == "running"
            with anyio.fail_after(PATIENCE):
                await plane.stalled.wait()
            assert (await call("copy_status", copy_id=handle["copy_id"]))["state"] == "running"
            plane.release.set()
            await finished(kit, handle["copy_id"])
            done = await call("copy_status", copy_id=handle["copy_id"])
            assert done["state"] == "done" and done["result"]["bytes"] == len(DATA)
            plane.release.clear()
            second = await call("download_file", **{**copy, "dest": "slow/b.bin"})
            cancelled = await call("cancel_copy", copy_id=second["copy_id"])
            assert cancelled["state"] == "cancelled"
            await call("copy_status", copy_id=second["copy_id"])
    finally:
        await plane.stop()
    return seen


async def test_every_tool_answers_what_its_output_schema_says(
    every_kit: Kit, clocked_emulator: Emulator
) -> None:
    """Each tool, called for real over MCP, answers structuredContent that its listed
    outputSchema accepts (the client checks it too) and the same JSON as text; a result
    with a key more or one less is refused, so a schema drifting from the code fails."""
    (every_kit.workspace / "in.bin").write_bytes(DATA)
    (every_kit.home / "remote.bin").write_bytes(DATA[::-1])
    seen: list[tuple[str, dict[str, Any]]] = []
    async with mcp.Client(build_server(every_kit.toolkit), mode="legacy") as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}

        async def call(tool: str, /, **arguments: Any) -> dict[str, Any]:
            got = await session.call_tool(tool, arguments)
            assert not got.is_error, got
            seen.append((tool, answer(got)))
            return seen[-1][1]

        await call("list_sandboxes")
        await call("write_file", sandbox="dev", remote="notes.txt", content="héllo\n" * 10)
        whole = await call("read_file", sandbox="dev", remote="notes.txt")
        assert "hint" in await call("read_file", sandbox="dev", remote="notes.txt", length=8)
        edit = {"sandbox": "dev", "remote": "notes.txt", "old_text": "héllo", "new_text": "hi"}
        assert "diff" in await call("edit_file", **edit, replace_all=True, dry_run=True)
        await call("edit_file", **edit, replace_all=True, expected_sha256=whole["sha256"])
        await call("upload_file", sandbox="dev", source="in.bin", remote="copy.bin")
        await call("download_file", sandbox="dev", remote="remote.bin", dest="out.bin")
        created = await call(
            "create_template", name="t", cpu_count=1, memory_mb=512, disk_size_mb=1024,
            commands=["make"],
        )  # fmt: skip
        ids = {"template_id": created["template_id"], "build_id": created["build_id"]}
        assert (await call("wait_for_build", **ids, timeout=0.05))["finished"] is False
        assert (await call("wait_for_build", **ids))["finished"] is True
        await call("get_build", **ids)
        await call("read_build_logs", **ids, limit=1)
        await call("list_builds", template_id=created["template_id"], page_size=1)
    client = every_kit.toolkit._setup.client
    seen += await handle_results(client, every_kit.workspace)
    assert {name for name, _ in seen} == set(listed)
    for name, value in seen:
        schema = listed[name].output_schema
        assert schema is not None and schema == json.loads(
            json.dumps(next(t for t in every_kit.toolkit.tools if t.name == name).output_schema)
        )
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)
    read = next(value for name, value in seen if name == "read_file")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**read, "extra": 1}, listed["read_file"].output_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**read, "eof": None}, listed["read_file"].output_schema)
    smaller = {k: v for k, v in read.items() if k != "size"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(smaller, listed["read_file"].output_schema)


async def test_a_failure_is_text_only_and_logged_at_warning_with_tool_and_code(
    every_kit: Kit, caplog: pytest.LogCaptureFixture
) -> None:
    """An error result has isError, the error's JSON as text and no structuredContent (it
    is no result of the outputSchema); the operator's log gets one WARNING naming the tool
    and the code, and neither the model's arguments nor the message."""
    with caplog.at_level(logging.WARNING, logger="sandboxkit.agents"):
        async with mcp.Client(build_server(every_kit.toolkit), mode="legacy") as session:
            result = await session.call_tool(
                "read_file", {"sandbox": "dev", "remote": "secret-plan.txt"}
            )
    assert result.is_error and result.structured_content is None
    assert answer(result)["code"] == "not_found"
    [line] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert line.getMessage() == "tool read_file failed: not_found (retryable: false)"
    assert "secret-plan" not in caplog.text


def _request(number: int, method: str, params: dict[str, Any]) -> SessionMessage:
    return SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=number, method=method, params=params))


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
async def test_a_client_of_an_earlier_revision_lists_and_calls_tools(
    every_kit: Kit, version: str
) -> None:
    """A client that offers an earlier protocol version gets it back, the tools listed and
    a call answered as JSON text (what clients before structuredContent read)."""
    (every_kit.home / "hello.txt").write_text("hello")
    hello = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "old"}}
    hello["clientInfo"]["version"] = "1"
    call = {"name": "read_file", "arguments": {"sandbox": "dev", "remote": "hello.txt"}}
    replies: list[dict[str, Any]] = []
    with anyio.fail_after(PATIENCE):
        async with InMemoryTransport(build_server(every_kit.toolkit)) as (read, write):
            for number, method, params in [
                (1, "initialize", hello),
                (2, "tools/list", {}),
                (3, "tools/call", call),
            ]:
                await write.send(_request(number, method, params))
                reply = await read.receive()
                assert isinstance(reply, SessionMessage), reply
                replies.append(reply.message.model_dump(by_alias=True, exclude_none=True))
                if number == 1:
                    initialized = JSONRPCNotification(
                        jsonrpc="2.0", method="notifications/initialized"
                    )
                    await write.send(SessionMessage(initialized))
    initialized_reply, listed, called = (r["result"] for r in replies)
    assert initialized_reply["protocolVersion"] == version
    names = [tool["name"] for tool in listed["tools"]]
    assert names == [tool.name for tool in every_kit.toolkit.tools]
    # The server sends what the newest revision has (outputSchema, structuredContent) to
    # every client: fields a revision does not know are ignored by its clients.
    assert {"inputSchema", "outputSchema", "annotations"} <= set(listed["tools"][1])
    result = types.CallToolResult.model_validate(called)
    assert not result.is_error and answer(result)["content"] == "hello"
