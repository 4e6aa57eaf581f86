"""Cancellation and shutdown: nothing half-written, nothing left open, nothing unreported.

Every operation is cancelled at seeded points (after the k-th progress callback or chunk, or
after a seeded tiny timeout); afterwards no temporary file exists, the old `dest` is intact,
no connection is held, the client still works with a single slot per host (so a leaked slot
would hang it), and the event loop reported nothing (no "Task exception was never
retrieved", no unclosed session). `aclose()` while transfers run fails each of them with a
sandboxkit exception. Replay a seed with `SANDBOXKIT_SEED=...`.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections.abc import AsyncIterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web

import sandboxkit
from sandboxkit._http.connections import Route
from sandboxkit._transfer.upload import READ_SIZE
from sandboxkit.emulator import Emulator, EmulatorResolver, Fault

from ..conftest import ScriptServer, json_answer
from ..reliability_support import (
    busy_connections,
    close_and_check,
    part_files,
    port_of,
    seed,
    settle,
)

LIMIT = 10
BASE_SEED = seed(20_240_601)
DATA = random.Random(BASE_SEED).randbytes(2 * 2**20)
CHUNK = 16 * 1024


pytestmark = pytest.mark.usefixtures("loop_reports")


@pytest.fixture
async def one_slot_client(clocked_emulator: Emulator) -> AsyncIterator[sandboxkit.Client]:
    """One slot per sandbox host: a slot leaked by a cancellation would hang the next call."""
    limits = sandboxkit.Limits(per_host_connections=1, control_plane_connections=1)
    async with clocked_emulator.client(retry=sandboxkit.RetryPolicy.no_delay(), limits=limits) as c:
        yield c


async def _box(emu: Emulator, client: sandboxkit.Client) -> sandboxkit.Sandbox:
    body = await emu.create_sandbox()
    root = emu.sandbox_root(body["data"]["sandbox_key"])
    (root / "home/user/data.bin").write_bytes(DATA)
    return client.sandbox_from_response(body)


def _cases(kinds: list[str], per_kind: int) -> list[tuple[str, int]]:
    return [(kind, BASE_SEED + n) for kind in kinds for n in range(per_kind)]


async def _check_still_works(sbx: sandboxkit.Sandbox, client: sandboxkit.Client) -> None:
    assert busy_connections(client) == 0, "a cancelled call still holds a connection"
    assert await sbx.files.read_bytes("/home/user/data.bin") == DATA


@pytest.mark.parametrize(
    ("kind", "case_seed"), _cases(["download", "iter_bytes", "upload", "read_bytes"], 6)
)
async def test_a_transfer_cancelled_at_a_seeded_point(
    clocked_emulator: Emulator,
    one_slot_client: sandboxkit.Client,
    tmp_path: Path,
    kind: str,
    case_seed: int,
) -> None:
    """Cancelled after a seeded number of chunks (or a seeded tiny timeout), sometimes amid
    retries, a transfer leaves no temporary file, an intact dest, and no held connection."""
    rng = random.Random(case_seed)
    note = f"{kind}, seed {case_seed} (replay: SANDBOXKIT_SEED={BASE_SEED})"
    sbx = await _box(clocked_emulator, one_slot_client)
    if rng.random() < 0.5:
        route = "files.upload" if kind == "upload" else "files.download"
        clocked_emulator.faults.script(
            route, Fault.cut(rng.randrange(len(DATA))), Fault.status(503)
        )
    dest = tmp_path / "dest.bin"
    dest.write_bytes(b"old")
    # Uploads report progress per piece of the source (READ_SIZE); downloads per chunk.
    pieces = -(-len(DATA) // READ_SIZE)
    stop_after = (
        rng.randint(1, pieces) if kind == "upload" else rng.randint(1, len(DATA) // CHUNK - 1)
    )
    calls = 0
    with anyio.fail_after(LIMIT):
        with anyio.CancelScope() as scope:

            def progress(done: int, total: int | None) -> None:
                nonlocal calls
                calls += 1
                if calls == stop_after:
                    scope.cancel()

            if kind == "download":
                await sbx.files.download(
                    "/home/user/data.bin", dest, chunk_size=CHUNK, progress=progress
                )
            elif kind == "upload":
                await sbx.files.upload("/home/user/up.bin", DATA, progress=progress)
            elif kind == "iter_bytes":
                async with sbx.files.iter_bytes("/home/user/data.bin", chunk_size=CHUNK) as it:
                    async for _ in it:
                        progress(0, None)
            else:
                scope.deadline = anyio.current_time() + rng.uniform(0, 0.02)
                await sbx.files.read_bytes("/home/user/data.bin")
        if kind != "read_bytes":  # its seeded deadline may fall after a quick read
            assert scope.cancelled_caught, note
        if kind == "download":  # the only kind that writes into tmp_path
            assert part_files(tmp_path) == [], note
            assert dest.read_bytes() == b"old", note
        await _check_still_works(sbx, one_slot_client)
    await close_and_check(
        one_slot_client, [port_of(clocked_emulator.base_url), port_of(clocked_emulator.domain)]
    )


async def _create(c: sandboxkit.Client, emu: Emulator) -> Any:
    return await c.templates.create(
        name="t", resources=sandboxkit.CustomResources(2, 2048, 10240), build={"commands": ["x"]}
    )


CONTROL = ["templates.create", "builds", "build_logs", "v1.get", "v1.post"]


@pytest.mark.parametrize(("kind", "case_seed"), _cases(CONTROL, 3))
async def test_control_plane_calls_cancelled_at_seeded_times(
    clocked_emulator: Emulator, one_slot_client: sandboxkit.Client, kind: str, case_seed: int
) -> None:
    """A control-plane call cancelled after a seeded tiny timeout, amid faults and retries,
    either completed or was cancelled; it never holds a connection and the client works on."""
    rng = random.Random(case_seed)
    created = await _create(one_slot_client, clocked_emulator)
    clocked_emulator.add_builds(created.id, 30)
    routes = {
        "templates.create": "templates.create",
        "builds": "builds.list",
        "build_logs": "builds.logs",
        "v1.get": "v1.organizations.get",
        "v1.post": "v1.api_keys.create",
    }
    with anyio.fail_after(LIMIT):
        for _ in range(8):
            clocked_emulator.faults.script(
                routes[kind], rng.choice([Fault.status(503), Fault.cut(5), Fault.delay(0.002)])
            )
            with anyio.move_on_after(rng.uniform(0, 0.004)) as scope:
                if kind == "templates.create":
                    await _create(one_slot_client, clocked_emulator)
                elif kind == "builds":
                    [b async for b in one_slot_client.templates.builds(created.id, page_size=3)]
                elif kind == "build_logs":
                    async with one_slot_client.templates.build_logs(
                        created.id, created.build_id, limit=1
                    ) as entries:
                        [e async for e in entries]
                elif kind == "v1.get":
                    await one_slot_client.v1.get_organization(clocked_emulator.org_id)
                else:
                    # Never retried (docs/design.md section 5): its injected fault
                    # surfaces, as it should.
                    with suppress(
                        sandboxkit.ServiceUnavailableError, sandboxkit.APIConnectionError
                    ):
                        await one_slot_client.v1.create_api_key(clocked_emulator.org_id, "k")
            del scope
            clocked_emulator.faults.clear()
            assert busy_connections(one_slot_client) == 0, f"seed {case_seed}"
        assert (await one_slot_client.v1.get_organization(clocked_emulator.org_id)).name
    await close_and_check(
        one_slot_client, [port_of(clocked_emulator.base_url), port_of(clocked_emulator.domain)]
    )


async def test_cancellation_during_a_retry_wait_is_not_swallowed(
    clocked_emulator: Emulator, one_slot_client: sandboxkit.Client
) -> None:
    """A call cancelled while it waits to retry stops at once: no further request, no
    swallowed cancellation."""
    one_slot_client._calls.policy = sandboxkit.RetryPolicy(initial_backoff=30, max_backoff=30)
    one_slot_client._calls.rand = lambda: 1.0  # the full 30 s backoff
    clocked_emulator.faults.script("v1.organizations.get", Fault.status(503))
    started = time.monotonic()
    with anyio.move_on_after(0.1) as scope:
        await one_slot_client.v1.get_organization(clocked_emulator.org_id)
    assert scope.cancelled_caught and time.monotonic() - started < 5
    assert len(clocked_emulator.journal_for("v1.organizations.get")) == 1


async def test_an_abandoned_stream_is_finalized_quietly(
    clocked_emulator: Emulator, one_slot_client: sandboxkit.Client
) -> None:
    """A stream left mid-file without `aclose()` is finalized by the loop: its connection
    is released and no task exception goes unretrieved."""
    sbx = await _box(clocked_emulator, one_slot_client)
    stream = sbx.files.iter_bytes("/home/user/data.bin", chunk_size=CHUNK)
    assert len(await stream.__anext__()) > 0
    del stream
    gc.collect()
    assert await settle(lambda: busy_connections(one_slot_client) == 0, rounds=200)
    await _check_still_works(sbx, one_slot_client)


class Stalled:
    """A scripted server whose answers stall midway until `release` is set (an upload
    stalls in its own source, since the scripted server reads a body before answering)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.arrived: dict[str, asyncio.Event] = {}

    def mark(self, name: str) -> None:
        self.arrived.setdefault(name, asyncio.Event()).set()

    async def wait(self, *names: str) -> None:
        for name in names:
            await self.arrived.setdefault(name, asyncio.Event()).wait()

    async def download(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Accept-Ranges": "bytes"})
        response.content_length = len(DATA)
        await response.prepare(request)
        await response.write(DATA[: 4 * CHUNK])
        self.mark(f"download:{request.query.get('path')}")
        await self.release.wait()
        return response  # the connection is gone by now

    async def control(self, request: web.Request) -> web.StreamResponse:
        self.mark("control")
        await self.release.wait()
        return json_answer({"request_id": "r", "total": 0, "page": 1, "page_size": 20, "items": []})

    async def upload(self, request: web.Request) -> web.StreamResponse:
        return json_answer([{"path": "/u", "name": "u", "type": "file"}])


async def test_aclose_while_transfers_run_fails_them_cleanly(
    script_server: ScriptServer, tmp_path: Path
) -> None:
    """`aclose()` with a download, read_bytes, iter_bytes, upload and control-plane call in
    flight ends every one with a sandboxkit exception, removes the temporary file, and
    leaves no socket open."""
    stalled = Stalled()
    script_server.always("GET", "/files", stalled.download)
    script_server.always("GET", "/api/v2/templates/t/builds", stalled.control)
    script_server.always("POST", "/files", stalled.upload)
    port = script_server.url.rsplit(":", 1)[1]
    client = sandboxkit.Client(
        api_key="sk-key",
        base_url=script_server.url,
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        retry=sandboxkit.RetryPolicy.no_delay(),
    )
    sbx = client.sandbox(sandbox_key="s", domain=f"sandbox.test:{port}", access_token="tok")
    outcomes: dict[str, BaseException | None] = {}
    streaming = asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        stalled.mark("upload")  # the body is being sent; the server is reading it
        yield b"first chunk"
        await stalled.release.wait()
        yield b"never sent"

    async def run(name: str, call: Any) -> None:
        try:
            await call()
            outcomes[name] = None
        except Exception as exc:
            outcomes[name] = exc

    async def consume() -> None:
        async with sbx.files.iter_bytes("/c", chunk_size=CHUNK) as chunks:
            async for _ in chunks:
                streaming.set()

    try:
        await _race_aclose(client, sbx, stalled, tmp_path, run, consume, source, streaming)
    except TimeoutError:
        raise AssertionError(f"a call outlived aclose(); these ended: {outcomes}") from None
    finally:
        stalled.release.set()  # let the server's handlers end, whatever happened
    assert set(outcomes) == {"download", "read_bytes", "iter_bytes", "upload", "builds"}

    for name, outcome in outcomes.items():
        assert isinstance(outcome, sandboxkit.SandboxKitError), (name, repr(outcome))
    assert part_files(tmp_path) == [] and not (tmp_path / "a.bin").exists()
    await close_and_check(client, [int(port)])


async def _race_aclose(
    client: sandboxkit.Client,
    sbx: sandboxkit.Sandbox,
    stalled: Stalled,
    tmp_path: Path,
    run: Any,
    consume: Any,
    source: Any,
    streaming: asyncio.Event,
) -> None:
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "download", lambda: sbx.files.download("/a", tmp_path / "a.bin"))
            tg.start_soon(run, "read_bytes", lambda: sbx.files.read_bytes("/b"))
            tg.start_soon(run, "iter_bytes", consume)
            tg.start_soon(run, "upload", lambda: sbx.files.upload("/u", source()))
            tg.start_soon(run, "builds", lambda: _all(client.templates.builds("t")))
            await stalled.wait("download:/a", "download:/b", "download:/c", "upload", "control")
            await streaming.wait()
            assert len(part_files(tmp_path)) == 2  # the part and its sidecar
            await client.aclose()


async def _all(items: Any) -> list[Any]:
    return [item async for item in items]


@pytest.mark.parametrize("plane", ["data", "control"])
async def test_aclose_as_an_answer_head_arrives(
    clocked_emulator: Emulator,
    one_slot_client: sandboxkit.Client,
    monkeypatch: pytest.MonkeyPatch,
    plane: str,
) -> None:
    """When `aclose()` runs between an answer's head arriving and its body being read, the
    call ends in ClientStateError, not in aiohttp's bare RuntimeError or a hang."""
    sbx = await _box(clocked_emulator, one_slot_client)
    # A data-plane GET goes the lean way (`connections.Route`), the console's through
    # aiohttp's session.
    owner: Any = Route if plane == "data" else aiohttp.ClientSession
    name = "get" if plane == "data" else "_request"
    real = getattr(owner, name)

    async def racing(self: Any, *args: Any, **kwargs: Any) -> Any:
        response = await real(self, *args, **kwargs)
        await one_slot_client.aclose()  # the head is in; the body is not read yet
        return response

    monkeypatch.setattr(owner, name, racing)
    with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.ClientStateError):
        if plane == "data":
            await sbx.files.read_bytes("/home/user/data.bin")
        else:
            await one_slot_client.v1.get_organization(clocked_emulator.org_id)
    monkeypatch.undo()
    await close_and_check(
        one_slot_client, [port_of(clocked_emulator.base_url), port_of(clocked_emulator.domain)]
    )
