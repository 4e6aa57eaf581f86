"""The link case's client side: one contender's download in a fresh process, as JSON.

`benchmarks/_link.py` starts ``python _linkclient.py CONFIG_JSON`` inside the client's
network namespace, once per contender and round, so every run starts from a process that
has done nothing yet: its peak RSS growth is its own, and no connection is reused from an
earlier run. The process sets up its session (or Client), then measures one download with
`_measure.measure` (wall time, CPU of the whole process, peak RSS sampled from a thread)
and prints one JSON line. Kinds:

* ``raw``: aiohttp, one GET, `iter_chunked(1 MiB)`, ~1 MiB batches hashed and written
  off-loop (`_transfer.raw_download`, as case 1's raw contender);
* ``ranged``: aiohttp, a HEAD for the size, then `parts` equal `Range` slices on `parts`
  connections, each written in place with `os.pwritev` off-loop in ~1 MiB batches (the
  issue's reference); its SHA-256 is computed from the file after the clock stops;
* ``sdk``: `sbx.files.download(remote, dest)` with SHA-256 on; with `parts`, when
  `sandboxkit.ParallelDownloads` exists, through ``Client(parallel_downloads=...)`` and
  ``download(..., parts=n)``; ``parts: null`` uses the client's defaults;
* ``probe``: no download: the time of `count` TCP connects (the link's RTT) in ms.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

# This directory holds the helper modules; running the file as a script puts it on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
from _measure import MiB, measure
from _server import die_with_parent
from _transfer import raw_download
from aiohttp.abc import AbstractResolver, ResolveResult

import sandboxkit

KEY = "sbx-bench"


class LinkResolver(AbstractResolver):
    """Every ``*.sandbox.test`` name to the server's address; nothing else resolves."""

    def __init__(self, address: str) -> None:
        self._address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The server's address for the benchmark's names."""
        if not host.lower().rstrip(".").endswith("sandbox.test"):
            raise OSError(f"the link resolver does not resolve {host!r}")
        return [
            ResolveResult(
                hostname=host,
                host=self._address,
                port=port,
                family=socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        """Nothing to release."""


async def ranged_download(
    session: aiohttp.ClientSession, url: str, remote: str, dest: Path, parts: int
) -> int:
    """Equal `Range` slices on `parts` connections, each written in place; returns the size."""
    async with session.head(url, params={"path": remote}) as response:
        response.raise_for_status()
        size = int(response.headers["Content-Length"])
    loop = asyncio.get_running_loop()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        step = -(-size // parts)

        async def fetch(start: int, end: int) -> None:
            headers = {"Range": f"bytes={start}-{end}"}
            async with session.get(url, params={"path": remote}, headers=headers) as answer:
                if answer.status != 206:
                    raise RuntimeError(f"slice {start}-{end}: status {answer.status}")
                offset, batch, batched = start, [], 0
                async for data in answer.content.iter_chunked(MiB):
                    batch.append(data)
                    batched += len(data)
                    if batched >= MiB:
                        await loop.run_in_executor(None, os.pwritev, fd, batch, offset)
                        offset, batch, batched = offset + batched, [], 0
                if batch:
                    await loop.run_in_executor(None, os.pwritev, fd, batch, offset)
                    offset += batched
                if offset != end + 1:
                    raise RuntimeError(f"slice {start}-{end} ended at {offset}")

        await asyncio.gather(*(fetch(s, min(s + step, size) - 1) for s in range(0, size, step)))
    finally:
        os.close(fd)
    return size


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read back in 4 MiB pieces."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while piece := handle.read(4 * MiB):
            digest.update(piece)
    return digest.hexdigest()


async def probe(config: dict[str, Any]) -> dict[str, Any]:
    """Time `count` TCP connects to the server: each is one round trip across the line."""
    times = []
    for _ in range(int(config["count"])):
        started = time.perf_counter()
        _, writer = await asyncio.open_connection(config["address"], config["port"])
        times.append((time.perf_counter() - started) * 1e3)
        writer.close()
        await writer.wait_closed()
    return {"connect_ms": sorted(times)}


async def run(config: dict[str, Any]) -> dict[str, Any]:
    """Set up the contender named by `config["kind"]`, measure one download, report it."""
    if config["kind"] == "probe":
        return await probe(config)
    dest = Path(config["dest"])
    remote, address = config["remote"], config["address"]
    host = f"{KEY}.{config['domain']}"
    url = f"http://{host}/files"
    result: dict[str, Any] = {}
    if config["kind"] in ("raw", "ranged"):
        parts = int(config.get("parts") or 1)
        connector = aiohttp.TCPConnector(resolver=LinkResolver(address), limit=max(parts, 1))
        async with aiohttp.ClientSession(
            connector=connector, headers={"X-Access-Token": config["token"]}
        ) as session:

            async def transfer() -> None:
                if config["kind"] == "raw":
                    result["sha256"] = await raw_download(session, url, dest, MiB, True)
                else:
                    await ranged_download(session, url, remote, dest, parts)

            sample = await measure(transfer)  # type: ignore[arg-type]
        if config["kind"] == "ranged":
            result["sha256"] = file_sha256(dest)
            result["sha256_after"] = True
    else:
        parts = config.get("parts")
        options: dict[str, Any] = {}
        call: dict[str, Any] = {}
        if hasattr(sandboxkit, "ParallelDownloads") and parts is not None:
            call["parts"] = int(parts)
            if parts > 1:
                options["parallel_downloads"] = sandboxkit.ParallelDownloads(
                    threshold=MiB, parts=int(parts)
                )
        elif parts not in (None, 1):
            return {"unavailable": "sandboxkit.ParallelDownloads does not exist in this tree"}
        async with sandboxkit.Client(
            api_key=config["api_key"],
            base_url=config["base_url"],
            data_plane_scheme="http",
            resolver=LinkResolver(address),
            **options,
        ) as client:
            sbx = client.sandbox(
                sandbox_key=KEY, domain=config["domain"], access_token=config["token"]
            )

            async def transfer() -> None:
                done = await sbx.files.download(remote, dest, checksum=True, **call)
                result["sha256"] = done.sha256

            sample = await measure(transfer)  # type: ignore[arg-type]
    result.update(
        wall=sample.wall,
        cpu=sample.cpu,
        rss_growth=sample.rss_growth,
        minflt=sample.minflt,
        size=await asyncio.to_thread(os.path.getsize, dest),
    )
    return result


def main(argv: list[str]) -> int:
    """Run one contender with the JSON config `argv[0]`; print its figures as JSON."""
    die_with_parent()
    print(json.dumps(asyncio.run(run(json.loads(argv[0])))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
