"""Peak RSS growth of the client while uploading and downloading a large file
(docs/design.md section 6).

The emulator runs in a child process, so only the client's memory is measured. Each phase
samples this process's resident set every few milliseconds from a thread and reports the
peak minus the resident size at the start of the phase. A raw-aiohttp download runs too, as
the yardstick (it grows 1 to 4 MiB). The issue's bound is 32 MiB; the exit status is 1 when
a sandboxkit phase exceeds it.

Usage::

    python benchmarks/transfer_memory.py            # 1 GiB each way
    python benchmarks/transfer_memory.py --quick    # 64 MiB, a smoke run
    python benchmarks/transfer_memory.py --size-mib 256
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import multiprocessing
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

import sandboxkit
from sandboxkit.emulator import Emulator, EmulatorResolver, Idc

MiB = 1 << 20
BOUND_MIB = 32.0
REMOTE = "/home/user/big.bin"


# --- the emulator, in its own process -------------------------------------------------------


def _serve(conn: Connection) -> None:
    asyncio.run(_serve_until_told(conn))


async def _serve_until_told(conn: Connection) -> None:
    async with Emulator(idcs=[Idc("us-denver-1")]) as emu:
        body = await emu.create_sandbox()
        conn.send(
            {
                "base_url": emu.base_url,
                "api_key": emu.api_key,
                "scheme": emu.data_plane_scheme,
                "sandbox": body,
            }
        )
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until "stop"


# --- measuring ------------------------------------------------------------------------------


def resident_bytes() -> int:
    """This process's current resident set size (Linux), else its peak so far."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


class PeakSampler:
    """Samples the resident set from a thread while a phase runs."""

    def __init__(self, interval: float = 0.002) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self.start_bytes = 0
        self.peak_bytes = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, resident_bytes())
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakSampler:
        self.start_bytes = self.peak_bytes = resident_bytes()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, resident_bytes())

    @property
    def growth_mib(self) -> float:
        """Peak minus start, in MiB."""
        return (self.peak_bytes - self.start_bytes) / MiB


async def measure(name: str, size: int, run: Callable[[], Awaitable[Any]]) -> float:
    """Run one phase, print its throughput and RSS growth, return the growth in MiB."""
    with PeakSampler() as sampler:
        started = time.perf_counter()
        await run()
        elapsed = time.perf_counter() - started
    print(
        f"{name:<28} {size / MiB:>7.0f} MiB {size / MiB / elapsed:>8.1f} MiB/s "
        f"{sampler.growth_mib:>8.1f} MiB RSS growth"
    )
    return sampler.growth_mib


# --- the phases -----------------------------------------------------------------------------


def make_source(path: Path, size: int) -> str:
    """Write `size` bytes (a random MiB repeated) and return their SHA-256."""
    block = os.urandom(MiB)
    digest = hashlib.sha256()
    with path.open("wb") as out:
        left = size
        while left:
            piece = block[: min(MiB, left)]
            out.write(piece)
            digest.update(piece)
            left -= len(piece)
    return digest.hexdigest()


async def raw_aiohttp_download(info: dict[str, Any], dest: Path) -> None:
    """The yardstick: aiohttp's iter_chunked straight into a file, nothing else."""
    data = info["sandbox"]["data"]
    url = f"{info['scheme']}://{data['sandbox_key']}.{data['domain']}/files"
    connector = aiohttp.TCPConnector(resolver=EmulatorResolver())
    headers = {"X-Access-Token": data["sandbox_access_token"]}
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(url, params={"path": REMOTE}, headers=headers) as response,
    ):
        response.raise_for_status()
        with dest.open("wb") as out:  # the yardstick writes on the loop, as most code does
            async for chunk in response.content.iter_chunked(MiB):
                out.write(chunk)


async def run(size: int) -> int:
    """Upload, download and the raw yardstick; returns the exit status."""
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(child,))
    server.start()
    try:
        info = await asyncio.get_running_loop().run_in_executor(None, parent.recv)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            source = work / "source.bin"
            expected = make_source(source, size)
            async with sandboxkit.Client(
                api_key=info["api_key"],
                base_url=info["base_url"],
                data_plane_scheme=info["scheme"],
                resolver=EmulatorResolver(),
            ) as client:
                sbx = client.sandbox_from_response(info["sandbox"])
                # Warm up: sessions, worker threads and lazy imports exist before measuring.
                await sbx.files.upload("/home/user/warm.bin", os.urandom(4 * MiB))
                await sbx.files.download("/home/user/warm.bin", work / "warm.bin")
                up = await measure(
                    "sandboxkit upload (path)", size, lambda: sbx.files.upload(REMOTE, source)
                )
                (work / "warm.bin").unlink()
                result: list[sandboxkit.DownloadResult] = []

                async def download() -> None:
                    result.append(await sbx.files.download(REMOTE, work / "down.bin"))

                down = await measure("sandboxkit download", size, download)
                if result[0].sha256 != expected:
                    print("sha256 MISMATCH after download", file=sys.stderr)
                    return 2
                (work / "down.bin").unlink()
            await measure(
                "raw aiohttp download", size, lambda: raw_aiohttp_download(info, work / "raw.bin")
            )
    finally:
        parent.send("stop")
        server.join(timeout=30)
    worst = max(up, down)
    verdict = "within" if worst <= BOUND_MIB else "OVER"
    print(f"sandboxkit peak RSS growth {worst:.1f} MiB: {verdict} the {BOUND_MIB:.0f} MiB bound")
    return 0 if worst <= BOUND_MIB else 1


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-mib", type=int, default=1024, help="file size (default 1024)")
    parser.add_argument("--quick", action="store_true", help="64 MiB smoke run")
    args = parser.parse_args(argv)
    size = (64 if args.quick else args.size_mib) * MiB
    return asyncio.run(run(size))


if __name__ == "__main__":
    sys.exit(main())
