"""`files.download(keep_partial=True)`: a download cancelled (or failing for good) keeps its
partial file and sidecar where the data center resumes, and the next download continues it
with `Range`, on one stream and in parallel slices alike. `sandboxkit.find_partial` tells
what is kept. Against the emulator, over loopback; cancellations come from the progress
callback, mid-body."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

import sandboxkit
from sandboxkit._transfer.sinks import WRITE_BATCH, PartOf, open_part, part_paths
from sandboxkit.emulator import Emulator, Fault

from ..files_support import NO_RESUME, Box, dir_listing, new_box, payload, sha
from .test_ranged_downloads import ranges, spans, split_client

MiB = 1 << 20
REMOTE = "/home/user/big.bin"
PART, SIDECAR = ".big.bin.part", ".big.bin.part.json"


async def cancelled_midway(box: Box, dest: Path, cut_at: int, **options: Any) -> None:
    """`box.files.download(REMOTE, dest, **options)`, cancelled by its progress callback once
    `cut_at` bytes have come: the cancellation lands mid-body."""
    seen: list[int] = []
    with anyio.CancelScope() as scope:

        def progress(done: int, total: int | None) -> None:
            seen.append(done)
            if done >= cut_at:
                scope.cancel()

        await box.files.download(REMOTE, dest, progress=progress, **options)
    assert scope.cancelled_caught, "the download ended before the cancellation"
    assert cut_at <= seen[-1] < len(box.get(REMOTE))


# parts=1: one stream, whose bytes reach the disk in write batches (4 MiB): cancelled past
# two of them, at least one is on disk. parts=None: the client's 4 slices of 8 MiB in
# 512 KiB pieces, half of which have come when it is cancelled.
SHAPES = [
    pytest.param(1, 16 * MiB, 2 * WRITE_BATCH + 1, id="one-stream"),
    pytest.param(None, 8 * MiB, 4 * MiB, id="sliced"),
]


@pytest.mark.parametrize(("parts", "size", "cut_at"), SHAPES)
async def test_a_cancelled_download_keeps_its_part_and_the_next_one_resumes_it(
    emulator: Emulator, tmp_path: Path, parts: int | None, size: int, cut_at: int
) -> None:
    """Cancelled mid-body with keep_partial=True: the part and its sidecar stay (dest
    untouched), and the next download fetches only the bytes the part lacks."""
    data = payload(size, seed=size)
    dest = tmp_path / "big.bin"
    dest.write_bytes(b"precious")
    async with split_client(emulator) as client:
        box = await new_box(emulator, client)
        box.put(REMOTE, data)
        await cancelled_midway(box, dest, cut_at, parts=parts, keep_partial=True)
        assert dir_listing(tmp_path) == [PART, SIDECAR, "big.bin"]
        assert dest.read_bytes() == b"precious"
        kept = sandboxkit.find_partial(dest)
        assert kept is not None and kept.path == tmp_path / PART and kept.total == size
        assert 0 < kept.held < size
        if parts == 1:  # a prefix of the file, all of it vouched for
            assert (tmp_path / PART).read_bytes() == data[: kept.held]
        else:  # written in slices: the sidecar lists the ranges written
            assert json.loads((tmp_path / SIDECAR).read_text())["done"]
        before = len(ranges(emulator))
        result = await box.files.download(REMOTE, dest, parts=parts)
    asked = ranges(emulator)[before:]
    if parts == 1:  # one GET for the rest
        assert asked == [f"bytes={kept.held}-"] and result.resumes == 1
    else:  # the sliced part's gaps only, each asked once
        assert sum(end - start for start, end in spans(asked)) == size - kept.held
    assert (dest.read_bytes(), result.sha256, result.size) == (data, sha(data), size)
    assert dir_listing(tmp_path) == ["big.bin"]
    assert sandboxkit.find_partial(dest) is None


@pytest.mark.parametrize(("parts", "size", "cut_at"), SHAPES)
async def test_without_keep_partial_a_cancelled_download_leaves_nothing(
    emulator: Emulator, tmp_path: Path, parts: int | None, size: int, cut_at: int
) -> None:
    """The default stays: a cancellation removes the part and its sidecar."""
    async with split_client(emulator) as client:
        box = await new_box(emulator, client)
        box.put(REMOTE, payload(size))
        await cancelled_midway(box, tmp_path / "big.bin", cut_at, parts=parts)
    assert dir_listing(tmp_path) == []


async def test_a_data_center_that_cannot_resume_keeps_nothing(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Where the answers showed no range support there is nothing a later download could
    continue: the part goes even with keep_partial=True."""
    async with split_client(emulator) as client:
        box = await new_box(emulator, client, NO_RESUME)
        box.put(REMOTE, payload(16 * MiB))
        dest = tmp_path / "big.bin"
        await cancelled_midway(box, dest, 2 * WRITE_BATCH + 1, keep_partial=True)
    assert dir_listing(tmp_path) == []


async def test_a_failure_for_good_keeps_the_part_too(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """A 500 after a cut (never retried, so by default the part goes) keeps the part with
    keep_partial=True; the next download continues from the cut."""
    data = payload(500 * 1024, seed=5)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    emulator.faults.script("files.download", Fault.cut(after_bytes=200_000), Fault.status(500))
    with pytest.raises(sandboxkit.InternalServerError):
        await box.files.download(REMOTE, dest, keep_partial=True)
    assert dir_listing(tmp_path) == [PART, SIDECAR]
    assert sandboxkit.find_partial(dest) == sandboxkit.PartialDownload(
        tmp_path / PART, tmp_path / SIDECAR, 200_000, len(data)
    )
    result = await box.files.download(REMOTE, dest)
    assert ranges(emulator)[-1] == "bytes=200000-"
    assert (dest.read_bytes(), result.sha256) == (data, sha(data))
    assert dir_listing(tmp_path) == ["big.bin"]


@pytest.mark.parametrize("value", ["yes", "false", 1, 0, None])
async def test_keep_partial_must_be_a_bool(
    emulator: Emulator, box: Box, tmp_path: Path, value: Any
) -> None:
    """Anything but True or False is refused before any request (a truthy "false" would
    otherwise keep files the caller meant to drop)."""
    box.put(REMOTE, b"x")
    with pytest.raises(sandboxkit.ValidationError, match="keep_partial="):
        await box.files.download(REMOTE, tmp_path / "x", keep_partial=value)
    assert ranges(emulator) == [] and dir_listing(tmp_path) == []


def test_a_part_renamed_into_place_is_never_kept(tmp_path: Path) -> None:
    """A cancellation that lands while the finished part is renamed over dest lets the rename
    finish: keeping would then leave the sidecar of a file that is already whole."""
    dest = tmp_path / "f.bin"
    part = open_part(dest, PartOf("http://h", "/f.bin", None), resume=True)
    part.handle.write(b"abc")
    part.handle.flush()
    part.record(3, True)
    os.replace(part.path, dest)  # what the commit does
    part.let_go(keep=True)
    assert dir_listing(tmp_path) == ["f.bin"]


def test_find_partial(tmp_path: Path) -> None:
    """None without a part; a part without a valid sidecar holds nothing to continue; a bad
    dest is refused."""
    dest = tmp_path / "f.bin"
    assert sandboxkit.find_partial(dest) is None
    part, sidecar = part_paths(dest)
    part.write_bytes(b"abc")
    assert sandboxkit.find_partial(str(dest)) == sandboxkit.PartialDownload(part, sidecar, 0, None)
    with pytest.raises(sandboxkit.ValidationError, match="dest="):
        sandboxkit.find_partial(3)  # type: ignore[arg-type]
