"""A bounded soak: mixed operations at concurrency 200 over 100 sandboxes, 10% faults.

20 seconds by default (CI), 5 minutes with `--soak`. Every byte is checked, every exception
classified; RSS and open sockets are sampled about once a second and printed (`-s` shows the
curve). Seeded: the seed is printed, and `SANDBOXKIT_SEED=...` replays it.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

import sandboxkit
from sandboxkit.emulator import Emulator, Idc, ManualClock

from .reliability_support import (
    HAS_PROC,
    client_sockets,
    open_sockets,
    part_files,
    port_of,
    rss,
    seed,
    settle,
)

CONCURRENCY = 200
SANDBOXES = 100
MIB = 2**20
LIMITS = sandboxkit.Limits(
    control_plane_connections=32, per_host_connections=2, max_sandbox_connections=128
)
SOCKET_BOUND = LIMITS.control_plane_connections + LIMITS.max_sandbox_connections
FAULT_RATES = {"429": 0.025, "502": 0.02, "503": 0.02, "cut": 0.025, "cut_before_headers": 0.01}
ROUTES = [
    "files.download",
    "files.upload",
    "templates.create",
    "builds.list",
    "builds.logs",
    "v1.organizations.get",
]
OPS = {
    "download": 25,
    "read_bytes": 20,
    "iter_bytes": 15,
    "upload": 15,
    "templates.create": 5,
    "builds": 8,
    "build_logs": 7,
    "v1.get": 5,
}


@attrs.define
class Tally:
    """What the soak saw."""

    ops: Counter[str] = attrs.Factory(Counter)
    failed: Counter[str] = attrs.Factory(Counter)
    wrong: list[str] = attrs.Factory(list)
    unhandled: list[str] = attrs.Factory(list)
    samples: list[tuple[float, float, int, int, int]] = attrs.Factory(list)


@attrs.frozen
class World:
    """The emulator, the sandboxes with their known files, and the control-plane facts."""

    emu: Emulator
    boxes: list[tuple[sandboxkit.Sandbox, Path]]
    files: dict[tuple[int, str], str]  # (box, name) -> sha256
    template_id: str
    build_id: str
    build_ids: list[str]
    log_count: int
    keys: dict[str, str]  # idempotency key -> template id
    org_name: str


@pytest.fixture
def soak_seconds(request: pytest.FixtureRequest) -> float:
    """20 s, or 300 s with `--soak`."""
    return 300.0 if request.config.getoption("--soak") else 20.0


@pytest.fixture
async def soak_world(tmp_path: Path) -> AsyncIterator[tuple[World, sandboxkit.Client]]:
    """An emulator with three IDCs, 100 sandboxes holding seeded files, templates and keys."""
    rng = random.Random(seed(7))
    clock = ManualClock()
    idcs = [
        Idc("us-denver-1"),
        Idc("eu-lite", supports_resume=False),
        Idc("ap-chunked", chunked_downloads=True),
    ]
    async with Emulator(idcs=idcs, clock=clock) as emu:
        client = emu.client(retry=sandboxkit.RetryPolicy.no_delay(10), limits=LIMITS)
        boxes, files = [], {}
        for index in range(SANDBOXES):
            body = await emu.create_sandbox(idcs[index % len(idcs)].name)
            root = emu.sandbox_root(body["data"]["sandbox_key"])
            for name, size in (
                ("small.bin", rng.randint(0, 64 * 1024)),
                ("big.bin", rng.randint(256 * 1024, MIB)),
            ):
                data = rng.randbytes(size)
                (root / "home/user" / name).write_bytes(data)
                files[(index, name)] = hashlib.sha256(data).hexdigest()
            boxes.append((client.sandbox_from_response(body), root))
        resources = sandboxkit.CustomResources(2, 2048, 10240)
        created = await client.templates.create(
            name="soak", resources=resources, build={"commands": ["make"]}
        )
        emu.add_builds(created.id, 5)
        clock.advance(10)
        keys = {}
        for n in range(10):
            key = f"soak-key-{n}"
            keys[key] = (
                await client.templates.create(
                    name=f"soak{n}", resources=resources, build={}, idempotency_key=key
                )
            ).id
        build_ids = [b.id async for b in client.templates.builds(created.id)]
        logs = [e async for e in client.templates.build_logs(created.id, created.build_id)]
        org = await client.v1.get_organization(emu.org_id)
        world = World(
            emu, boxes, files, created.id, created.build_id, build_ids, len(logs), keys, org.name
        )
        yield world, client
        await client.aclose()


async def one_op(
    world: World, client: sandboxkit.Client, rng: random.Random, op: str, scratch: Path
) -> str | None:
    """Run one operation; returns a description of wrong bytes or results, None when right."""
    index = rng.randrange(SANDBOXES)
    sbx, root = world.boxes[index]
    name = rng.choice(["small.bin", "big.bin"])
    want = world.files[(index, name)]
    remote = f"/home/user/{name}"
    if op == "download":
        dest = scratch / f"{rng.getrandbits(64):x}.bin"
        result = await sbx.files.download(remote, dest, chunk_size=rng.choice([16384, 65536, MIB]))
        got = hashlib.sha256(dest.read_bytes()).hexdigest()
        dest.unlink()
        return None if got == want == result.sha256 else f"download {index}/{name}"
    if op == "read_bytes":
        got = hashlib.sha256(await sbx.files.read_bytes(remote)).hexdigest()
        return None if got == want else f"read_bytes {index}/{name}"
    if op == "iter_bytes":
        digest = hashlib.sha256()
        async with sbx.files.iter_bytes(remote, chunk_size=rng.choice([4096, 65536])) as chunks:
            async for chunk in chunks:
                digest.update(chunk)
        return None if digest.hexdigest() == want else f"iter_bytes {index}/{name}"
    if op == "upload":
        data = rng.randbytes(rng.randint(0, 256 * 1024))
        target = f"/tmp/up-{rng.getrandbits(64):x}.bin"
        entry = await sbx.files.upload(target, data)
        stored = root / target.lstrip("/")
        ok = entry.path == target and stored.read_bytes() == data
        stored.unlink()
        return None if ok else f"upload {index}{target}"
    if op == "templates.create":
        n = rng.randrange(len(world.keys))
        key = f"soak-key-{n}"
        created = await client.templates.create(
            name=f"soak{n}",
            resources=sandboxkit.CustomResources(2, 2048, 10240),
            build={},
            idempotency_key=key,
        )
        return None if created.id == world.keys[key] and created.replayed else f"create {key}"
    if op == "builds":
        ids = [b.id async for b in client.templates.builds(world.template_id, page_size=2)]
        return None if ids == world.build_ids else "builds"
    if op == "build_logs":
        entries = [
            e async for e in client.templates.build_logs(world.template_id, world.build_id, limit=3)
        ]
        return None if len(entries) == world.log_count else "build_logs"
    org = await client.v1.get_organization(world.emu.org_id)
    return None if org.name == world.org_name else "v1.get"


async def test_soak(
    soak_world: tuple[World, sandboxkit.Client], soak_seconds: float, tmp_path: Path
) -> None:
    """Concurrency 200 over 100 sandboxes with 10% seeded faults: zero wrong bytes, zero
    unhandled exceptions, every operation succeeds, RSS and sockets stay flat."""
    w, client = soak_world
    run_seed = seed(20_240_601)
    print(f"\nsoak: seed={run_seed} (replay: SANDBOXKIT_SEED={run_seed}) seconds={soak_seconds}")
    loop = asyncio.get_running_loop()
    loop_reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: loop_reports.append(context))
    ports = [port_of(w.emu.base_url), port_of(w.emu.domain)]
    tally = Tally()
    names, weights = list(OPS), list(OPS.values())
    w.emu.journal.clear()
    w.emu.faults.random(seed=run_seed, rates=FAULT_RATES, routes=ROUTES)
    started = time.monotonic()
    deadline = started + soak_seconds

    async def worker(number: int) -> None:
        rng = random.Random(run_seed * 1000 + number)
        scratch = tmp_path / f"w{number}"
        scratch.mkdir()
        while time.monotonic() < deadline:
            op = rng.choices(names, weights)[0]
            try:
                problem = await one_op(w, client, rng, op, scratch)
            except sandboxkit.SandboxKitError as exc:
                tally.failed[f"{op}: {type(exc).__name__}: {exc}"] += 1
            except Exception as exc:  # the soak's point: none may get here
                tally.unhandled.append(f"{op}: {type(exc).__name__}: {exc}")
            else:
                tally.ops[op] += 1
                if problem is not None:
                    tally.wrong.append(problem)

    async def sampler() -> None:
        gc.collect()
        while time.monotonic() < deadline:
            await anyio.sleep(1.0)  # pacing the samples, not waiting for anything
            w.emu.journal.clear()  # the emulator's own record would otherwise grow
            tally.samples.append(
                (
                    time.monotonic() - started,
                    rss() / MIB,
                    client_sockets(ports) if HAS_PROC else 0,
                    open_sockets() if HAS_PROC else 0,
                    sum(tally.ops.values()),
                )
            )

    with anyio.fail_after(soak_seconds + 120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler)
            for number in range(CONCURRENCY):
                tg.start_soon(worker, number)
    injected = dict(w.emu.faults.injected)
    w.emu.faults.clear()
    loop.set_exception_handler(None)
    print(f"{'t(s)':>6} {'rss(MiB)':>9} {'client socks':>12} {'all socks':>9} {'ops':>7}")
    for t, mib, client_socks, all_socks, ops in tally.samples:
        print(f"{t:6.1f} {mib:9.1f} {client_socks:12d} {all_socks:9d} {ops:7d}")
    print(f"ops: {dict(tally.ops)}  faults injected: {injected}")
    note = f"seed {run_seed}"
    assert tally.unhandled == [], (note, tally.unhandled[:5])
    assert tally.wrong == [], (note, tally.wrong[:5])
    assert not tally.failed, (note, tally.failed.most_common(5))
    assert loop_reports == [], (note, [str(r.get("message")) for r in loop_reports])
    assert sum(injected.values()) > 0.05 * sum(tally.ops.values()), note
    assert set(tally.ops) == set(OPS) and sum(tally.ops.values()) > 10 * CONCURRENCY, note
    assert len(tally.samples) >= soak_seconds * 0.6, note
    half = tally.samples[len(tally.samples) // 2 :]
    growth = max(s[1] for s in half) - half[0][1]
    assert growth < 30, f"RSS grew {growth:.1f} MiB in the second half ({note})"
    if HAS_PROC:
        assert max(s[2] for s in tally.samples) <= SOCKET_BOUND, note
        assert max(s[3] for s in half) <= max(s[3] for s in tally.samples[: len(half)]) + 50, note
    assert all(part_files(tmp_path / f"w{n}") == [] for n in range(CONCURRENCY)), note
    await client.aclose()
    if HAS_PROC:
        assert await settle(lambda: client_sockets(ports) == 0), note
