"""Helpers shared by the reliability suite (this module holds no tests).

Counters of what a process holds (sockets, RSS), checks that a client left nothing behind
(no busy connection before `aclose()`, no session or socket after it, no temporary file), and
the seed handling of every randomized test (`SANDBOXKIT_SEED=` replays one).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import aiohttp

import sandboxkit

PROC_FD = Path("/proc/self/fd")
HAS_PROC = PROC_FD.is_dir() and Path("/proc/net/tcp").exists()


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


def seed(default: int) -> int:
    """The seed of a randomized test: `SANDBOXKIT_SEED` when set (to replay), else `default`."""
    value = os.environ.get("SANDBOXKIT_SEED")
    return int(value) if value else default


def _socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir(PROC_FD):
        try:
            target = os.readlink(PROC_FD / fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def open_sockets() -> int:
    """Socket file descriptors this process holds (all kinds, servers' included)."""
    return len(_socket_inodes())


def client_sockets(ports: Iterable[int]) -> int:
    """TCP sockets of this process whose remote end is one of `ports` (the client side)."""
    wanted = set(ports)
    inodes = _socket_inodes()
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) in wanted and fields[9] in inodes:
                count += 1
    return count


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


class LoopbackServer:
    """A server of raw bytes on 127.0.0.1: `start`, `stop` (closing every connection it
    holds in `_writers`) and `port`; a subclass writes `_serve`."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()


class RawServer(LoopbackServer):
    """A loopback HTTP/1.1 server that writes scripted raw bytes, framing lies included.

    Each request (head, plus a body by its Content-Length) gets the next scripted answer as
    is; `(answer, True)` closes the connection after it, `(answer, False)` keeps it open. An
    unscripted request gets the `always` answer (a 404 unless set). `heads` holds every
    request head received.
    """

    def __init__(self) -> None:
        super().__init__()
        self.heads: list[bytes] = []
        self._script: list[tuple[bytes, bool]] = []
        self._default = (http_answer(404), True)

    def on(self, answer: bytes, *, close: bool = True) -> None:
        """Answer the next request with `answer`."""
        self._script.append((answer, close))

    def always(self, answer: bytes, *, close: bool = True) -> None:
        """Answer every request not covered by `on` with `answer`."""
        self._default = (answer, close)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                self.heads.append(head)
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        await reader.readexactly(int(line.split(b":", 1)[1]))
                answer, close = self._script.pop(0) if self._script else self._default
                writer.write(answer)
                await writer.drain()
                if close:
                    return
        except ConnectionError:
            return
        finally:
            self._writers.discard(writer)
            writer.close()
