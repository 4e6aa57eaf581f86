"""Cases 1 and 2: a large download to disk and a large upload, against the minimal server.

The minimal server sends the file with sendfile and drops uploaded bytes, so nearly all of
the machine's time goes to the client being measured. Every contender reuses one session
(or client) across rounds, as a real program would; a warm-up run comes first.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO, Any

import aiohttp
from _ceiling import ceiling_download
from _measure import Contender, GiB, MiB, Run, Sample, median, paired_ratio, paired_rounds
from _report import CaseResult, Column, target
from _server import ServerProcess, token_for

import sandboxkit
from sandboxkit.emulator import EmulatorResolver

try:
    import httpx
except ImportError:  # httpx is only in the `bench` extra: its contenders are skipped
    httpx = None  # type: ignore[assignment]

KEY = "sbx-bench"
BIG = "/home/user/big.bin"
UPLOADED = "/home/user/uploaded.bin"
# Disk writes leave the event loop in batches of about this size (docs/design.md section 6).
WRITE_BATCH = MiB
CEILING_SHA = "ceiling: socket recv_into 4 MiB ring, hash + write threads, sha256"
CEILING = "ceiling: socket recv_into 4 MiB ring, write thread"
SERVER = "minimal aiohttp.web (benchmarks/_server.py): GET via sendfile"
UPLOAD_SERVER = "lean receiver (benchmarks/_sink.py): POST counted and dropped"


def make_file(path: Path, size: int) -> str:
    """Write `size` pseudo-random bytes to `path`; returns their SHA-256."""
    digest = hashlib.sha256()
    block = os.urandom(MiB)
    with path.open("wb") as out:
        left = size
        while left:
            # A different block each MiB, so no layer can shortcut repeated content.
            block = hashlib.sha256(block[:64]).digest() * (MiB // 32)
            piece = block[: min(MiB, left)]
            out.write(piece)
            digest.update(piece)
            left -= len(piece)
    return digest.hexdigest()


class _BatchWriter:
    """What a careful raw-aiohttp program does: ~1 MiB batches written (and hashed) off-loop."""

    def __init__(self, handle: IO[bytes], hashing: bool) -> None:
        self._handle = handle
        self.hash = hashlib.sha256() if hashing else None
        self._batch: list[bytes] = []
        self._size = 0
        self._loop = asyncio.get_running_loop()

    async def add(self, data: bytes) -> None:
        self._batch.append(data)
        self._size += len(data)
        if self._size >= WRITE_BATCH:
            await self.flush()

    async def flush(self) -> None:
        if self._batch:
            batch, self._batch, self._size = self._batch, [], 0
            await self._loop.run_in_executor(None, self._write, batch)

    def _write(self, batch: list[bytes]) -> None:
        for piece in batch:
            self._handle.write(piece)
            if self.hash is not None:
                self.hash.update(piece)


class Endpoints:
    """The addresses and credentials of one sandbox on the minimal server."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.domain: str = info["domain"]
        self.port = int(self.domain.rsplit(":", 1)[1])
        self.token = token_for(info["secret"], KEY)
        self.host = f"{KEY}.{self.domain}"
        self.url = f"http://{self.host}/files"
        self.base_url: str = info["base_url"]
        self.api_key: str = info["api_key"]


async def raw_download(
    session: aiohttp.ClientSession, url: str, dest: Path | None, chunk: int, hashing: bool
) -> str | None:
    """GET with aiohttp's iter_chunked; to disk in batches off-loop, or discarded."""
    async with session.get(url, params={"path": BIG}) as response:
        response.raise_for_status()
        if dest is None:
            async for _ in response.content.iter_chunked(chunk):
                pass
            return None
        with dest.open("wb") as handle:
            writer = _BatchWriter(handle, hashing)
            async for data in response.content.iter_chunked(chunk):
                await writer.add(data)
            await writer.flush()
        return writer.hash.hexdigest() if writer.hash is not None else None


async def httpx_download(client: Any, ends: Endpoints, dest: Path, chunk: int) -> None:
    """httpx's streaming API, written to disk the same way."""
    url = f"http://127.0.0.1:{ends.port}/files"
    headers = {"Host": ends.host, "X-Access-Token": ends.token}
    async with client.stream("GET", url, params={"path": BIG}, headers=headers) as response:
        response.raise_for_status()
        with dest.open("wb") as handle:
            writer = _BatchWriter(handle, False)
            async for data in response.aiter_raw(chunk):
                await writer.add(data)
            await writer.flush()


def _transfer_rows(
    samples: dict[str, list[Sample]], size: int, refs: dict[str, str]
) -> list[dict[str, Any]]:
    gib = size / GiB
    rows = []
    for name, runs in samples.items():
        ref = refs.get(name)
        row: dict[str, Any] = {
            "contender": name,
            "gb_per_s": median([size / 1e9 / s.wall for s in runs]),
            "cpu_s_per_gib": median([s.cpu / gib for s in runs]),
            "rss_growth_mib": max(s.rss_growth for s in runs) / MiB,
            "minflt_per_gib": median([s.minflt / gib for s in runs]),
            "vs": ref or "",
        }
        if ref is not None:
            row["x_throughput"] = paired_ratio(runs, samples[ref], lambda s: 1 / s.wall)
            row["x_cpu"] = paired_ratio(runs, samples[ref], lambda s: s.cpu)
        rows.append(row)
    return rows


COLUMNS = [
    Column("gb_per_s", "GB/s"),
    Column("x_throughput", "x tput", "{:.3f}"),
    Column("cpu_s_per_gib", "CPU s/GiB"),
    Column("x_cpu", "x CPU", "{:.3f}"),
    Column("rss_growth_mib", "peak RSS +MiB", "{:.1f}"),
    Column("minflt_per_gib", "minflt/GiB", "{:.0f}"),
    Column("vs", "ratio vs"),
]


def _best(samples: dict[str, list[Sample]], names: Sequence[str]) -> str:
    return max(names, key=lambda n: median([1 / s.wall for s in samples[n]]))


async def run_download(size: int, rounds: int, work: Path) -> CaseResult:
    """Case 1: download `size` bytes to disk, sandboxkit against raw aiohttp and httpx."""
    data = work / "data"
    (data / "home/user").mkdir(parents=True, exist_ok=True)
    expected = make_file(data / BIG.lstrip("/"), size)
    out = work / "out"
    out.mkdir(exist_ok=True)
    async with ServerProcess("minimal", {"data_dir": str(data)}) as server:
        ends = Endpoints(server.info)
        resolver = EmulatorResolver()
        async with (
            sandboxkit.Client(
                api_key=ends.api_key,
                base_url=ends.base_url,
                data_plane_scheme="http",
                resolver=resolver,
            ) as client,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=EmulatorResolver()),
                headers={"X-Access-Token": ends.token},
            ) as session,
            # Loopback answers within the default min_latency, so `client` uses one stream;
            # this one splits anyway, to show what slices cost where they cannot pay.
            sandboxkit.Client(
                api_key=ends.api_key,
                base_url=ends.base_url,
                data_plane_scheme="http",
                resolver=resolver,
                parallel_downloads=sandboxkit.ParallelDownloads(min_latency=0),
            ) as splitting,
        ):
            sbx = client.sandbox(sandbox_key=KEY, domain=ends.domain, access_token=ends.token)
            sliced = splitting.sandbox(sandbox_key=KEY, domain=ends.domain, access_token=ends.token)

            def check(dest: Path, digest: str | None) -> None:
                if digest is not None and digest != expected:
                    raise RuntimeError(f"{dest.name}: sha256 mismatch")
                if dest.stat().st_size != size:
                    raise RuntimeError(f"{dest.name}: wrong size")

            def sdk(checksum: bool) -> Callable[[], Any]:
                async def run() -> None:
                    dest = out / f"sdk-{checksum}.bin"
                    result = await sbx.files.download(BIG, dest, checksum=checksum)
                    check(dest, result.sha256 if checksum else None)

                return run

            async def in_slices() -> None:
                dest = out / "sdk-slices.bin"
                result = await sliced.files.download(BIG, dest)
                check(dest, result.sha256)

            def raw(chunk: int, hashing: bool) -> Callable[[], Any]:
                async def run() -> None:
                    dest = out / f"raw-{chunk}-{hashing}.bin"
                    check(dest, await raw_download(session, ends.url, dest, chunk, hashing))

                return run

            async def discard() -> None:
                await raw_download(session, ends.url, None, MiB, False)

            def ceiling(hashing: bool) -> Callable[[], Any]:
                async def run() -> None:
                    dest = out / f"ceiling-{hashing}.bin"
                    digest = await asyncio.to_thread(
                        ceiling_download, ends.port, ends.host, ends.token, BIG, dest, hashing
                    )
                    check(dest, digest)

                return run

            contenders = [
                Contender(CEILING_SHA, ceiling(True)),
                Contender(CEILING, ceiling(False)),
                Contender("sandboxkit download (sha256)", sdk(True)),
                Contender("sandboxkit 8 Range slices (sha256)", in_slices),
                Contender("raw aiohttp 1 MiB + sha256", raw(MiB, True)),
                Contender("raw aiohttp 256 KiB + sha256", raw(256 * 1024, True)),
                Contender("sandboxkit download checksum=False", sdk(False)),
                Contender("raw aiohttp 1 MiB", raw(MiB, False)),
                Contender("raw aiohttp 256 KiB", raw(256 * 1024, False)),
            ]
            notes: list[str] = [
                "raw aiohttp: one session, iter_chunked(N), ~1 MiB batches written (and hashed) "
                "with loop.run_in_executor (docs/design.md section 6); each sandboxkit row is "
                "compared with the faster raw variant doing the same work (by median throughput)",
                "ceiling (benchmarks/_ceiling.py): a blocking socket, a hand-written GET, "
                "recv_into a ring of 4 MiB buffers, each handed to a hash thread and a write "
                "thread at once; the 'vs ceiling' rows are sandboxkit's paired ratios to it",
            ]
            httpx_client = httpx.AsyncClient(timeout=60.0) if httpx is not None else None
            if httpx_client is not None:

                async def via_httpx() -> None:
                    dest = out / "httpx.bin"
                    await httpx_download(httpx_client, ends, dest, MiB)
                    check(dest, None)

                contenders.append(Contender("httpx stream 1 MiB", via_httpx))
            else:
                notes.append("httpx is not installed (pip install -e '.[bench]'): skipped")
            contenders.append(Contender("raw aiohttp 1 MiB, discarded (no disk)", discard))

            async def clean(_: Contender) -> None:
                # Deleting the previous output here keeps its cost out of the measurement
                # and stops dirty pages from piling up towards the kernel's writeback limit.
                for path in out.iterdir():
                    path.unlink()

            try:
                samples = await paired_rounds(contenders, rounds, between=clean)
            finally:
                if httpx_client is not None:
                    await httpx_client.aclose()
                await clean(contenders[0])
    best_sha = _best(samples, ["raw aiohttp 1 MiB + sha256", "raw aiohttp 256 KiB + sha256"])
    best_raw = _best(samples, ["raw aiohttp 1 MiB", "raw aiohttp 256 KiB"])
    refs = {
        "sandboxkit download (sha256)": best_sha,
        "sandboxkit 8 Range slices (sha256)": best_sha,
        "raw aiohttp 1 MiB + sha256": best_sha,
        "raw aiohttp 256 KiB + sha256": best_sha,
        "sandboxkit download checksum=False": best_raw,
        "raw aiohttp 1 MiB": best_raw,
        "raw aiohttp 256 KiB": best_raw,
        "httpx stream 1 MiB": best_raw,
        "raw aiohttp 1 MiB, discarded (no disk)": best_raw,
    }
    rows = _transfer_rows(samples, size, refs)
    # The ceiling's rows, and sandboxkit's ratios against it (issue 18's targets).
    for name, ref in [
        (CEILING_SHA, None),
        (CEILING, None),
        ("sandboxkit download (sha256)", CEILING_SHA),
        ("sandboxkit download checksum=False", CEILING),
    ]:
        if ref is None:
            continue
        extra = _transfer_rows({name: samples[name], ref: samples[ref]}, size, {name: ref})[0]
        extra["contender"] = f"{name} vs ceiling"
        rows.append(extra)
    by_name = {row["contender"]: row for row in rows}
    sha, plain = (
        by_name["sandboxkit download (sha256)"],
        by_name["sandboxkit download checksum=False"],
    )
    sha_ceiling = by_name["sandboxkit download (sha256) vs ceiling"]
    plain_ceiling = by_name["sandboxkit download checksum=False vs ceiling"]
    targets = [
        target("sha256: throughput vs the ceiling", sha_ceiling["x_throughput"], ">= 0.80"),
        target("sha256: CPU/GiB vs the ceiling", sha_ceiling["x_cpu"], "<= 1.25"),
        target("no hash: throughput vs the ceiling", plain_ceiling["x_throughput"], ">= 0.80"),
        target(f"sha256: throughput vs {best_sha}", sha["x_throughput"], ">= 0.95"),
        target(f"sha256: CPU/GiB vs {best_sha}", sha["x_cpu"], "<= 1.10"),
        target(f"no hash: throughput vs {best_raw}", plain["x_throughput"], ">= 0.95"),
        target(f"no hash: CPU/GiB vs {best_raw}", plain["x_cpu"], "<= 1.10"),
        target(
            "sandboxkit peak RSS growth, MiB (worst round)",
            max(sha["rss_growth_mib"], plain["rss_growth_mib"]),
            "< 32",
        ),
    ]
    return CaseResult(
        name="download",
        title=f"1. download {size / MiB:.0f} MiB to disk",
        server=SERVER,
        columns=[*COLUMNS[:-1], Column("server_cpu_per_wall", "server CPU/wall"), COLUMNS[-1]],
        rows=rows,
        targets=targets,
        notes=[
            *notes,
            "server CPU/wall: the receiving server's CPU seconds per wall second of the run; "
            "near 1.0 the server sets the pace on this machine",
        ],
        config={"size_mib": size / MiB, "rounds": rounds},
    )


async def raw_upload(session: aiohttp.ClientSession, url: str, source: Path) -> int:
    """aiohttp's FormData with an open file: the documented way to upload with aiohttp."""
    with source.open("rb") as handle:
        form = aiohttp.FormData()
        form.add_field("file", handle, filename="uploaded.bin")
        async with session.post(url, params={"path": UPLOADED}, data=form) as response:
            response.raise_for_status()
            await response.read()
            return int(response.headers["X-Bench-Received"])


async def httpx_upload(client: Any, ends: Endpoints, source: Path) -> int:
    """httpx's `files=` with an open file."""
    url = f"http://127.0.0.1:{ends.port}/files"
    headers = {"Host": ends.host, "X-Access-Token": ends.token}
    with source.open("rb") as handle:
        response = await client.post(
            url,
            params={"path": UPLOADED},
            headers=headers,
            files={"file": ("uploaded.bin", handle, "application/octet-stream")},
        )
        response.raise_for_status()
        return int(response.headers["X-Bench-Received"])


async def run_upload(size: int, rounds: int, work: Path) -> CaseResult:
    """Case 2: upload a `size`-byte file, sandboxkit against raw aiohttp and httpx."""
    source = work / "upload.bin"
    make_file(source, size)
    async with ServerProcess("minimal", {"data_dir": str(work)}) as server:
        # The lean receiver (_sink.py): aiohttp.web's own parsing set the pace before.
        ends = Endpoints({**server.info, "domain": server.info["sink_domain"]})
        async with (
            sandboxkit.Client(
                api_key=ends.api_key,
                base_url=ends.base_url,
                data_plane_scheme="http",
                resolver=EmulatorResolver(),
            ) as client,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=EmulatorResolver()),
                headers={"X-Access-Token": ends.token},
            ) as session,
        ):
            sbx = client.sandbox(sandbox_key=KEY, domain=ends.domain, access_token=ends.token)

            def check(received: int) -> None:
                # The multipart framing adds a few hundred bytes around the file.
                if not size <= received < size + 4096:
                    raise RuntimeError(f"the server received {received} bytes for {size}")

            def server_cpu(run: Callable[[], Awaitable[object]]) -> Run:
                # The receiving server's CPU in the same run: at 1.0 s per wall second it,
                # not the client, sets the pace, and a leaner client shows only in its CPU.
                async def measured() -> dict[str, float]:
                    before = server.cpu_seconds()
                    await run()
                    return {"server_cpu": server.cpu_seconds() - before}

                return measured

            @server_cpu
            async def sdk() -> None:
                await sbx.files.upload(UPLOADED, source)

            @server_cpu
            async def raw() -> None:
                check(await raw_upload(session, ends.url, source))

            contenders = [
                Contender("sandboxkit upload (path)", sdk),
                Contender("raw aiohttp FormData(open file)", raw),
            ]
            notes: list[str] = []
            httpx_client = httpx.AsyncClient(timeout=60.0) if httpx is not None else None
            if httpx_client is not None:

                @server_cpu
                async def via_httpx() -> None:
                    check(await httpx_upload(httpx_client, ends, source))

                contenders.append(Contender("httpx files=(open file)", via_httpx))
            else:
                notes.append("httpx is not installed (pip install -e '.[bench]'): skipped")
            try:
                samples = await paired_rounds(contenders, rounds)
            finally:
                if httpx_client is not None:
                    await httpx_client.aclose()
    source.unlink()
    ref = "raw aiohttp FormData(open file)"
    rows = _transfer_rows(samples, size, {name: ref for name in samples})
    for row, runs in zip(rows, samples.values(), strict=True):
        row["server_cpu_per_wall"] = median([s.extra["server_cpu"] / s.wall for s in runs])
    sdk_row = rows[0]
    targets = [
        target(f"throughput vs {ref}", sdk_row["x_throughput"], ">= 0.90"),
        target("sandboxkit peak RSS growth, MiB (worst round)", sdk_row["rss_growth_mib"], "< 32"),
    ]
    return CaseResult(
        name="upload",
        title=f"2. upload {size / MiB:.0f} MiB (multipart)",
        server=UPLOAD_SERVER,
        columns=[*COLUMNS[:-1], Column("server_cpu_per_wall", "server CPU/wall"), COLUMNS[-1]],
        rows=rows,
        targets=targets,
        notes=[
            *notes,
            "server CPU/wall: the receiving server's CPU seconds per wall second of the run; "
            "near 1.0 the server sets the pace on this machine",
        ],
        config={"size_mib": size / MiB, "rounds": rounds},
    )
