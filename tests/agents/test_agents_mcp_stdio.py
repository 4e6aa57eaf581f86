"""`sandboxkit mcp` as a real stdio subprocess (`python -m sandboxkit mcp --config f.toml`),
driven by the `mcp` package's client against an emulator mcp_served by this test's own loop."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import attrs
import httpx2
import mcp
import mcp_types as types
import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from sandboxkit.emulator import Emulator

from ..agents_mcp_support import answer, dumped, leaks

# No real wait: bounds on a child process that answers at once when it works.
PATIENCE = 60
DATA = bytes(range(256)) * 4096  # 1 MiB


@attrs.frozen
class Served:
    emulator: Emulator
    config: Path
    env: dict[str, str]
    home: Path
    workspace: Path
    secrets: tuple[str, ...]


@pytest.fixture
async def mcp_served(tmp_path: Path) -> AsyncIterator[Served]:
    """An emulator whose sandbox hosts are `*.localhost` (loopback to any process, no
    resolver needed), one sandbox, and a config naming it with its token in a variable."""
    async with Emulator(domain="localhost") as emu:
        body = await emu.create_sandbox()
        data = body["data"]
        token = data["sandbox_access_token"]
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        config = tmp_path / "mcp.toml"
        config.write_text(
            textwrap.dedent(
                f"""
                base_url = "{emu.base_url}"
                api_key_env = "EMU_API_KEY"
                data_plane_scheme = "http"
                workspace = "workspace"

                [sandboxes.dev]
                sandbox_key = "{data["sandbox_key"]}"
                domain = "{data["domain"]}"
                access_token_env = "DEV_TOKEN"
                """
            )
        )
        env = {"DEV_TOKEN": token, "EMU_API_KEY": emu.api_key}
        home = emu.sandbox_root(data["sandbox_key"]) / "home/user"
        yield Served(emu, config, env, home, workspace, (token, emu.api_key))


def command(mcp_served: Served) -> list[str]:
    return ["-m", "sandboxkit", "mcp", "--config", str(mcp_served.config)]


async def spawn(
    mcp_served: Served, *extra: str, stdin: int | None = None
) -> asyncio.subprocess.Process:
    """`sandboxkit mcp` (with `extra` arguments) as a child of this test's loop, which serves
    its emulator: output on pipes, and only the served variables and a PATH in its
    environment."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *command(mcp_served),
        *extra,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**mcp_served.env, "PATH": "/usr/bin:/bin"},
    )


async def test_the_stdio_server_serves_the_tools_and_never_shows_a_credential(
    mcp_served: Served, tmp_path: Path
) -> None:
    """Over a real stdio pipe: the tools are listed, a read, a write and a download work
    (with progress), an error is a result; and no result, notification or stderr line holds
    the sandbox token or the API key."""
    (mcp_served.home / "hello.txt").write_text("hello from the sandbox\n")
    (mcp_served.home / "big.bin").write_bytes(DATA)
    params = StdioServerParameters(
        command=sys.executable, args=command(mcp_served), env=mcp_served.env
    )
    received: list[Any] = []
    progress: list[float] = []

    async def keep(message: Any) -> None:
        received.append(message)

    async def count(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    stderr = tmp_path / "stderr.txt"
    with stderr.open("w+") as errlog, anyio.fail_after(PATIENCE):
        transport = stdio_client(params, errlog=errlog)
        async with mcp.Client(transport, message_handler=keep) as client:
            listed = await client.list_tools()
            received.append(listed)
            assert "download_file" in {tool.name for tool in listed.tools}
            read = await client.call_tool("read_file", {"sandbox": "dev", "remote": "hello.txt"})
            written = await client.call_tool(
                "write_file", {"sandbox": "dev", "remote": "new.txt", "content": "from the model"}
            )
            copied = await client.call_tool(
                "download_file",
                {"sandbox": "dev", "remote": "big.bin", "dest": "big.bin"},
                progress_callback=count,
            )
            missing = await client.call_tool("read_file", {"sandbox": "dev", "remote": "nope.txt"})
            received += [read, written, copied, missing]
    assert not read.is_error and read.structured_content["content"] == "hello from the sandbox\n"
    assert not written.is_error and (mcp_served.home / "new.txt").read_text() == "from the model"
    assert not copied.is_error and (mcp_served.workspace / "big.bin").read_bytes() == DATA
    assert missing.is_error and answer(missing)["code"] == "not_found"
    assert progress and progress == sorted(progress)
    log = stderr.read_text()
    assert "sandboxkit mcp: serving" in log and "for sandboxes dev" in log
    assert leaks([*dumped(received), log], mcp_served.secrets) == []


async def _exchange(process: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    await process.stdin.drain()


async def test_stdout_carries_only_protocol_and_eof_ends_the_server(mcp_served: Served) -> None:
    """Every line the server writes on stdout is a JSON-RPC message, its notes go to stderr,
    and closing stdin ends it with status 0."""
    process = await spawn(mcp_served, stdin=asyncio.subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    hello = {
        "protocolVersion": LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    with anyio.fail_after(PATIENCE):
        await _exchange(
            process, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        )
        first = json.loads(await process.stdout.readline())
        await _exchange(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "read_file", "arguments": {"sandbox": "dev", "remote": "../../../etc"}}
        await _exchange(
            process, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
        )
        second = json.loads(await process.stdout.readline())
        process.stdin.close()  # EOF: the client is gone (in-flight calls are cancelled)
        out, err = await process.communicate()
    lines = [first, second, *(json.loads(line) for line in out.decode().splitlines())]
    assert all(line["jsonrpc"] == "2.0" for line in lines)
    assert first["id"] == 1 and first["result"]["serverInfo"]["name"] == "sandboxkit"
    [reply] = [line for line in lines if line.get("id") == 2]
    result = types.CallToolResult.model_validate(reply["result"])
    assert result.is_error and answer(result)["code"] == "invalid_path"
    assert process.returncode == 0, err.decode()
    assert b"sandboxkit mcp: serving" in err


async def test_the_http_server_answers_on_loopback_and_refuses_a_foreign_host(
    mcp_served: Served,
) -> None:
    """`--transport http --port 0` serves /mcp on 127.0.0.1 (the port uvicorn prints), a
    tool call works over it, a request naming another Host is refused (DNS rebinding), and
    Ctrl-C stops it with 130; its log shows no credential."""
    (mcp_served.home / "hello.txt").write_text("over http")
    process = await spawn(mcp_served, "--transport", "http", "--port", "0")
    assert process.stderr is not None
    log: list[str] = []
    try:
        with anyio.fail_after(PATIENCE):
            found = None
            while found is None:
                line = (await process.stderr.readline()).decode()
                assert line, "".join(log)
                log.append(line)
                found = re.search(r"running on http://127\.0\.0\.1:(\d+)", line)
            url = f"http://127.0.0.1:{found.group(1)}/mcp"
            async with mcp.Client(url) as client:
                read = await client.call_tool(
                    "read_file", {"sandbox": "dev", "remote": "hello.txt"}
                )
            foreign = {"Host": "evil.example"}
            async with (
                aiohttp.ClientSession() as http,
                http.post(url, json={}, headers=foreign) as refused,
            ):
                assert refused.status == 421
            process.send_signal(signal.SIGINT)
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert not read.is_error and answer(read)["content"] == "over http"
    assert process.returncode == 130 and out == b""
    text = "".join(log) + err.decode()
    assert "sandboxkit mcp: serving" in text
    assert leaks([text, *dumped([read])], mcp_served.secrets) == []


BEARER = "operator-bearer-" + "7" * 32


async def test_the_http_server_requires_the_bearer_token_and_logs_failures_without_secrets(
    mcp_served: Served,
) -> None:
    """With SANDBOXKIT_MCP_TOKEN set, a request without the token or with a wrong one is
    401 with `WWW-Authenticate: Bearer`, a foreign Host with the right one is still refused,
    and the right one lists and calls the tools; a failed call is a WARNING line naming the
    tool and code; stderr never shows the bearer token, the sandbox token or the API key."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *command(mcp_served),
        "--transport",
        "http",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**mcp_served.env, "SANDBOXKIT_MCP_TOKEN": BEARER, "PATH": "/usr/bin:/bin"},
    )
    assert process.stderr is not None
    log: list[str] = []
    refusals: list[tuple[int, str | None]] = []
    try:
        with anyio.fail_after(PATIENCE):
            found = None
            while found is None:
                line = (await process.stderr.readline()).decode()
                assert line, "".join(log)
                log.append(line)
                found = re.search(r"running on http://127\.0\.0\.1:(\d+)", line)
            url = f"http://127.0.0.1:{found.group(1)}/mcp"
            hello = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": LATEST_HANDSHAKE_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
            accept = {"Accept": "application/json, text/event-stream"}
            async with aiohttp.ClientSession() as http:
                for headers in (
                    {},
                    {"Authorization": "Bearer " + "x" * len(BEARER)},
                    {"Authorization": "Basic " + BEARER},
                ):
                    async with http.post(url, json=hello, headers={**accept, **headers}) as got:
                        refusals.append((got.status, got.headers.get("WWW-Authenticate")))
                foreign = {**accept, "Authorization": f"Bearer {BEARER}", "Host": "evil.example"}
                async with http.post(url, json=hello, headers=foreign) as refused:
                    assert refused.status == 421
            authorized = httpx2.AsyncClient(headers={"Authorization": f"Bearer {BEARER}"})
            async with (
                authorized,
                mcp.Client(streamable_http_client(url, http_client=authorized)) as client,
            ):
                listed = await client.list_tools()
                missing = await client.call_tool("read_file", {"sandbox": "dev", "remote": "no"})
            process.send_signal(signal.SIGINT)
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    for status, challenge in refusals:
        assert status == 401 and challenge is not None and challenge.startswith("Bearer "), refusals
    assert "copy_status" in {tool.name for tool in listed.tools}
    assert missing.is_error and answer(missing)["code"] == "not_found"
    text = "".join(log) + err.decode()
    assert "(bearer token required)" in text
    assert "sandboxkit mcp: tool read_file failed: not_found (retryable: false)" in text
    assert leaks([text], [*mcp_served.secrets, BEARER]) == []
    assert process.returncode == 130 and out == b""
