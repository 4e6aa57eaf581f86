"""Clients made before `os.fork()` and used in the child, with a real fork.

The child gets a working client of its own (a loop thread and pools made on its first use)
and never touches the parent's sockets: the parent's pooled connections are the same ones,
still answering, after the child used its client, closed it and exited.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

import sandboxkit
from sandboxkit import sync
from sandboxkit.emulator import Emulator, ManualClock
from sandboxkit.sync._loop import Loop

from ..reliability_support import emulator_env, run_on_emulator, sessions_of
from ..sync.test_sync import Running

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()"),
    # Python 3.12+ warns on any fork of a process with threads (the emulator has one).
    pytest.mark.filterwarnings("ignore:.*use of fork.. may lead to deadlocks:DeprecationWarning"),
]

# A child that has not reported by then is killed: a hang fails the test, never the suite.
CHILD_SECONDS = 30
FILE = "/home/user/forked.bin"
DATA = b"made by the parent, read by the child\n" * 1000
PRODUCTS = "/api/v2/products"


def pooled_ports(client: sandboxkit.Client) -> set[int]:
    """The local ports of every connection the client's pools hold idle right now."""
    ports = set()
    for session in sessions_of(client):
        for conns in session.connector._conns.values():  # type: ignore[union-attr]
            ports.update(proto.transport.get_extra_info("sockname")[1] for proto, _ in conns)
    return ports


def in_child(work: Callable[[], dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """Run `work` in a forked child; its exit code and the report it sent over a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # kills even a thread stuck in C
            signal.alarm(CHILD_SECONDS)
            try:
                report = work()
                code = 0
            except BaseException as exc:
                report = {"error": type(exc).__name__, "message": str(exc)}
            os.write(write_end, json.dumps(report).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        # The child's end closes when it exits, or when its alarm kills it.
        if not select.select([pipe], [], [], CHILD_SECONDS + 10)[0]:
            os.kill(pid, signal.SIGKILL)
        sent = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), json.loads(sent) if sent else {}


@pytest.fixture
def served() -> Iterator[Running]:
    """An emulator served from a portal's loop thread, as in tests/sync/test_sync.py."""
    clock = ManualClock()
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Emulator(clock=clock)) as emu,
    ):
        yield Running(emu, portal, clock)


@pytest.fixture
def parent_sync(served: Running) -> Iterator[tuple[sync.Client, sync.Sandbox]]:
    """A sync Client that has used its console and sandbox pools, with a file uploaded."""
    with sync.Client(**served.options(), timeout=sandboxkit.Timeout(read=5)) as client:
        sbx = client.sandbox_from_response(served.new_sandbox())
        sbx.files.upload(FILE, DATA)
        client.request("GET", PRODUCTS)
        yield client, sbx


def test_sync_client_made_before_a_fork_works_in_the_child(
    parent_sync: tuple[sync.Client, sync.Sandbox],
) -> None:
    """The forked child's calls (console and data plane, on handles made in the parent) run
    on a loop and pools of its own; the parent's connections are untouched and reused."""
    client, sbx = parent_sync
    products = client.request("GET", PRODUCTS)
    before = pooled_ports(client._target)
    assert len(before) == 2  # one to the console, one to the sandbox's host

    def work() -> dict[str, Any]:
        answer = client.request("GET", PRODUCTS)
        read = sbx.files.read_bytes(FILE)
        ports = pooled_ports(client._target)
        client.close()  # closes the child's own pools and loop
        return {"products": answer, "read": read == DATA, "ports": sorted(ports)}

    code, report = in_child(work)

    assert code == 0, report
    assert report["products"] == products and report["read"] is True
    assert len(report["ports"]) == 2 and not set(report["ports"]) & before
    assert pooled_ports(client._target) == before  # not closed by the child
    assert client.request("GET", PRODUCTS) == products
    assert sbx.files.read_bytes(FILE) == DATA
    assert pooled_ports(client._target) == before  # the same two connections answered


def test_async_client_made_before_a_fork_works_in_the_childs_own_loop(
    served: Running,
) -> None:
    """An async Client in use on the parent's loop works in the child's `asyncio.run`, on
    sessions of its own; closing it there leaves the parent's sessions open and answering."""
    client = sandboxkit.Client(**served.options(), timeout=sandboxkit.Timeout(read=5))
    call = served.portal.call
    try:
        sbx = client.sandbox_from_response(served.new_sandbox())
        call(sbx.files.upload, FILE, DATA)
        products = call(client.request, "GET", PRODUCTS)
        before = call(pooled_ports, client)
        assert len(before) == 2

        async def child_work() -> dict[str, Any]:
            async with client:
                answer = await client.request("GET", PRODUCTS)
                read = await sbx.files.read_bytes(FILE)
                ports = pooled_ports(client)
            return {"products": answer, "read": read == DATA, "ports": sorted(ports)}

        code, report = in_child(lambda: asyncio.run(child_work()))

        assert code == 0, report
        assert report["products"] == products and report["read"] is True
        assert len(report["ports"]) == 2 and not set(report["ports"]) & before
        assert call(pooled_ports, client) == before
        assert call(client.request, "GET", PRODUCTS) == products
        assert call(sbx.files.read_bytes, FILE) == DATA
        assert call(pooled_ports, client) == before
    finally:
        call(client.aclose)


# A gunicorn-like parent: a module-level client, used, then a forked worker that exits
# normally (atexit, interpreter teardown) without using it; the parent carries on.
WORKER_EXITS = """
import os
import sys

from sandboxkit import sync
from sandboxkit.sync._loop import Loop
from sandboxkit.emulator import EmulatorResolver

client = sync.Client(resolver=EmulatorResolver())
client.request("GET", "/api/v2/products")
pid = os.fork()
if pid == 0:
    sys.exit(0)
_, status = os.waitpid(pid, 0)
client.request("GET", "/api/v2/products")
client.close()
print("worker", os.waitstatus_to_exitcode(status), "parent ok", flush=True)
"""


def test_a_forked_child_that_exits_leaves_the_parents_client_alone(
    served: Running, tmp_path: Path
) -> None:
    """A child exiting normally neither warns about the parent's client (it is not the
    child's to close) nor asks the parent's loop to stop."""
    done = run_on_emulator(WORKER_EXITS, tmp_path / "worker.py", served.emu, timeout=60)
    assert (done.returncode, done.stdout) == (0, "worker 0 parent ok\n"), done.stderr
    assert done.stderr == ""


# A client that has started every kind of thread it has (its loop's, anyio's workers for the
# file's writes, its executor's for a name lookup), then forks. The hook registered first
# runs last before a fork: it counts the threads the process forks with.
FORKS_ALONE = """
import asyncio
import json
import os
import sys
import threading

forked_with = []
os.register_at_fork(before=lambda: forked_with.append(len(os.listdir("/proc/self/task"))))

from sandboxkit import sync
from sandboxkit.sync._loop import Loop
from sandboxkit.emulator import EmulatorResolver

DATA = os.urandom(3 << 20)
client = sync.Client(resolver=EmulatorResolver(), data_plane_scheme="http")
sbx = client.sandbox_from_response(json.loads(sys.argv[1]))
sbx.files.upload("/home/user/f.bin", DATA)
sbx.files.download("/home/user/f.bin", sys.argv[2])


async def look_up() -> object:
    return await asyncio.get_running_loop().getaddrinfo("localhost", 80)


client._loop.call(look_up)
names = sorted({t.name.split("_")[0].rstrip("-0123456789") for t in threading.enumerate()})
pid = os.fork()
if pid == 0:
    os._exit(0 if sbx.files.read_bytes("/home/user/f.bin") == DATA else 1)
_, status = os.waitpid(pid, 0)
assert sbx.files.read_bytes("/home/user/f.bin") == DATA  # the parent's loop runs on
client.close()
print(names, forked_with, os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_sync_client_forks_with_no_thread_of_its_own(served: Running, tmp_path: Path) -> None:
    """Its loop, workers and executor are parked around the fork: the process forks with
    one thread (no warning on Python 3.12+), the child uses the client, the parent goes on."""
    script = tmp_path / "forks_alone.py"
    script.write_text(FORKS_ALONE)
    body = json.dumps(served.new_sandbox())
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script), body, str(tmp_path / "f")],
        env=emulator_env(served.emu),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    names = "['AnyIO worker thread', 'MainThread', 'sandboxkit-sync', 'sandboxkit-sync-executor']"
    assert done.stdout == f"{names} [1] 0\n"


def test_a_fork_while_another_thread_waits_on_a_call_lets_that_call_finish() -> None:
    """A call in flight when the process forks goes on in the parent at once: the loop's
    thread starts again right after the fork, not only with the next call."""
    loop = Loop()
    started = threading.Event()
    gate: dict[str, Any] = {}

    async def slow() -> str:
        gate["event"], gate["loop"] = asyncio.Event(), asyncio.get_running_loop()
        started.set()
        await gate["event"].wait()
        return "finished"

    results: list[str] = []
    waiter = threading.Thread(target=lambda: results.append(loop.call(slow)))
    try:
        waiter.start()
        assert started.wait(10)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        thread = loop._runner.thread if loop._runner is not None else None
        assert thread is not None and thread.is_alive()  # running again, as the fork returned
        os.waitpid(pid, 0)
        gate["loop"].call_soon_threadsafe(gate["event"].set)
        waiter.join(10)
        assert results == ["finished"]
    finally:
        loop.stop()


def test_a_fork_while_a_host_is_paused_and_a_transfer_is_paced_leaves_both_to_the_parent(
    served: Running, tmp_path: Path
) -> None:
    """Issue 41's state that waits (a host paused by a 429, a transfer drawing on a 1 KiB/s
    budget) is the parent's: the child's client starts with neither host paused and its own
    buckets, and reads both files at once once it lifts the limit; back in the parent the
    pause still holds and the paced download, woken by lifting the limit there, ends whole."""
    from sandboxkit.emulator import Fault

    # The default policy: a 429's Retry-After is waited for, and pauses its host.
    options = {**served.options(), "retry": sandboxkit.RetryPolicy()}
    client = sandboxkit.Client(**options, timeout=sandboxkit.Timeout(read=5))
    portal, call = served.portal, served.portal.call
    paused_host = client.sandbox_from_response(served.new_sandbox())
    paced_host = client.sandbox_from_response(served.new_sandbox())
    for box in (paused_host, paced_host):
        remote = served.emu.sandbox_root(box.sandbox_key) / FILE.lstrip("/")
        remote.parent.mkdir(parents=True, exist_ok=True)
        remote.write_bytes(DATA)
    paused, moving = threading.Event(), threading.Event()

    def heard(origin: str, status: int, seconds: float, event: object) -> None:
        if event is not None:
            paused.set()

    try:
        client._transport.hosts.listeners.append(heard)
        served.emu.faults.script("files.download", Fault.status(429, retry_after="30"))
        waiting = portal.start_task_soon(paused_host.files.read_bytes, FILE)
        assert paused.wait(CHILD_SECONDS)
        call(client.set_budgets, sandboxkit.Budgets(download_bytes_per_second=1024))
        dest = tmp_path / "paced.bin"

        async def paced() -> sandboxkit.DownloadResult:
            return await paced_host.files.download(
                FILE, dest, progress=lambda done, total: moving.set()
            )

        pacing = portal.start_task_soon(paced)
        assert moving.wait(CHILD_SECONDS)  # its first grain moved; the rest waits on 1 KiB/s

        async def child_work() -> dict[str, Any]:
            async with client:
                client.set_budgets(sandboxkit.Budgets())
                hosts = client._transport.hosts
                with anyio.fail_after(10):
                    both = [await b.files.read_bytes(FILE) for b in (paused_host, paced_host)]
                pauses = [p.pause.remaining(hosts.pause_clock()) for p in hosts._pools.values()]
            return {"read": [data == DATA for data in both], "paused": pauses}

        code, report = in_child(lambda: asyncio.run(child_work()))

        assert code == 0, report
        assert report == {"read": [True, True], "paused": [0.0, 0.0]}
        assert not pacing.done() and not waiting.done()
        pool = next(
            p
            for p in client._transport.hosts._pools.values()
            if p.origin == paused_host._host.origin
        )
        assert 20 < pool.pause.remaining(client._transport.hosts.pause_clock()) <= 30
        call(client.set_budgets, sandboxkit.Budgets())
        assert pacing.result(CHILD_SECONDS).size == len(DATA)
        assert dest.read_bytes() == DATA
        waiting.cancel()
    finally:
        call(client.aclose)
