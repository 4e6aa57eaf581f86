"""One pool per sandbox host at scale: socket bounds, idle closing, per-host throttling."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import anyio
import pytest

import sandboxkit
from sandboxkit.emulator import Emulator, Fault

from ..files_support import Box, dir_listing, new_box, payload


def client_sockets(port: int) -> int:
    """Sockets of this process connected to `port` (the client side only, not the server's)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                    count += 1
    return count


def server_connections(port: int) -> set[int]:
    """Client ports of the connections the server on `port` has open (ESTABLISHED on its
    side: a socket the client closed is CLOSE_WAIT there at once, whatever the server's
    loop has handled yet). Counted at the server, so no client socket can hide."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local, remote, state = fields[1], fields[2], fields[3]
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                    ports.add(int(remote.rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc")
async def test_many_sandboxes_stay_within_the_socket_bound(
    emulator: Emulator, tmp_path: Path
) -> None:
    """2000 concurrent downloads over 200 sandboxes with a budget of 32 sockets all succeed,
    the server never sees more than 32 connections open, and idle pools close."""
    limits = sandboxkit.Limits(max_sandbox_connections=32, per_host_connections=2)
    port = int(emulator.domain.rsplit(":", 1)[1])
    async with emulator.client(limits=limits, retry=sandboxkit.RetryPolicy.no_delay()) as client:
        boxes = [await new_box(emulator, client) for _ in range(200)]
        for index, sbx in enumerate(boxes):
            sbx.put("/home/user/small.bin", payload(2048, seed=index))
        hosts = client._transport.hosts
        samples: list[tuple[int, int]] = []
        calls = 0

        def sample(done: int, total: int | None) -> None:
            nonlocal calls
            calls += 1
            if calls % 10 == 0:
                samples.append((len(server_connections(port)), hosts.sockets))

        async def one(n: int) -> None:
            sbx = boxes[n % len(boxes)]
            result = await sbx.files.download(
                "/home/user/small.bin", tmp_path / f"{n}.bin", progress=sample
            )
            assert result.size == 2048

        async with anyio.create_task_group() as tg:
            for n in range(2000):
                tg.start_soon(one, n)
        assert len(dir_listing(tmp_path)) == 2000
        assert len(samples) >= 100
        assert max(s for s, _ in samples) <= limits.max_sandbox_connections
        assert max(s for s, _ in samples) > limits.per_host_connections  # really concurrent
        assert max(c for _, c in samples) <= limits.max_sandbox_connections
        assert hosts.evicted > 0  # the budget, not the host count, was what bound them
        assert len(emulator.journal_for("files.download")) == 2000
        # Idle pools close: move the pools' clock past host_idle_seconds.
        open_pools = [hosts.get(sbx.handle._host) for sbx in boxes]
        live = [pool for pool in open_pools if pool is not None]
        assert live
        hosts._clock = lambda: time.monotonic() + limits.host_idle_seconds + 1
        assert await hosts.close_idle() == len(live)
        assert len(hosts) == 0 and hosts.sockets == 0
        assert all(pool.session.closed for pool in live)
        for _ in range(10):  # transports finish closing on the next loop iterations
            await asyncio.sleep(0)
        assert client_sockets(port) == 0
        assert not server_connections(port)


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc")
async def test_idle_hosts_keep_their_sockets_while_the_budget_holds_them(
    emulator: Emulator,
) -> None:
    """40 hosts used one at a time fit a budget of 40 sockets: used again, each finds its
    own connection (the server sees no new one); a 41st host closes the least recently
    used host's socket only, and the rest stay."""
    limits = sandboxkit.Limits(max_sandbox_connections=40, per_host_connections=2)
    port = int(emulator.domain.rsplit(":", 1)[1])
    async with emulator.client(limits=limits, retry=sandboxkit.RetryPolicy.no_delay()) as client:
        boxes = [await new_box(emulator, client) for _ in range(41)]
        for sbx in boxes:
            sbx.put("/home/user/f.bin", payload(1000))
        hosts = client._transport.hosts

        async def read_each(order: list[Box]) -> None:
            for sbx in order:
                assert len(await sbx.files.read_bytes("/home/user/f.bin")) == 1000

        await read_each(boxes[:40])
        first = server_connections(port)
        assert len(first) == 40 and hosts.sockets == 40
        await read_each(boxes[39::-1])  # again, most recent first: boxes[39] is now the LRU
        assert server_connections(port) == first
        assert (hosts.opened, hosts.evicted) == (40, 0)
        await read_each(boxes[40:])
        after = server_connections(port)
        assert (hosts.opened, hosts.evicted, hosts.sockets) == (41, 1, 40)
        assert hosts.get(boxes[39].handle._host) is None
        assert len(after) == 40 and len(after - first) == 1 and len(first - after) == 1
        await read_each(boxes[:39])  # the other 39 still have their sockets
        assert server_connections(port) == after


async def _open_stream(sbx: Box) -> sandboxkit.resources._common.AsyncStream[bytes]:
    stream = sbx.files.iter_bytes("/home/user/f.bin", chunk_size=1024)
    await stream.__anext__()  # the request is in flight and holds its host slot
    return stream


async def test_throttled_host_slows_only_itself(emulator: Emulator) -> None:
    """429s from sandbox A shrink A's window; B keeps its full window, fills it, never waits."""
    per_host = 8
    limits = sandboxkit.Limits(per_host_connections=per_host)
    async with emulator.client(limits=limits, retry=sandboxkit.RetryPolicy.no_delay()) as client:
        a, b = await new_box(emulator, client), await new_box(emulator, client)
        for sbx in (a, b):
            sbx.put("/home/user/f.bin", payload(256 * 1024))
        assert len(await b.files.read_bytes("/home/user/f.bin")) == 256 * 1024
        emulator.faults.script("files.download", *[Fault.status(429, retry_after="0")] * 3)
        assert len(await a.files.read_bytes("/home/user/f.bin")) == 256 * 1024
        hosts = client._transport.hosts
        pool_a = hosts.get(a.handle._host)
        pool_b = hosts.get(b.handle._host)
        assert pool_a is not None and pool_b is not None
        # 8 -> 4 -> 2 -> 1 on three 429s, then one success: 2.
        assert (pool_a.window.allowed, pool_a.limiter.total_tokens) == (2, 2)
        assert (pool_b.window.allowed, pool_b.limiter.total_tokens) == (per_host, per_host)
        statuses = [(r.sandbox_key, r.status) for r in emulator.journal_for("files.download")]
        assert [key for key, status in statuses if status == 429] == [a.key] * 3
        assert all(status == 200 for key, status in statuses if key == b.key)

        streams_b = [await _open_stream(b) for _ in range(per_host)]
        streams_a = [await _open_stream(a) for _ in range(2)]
        assert pool_b.limiter.borrowed_tokens == per_host  # B runs at full width
        assert pool_a.limiter.borrowed_tokens == 2
        async with anyio.create_task_group() as tg:
            third = a.files.iter_bytes("/home/user/f.bin", chunk_size=1024)
            tg.start_soon(third.__anext__)
            for _ in range(1000):  # let the third A request reach A's limiter
                if pool_a.limiter.statistics().tasks_waiting:
                    break
                await asyncio.sleep(0)
            assert pool_a.limiter.statistics().tasks_waiting == 1  # A waits on A's limit
            assert pool_b.limiter.statistics().tasks_waiting == 0  # B waits on nothing
            await streams_a[0].aclose()  # a slot frees: the third A request proceeds
        await third.aclose()
        for stream in [*streams_a[1:], *streams_b]:
            await stream.aclose()
        assert pool_a.limiter.borrowed_tokens == pool_b.limiter.borrowed_tokens == 0


async def test_idle_host_pools_close_their_sockets_with_no_further_request(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Pools of sandboxes nobody calls again (deleted ones, say) are closed, and their sockets
    with them, once `host_idle_seconds` pass: no later request is needed to sweep them."""
    limits = sandboxkit.Limits(host_idle_seconds=0.3)
    port = int(emulator.domain.rsplit(":", 1)[1])
    async with emulator.client(limits=limits, retry=sandboxkit.RetryPolicy.no_delay()) as client:
        boxes = [await new_box(emulator, client) for _ in range(3)]
        for i, box in enumerate(boxes):
            box.put("/home/user/f.bin", payload(1000))
            await box.files.download("/home/user/f.bin", tmp_path / f"{i}.bin")
        hosts = client._transport.hosts
        assert len(hosts) == 3 and client_sockets(port) >= 1
        timer = hosts._timer
        assert timer is not None
        with anyio.fail_after(10):
            await timer  # it ends when the last idle pool is closed
        assert len(hosts) == 0
        assert client_sockets(port) == 0


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc")
async def test_a_quiet_sandbox_is_not_starved_by_a_busy_one(emulator: Emulator) -> None:
    """With a budget of 2 sockets held by two of sandbox A's downloads, 30 more of A's
    queue with one of sandbox B's second in line: the server sees B's request second at the
    latest (it was 32nd of 32 when a freed socket went to its own host's waiters first),
    every read gets its bytes, and the server never has more than 2 connections open."""
    limits = sandboxkit.Limits(max_sandbox_connections=2, per_host_connections=2)
    port = int(emulator.domain.rsplit(":", 1)[1])
    async with emulator.client(limits=limits, retry=sandboxkit.RetryPolicy.no_delay()) as client:
        a, b = await new_box(emulator, client), await new_box(emulator, client)
        for sbx in (a, b):
            sbx.put("/home/user/f.bin", payload(256 * 1024))
            sbx.put("/home/user/small.bin", payload(1000, seed=3))
        held = [await _open_stream(a) for _ in range(2)]
        hosts = client._transport.hosts
        seen: list[int] = []
        before = len(emulator.journal_for("files.download"))

        async def read(sbx: Box) -> None:
            data = await sbx.files.read_bytes("/home/user/small.bin")
            assert data == payload(1000, seed=3)
            seen.append(len(server_connections(port)))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for sbx in [a, b, *[a] * 29]:
                    tg.start_soon(read, sbx)
                await anyio.wait_all_tasks_blocked()
                assert len(emulator.journal_for("files.download")) == before
                assert hosts.get(b.handle._host).waiting == 1  # type: ignore[union-attr]
                for stream in held:
                    await stream.aclose()
        keys = [r.sandbox_key for r in emulator.journal_for("files.download")[before:]]
        assert len(keys) == 31 and keys.count(b.key) == 1
        assert keys.index(b.key) <= 1
        assert len(seen) == 31 and max(seen) <= limits.max_sandbox_connections
        assert hosts.sockets <= limits.max_sandbox_connections
