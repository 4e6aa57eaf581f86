"""Every operation x every fault -> the documented outcome, with nothing left behind.

One table: each operation (templates.create, builds paging, build logs, download, upload and
a v1 GET, DELETE and POST) meets each fault (retryable and final statuses, refused and cut
connections, a read timeout, and bodies that are not what the interface shows). The outcome
is docs/design.md sections 5 and 7: an idempotent operation is retried to success, anything
else surfaces as its exception class. After every case: no temporary file, no connection
held before `aclose()`, and no client socket after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import sandboxkit
from sandboxkit.emulator import Emulator, Fault, ManualClock

from ..reliability_support import close_and_check, part_files, port_of, refused_port

DATA = bytes(range(256)) * 1200  # 300 KiB: several chunks, so a cut lands mid-file
UPLOAD = bytes(reversed(range(256))) * 800
HUGE = b"x" * (33 * 2**20)  # past the 32 MiB a control-plane answer may hold
READ_TIMEOUT = sandboxkit.Timeout(connect=5.0, read=0.1)


@attrs.define
class World:
    """One emulator, a client on it, and what the operations work on."""

    emu: Emulator
    client: sandboxkit.Client
    sandbox: sandboxkit.Sandbox
    token: str
    root: Path
    tmp: Path
    template_id: str
    build_id: str
    build_ids: list[str]
    log_count: int


@attrs.frozen
class Op:
    """One operation: the emulator route its faults hit, whether it may be retried, how to
    run it, and whether its answer is opaque bytes (a download) rather than JSON."""

    route: str
    idempotent: bool
    run: Callable[[World], Awaitable[Any]]
    check: Callable[[World, Any], None]
    opaque: bool = False


async def _create(w: World) -> Any:
    return await w.client.templates.create(
        name="matrix", resources=sandboxkit.CustomResources(2, 2048, 10240)
    )


def _check_create(w: World, created: Any) -> None:
    keys = {r.headers["Idempotency-Key"] for r in w.emu.journal_for("templates.create")}
    assert len(keys) == 1, "every attempt must carry the call's one idempotency key"
    assert created.idempotency_key in keys and created.build_id


async def _builds(w: World) -> Any:
    return [b.id async for b in w.client.templates.builds(w.template_id, page_size=2)]


async def _logs(w: World) -> Any:
    return [e async for e in w.client.templates.build_logs(w.template_id, w.build_id, limit=3)]


async def _download(w: World) -> Any:
    result = await w.sandbox.files.download("/home/user/data.bin", w.tmp / "out.bin")
    assert result.size == (w.tmp / "out.bin").stat().st_size
    return (w.tmp / "out.bin").read_bytes()


async def _upload(w: World) -> Any:
    return await w.sandbox.files.upload("/home/user/up.bin", UPLOAD)


def _check_upload(w: World, entry: Any) -> None:
    assert entry.path == "/home/user/up.bin"
    assert (w.root / "home/user/up.bin").read_bytes() == UPLOAD


async def _v1_get(w: World) -> Any:
    return await w.client.v1.get_organization(w.emu.org_id)


async def _v1_delete(w: World) -> Any:
    return await w.client.v1.vpcs.release(w.emu.vpc_ids[0])


async def _v1_post(w: World) -> Any:
    return await w.client.v1.create_api_key(w.emu.org_id, "matrix", scope="ce_resource")


OPS = {
    "templates.create": Op("templates.create", True, _create, _check_create),
    "builds": Op(
        "builds.list", True, _builds, lambda w, ids: _equal(ids, w.build_ids), opaque=False
    ),
    "build_logs": Op("builds.logs", True, _logs, lambda w, es: _equal(len(es), w.log_count)),
    "download": Op(
        "files.download", True, _download, lambda w, data: _equal(data, DATA), opaque=True
    ),
    "upload": Op("files.upload", True, _upload, _check_upload),
    "v1.get": Op(
        "v1.organizations.get", True, _v1_get, lambda w, org: _equal(bool(org.name), True)
    ),
    "v1.delete": Op("v1.vpcs.release", True, _v1_delete, lambda w, r: _equal(r.result, "ok")),
    "v1.post": Op(
        "v1.api_keys.create", False, _v1_post, lambda w, key: _equal(bool(key.key), True)
    ),
}


def _equal(got: Any, want: Any) -> None:
    assert got == want


@attrs.frozen
class Case:
    """A fault and the outcome it calls for."""

    faults: tuple[Fault, ...]
    error: type[Exception] | None  # raised when the operation may not be retried (or at all)
    retried: bool = True  # whether an idempotent operation gets past it
    body: bytes | None = None  # the answer's raw body, for opaque operations


def _garbage(body: bytes) -> Case:
    return Case((Fault.garbage(200, body),), sandboxkit.ResponseDecodeError, False, body)


FAULTS: dict[str, Case] = {
    "429-retry-after": Case((Fault.status(429, retry_after="0"),), sandboxkit.RateLimitError),
    "429": Case((Fault.status(429),), sandboxkit.RateLimitError),
    "502": Case((Fault.status(502),), sandboxkit.BadGatewayError),
    "503": Case((Fault.status(503),), sandboxkit.ServiceUnavailableError),
    "504": Case((Fault.status(504),), sandboxkit.GatewayTimeoutError),
    "500": Case((Fault.status(500),), sandboxkit.InternalServerError, retried=False),
    "refused": Case((), sandboxkit.APIConnectionError, retried=False),
    # Twice: aiohttp itself silently resends a GET once when a reused connection closes
    # before any answer, so one cut alone might never reach sandboxkit.
    "cut-before-headers": Case((Fault.cut_before_headers(),) * 2, sandboxkit.APIConnectionError),
    "cut-mid-body": Case((Fault.cut(10),), sandboxkit.APIConnectionError),
    "read-timeout": Case((Fault.delay(0.5),), sandboxkit.APITimeoutError),
    "malformed-json": _garbage(b"{not json"),
    "wrong-shape": _garbage(b"[1, 2, 3]"),
    "empty-body": _garbage(b""),
    "huge-body": _garbage(HUGE),
}


def outcome(op: Op, case: Case, name: str) -> type[Exception] | str:
    """What docs/design.md sections 5 and 7 promise: "ok", "verbatim" (opaque bytes as
    sent), or an error."""
    if op.opaque and case.body is not None:
        return "verbatim"  # a download's body is the file: any bytes are valid content
    if name == "cut-mid-body" and op.route == "v1.vpcs.release":
        # The first DELETE took effect before its answer was cut: the retry finds nothing.
        return sandboxkit.NotFoundError
    if op.idempotent and case.retried:
        return "ok"
    assert case.error is not None
    return case.error


@pytest.fixture
async def matrix_world(tmp_path: Path) -> AsyncIterator[World]:
    """A fresh emulator with a template, five builds with logs, a file and a client."""
    clock = ManualClock()
    async with Emulator(clock=clock) as emu:
        setup = emu.client(retry=sandboxkit.RetryPolicy.no_delay())
        created = await setup.templates.create(
            name="base",
            resources=sandboxkit.CustomResources(2, 2048, 10240),
            build={"commands": ["make", "make test"]},
        )
        emu.add_builds(created.id, 4)
        clock.advance(10)
        build_ids = [b.id async for b in setup.templates.builds(created.id)]
        logs = [e async for e in setup.templates.build_logs(created.id, created.build_id)]
        await setup.aclose()
        body = await emu.create_sandbox()
        key = body["data"]["sandbox_key"]
        root = emu.sandbox_root(key)
        (root / "home/user/data.bin").write_bytes(DATA)
        client = emu.client(retry=sandboxkit.RetryPolicy.no_delay(5))
        emu.journal.clear()
        w = World(
            emu,
            client,
            client.sandbox_from_response(body),
            body["data"]["sandbox_access_token"],
            root,
            tmp_path,
            created.id,
            created.build_id,
            build_ids,
            len(logs),
        )
        yield w
        await client.aclose()
        await w.client.aclose()  # the test may have rewired it


def _rewire(w: World, port: int, timeout: sandboxkit.Timeout | None) -> list[int]:
    """Point the world's client at `port` (refused) or give it `timeout`; returns the ports
    whose client sockets must be gone after `aclose()`."""
    ports = [port_of(w.emu.base_url), port_of(w.emu.domain)]
    if port or timeout:
        options: dict[str, Any] = {"retry": sandboxkit.RetryPolicy.no_delay(5)}
        if port:
            options["base_url"] = f"http://127.0.0.1:{port}"
            ports.append(port)
        if timeout:
            options["timeout"] = timeout
        w.client = w.emu.client(**options)
        domain = f"sandbox.test:{port}" if port else w.emu.domain
        w.sandbox = w.client.sandbox(
            sandbox_key=w.sandbox.sandbox_key, domain=domain, access_token=w.token
        )
    return ports


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("op_name", list(OPS))
async def test_fault_matrix(matrix_world: World, op_name: str, fault: str) -> None:
    """The operation meets the fault and ends as docs/design.md sections 5 and 7 say, leaving
    nothing behind."""
    op, case = OPS[op_name], FAULTS[fault]
    expected = outcome(op, case, fault)
    ports = _rewire(
        matrix_world,
        refused_port() if fault == "refused" else 0,
        READ_TIMEOUT if fault == "read-timeout" else None,
    )
    matrix_world.emu.faults.script(op.route, *case.faults)
    with anyio.fail_after(20):
        if isinstance(expected, str):
            value = await op.run(matrix_world)
            if expected == "verbatim":
                assert value == case.body
            else:
                op.check(matrix_world, value)
                assert matrix_world.emu.faults.pending(op.route) == 0
                answered = [r for r in matrix_world.emu.journal_for(op.route) if r.fault is None]
                assert answered and answered[-1].status is not None
        else:
            with pytest.raises(expected) as caught:
                await op.run(matrix_world)
            assert type(caught.value).__module__ == "sandboxkit.errors"
            hits = matrix_world.emu.journal_for(op.route)
            if not op.idempotent or not case.retried:
                assert len(hits) == (0 if fault == "refused" else 1), "must not be retried"
    assert part_files(matrix_world.tmp) == []
    assert sorted(p.name for p in matrix_world.tmp.iterdir()) in ([], ["out.bin"])
    await close_and_check(matrix_world.client, ports)


def test_the_matrix_covers_every_operation_and_fault() -> None:
    """The table names the eight operations and fourteen faults the issue asks for."""
    assert len(OPS) == 8 and len(FAULTS) == 14
    assert {op.route for op in OPS.values()} >= {"files.download", "files.upload"}
    outcomes = {outcome(op, case, name) for op in OPS.values() for name, case in FAULTS.items()}
    assert {"ok", "verbatim", sandboxkit.APIConnectionError} <= outcomes
