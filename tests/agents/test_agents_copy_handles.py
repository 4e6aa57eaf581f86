"""Copies that outlast a client's patience (`CopyHandles`): the first call answers at once
with a handle, `copy_status` follows it, `cancel_copy` stops it leaving nothing behind, and
the handles are bounded, unguessable, forgotten in time and ended with the toolkit."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest

import sandboxkit
from sandboxkit.agents import CopyHandles, ToolError, Toolkit
from sandboxkit.agents._mcp import build_server
from sandboxkit.emulator import Emulator

from ..agents_mcp_support import ChokedRelay, StallingDataPlane, answer
from ..reliability_support import busy_connections, port_of

GIB = 1 << 30
MIB = 1 << 20
# No real wait: a bound on waits for events a working server sets at once.
PATIENCE = 30


@pytest.fixture
async def slow_plane() -> AsyncIterator[StallingDataPlane]:
    """A data plane serving a 1 GiB file whose first MiB comes, then nothing more: a link
    too slow for any client's patience, with no gigabyte moved."""
    plane = StallingDataPlane(size=GIB, sent=MIB)
    await plane.start()
    try:
        yield plane
    finally:
        await plane.stop()


def slow_sandbox(client: sandboxkit.Client, plane: StallingDataPlane) -> sandboxkit.Sandbox:
    return client.sandbox(sandbox_key="slow", domain=f"localhost:{plane.port}", access_token="t")


async def status_until(
    session: mcp.Client, copy_id: str, done: int
) -> dict[str, Any]:  # pragma: no cover - returns on the first turns when it works
    """copy_status, asked again (a tiny pause between) until `done` bytes are told."""
    with anyio.fail_after(PATIENCE):
        while True:
            status = answer(await session.call_tool("copy_status", {"copy_id": copy_id}))
            if status["bytes_done"] >= done or status["state"] != "running":
                return status
            await asyncio.sleep(0.01)


async def test_a_slow_1_gib_download_answers_a_handle_within_2_s_then_follows_and_cancels(
    emulator_client: sandboxkit.Client, slow_plane: StallingDataPlane, tmp_path: Path
) -> None:
    """Over MCP, with the default CopyHandles: a 1 GiB download on a stalled link answers
    its first call within 2 s with a copy_id; copy_status shows bytes of 1 GiB; cancel_copy
    stops it, the data plane sees the connection closed, no partial file is left and the
    dest that was there is as it was."""
    (tmp_path / "big.bin").write_bytes(b"the old file")
    slow = slow_sandbox(emulator_client, slow_plane)
    async with (
        Toolkit(
            emulator_client, {"slow": slow}, workspace=tmp_path, copy_handles=CopyHandles()
        ) as kit,
        mcp.Client(build_server(kit), mode="legacy") as session,
    ):
        started = time.monotonic()
        first = await session.call_tool(
            "download_file", {"sandbox": "slow", "remote": "big.bin", "dest": "big.bin"}
        )
        took = time.monotonic() - started
        handle = answer(first)
        assert not first.is_error and took < 2, took
        assert handle["state"] == "running" and handle["tool"] == "download_file"
        status = await status_until(session, handle["copy_id"], MIB)
        assert (status["state"], status["bytes_done"], status["total"]) == ("running", MIB, GIB)
        assert (status["result"], status["error"]) == (None, None)
        assert len(os.listdir(tmp_path)) > 1  # the old file, the SDK's partial file...
        cancelled = answer(await session.call_tool("cancel_copy", {"copy_id": handle["copy_id"]}))
        assert cancelled["state"] == "cancelled"
        with anyio.fail_after(PATIENCE):
            await slow_plane.closed.wait()
        again = answer(await session.call_tool("copy_status", {"copy_id": handle["copy_id"]}))
        assert again["state"] == "cancelled"
    assert os.listdir(tmp_path) == ["big.bin"]
    assert (tmp_path / "big.bin").read_bytes() == b"the old file"
    assert len(slow_plane.heads) == 1


async def test_a_slow_1_gib_upload_answers_a_handle_and_cancel_leaves_the_sandbox_file(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """An upload of a sparse 1 GiB file over a link that stalls after 1 MiB answers a
    handle within 2 s; cancel_copy stops it, and once the link is gone the sandbox file is
    as it was (the service replaces a file only once the upload's request has all come)."""
    body = await emulator.create_sandbox()
    data = body["data"]
    home = emulator.sandbox_root(data["sandbox_key"]) / "home/user"
    (home / "big.bin").write_bytes(b"the old file")
    with (tmp_path / "big.bin").open("wb") as sparse:
        sparse.truncate(GIB)  # no disk: a hole
    relay = ChokedRelay(port_of(emulator.domain), allowed=MIB)
    await relay.serve()
    relayed = f"{emulator.domain.rsplit(':', 1)[0]}:{relay.port}"
    sandbox = emulator_client.sandbox(
        sandbox_key=data["sandbox_key"], domain=relayed, access_token=data["sandbox_access_token"]
    )
    try:
        async with (
            Toolkit(
                emulator_client, {"dev": sandbox}, workspace=tmp_path, copy_handles=CopyHandles()
            ) as kit,
            mcp.Client(build_server(kit), mode="legacy") as session,
        ):
            started = time.monotonic()
            first = await session.call_tool(
                "upload_file", {"sandbox": "dev", "source": "big.bin", "remote": "big.bin"}
            )
            took = time.monotonic() - started
            handle = answer(first)
            assert handle["state"] == "running" and took < 2, (handle, took)
            with anyio.fail_after(PATIENCE):
                await relay.choked.wait()
            status = answer(await session.call_tool("copy_status", {"copy_id": handle["copy_id"]}))
            assert status["state"] == "running" and status["total"] in (None, GIB)
            cancelled = answer(
                await session.call_tool("cancel_copy", {"copy_id": handle["copy_id"]})
            )
            assert cancelled["state"] == "cancelled"
            assert busy_connections(emulator_client) == 0  # the request is given up
    finally:
        await relay.refuse()
    assert len(emulator.journal_for("files.upload")) == 1
    assert (home / "big.bin").read_bytes() == b"the old file"


async def test_a_copy_done_in_time_answers_its_result_and_keeps_no_handle(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """A copy that ends within answer_within answers the tool's own result (no copy_id),
    as without handles, and leaves nothing to follow."""
    body = await emulator.create_sandbox()
    (tmp_path / "a.txt").write_bytes(b"abc")
    sandboxes = {"dev": emulator_client.sandbox_from_response(body)}
    handles = CopyHandles(answer_within=PATIENCE)
    async with Toolkit(emulator_client, sandboxes, workspace=tmp_path, copy_handles=handles) as kit:
        result = await kit.call("upload_file", {"sandbox": "dev", "source": "a.txt", "remote": "a"})
        assert result == {"sandbox": "dev", "source": "a.txt", "remote": "/home/user/a", "bytes": 3}
        assert kit._copies is not None and kit._copies._copies == {}


async def handle_of(kit: Toolkit, plane: StallingDataPlane, dest: str) -> str:
    result = await kit.call("download_file", {"sandbox": "slow", "remote": "f", "dest": dest})
    assert result["state"] == "running"
    copy_id: str = result["copy_id"]
    return copy_id


async def test_handles_are_bounded_unguessable_and_forgotten_in_time(
    emulator_client: sandboxkit.Client, slow_plane: StallingDataPlane, tmp_path: Path
) -> None:
    """A copy past max_running is refused (rate_limited, retryable, nothing sent); ids are
    128 random bits; an unknown id is not_found; a finished copy is forgotten past keep_for,
    and past max_kept newer ones."""
    handles = CopyHandles(answer_within=0.001, max_running=2, max_kept=1, keep_for=60)
    slow = slow_sandbox(emulator_client, slow_plane)
    async with Toolkit(
        emulator_client, {"slow": slow}, workspace=tmp_path, copy_handles=handles
    ) as kit:
        assert kit._copies is not None
        now = [0.0]
        kit._copies._clock = lambda: now[0]
        # Each copy's request reaches the server (and stalls there) before the next step:
        # a handle answers within 1 ms, before its GET is even sent, and a copy cancelled
        # then would send none (under uvloop, now and then).
        handled = []
        for name in ("a", "b"):
            handled.append(await handle_of(kit, slow_plane, name))
            with anyio.fail_after(10):
                await slow_plane.stalled.wait()
            slow_plane.stalled.clear()
        first, second = handled
        assert first != second
        assert all(re.fullmatch(r"copy_[A-Za-z0-9_-]{22}", i) for i in (first, second))
        with pytest.raises(ToolError) as refused:
            await kit.call("download_file", {"sandbox": "slow", "remote": "f", "dest": "c"})
        assert (refused.value.code, refused.value.retryable) == ("rate_limited", True)
        with pytest.raises(ToolError) as unknown:
            await kit.call("copy_status", {"copy_id": "copy_" + "A" * 22})
        assert unknown.value.code == "not_found"
        await kit.call("cancel_copy", {"copy_id": first})
        now[0] = 1.0
        await kit.call("cancel_copy", {"copy_id": second})
        # max_kept=1: the older of two finished copies is forgotten.
        with pytest.raises(ToolError):
            await kit.call("copy_status", {"copy_id": first})
        assert (await kit.call("copy_status", {"copy_id": second}))["state"] == "cancelled"
        now[0] = 1.0 + 60.5
        with pytest.raises(ToolError) as expired:
            await kit.call("copy_status", {"copy_id": second})
        assert expired.value.code == "not_found"
    assert len(slow_plane.heads) == 2


async def test_closing_the_toolkit_cancels_its_copies_and_leaves_no_partial_file(
    emulator_client: sandboxkit.Client, slow_plane: StallingDataPlane, tmp_path: Path
) -> None:
    """aclose cancels a copy under way and waits for its cleanup: the workspace is empty
    after, the data plane's connection closed."""
    slow = slow_sandbox(emulator_client, slow_plane)
    kit = Toolkit(
        emulator_client, {"slow": slow}, workspace=tmp_path, copy_handles=CopyHandles(0.001)
    )
    await handle_of(kit, slow_plane, "big.bin")
    with anyio.fail_after(PATIENCE):
        await slow_plane.stalled.wait()
    await kit.aclose()
    assert os.listdir(tmp_path) == []
    with anyio.fail_after(PATIENCE):
        await slow_plane.closed.wait()


async def test_a_call_cancelled_before_it_answers_cancels_its_copy(
    emulator_client: sandboxkit.Client, slow_plane: StallingDataPlane, tmp_path: Path
) -> None:
    """Cancelling the call while it waits to answer cancels the copy (nobody holds a
    handle to it) and waits for its cleanup."""
    slow = slow_sandbox(emulator_client, slow_plane)
    handles = CopyHandles(answer_within=PATIENCE)
    async with Toolkit(
        emulator_client, {"slow": slow}, workspace=tmp_path, copy_handles=handles
    ) as kit:
        call = asyncio.create_task(
            kit.call("download_file", {"sandbox": "slow", "remote": "f", "dest": "big.bin"})
        )
        with anyio.fail_after(PATIENCE):
            await slow_plane.stalled.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert os.listdir(tmp_path) == []
        assert kit._copies is not None and kit._copies._copies == {}


async def test_a_copy_failing_after_its_handle_is_told_by_copy_status_and_logged(
    emulator: Emulator,
    slow_plane: StallingDataPlane,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A copy that fails after answering its handle is `failed` in copy_status with the
    error a direct call would raise, and a WARNING names the tool and the code."""
    async with emulator.client(retry=sandboxkit.RetryPolicy.none()) as client:
        slow = slow_sandbox(client, slow_plane)
        handles = CopyHandles(answer_within=0.001)
        with caplog.at_level(logging.WARNING, logger="sandboxkit.agents"):
            async with Toolkit(
                client, {"slow": slow}, workspace=tmp_path, copy_handles=handles
            ) as kit:
                copy_id = await handle_of(kit, slow_plane, "big.bin")
                with anyio.fail_after(PATIENCE):
                    await slow_plane.stalled.wait()
                await slow_plane.stop()  # the link breaks mid-body
                assert kit._copies is not None
                task = kit._copies._copies[copy_id].task
                assert task is not None
                with anyio.fail_after(PATIENCE):
                    await asyncio.wait([task])
                status = await kit.call("copy_status", {"copy_id": copy_id})
    assert status["state"] == "failed" and status["result"] is None
    assert status["error"]["code"] == "unavailable"
    assert "tool download_file failed in the background: unavailable" in caplog.text


# A program that starts a long copy through a toolkit, gets its handle and ends, closing
# neither the toolkit nor its client (asyncio.run cancels what still runs).
FORGOTTEN_COPY = """
import asyncio, sys
from pathlib import Path
import sandboxkit
from sandboxkit.agents import CopyHandles, Toolkit

async def main(workspace: Path, port: str) -> None:
    client = sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:9", data_plane_scheme="http")
    slow = client.sandbox(sandbox_key="slow", domain=f"localhost:{port}", access_token="t")
    handles = CopyHandles(answer_within=0.2)
    kit = Toolkit(client, {"slow": slow}, workspace=workspace, copy_handles=handles)
    asked = {"sandbox": "slow", "remote": "big.bin", "dest": "big.bin"}
    handle = await kit.call("download_file", asked)
    print(handle["state"], sorted(p.name for p in workspace.iterdir()), flush=True)

asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
"""


async def test_a_program_that_ends_with_a_copy_running_leaves_no_part_and_dest_as_it_was(
    slow_plane: StallingDataPlane, tmp_path: Path
) -> None:
    """Exit without closing: the running copy is cancelled with the program's loop, its
    partial file and sidecar are removed, `dest` keeps its old bytes, the data plane sees
    the connection closed; stderr says only that the client was never closed."""
    (tmp_path / "big.bin").write_bytes(b"the old file")
    with anyio.fail_after(PATIENCE):
        program = [sys.executable, "-X", "dev", "-c", FORGOTTEN_COPY]
        done = await anyio.run_process([*program, str(tmp_path), str(slow_plane.port)], check=False)
        await slow_plane.closed.wait()
    out, err = done.stdout.decode(), done.stderr.decode()
    assert (done.returncode, out) == (
        0,
        "running ['.big.bin.part', '.big.bin.part.json', 'big.bin']\n",
    ), err
    assert os.listdir(tmp_path) == ["big.bin"]
    assert (tmp_path / "big.bin").read_bytes() == b"the old file"
    assert "sandboxkit.Client was never closed" in err
    assert "Traceback" not in err and "Task was destroyed" not in err
