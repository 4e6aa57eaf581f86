"""Case 9: small files at the speed of the machine (issue 32).

10,000 reads of a 16 KiB file spread over 1,000 sandbox hosts at concurrency 256, the way a
batch job collects results. Three clients, each run in a fresh process of its own (so one's
garbage, caches and sockets never weigh on another's), in paired rounds, against
`_fastserver.py` (a server that is never the bottleneck):

* sandboxkit: `sandbox.files.read_bytes` with the default client;
* raw aiohttp: one `ClientSession` per host with the host's token as a default header (the
  pattern a careful user writes by hand), created on the host's first read;
* the floor: a hand-written asyncio client, a `Protocol` per connection, a minimal
  HTTP/1.1 parse (status line, Content-Length, body), keep-alive per host, up to 8
  connections a host: what the machine can do in Python, and the target of a lean path.

Reported: wall time, requests per second, client CPU per 1,000 requests (user + system of the
client process over the fan-out, client set-up included, imports not), and each as a paired
ratio to raw aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import aiohttp
from _measure import fan_out, median, paired_ratio
from _report import CaseResult, Column, target
from _server import ServerProcess, token_for

import sandboxkit
from sandboxkit.emulator import EmulatorResolver

HERE = Path(__file__).resolve().parent
SMALL = "/home/user/small.bin"
FILE_SIZE = 16 * 1024
PER_HOST = 8
SECRET = "case-9"
CONTENDERS = ("sandboxkit read_bytes", "raw aiohttp, a session per host", "floor: asyncio Protocol")
KINDS = dict(zip(CONTENDERS, ("sdk", "aiohttp", "floor"), strict=True))
SERVER = "benchmarks/_fastserver.py: asyncio Protocol, file from memory, keep-alive"


async def run(requests: int, hosts: int, concurrency: int, rounds: int) -> CaseResult:
    """Run case 9; each contender in a fresh process, the order alternating each round."""
    config = {"file_size": FILE_SIZE, "hosts": hosts, "secret": SECRET}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in CONTENDERS}
    async with ServerProcess("fast", config, script=HERE / "_fastserver.py") as server:
        job = {
            **config,
            "requests": requests,
            "concurrency": concurrency,
            "domain": server.info["domain"],
            "port": server.info["port"],
        }
        for index in range(rounds):
            order = CONTENDERS if index % 2 == 0 else CONTENDERS[::-1]
            for name in order:
                served_before = server.cpu_seconds()
                sample = await asyncio.to_thread(_child, {**job, "kind": KINDS[name]})
                sample["server_cpu"] = server.cpu_seconds() - served_before
                counts = await server.command("requests")
                sample["served"], sample["connects"] = counts["served"], counts["connects"]
                samples[name].append(sample)
    reference = samples[CONTENDERS[1]]
    rows = []
    for name, runs in samples.items():
        rows.append(
            {
                "contender": name,
                "wall_s": median([s["wall"] for s in runs]),
                "per_s": median([requests / s["wall"] for s in runs]),
                "cpu_ms_per_1000": median([s["cpu"] / requests * 1e6 for s in runs]),
                "x_wall": paired_ratio(runs, reference, lambda s: s["wall"]),
                "x_cpu": paired_ratio(runs, reference, lambda s: s["cpu"]),
                "server_load": median([s["server_cpu"] / s["wall"] for s in runs]),
                "connects": median([s["connects"] for s in runs]),
                "errors": sum(s["errors"] for s in runs),
            }
        )
    sdk, floor = rows[0], rows[2]
    return CaseResult(
        name="smallfiles",
        title=f"9. small files: {requests} reads of {FILE_SIZE // 1024} KiB over {hosts} "
        f"hosts, concurrency {concurrency}, each client a fresh process",
        server=SERVER,
        columns=[
            Column("wall_s", "wall s", "{:.2f}"),
            Column("per_s", "requests/s", "{:.0f}"),
            Column("cpu_ms_per_1000", "CPU ms / 1,000 req", "{:.0f}"),
            Column("x_wall", "x wall vs aiohttp", "{:.2f}"),
            Column("x_cpu", "x CPU vs aiohttp", "{:.2f}"),
            Column("server_load", "server CPU / wall", "{:.2f}"),
            Column("connects", "connects", "{:.0f}"),
            Column("errors", "errors", "{:.0f}"),
        ],
        rows=rows,
        targets=[
            target("sandboxkit: wall vs raw aiohttp (parity)", sdk["x_wall"], "<= 1"),
            target("sandboxkit: CPU vs raw aiohttp (parity)", sdk["x_cpu"], "<= 1"),
            target("sandboxkit: requests/s vs raw aiohttp (stretch)", 1 / sdk["x_wall"], ">= 1.5"),
            target(
                "sandboxkit: CPU per request vs the floor (stretch)",
                sdk["cpu_ms_per_1000"] / floor["cpu_ms_per_1000"],
                "<= 3",
            ),
            *(target(f"{row['contender']}: errors", row["errors"], "== 0") for row in rows),
        ],
        notes=[
            "x ratios: medians over rounds of the contender over raw aiohttp in the same round",
            "server CPU / wall: near 1.0 the server would set the pace (it does not: the "
            "floor client's rate shows the server's headroom)",
        ],
        config={**job, "rounds": rounds},
    )


def _child(job: dict[str, Any]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), json.dumps(job)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{job['kind']} client failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


# --- child side --------------------------------------------------------------------------------


def _work(job: dict[str, Any]) -> tuple[list[int], list[str], list[str], bytes]:
    keys = [f"sbx-{index:04d}" for index in range(job["hosts"])]
    tokens = [token_for(job["secret"], key) for key in keys]
    order = random.Random(7).choices(range(job["hosts"]), k=job["requests"])
    content = random.Random(9).randbytes(job["file_size"])
    return order, keys, tokens, content


async def _sdk(job: dict[str, Any]) -> int:
    order, keys, tokens, content = _work(job)
    async with sandboxkit.Client(
        api_key="unused",
        base_url="http://console.invalid",
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
    ) as client:
        handles = [
            client.sandbox(sandbox_key=key, domain=job["domain"], access_token=token).files
            for key, token in zip(keys, tokens, strict=True)
        ]

        async def fetch(host: int) -> bytes:
            return await handles[host].read_bytes(SMALL)

        return await fan_out(order, job["concurrency"], fetch, content)


async def _aiohttp(job: dict[str, Any]) -> int:
    order, keys, tokens, content = _work(job)
    sessions: dict[int, aiohttp.ClientSession] = {}
    resolver = EmulatorResolver()

    async def fetch(host: int) -> bytes:
        session = sessions.get(host)
        if session is None:
            session = sessions[host] = aiohttp.ClientSession(
                f"http://{keys[host]}.{job['domain']}",
                connector=aiohttp.TCPConnector(limit_per_host=PER_HOST, resolver=resolver),
                headers={"X-Access-Token": tokens[host]},
            )
        async with session.get("/files", params={"path": SMALL}) as response:
            response.raise_for_status()
            return await response.read()

    try:
        return await fan_out(order, job["concurrency"], fetch, content)
    finally:
        for session in sessions.values():
            await session.close()


class _Connection(asyncio.Protocol):
    """The floor client's connection: one request at a time, its answer parsed minimally."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[bytes] | None = None
        self._buffer = bytearray()
        self._need = -1  # body bytes still to come; -1: reading the head

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, but not always an asyncio.Transport: uvloop's do not subclass
        # asyncio's classes, so isinstance() would refuse them.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if self._need < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end])
            del buffer[: end + 4]
            if not head.startswith(b"HTTP/1.1 200"):
                self._fail(RuntimeError(head.split(b"\r\n", 1)[0].decode()))
                return
            start = head.lower().find(b"content-length:") + 15
            end = head.find(b"\r\n", start)
            self._need = int(head[start : end if end >= 0 else len(head)])
        if len(buffer) >= self._need:
            body = bytes(buffer[: self._need])
            del buffer[: self._need]
            self._need = -1
            waiter, self.waiter = self.waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(body)

    def _fail(self, exc: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("closed"))


async def _floor(job: dict[str, Any]) -> int:
    order, keys, tokens, content = _work(job)
    loop = asyncio.get_running_loop()
    port = job["port"]
    idle: dict[int, list[_Connection]] = {}
    slots: dict[int, asyncio.Semaphore] = {}
    requests = [
        (
            f"GET /files?path=%2Fhome%2Fuser%2Fsmall.bin HTTP/1.1\r\n"
            f"Host: {key}.{job['domain']}\r\nX-Access-Token: {token}\r\n\r\n"
        ).encode()
        for key, token in zip(keys, tokens, strict=True)
    ]

    async def fetch(host: int) -> bytes:
        slot = slots.get(host)
        if slot is None:
            slot = slots[host] = asyncio.Semaphore(PER_HOST)
        async with slot:
            pool = idle.setdefault(host, [])
            if pool:
                connection = pool.pop()
            else:
                _, connection = await loop.create_connection(_Connection, "127.0.0.1", port)
            connection.waiter = loop.create_future()
            assert connection.transport is not None
            connection.transport.write(requests[host])
            body = await connection.waiter
            pool.append(connection)
            return body

    try:
        return await fan_out(order, job["concurrency"], fetch, content)
    finally:
        for pool in idle.values():
            for connection in pool:
                if connection.transport is not None:
                    connection.transport.close()


def main(argv: list[str]) -> int:
    """Run one client (`kind` in the JSON job `argv[0]`); print its figures as one JSON line."""
    job = json.loads(argv[0])
    client = {"sdk": _sdk, "aiohttp": _aiohttp, "floor": _floor}[job["kind"]]
    # What a process pays once (imports a client makes on first use: anyio's backend,
    # OpenTelemetry's API) is paid before the clock starts, as imports are: one read with a
    # client of its own, closed again.
    asyncio.run(client({**job, "requests": 1, "concurrency": 1}))
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    errors = asyncio.run(client(job))
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({"wall": wall, "cpu": cpu, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
