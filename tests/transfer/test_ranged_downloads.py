"""Parallel ranged downloads over loopback against the emulator: bytes and sha256 right for
sizes around the threshold and the slice boundaries, each slice resumed on its own, a size
change restarting the whole download, fallbacks, 429s, cancellation, a killed process's
rerun fetching only the gaps, one connection per host, and memory that stays flat."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import pickle
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import sandboxkit
from sandboxkit import sync
from sandboxkit._transfer.inplace import InPlace
from sandboxkit._transfer.sinks import WRITE_BATCH, PartOf, open_part, part_paths
from sandboxkit.emulator import Emulator, Fault

from ..cli_support import EmulatorThread
from ..files_support import NO_RESUME, Box, new_box, payload, sha
from ..reliability_support import busy_connections, part_files, run_script

KiB, MiB = 1 << 10, 1 << 20
REMOTE = "/home/user/big.bin"
THRESHOLD = 1 * MiB  # small, so tests move a few MiB; pieces are then >= 256 KiB
PARTS = 4


def split_client(emu: Emulator, **options: Any) -> sandboxkit.Client:
    options.setdefault(
        "parallel_downloads",
        sandboxkit.ParallelDownloads(threshold=THRESHOLD, parts=PARTS, min_latency=0),
    )
    return emu.client(retry=sandboxkit.RetryPolicy.no_delay(), **options)


@pytest.fixture
async def split_box(emulator: Emulator) -> AsyncIterator[Box]:
    """A sandbox on the resume IDC, seen through a client that splits files >= 1 MiB."""
    async with split_client(emulator) as client:
        yield await new_box(emulator, client)


def ranges(emu: Emulator) -> list[str | None]:
    """The Range header of every download request, in order."""
    return [r.headers.get("Range") for r in emu.journal_for("files.download")]


def spans(headers: list[str | None]) -> list[tuple[int, int]]:
    """`bytes=a-b` headers as half-open spans (closed ranges only)."""
    out = []
    for header in headers:
        assert header is not None and header.startswith("bytes=")
        first, last = header[6:].split("-")
        out.append((int(first), int(last) + 1))
    return out


def write_spans(path: Path, data: bytes, held: list[tuple[int, int]]) -> None:
    """A part holding `data`'s bytes in `held` only (zeros elsewhere)."""
    with open(path, "wb") as handle:
        for start, end in held:
            handle.seek(start)
            handle.write(data[start:end])


def replace(box: Box, remote: str, data: bytes) -> None:
    """Swap the sandbox file atomically (answers in flight keep reading the old one)."""
    target = box.root / remote.lstrip("/")
    scratch = target.with_name(target.name + ".new")
    scratch.write_bytes(data)
    os.replace(scratch, target)


@pytest.mark.parametrize(
    "size",
    [
        THRESHOLD - 1,
        THRESHOLD,
        THRESHOLD + 1,
        16 * 256 * KiB,  # exactly 16 pieces of the smallest size
        16 * 256 * KiB - 1,
        16 * 256 * KiB + 1,
        5 * MiB + 3,
    ],
)
async def test_bytes_and_sha256_are_right_for_sizes_around_threshold_and_boundaries(
    emulator: Emulator, split_box: Box, tmp_path: Path, size: int
) -> None:
    """The first GET has no Range; past the threshold the others are closed ranges that
    cover the rest of the file exactly once; `attempts` counts every GET."""
    data = payload(size, seed=size)
    split_box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    done: list[int] = []
    result = await split_box.files.download(REMOTE, dest, progress=lambda d, _: done.append(d))
    assert dest.read_bytes() == data
    assert max(done) == size  # no byte counted twice: the first answer stopped at its slice
    assert (result.size, result.sha256, result.resumes) == (size, sha(data), 0)
    seen = ranges(emulator)
    assert seen[0] is None and result.attempts == len(seen)
    if size < THRESHOLD:
        assert seen == [None]
    else:
        rest = sorted(spans(seen[1:]))
        assert len(rest) >= 3
        # The first answer was read up to the first slice's end, the rest tile the file.
        assert all(a[1] == b[0] for a, b in itertools.pairwise(rest))
        assert rest[-1][1] == size
    assert os.listdir(tmp_path) == ["big.bin"]


async def test_a_cut_slice_resumes_with_range_from_where_it_got_to(
    emulator: Emulator, split_box: Box, tmp_path: Path
) -> None:
    """The second request (the first slice on another connection) is cut after 100,000
    bytes: its next GET asks from exactly there to the slice's end, and counts as a resume."""
    data = payload(4 * MiB, seed=3)
    split_box.put(REMOTE, data)
    emulator.faults.script("files.download", Fault.delay(0), Fault.cut(after_bytes=100_000))
    result = await split_box.files.download(REMOTE, tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data and result.sha256 == sha(data)
    seen = ranges(emulator)
    (start, end), *_ = spans([seen[1]])
    assert f"bytes={start + 100_000}-{end - 1}" in seen
    assert result.resumes == 1 and result.attempts == len(seen)


async def test_a_size_change_mid_download_starts_the_whole_download_over(
    emulator: Emulator, tmp_path: Path
) -> None:
    """The file is replaced (another size) as the first slice is requested: that slice's
    206 shows the new total, and the download begins again with a whole GET."""
    old, new = payload(3 * MiB, seed=4), payload(3 * MiB + 12_345, seed=5)
    box: Box | None = None
    swapped = False

    def on_request(event: sandboxkit.RequestEvent) -> None:
        nonlocal swapped
        if not swapped and len(emulator.journal_for("files.download")) == 1:
            assert box is not None
            replace(box, REMOTE, new)
            swapped = True

    async with split_client(emulator, on_request=on_request) as client:
        box = await new_box(emulator, client)
        box.put(REMOTE, old)
        result = await box.files.download(REMOTE, tmp_path / "big.bin")
    assert swapped
    assert (tmp_path / "big.bin").read_bytes() == new
    assert (result.size, result.sha256) == (len(new), sha(new))
    assert ranges(emulator).count(None) == 2  # the first GET, and the one after the change
    assert os.listdir(tmp_path) == ["big.bin"]


async def test_a_data_center_without_range_support_gets_one_stream(
    emulator: Emulator, tmp_path: Path
) -> None:
    data = payload(3 * MiB, seed=6)
    async with split_client(emulator) as client:
        box = await new_box(emulator, client, NO_RESUME)
        box.put(REMOTE, data)
        result = await box.files.download(REMOTE, tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data and result.sha256 == sha(data)
    assert ranges(emulator) == [None] and result.attempts == 1


async def test_parts_1_and_iter_bytes_use_one_stream(
    emulator: Emulator, split_box: Box, tmp_path: Path
) -> None:
    data = payload(3 * MiB, seed=7)
    split_box.put(REMOTE, data)
    result = await split_box.files.download(REMOTE, tmp_path / "a.bin", parts=1)
    assert result.sha256 == sha(data) and ranges(emulator) == [None]
    chunks = [chunk async for chunk in split_box.files.iter_bytes(REMOTE)]
    assert b"".join(chunks) == data and ranges(emulator) == [None, None]
    assert await split_box.files.read_bytes(REMOTE) == data
    assert ranges(emulator) == [None, None, None]


async def test_a_429_on_one_slice_is_retried_on_its_own(
    emulator: Emulator, split_box: Box, tmp_path: Path
) -> None:
    data = payload(4 * MiB, seed=8)
    split_box.put(REMOTE, data)
    emulator.faults.script("files.download", Fault.delay(0), Fault.status(429, retry_after="0"))
    result = await split_box.files.download(REMOTE, tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data and result.sha256 == sha(data)
    seen = ranges(emulator)
    assert seen.count(seen[1]) == 2  # the throttled slice asked again, from its start
    assert result.attempts == len(seen) and result.resumes == 0


async def test_one_connection_per_host_still_downloads_every_slice(
    emulator: Emulator, tmp_path: Path
) -> None:
    data = payload(3 * MiB + 7, seed=9)
    async with split_client(emulator, limits=sandboxkit.Limits(per_host_connections=1)) as client:
        box = await new_box(emulator, client)
        box.put(REMOTE, data)
        result = await box.files.download(REMOTE, tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data and result.sha256 == sha(data)
    assert len(ranges(emulator)) > 2


async def test_checksum_false_and_progress(
    emulator: Emulator, split_box: Box, tmp_path: Path
) -> None:
    data = payload(2 * MiB + 1, seed=10)
    split_box.put(REMOTE, data)
    seen: list[tuple[int, int | None]] = []
    result = await split_box.files.download(
        REMOTE, tmp_path / "big.bin", checksum=False, progress=lambda d, t: seen.append((d, t))
    )
    assert result.sha256 is None and (tmp_path / "big.bin").read_bytes() == data
    assert seen[-1] == (len(data), len(data))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


@pytest.mark.parametrize("parts", [0, -1, True, 1.5, "2"])
async def test_bad_parts_are_refused_before_any_request(
    emulator: Emulator, split_box: Box, tmp_path: Path, parts: Any
) -> None:
    with pytest.raises(sandboxkit.ValidationError, match="parts"):
        await split_box.files.download(REMOTE, tmp_path / "x", parts=parts)
    assert ranges(emulator) == []


async def test_cancelled_twice_leaves_nothing_behind(emulator: Emulator, tmp_path: Path) -> None:
    """Cancelled while slices are in flight (held by a delay) and again during cleanup:
    the call ends cancelled, no part, no sidecar, no connection held."""
    data = payload(4 * MiB, seed=11)
    emulator.faults.script("files.download", Fault.delay(0), *[Fault.delay(1.0)] * 3)
    started = asyncio.Event()
    async with split_client(emulator) as client:
        box = await new_box(emulator, client)
        box.put(REMOTE, data)

        def progress(done: int, total: int | None) -> None:
            started.set()

        task = asyncio.create_task(
            box.files.download(REMOTE, tmp_path / "big.bin", progress=progress)
        )
        await started.wait()
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert os.listdir(tmp_path) == []
        assert busy_connections(client) == 0
        # The slices in flight were dropped, not finished: the other slices were never asked.
        assert len(ranges(emulator)) <= PARTS + 1


async def test_memory_stays_flat(
    emulator: Emulator, split_box: Box, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python allocations peak far below the file size, and every thread call writes one
    batch of a few MiB, never a whole slice."""
    data = payload(96 * MiB, seed=12)
    split_box.put(REMOTE, data)
    del data
    batches: list[int] = []
    write_at = InPlace.write_at

    def counting(self: InPlace, batch: list[bytes], offset: int) -> None:
        batches.append(sum(map(len, batch)))
        write_at(self, batch, offset)

    monkeypatch.setattr(InPlace, "write_at", counting)
    tracemalloc.start()
    try:
        result = await split_box.files.download(REMOTE, tmp_path / "big.bin")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.size == 96 * MiB and len(ranges(emulator)) > 4
    assert max(batches) <= WRITE_BATCH + 1 * MiB and len(batches) >= 96 * MiB // WRITE_BATCH
    assert peak < 40 * MiB, peak


def write_sidecar(sidecar: Path, box: Box, total: int, done: list[tuple[int, int]] | None) -> None:
    """A sidecar as a dead process left it for REMOTE on `box` (`done` absent when None)."""
    record: dict[str, Any] = {
        "origin": box.handle.origin,
        "path": REMOTE,
        "username": None,
        "total": total,
        "ranges": True,
    }
    if done is not None:
        record["done"] = [list(span) for span in done]
    sidecar.write_text(json.dumps(record))


async def test_a_sliced_part_is_continued_in_its_gaps_only(
    emulator: Emulator, split_box: Box, tmp_path: Path
) -> None:
    """A part whose sidecar vouches for two ranges (not a prefix) is continued by asking
    for the two gaps only; the sha256 covers the whole file (the held bytes read back)."""
    data = payload(3 * MiB, seed=14)
    split_box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    part, sidecar = part_paths(dest)
    held = [(0, 300_000), (1_000_000, 2_000_000)]
    write_spans(part, data, held)
    write_sidecar(sidecar, split_box, len(data), held)
    result = await split_box.files.download(REMOTE, dest)
    asked = sorted(spans(ranges(emulator)))
    assert asked[0][0] == 300_000 and sum(b - a for a, b in asked) == len(data) - 1_300_000
    assert all(b <= 1_000_000 or a >= 2_000_000 for a, b in asked)
    assert dest.read_bytes() == data and result.sha256 == sha(data)
    assert result.resumes == 2  # the two gaps' first slices continue held bytes
    assert os.listdir(tmp_path) == ["big.bin"]


async def test_one_stream_continues_only_the_first_range_of_a_sliced_part(
    emulator: Emulator, split_box: Box, tmp_path: Path
) -> None:
    """With parts=1, a sliced part is cut back to its first range and continued from there."""
    data = payload(3 * MiB, seed=15)
    split_box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    part, sidecar = part_paths(dest)
    part.write_bytes(data[:2_000_000])
    write_sidecar(sidecar, split_box, len(data), [(0, 300_000), (1_000_000, 2_000_000)])
    result = await split_box.files.download(REMOTE, dest, parts=1)
    assert ranges(emulator) == ["bytes=300000-"]
    assert dest.read_bytes() == data and result.sha256 == sha(data)


CHILD = """
import asyncio, json, os, signal, sys
import sandboxkit
from sandboxkit.emulator import EmulatorResolver

args = json.loads(sys.argv[1])

async def main() -> None:
    client = sandboxkit.Client(
        api_key=args["api_key"], base_url=args["base_url"], data_plane_scheme="http",
        resolver=EmulatorResolver(), retry=sandboxkit.RetryPolicy.no_delay(),
        parallel_downloads=sandboxkit.ParallelDownloads(threshold=1 << 20, parts=4, min_latency=0),
    )
    box = client.sandbox(sandbox_key=args["key"], domain=args["domain"], access_token=args["token"])

    def progress(done: int, total: int | None) -> None:
        if total and done >= total // 2:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-download: slices are mid-body

    async with client:
        await box.files.download(args["remote"], args["dest"], progress=progress)

asyncio.run(main())
"""


async def test_a_killed_process_rerun_fetches_only_the_missing_ranges(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """SIGKILL halfway through a parallel download leaves the part and a sidecar listing
    the ranges written; the rerun (in this process) asks only for bytes outside them, and
    the file and sha256 are right."""
    data = payload(24 * MiB, seed=13)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    args = {
        "api_key": emulator.api_key,
        "base_url": emulator.base_url,
        "key": box.key,
        "domain": emulator.domain,
        "token": box.handle._host.token,
        "remote": REMOTE,
        "dest": str(dest),
    }
    code, output = await run_script(CHILD, args)
    assert code == -9, output
    _part, sidecar = part_paths(dest)
    done = [tuple(span) for span in json.loads(sidecar.read_text())["done"]]
    assert done and sum(end - start for start, end in done) < len(data)
    before = len(emulator.journal_for("files.download"))
    async with split_client(emulator) as client:
        handle = client.sandbox(
            sandbox_key=box.key, domain=emulator.domain, access_token=args["token"]
        )
        result = await handle.files.download(REMOTE, dest)
    asked = spans(ranges(emulator)[before:])
    for start, end in asked:  # nothing written before is fetched again
        assert all(end <= a or start >= b for a, b in done), ((start, end), done)
    assert sum(end - start for start, end in asked) == len(data) - sum(b - a for a, b in done)
    assert dest.read_bytes() == data and result.sha256 == sha(data)
    assert result.resumes >= 1
    assert part_files(tmp_path) == [] and os.listdir(tmp_path) == ["big.bin"]


def test_a_single_stream_opens_a_sliced_part_cut_back_to_its_first_range(
    tmp_path: Path,
) -> None:
    """Bytes after the first gap are not vouched for by a prefix sidecar: they are cut off
    before one stream writes its own sidecar over the part."""
    of = PartOf("http://k.example.test", REMOTE, None)
    dest = tmp_path / "big.bin"
    part, sidecar = part_paths(dest)
    part.write_bytes(b"x" * 2000)
    sidecar.write_text(
        json.dumps(
            {**attrs.asdict(of), "total": 3000, "ranges": True, "done": [[0, 300], [1000, 2000]]}
        )
    )
    opened = open_part(dest, of, resume=True)
    try:
        assert (opened.held, opened.done) == (300, [(0, 300)])
        assert os.fstat(opened.handle.fileno()).st_size == 300
    finally:
        opened.handle.close()
    opened = open_part(dest, of, resume=True, sliced=True)
    opened.handle.close()
    # The sidecar still names the range cut off, which the file no longer holds: distrusted.
    assert opened.done == []


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"threshold": 0}, "threshold"),
        ({"parts": 0}, "parts"),
        ({"parts": True}, "parts"),
        ({"min_latency": -1}, "min_latency"),
    ],
)
def test_parallel_downloads_options_are_validated(options: dict[str, Any], field: str) -> None:
    with pytest.raises(sandboxkit.ValidationError, match=field):
        sandboxkit.ParallelDownloads(**options)
    assert sandboxkit.ParallelDownloads.off().parts == 1
    with pytest.raises(sandboxkit.ValidationError, match="parallel_downloads"):
        sandboxkit.Client(api_key="k", base_url="http://x.test", parallel_downloads=4)  # type: ignore[arg-type]


def test_client_config_carries_parallel_downloads_through_pickle() -> None:
    chosen = sandboxkit.ParallelDownloads(threshold=5 * MiB, parts=6)
    config = sandboxkit.ClientConfig(
        api_key="k", base_url="http://x.test", parallel_downloads=chosen
    )
    again = pickle.loads(pickle.dumps(config))
    assert again.parallel_downloads == chosen
    assert sandboxkit.Client.from_config(again).parallel_downloads == chosen
    with pytest.raises(sandboxkit.ValidationError, match="parallel_downloads"):
        sandboxkit.ClientConfig(parallel_downloads=3)  # type: ignore[arg-type]


def test_the_sync_client_splits_too(tmp_path: Path) -> None:
    with EmulatorThread() as running:
        emu = running.emu
        body = running.call(emu.create_sandbox())
        data = payload(3 * MiB, seed=16)
        (emu.sandbox_root(body["data"]["sandbox_key"]) / "big.bin").write_bytes(data)
        options = {
            "api_key": emu.api_key,
            "base_url": emu.base_url,
            "data_plane_scheme": "http",
            "resolver": emu.resolver,
            "parallel_downloads": sandboxkit.ParallelDownloads(
                threshold=THRESHOLD, parts=PARTS, min_latency=0
            ),
        }
        with sync.Client(**options) as client:  # type: ignore[arg-type]
            result = client.sandbox_from_response(body).files.download("/big.bin", tmp_path / "b")
        assert result.sha256 == sha(data) and (tmp_path / "b").read_bytes() == data
        assert len(emu.journal_for("files.download")) > 2


async def test_a_nearby_data_center_gets_one_stream(emulator: Emulator, tmp_path: Path) -> None:
    """An answer within `min_latency` means a short path, where one stream reaches the
    link's speed: even a file past the threshold is not split, whatever `parts` says."""
    data = payload(3 * MiB, seed=17)
    parallel = sandboxkit.ParallelDownloads(threshold=THRESHOLD, parts=PARTS, min_latency=5.0)
    async with split_client(emulator, parallel_downloads=parallel) as client:
        box = await new_box(emulator, client)
        box.put(REMOTE, data)
        result = await box.files.download(REMOTE, tmp_path / "big.bin", parts=8)
    assert result.sha256 == sha(data) and ranges(emulator) == [None]


async def test_a_slow_server_on_loopback_gets_one_stream(
    emulator: Emulator, tmp_path: Path
) -> None:
    """A loopback server slow to start answering is not a long link: the kernel's RTT of
    the connection decides, not the head's time, so the file comes as one stream (the
    head's time alone used to split it into slices that only cost CPU)."""
    data = payload(3 * MiB, seed=19)
    parallel = sandboxkit.ParallelDownloads(threshold=THRESHOLD, parts=PARTS, min_latency=0.01)
    async with split_client(emulator, parallel_downloads=parallel) as client:
        box = await new_box(emulator, client)
        box.put(REMOTE, data)
        emulator.faults.script("files.download", Fault.delay(0.05))
        result = await box.files.download(REMOTE, tmp_path / "big.bin")
    assert emulator.faults.injected["delay"] == 1
    assert result.sha256 == sha(data) and ranges(emulator) == [None]


def test_link_info_reads_the_kernels_rtt_of_a_loopback_connection() -> None:
    """A connected loopback TCP socket tells a small RTT and a loopback peer; what is not a
    TCP socket tells nothing, and never raises."""
    import socket

    from sandboxkit._http.links import UNKNOWN, link_info

    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    pair = socket.socketpair()
    try:
        info = link_info(client)
        assert info.loopback is True
        if hasattr(socket, "TCP_INFO"):
            assert info.rtt is not None and 0 < info.rtt < 0.01
        assert link_info(None) is UNKNOWN and link_info(pair[0]) is UNKNOWN
        assert link_info(object()) is UNKNOWN
    finally:
        for each in (listener, client, server, *pair):
            each.close()


async def test_a_prefix_part_is_continued_on_one_stream(
    emulator: Emulator, split_box: Box, tmp_path: Path
) -> None:
    """A part one stream left (no `done` in its sidecar) says nothing of the link: it is
    continued with one open Range, as without slices."""
    data = payload(3 * MiB, seed=18)
    split_box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    part, sidecar = part_paths(dest)
    part.write_bytes(data[:1_234_567])
    write_sidecar(sidecar, split_box, len(data), None)  # one stream's: no `done`
    result = await split_box.files.download(REMOTE, dest)
    assert ranges(emulator) == ["bytes=1234567-"]
    assert dest.read_bytes() == data and result.sha256 == sha(data) and result.resumes == 1
