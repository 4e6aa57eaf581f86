"""Helpers shared by the reliability suite (this module holds no tests).

Counters of what a process holds (sockets, RSS), checks that a client left nothing behind
(no busy connection before `aclose()`, no session or socket after it, no temporary file),
the seed handling of every randomized test (`SANDBOXKIT_SEED=` replays one), scripts run in
a fresh Python, outages on a virtual clock, loopback servers that write raw bytes, and a
relay that stops listening (refused connects) and listens again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp

import sandboxkit
from sandboxkit import batch
from sandboxkit.emulator import Emulator, Outage

from .files_support import Box, new_box

PROC_FD = Path("/proc/self/fd")
HAS_PROC = PROC_FD.is_dir() and Path("/proc/net/tcp").exists()
# What a loopback server's `stop` waits at most for its connections' handlers to end.
STOP_SECONDS = 10


async def run_script(script: str, args: object, timeout: float = 120) -> tuple[int, str]:
    """Run `script` in a fresh Python with `args` as JSON in argv[1]; its exit status (-9:
    SIGKILL) and what it printed (stdout, then stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        json.dumps(args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode() + err.decode()


def emulator_env(emu: Emulator) -> dict[str, str]:
    """This process's environment plus what points a child's Client at `emu` (its key and
    base URL)."""
    return {
        **os.environ,
        "SANDBOXKIT_API_KEY": emu.api_key,
        "SANDBOXKIT_BASE_URL": emu.base_url,
    }


def run_on_emulator(
    source: str, path: Path, emu: Emulator, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Write `source` to `path` and run it in a fresh Python on `emu` (`emulator_env`), every
    ResourceWarning shown; its exit status and what it printed."""
    path.write_text(source)
    return subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", str(path)],
        env=emulator_env(emu),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def seed(default: int) -> int:
    """The seed of a randomized test: `SANDBOXKIT_SEED` when set (to replay), else `default`."""
    value = os.environ.get("SANDBOXKIT_SEED")
    return int(value) if value else default


def fd_targets() -> list[str]:
    """What each file descriptor of this process is open on (a path, `socket:[inode]`...)."""
    targets = []
    for fd in os.listdir(PROC_FD):
        try:
            targets.append(os.readlink(PROC_FD / fd))
        except OSError:  # closed meanwhile (the listing's own descriptor, for one)
            continue
    return targets


def _socket_inodes() -> set[str]:
    return {target[8:-1] for target in fd_targets() if target.startswith("socket:[")}


def _tcp_table() -> list[list[str]]:
    """The fields of each TCP socket's line in /proc/net/tcp and tcp6, the kernel's."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        rows.extend(line.split() for line in lines)
    return rows


LISTEN = "0A"  # a TCP state in /proc/net/tcp


def open_sockets() -> int:
    """Sockets this process holds: its socket descriptors (all kinds, servers' included), and
    the connections its listeners have yet to accept.

    The second part makes the count the same on every event loop: libuv (under uvloop)
    accepts one connection per loop turn, so a busy in-process server keeps dozens waiting
    in its backlog, without descriptors, that asyncio's loop would have accepted at once.
    """
    inodes = _socket_inodes()
    # A listener's receive-queue column is its accept backlog's length.
    waiting = sum(
        int(fields[4].split(":")[1], 16)
        for fields in _tcp_table()
        if fields[3] == LISTEN and fields[9] in inodes
    )
    return len(inodes) + waiting


def client_sockets(ports: Iterable[int]) -> int:
    """TCP sockets of this process whose remote end is one of `ports` (the client side)."""
    wanted = set(ports)
    inodes = _socket_inodes()
    return sum(
        1
        for fields in _tcp_table()
        if int(fields[2].rsplit(":", 1)[1], 16) in wanted and fields[9] in inodes
    )


def rss() -> int:
    """The process's resident set size in bytes (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def port_of(url_or_domain: str) -> int:
    """The port at the end of a URL or a `host:port` domain."""
    return int(url_or_domain.rstrip("/").rsplit(":", 1)[1])


def refused_port() -> int:
    """A loopback port nothing listens on (bound, then released without listening)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def part_files(directory: Path) -> list[str]:
    """Partial download files (`.{name}.part`) and their sidecars left in `directory`."""
    return sorted(name for name in os.listdir(directory) if name.endswith((".part", ".part.json")))


def exists(path: Path) -> bool:
    """Whether `path` exists (a plain call, for async tests to use)."""
    return path.exists()


def files_under(directory: Path) -> list[Path]:
    """Every regular file below `directory`, sorted."""
    return sorted(p for p in directory.rglob("*") if p.is_file())


def sessions_of(client: sandboxkit.Client) -> list[aiohttp.ClientSession]:
    """Every aiohttp session the client holds now: the console's and each sandbox host's."""
    transport = client._transport
    sessions = [pool.session for pool in transport.hosts._pools.values()]
    if transport._control is not None:
        sessions.append(transport._control)
    return sessions


def busy_connections(client: sandboxkit.Client) -> int:
    """Connections the client's connectors still count as acquired (held by a request)."""
    total = 0
    for session in sessions_of(client):
        connector = session.connector
        if connector is not None:
            total += len(connector._acquired)
    return total


async def settle(condition: Callable[[], bool], rounds: int = 100) -> bool:
    """Let the loop turn (no wall-clock wait) until `condition()` holds; returns it."""
    for _ in range(rounds):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


async def close_and_check(client: sandboxkit.Client, ports: Iterable[int]) -> None:
    """Assert nothing is left behind: no busy connection before `aclose()`, and after it no
    open session and no client socket to `ports`."""
    wanted = list(ports)
    assert busy_connections(client) == 0, "a connection is still acquired"
    sessions = sessions_of(client)
    await client.aclose()
    assert all(session.closed for session in sessions)
    assert not sessions_of(client)
    if HAS_PROC:
        assert await settle(lambda: client_sockets(wanted) == 0), (
            f"{client_sockets(wanted)} client sockets still open after aclose()"
        )


# -- outages on virtual time, and batches through them ------------------------------


class VirtualTime:
    """A clock that moves only when a call sleeps (to the end of that sleep), with actions
    due at given times (ending an outage, say)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._due: list[tuple[float, Callable[[], Any]]] = []
        # One sleeper at a time moves the clock: an action (an outage ending) finishes
        # before any other sleeper sees the time after it.
        self._turn = asyncio.Lock()

    def clock(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], Any]) -> None:
        self._due.append((when, action))

    async def sleep(self, delay: float) -> None:
        until = self.now + delay  # sleepers due at the same time wake at the same time
        async with self._turn:
            self.sleeps.append(delay)
            # What is due runs before anyone sees the new time.
            for item in [d for d in self._due if d[0] <= until]:
                self._due.remove(item)
                await item[1]()
            self.now = max(self.now, until)
        await asyncio.sleep(0)


def on_virtual_time(client: sandboxkit.Client, time: VirtualTime) -> None:
    """Run `client`'s retry loop, circuits and host pauses on `time`, with no jitter in
    backoff."""
    client._calls.sleep = time.sleep
    client._calls.clock = time.clock
    client._calls.rand = lambda: 0.0
    client._calls.transport.circuits.clock = time.clock
    client._calls.transport.hosts.pause_clock = time.clock
    client._calls.transport.hosts.pause_sleep = time.sleep


@contextlib.asynccontextmanager
async def box_on_virtual_time(emulator: Emulator) -> AsyncIterator[tuple[Box, VirtualTime]]:
    """A new sandbox, seen by a client on virtual time with a 10 s `max_stall`."""
    time = VirtualTime()
    async with emulator.client(retry=sandboxkit.RetryPolicy(max_stall=10.0)) as client:
        on_virtual_time(client, time)
        yield await new_box(emulator, client), time


async def outage_until(emulator: Emulator, time: VirtualTime, end: float, **shape: Any) -> Outage:
    """The emulator taken down now (`Emulator.outage(**shape)`), back at `end` on `time`."""
    stack = contextlib.AsyncExitStack()
    down: Outage = await stack.enter_async_context(emulator.outage(**shape))
    time.at(end, stack.aclose)
    return down


async def same_file_jobs(
    emulator: Emulator,
    hosts: int,
    per_host: int,
    data: bytes,
    dest: Path,
    port: int | None = None,
) -> list[batch.DownloadJob]:
    """`per_host` downloads from each of `hosts` new sandboxes, every file holding `data`,
    into `dest`; with `port`, the sandboxes are reached on it (a relay's) instead."""
    jobs = []
    relayed = f"{emulator.domain.rsplit(':', 1)[0]}:{port}"
    for i in range(hosts):
        body = (await emulator.create_sandbox())["data"]
        root = emulator.sandbox_root(body["sandbox_key"])
        (root / "home/user").mkdir(parents=True, exist_ok=True)
        domain = body["domain"] if port is None else relayed
        ref = batch.SandboxRef(body["sandbox_key"], domain, body["sandbox_access_token"])
        for j in range(per_host):
            (root / f"home/user/{j}.bin").write_bytes(data)
            jobs.append(batch.DownloadJob(ref, f"/home/user/{j}.bin", dest / f"{i}-{j}"))
    return jobs


# -- loopback servers of raw bytes -------------------------------------------------------


def http_answer(
    status: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    length: int | None = None,
) -> bytes:
    """A raw HTTP/1.1 answer; `length` is the Content-Length to claim (default: the truth)."""
    lines = [f"HTTP/1.1 {status} X"]
    claimed = len(body) if length is None else length
    lines += [
        f"{name}: {value}"
        for name, value in {**(headers or {}), "Content-Length": str(claimed)}.items()
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    """The next request head on a connection, or None once the client closed it."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None


class Startable(Protocol):
    """A test server: `start` it, then `stop` it."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


S = TypeVar("S", bound=Startable)


@contextlib.asynccontextmanager
async def started(server: S) -> AsyncIterator[S]:
    """`server` started, and stopped on the way out whatever happened."""
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class LoopbackServer:
    """A server of raw bytes on 127.0.0.1: `start`, `stop` and `port`; a subclass writes
    `_serve`, called for each connection (a client that goes away is no error).

    `stop` closes every connection (each writer in `_writers`), then waits for each `_serve`
    to end: closed, not cancelled, so each sees the end of its streams and returns (a
    cancelled one is logged by asyncio's server as an error).
    """

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=STOP_SECONDS)
        await self._server.wait_closed()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            await self._serve(reader, writer)
        except ConnectionError:
            pass  # the client went away
        finally:
            self._handlers.discard(task)
            self._writers.discard(writer)
            writer.close()


class RawServer(LoopbackServer):
    """A loopback HTTP/1.1 server that writes scripted raw bytes, framing lies included.

    Each request (head, plus a body by its Content-Length) gets the next scripted answer as
    is; `(answer, True)` closes the connection after it, `(answer, False)` keeps it open. An
    unscripted request gets the `always` answer (a 404 unless set). `heads` holds every
    request head received, `connections` counts the connections accepted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.heads: list[bytes] = []
        self.connections = 0
        self._script: list[tuple[bytes, bool]] = []
        self._default = (http_answer(404), True)

    def on(self, answer: bytes, *, close: bool = True) -> None:
        """Answer the next request with `answer`."""
        self._script.append((answer, close))

    def always(self, answer: bytes, *, close: bool = True) -> None:
        """Answer every request not covered by `on` with `answer`."""
        self._default = (answer, close)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while (head := await read_head(reader)) is not None:
            self.heads.append(head)
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":", 1)[1]))
            answer, close = self._script.pop(0) if self._script else self._default
            writer.write(answer)
            await writer.drain()
            if close:
                return


async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy what `source` reads to `sink` until it ends or either side goes away."""
    with contextlib.suppress(ConnectionError):
        while data := await source.read(1 << 16):
            sink.write(data)
            await sink.drain()


class Relay:
    """A TCP relay on one loopback port to the emulator's data server. `refuse()` stops
    listening (connects are refused, as to a host whose server is gone) and resets what it
    relays; `serve()` listens again on the same port.

    Its own accept loop, not `asyncio.start_server`: closing an asyncio server can leak a
    connection accepted in the same loop turn, unanswered (Python 3.11's
    `Server._attach`), and a client then waits out its read timeout on it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._listener: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepted: list[socket.socket] = []  # closed at refuse(), whatever became of them

    async def serve(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(256)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        self._listener = listener
        # Accepted in a plain callback: a cancelled `sock_accept` can drop a connection it
        # has already taken, unclosed.
        asyncio.get_running_loop().add_reader(listener, self._accept, listener)

    async def refuse(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for connection in self._accepted:  # a relay cancelled before it began holds its own
            connection.close()
        self._accepted.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            connection.setblocking(False)
            self._accepted.append(connection)
            self._start(self._relay(connection))

    async def _relay(self, connection: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=connection)
        except BaseException:
            connection.close()
            raise
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            try:
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            finally:
                up_writer.transport.abort()
        finally:
            writer.transport.abort()

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        await pump(source, sink)
        sink.transport.abort()  # one side ended: the exchange is over on both
