"""A host's own found concurrency (`Limits.found_host_concurrency`) over real loopback sockets:
every call to the host, outside any batch and a download's slices too, goes at the
concurrency its answers allow.

`CapacityServer` is a raw asyncio server whose answers the test releases: how many requests
it holds at once is the client's concurrency, seen from the other end of the socket. The
host's decisions run on a fake clock (`HostPools.pause_clock`), so damping is shown without
waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import sandboxkit
from sandboxkit._core.pacing import GROW, SHRINK, PaceEvent
from sandboxkit._http.hosts import HostKey
from sandboxkit.emulator import Emulator, Fault
from sandboxkit.emulator._resolver import EmulatorResolver

from ..files_support import Box, new_box, payload

BODY = payload(64 * 1024)
LIMIT = 20.0  # seconds any test may take, as a guard: nothing here waits on time
FOUND = sandboxkit.Limits(per_host_connections=8, found_host_concurrency=True)


class CapacityServer:
    """Holds each request until the test answers it (`answer`); counts those it holds."""

    def __init__(self) -> None:
        self.port = 0
        self.held: list[asyncio.Future[int]] = []  # the status each held request gets
        self.most = 0  # the most requests held at once
        self.requests = 0
        self._changed = asyncio.Event()
        self.open = False  # answer at once, holding nothing

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                self.requests += 1
                self._tell()
                status = 200
                if not self.open:
                    answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
                    self.held.append(answer)
                    self.most = max(self.most, len(self.held))
                    self._tell()
                    try:
                        status = await answer
                    finally:
                        self.held.remove(answer)
                        self._tell()
                if status == 200:
                    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY)
                    writer.write(head + BODY)
                else:
                    writer.write(b"HTTP/1.1 %d No\r\nContent-Length: 0\r\n\r\n" % status)
                await writer.drain()
        finally:
            writer.close()

    def _tell(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until `condition` holds, looking again at each request come or answered."""
        while not condition():
            await self._changed.wait()

    async def holding(self, count: int) -> None:
        """Wait until `count` requests (or more) are held."""
        await self.until(lambda: len(self.held) >= count)

    def answer(self, count: int, status: int = 200) -> None:
        """Answer the `count` oldest held requests with `status`."""
        for future in [f for f in self.held if not f.done()][:count]:
            future.set_result(status)

    def release_all(self) -> None:
        """Answer every held request, and every later one at once."""
        self.open = True
        self.answer(len(self.held))


@pytest.fixture
async def capacity() -> AsyncIterator[CapacityServer]:
    server = CapacityServer()
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        server.release_all()
        listener.close()
        await listener.wait_closed()


async def settled(condition: Callable[[], bool]) -> None:
    """Let the client's tasks run until `condition`, on the client's own state, holds: each
    pass yields to the loop once (no timed sleep; that state has no event to wait on)."""
    while not condition():
        await anyio.lowlevel.checkpoint()


async def test_a_hosts_found_concurrency_starts_at_4_grows_and_shrinks_damped(
    capacity: CapacityServer,
) -> None:
    """16 reads at once to one host: 4 reach the server (12 wait in the client); 4 fast
    answers double it to 8 (an event naming the host, with the rate they moved); a 503
    inside the half second after that changes nothing, one after it halves it to 4."""
    clock = [100.0]
    async with sandboxkit.Client(
        api_key="k",
        base_url="http://127.0.0.1:9",
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        limits=FOUND,
        retry=sandboxkit.RetryPolicy.no_delay(max_attempts=3),
    ) as client:
        hosts = client._transport.hosts
        hosts.pause_clock = lambda: clock[0]
        events: list[PaceEvent] = []
        shrank = anyio.Event()

        def paced(event: PaceEvent) -> None:
            events.append(event)
            if event.kind == SHRINK:
                shrank.set()

        hosts.paced.append(paced)
        sbx = client.sandbox(
            sandbox_key="s", domain=f"sandbox.test:{capacity.port}", access_token="t"
        )
        origin = sbx._host.origin
        results: list[bytes] = []

        async def read(index: int) -> None:
            results.append(await sbx.files.read_bytes(f"/f{index}"))

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as group:
                for index in range(16):
                    group.start_soon(read, index)
                await capacity.holding(4)
                pool = hosts.get(HostKey(origin, "t"))
                assert pool is not None
                await settled(lambda: pool.in_flight == 16)  # all 16 at the host's door
                assert (capacity.most, pool.limiter.total_tokens) == (4, 4)
                assert events == []

                clock[0] += 0.01  # each of the 4 took 10 ms
                capacity.answer(4)
                await capacity.holding(8)
                assert capacity.most == 8
                assert [(e.kind, e.concurrency, e.reason, e.host) for e in events] == [
                    (GROW, 8, "room", origin)
                ]
                assert events[0].rate == pytest.approx(4 * len(BODY) / 0.01, rel=0.01)

                capacity.answer(1, status=503)  # at once: damped, nothing changes
                await capacity.holding(8)  # its retry took its place
                await capacity.until(lambda: capacity.requests == 13)
                assert len(events) == 1 and pool.limiter.total_tokens == 8

                clock[0] += 0.6  # past the half second since the growth
                capacity.answer(1, status=503)
                await shrank.wait()
                assert (events[1].kind, events[1].concurrency, events[1].reason) == (
                    SHRINK,
                    4,
                    "503",
                )
                assert pool.limiter.total_tokens == 4
                capacity.release_all()
    assert results == [BODY] * 16


async def test_without_the_option_a_host_takes_its_whole_window_at_once(
    capacity: CapacityServer,
) -> None:
    """The default: `per_host_connections` requests at once from the start, no events."""
    async with sandboxkit.Client(
        api_key="k",
        base_url="http://127.0.0.1:9",
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        limits=sandboxkit.Limits(per_host_connections=8),
    ) as client:
        events: list[PaceEvent] = []
        client._transport.hosts.paced.append(events.append)
        sbx = client.sandbox(
            sandbox_key="s", domain=f"sandbox.test:{capacity.port}", access_token="t"
        )
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as group:
                for index in range(16):
                    group.start_soon(sbx.files.read_bytes, f"/f{index}")
                await capacity.holding(8)
                assert capacity.most == 8
                capacity.release_all()
    assert events == []


@pytest.mark.parametrize("found", [True, False])
async def test_a_downloads_slices_go_at_the_hosts_found_concurrency(
    emulator: Emulator, tmp_path: Path, found: bool
) -> None:
    """One file in 8 slices: with the host's concurrency found, no more than 4 requests hold
    its slots until its pieces' answers grow it, and then more do; without, 8 at once. The
    file is right either way."""
    limits = FOUND if found else sandboxkit.Limits(per_host_connections=8)
    parallel = sandboxkit.ParallelDownloads(threshold=1 << 20, parts=8, min_latency=0)
    # Every answer takes 20 ms: the slices overlap, whatever the machine's speed.
    emulator.faults.script("files.download", *[Fault.delay(0.02)] * 200)
    async with emulator.client(limits=limits, parallel_downloads=parallel) as client:
        box = await new_box(emulator, client)
        data = payload(8 << 20)
        box.put("/home/user/big.bin", data)
        hosts = client._transport.hosts
        seen: list[tuple[str, int]] = []  # ("head", slots held) or ("grow", new limit)

        def headed(origin: str, status: int, seconds: float, event: object) -> None:
            pool = next(p for p in hosts._pools.values() if p.origin == origin)
            seen.append(("head", pool.limiter.borrowed_tokens))

        def paced(event: PaceEvent) -> None:
            if event.kind == GROW:
                seen.append(("grow", event.concurrency))

        hosts.listeners.append(headed)
        hosts.paced.append(paced)
        dest = tmp_path / "big.bin"
        with anyio.fail_after(LIMIT):
            result = await box.files.download("/home/user/big.bin", dest)
    assert dest.read_bytes() == data and result.size == len(data)
    heads = [held for what, held in seen if what == "head"]
    assert len(heads) > 8  # sliced: the first answer, then the pieces
    if not found:
        assert max(heads) == 8 and not any(what == "grow" for what, _ in seen)
        return
    growths = [i for i, (what, _) in enumerate(seen) if what == "grow"]
    assert growths, "the pieces' answers must grow the host's concurrency"
    first_growth = growths[0]
    assert max(held for _, held in seen[:first_growth]) == 4
    assert max(held for what, held in seen[first_growth:] if what == "head") > 4


async def test_a_batch_shows_its_hosts_changes_beside_its_own(
    emulator: Emulator, tmp_path: Path
) -> None:
    """With the option on, a batch's summary and `on_pace` carry each host's changes, named
    by the host; `shrinks` and `concurrency` stay the batch's own."""
    async with emulator.client(limits=FOUND) as client:
        box = await new_box(emulator, client)
        jobs = []
        for index in range(24):
            box.put(f"/home/user/{index}.bin", payload(1024, index))
            jobs.append(
                sandboxkit.batch.DownloadJob(
                    sandboxkit.batch.SandboxRef(box.key, box.handle.domain, box.handle._host.token),
                    f"/home/user/{index}.bin",
                    tmp_path / f"{index}.bin",
                )
            )
        told: list[PaceEvent] = []
        result = await sandboxkit.batch.download_many(client, jobs, on_pace=told.append)
        origin = box.handle._host.origin
    assert result.ok
    assert [(tmp_path / f"{i}.bin").read_bytes() for i in range(24)] == [
        payload(1024, i) for i in range(24)
    ]
    summary = result.summary
    assert told == list(summary.pace_events)
    hosts_own = [(e.kind, e.concurrency) for e in summary.pace_events if e.host == origin]
    assert hosts_own[:1] == [(GROW, 8)]
    assert summary.shrinks == sum(e.kind == SHRINK and not e.host for e in summary.pace_events)


def test_the_option_takes_true_false_or_none_only() -> None:
    """Anything but True, False or None is refused where the limits are made."""
    for value in (1, 0, "yes", 4.0):
        with pytest.raises(sandboxkit.ValidationError, match="found_host_concurrency"):
            sandboxkit.Limits(found_host_concurrency=value)  # type: ignore[arg-type]


def jobs_over(boxes: list[Box], each: int, tmp_path: Path) -> list[sandboxkit.batch.DownloadJob]:
    """`each` small files put on every box, and a download job for each, boxes interleaved."""
    jobs = []
    for index in range(each):
        for n, box in enumerate(boxes):
            box.put(f"/home/user/{index}.bin", payload(512, index))
            ref = sandboxkit.batch.SandboxRef(box.key, box.handle.domain, box.handle._host.token)
            jobs.append(
                sandboxkit.batch.DownloadJob(
                    ref, f"/home/user/{index}.bin", tmp_path / f"{n}-{index}.bin"
                )
            )
    return jobs


@pytest.mark.parametrize(
    ("option", "concurrency", "hosts_find"),
    [
        (None, None, True),  # the default: a batch that finds its concurrency
        (None, 8, False),  # a fixed concurrency is fixed all the way down
        (False, None, False),  # never
    ],
)
async def test_a_batch_that_finds_its_concurrency_has_its_hosts_find_theirs_while_it_runs(
    emulator: Emulator,
    tmp_path: Path,
    option: bool | None,
    concurrency: int | None,
    hosts_find: bool,
) -> None:
    """By default, hosts find their own concurrency while a batch that finds its own runs,
    and go back to their window (as it was) when it ends; not for a fixed concurrency, nor
    with `found_host_concurrency=False`."""
    limits = sandboxkit.Limits(per_host_connections=8, found_host_concurrency=option)
    async with emulator.client(limits=limits) as client:
        boxes = [await new_box(emulator, client) for _ in range(2)]
        hosts = client._transport.hosts
        result = await sandboxkit.batch.download_many(
            client, jobs_over(boxes, 20, tmp_path), concurrency=concurrency
        )
        assert result.ok
        own = [e for e in result.summary.pace_events if e.host and e.kind != "pause"]
        assert bool(own) == hosts_find
        if hosts_find:
            assert {e.host for e in own} <= {b.handle._host.origin for b in boxes}
        pools = [hosts.get(b.handle._host) for b in boxes]
        assert all(p is not None and p.found is None for p in pools)  # ended with the batch
        assert all(p is not None and p.limiter.total_tokens == 8 for p in pools)
