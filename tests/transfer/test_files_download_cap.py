"""`files.download(max_size=)`: a file over the cap fails with `FileTooLargeError` before a
byte past the cap is written: from the size an answer's head shows (its body unread), else
by counting (reading stops one byte past the cap). `dest` is left as it was and no partial
file remains, `keep_partial=True` notwithstanding; on one stream and in parallel slices
alike. Over loopback, against the emulator and a server that counts what it wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit.emulator import Emulator

from ..files_support import CHUNKED, NO_RESUME, RESUME, new_box, payload
from ..reliability_support import part_files
from .test_bounded_reads import files_of, serving
from .test_keep_partial import cancelled_midway
from .test_ranged_downloads import split_client

MiB = 1 << 20
REMOTE = "/home/user/big.bin"
OLD = b"the file dest held before"


def gets(emu: Emulator) -> int:
    """The GETs of files the emulator answered so far."""
    return len(emu.journal_for("files.download"))


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "no-ranges"])
async def test_a_size_shown_over_the_cap_fails_before_the_body(
    tmp_path: Path, ranges: bool
) -> None:
    """A 16 MiB file under `max_size=1 MiB`: refused from the answer's head, its connection
    closed with less than the cap sent, never retried; `dest` keeps its old bytes and no
    part is left, even with keep_partial=True. A cap of the file's size downloads it."""
    data = payload(16 * MiB, seed=40)
    dest = tmp_path / "big.bin"
    dest.write_bytes(OLD)
    async with serving(data, ranges=ranges) as server, files_of(server) as files:
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await files.download(REMOTE, dest, max_size=MiB, keep_partial=True)
        assert (caught.value.size, caught.value.limit) == (16 * MiB, MiB)
        assert caught.value.operation == "files.download"
        assert dest.read_bytes() == OLD and part_files(tmp_path) == []
        [refused] = server.served
        assert not refused.whole and refused.sent < MiB, refused
        result = await files.download(REMOTE, dest, max_size=16 * MiB, parts=1)
    assert result.size == 16 * MiB and dest.read_bytes() == data


async def test_a_cap_passed_by_counting_stops_one_byte_past_it(tmp_path: Path) -> None:
    """A chunked answer shows no size: the bytes are counted, and reading stops one byte past
    the cap (the rest unread); the error says the size is unknown, `dest` is as it was and
    no part remains. A file of exactly the cap downloads whole."""
    data = payload(16 * MiB, seed=41)
    dest = tmp_path / "big.bin"
    dest.write_bytes(OLD)
    async with serving(data, ranges=False, chunked=True) as server, files_of(server) as files:
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await files.download(REMOTE, dest, max_size=100_000, keep_partial=True)
        assert (caught.value.size, caught.value.limit) == (None, 100_000)
        assert dest.read_bytes() == OLD and part_files(tmp_path) == []
        server.data = data[:100_000]
        result = await files.download(REMOTE, dest, max_size=100_000)
    assert result.size == 100_000 and dest.read_bytes() == data[:100_000]
    refused = server.served[0]
    assert not refused.whole and 100_000 < refused.sent < 2 * MiB, refused


async def test_caps_on_each_data_center(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """On each data center a file of exactly `max_size` bytes lands, one byte more is
    refused with one GET (its size where the answer showed it), leaving nothing behind."""
    for idc in (RESUME, NO_RESUME, CHUNKED):
        box = await new_box(emulator, emulator_client, idc)
        data = payload(300_001, seed=42)
        box.put(REMOTE, data)
        dest = tmp_path / f"{idc}.bin"
        result = await box.files.download(REMOTE, dest, max_size=300_001)
        assert result.size == 300_001 and dest.read_bytes() == data
        dest.unlink()
        before = gets(emulator)
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await box.files.download(REMOTE, dest, max_size=300_000)
        assert caught.value.size == (None if idc == CHUNKED else 300_001)
        assert gets(emulator) == before + 1
        assert not dest.exists() and part_files(tmp_path) == []


async def test_a_split_download_is_refused_before_any_slice(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Where the file would come in parallel slices, the first answer's size is over the cap:
    no slice is asked for. Under the cap it is sliced as usual."""
    async with split_client(emulator) as client:
        box = await new_box(emulator, client)
        data = payload(4 * MiB, seed=43)
        box.put(REMOTE, data)
        dest = tmp_path / "big.bin"
        with pytest.raises(sandboxkit.FileTooLargeError):
            await box.files.download(REMOTE, dest, max_size=4 * MiB - 1)
        assert gets(emulator) == 1 and part_files(tmp_path) == []
        result = await box.files.download(REMOTE, dest, max_size=4 * MiB)
    assert dest.read_bytes() == data and result.attempts > 2  # the first GET and its slices


async def test_a_kept_sliced_part_of_a_file_over_the_cap_is_refused_without_a_request(
    emulator: Emulator, tmp_path: Path
) -> None:
    """A part an earlier download kept in slices knows its file's size: a download under a
    smaller cap is refused from it before any request, and the part is removed."""
    async with split_client(emulator) as client:
        box = await new_box(emulator, client)
        box.put(REMOTE, payload(8 * MiB, seed=44))
        dest = tmp_path / "big.bin"
        await cancelled_midway(box, dest, 4 * MiB, keep_partial=True)
        kept = sandboxkit.find_partial(dest)
        assert kept is not None and kept.total == 8 * MiB
        before = gets(emulator)
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await box.files.download(REMOTE, dest, max_size=MiB, keep_partial=True)
    assert caught.value.size == 8 * MiB
    assert gets(emulator) == before and part_files(tmp_path) == [] and not dest.exists()


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "1"])
async def test_a_bad_cap_raises_before_any_request(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path, value: Any
) -> None:
    """`max_size` must be a positive integer: anything else is a ValidationError naming it,
    and nothing is sent."""
    box = await new_box(emulator, emulator_client)
    with pytest.raises(sandboxkit.ValidationError, match="max_size="):
        await box.files.download(REMOTE, tmp_path / "x", max_size=value)
    assert gets(emulator) == 0


async def test_a_part_of_a_file_that_grew_past_the_cap_is_not_kept(tmp_path: Path) -> None:
    """A file within the cap is cut mid-body and replaced by one over it: the GET that
    would resume shows the new version's size, and the download fails with
    FileTooLargeError before its body; nothing of the old version is kept, keep_partial=True
    notwithstanding (its bytes are of a file that is gone)."""
    data = payload(MiB, seed=45)
    dest = tmp_path / "big.bin"
    async with serving(data, etag='"v1"') as server, files_of(server) as files:
        server.cut_next(MiB // 2, then=payload(4 * MiB, seed=46), etag='"v2"')
        with pytest.raises(sandboxkit.FileTooLargeError) as caught:
            await files.download(REMOTE, dest, max_size=2 * MiB, keep_partial=True, parts=1)
    assert caught.value.size == 4 * MiB
    assert [s.if_range for s in server.served] == [None, '"v1"']  # it did try to resume
    assert part_files(tmp_path) == [] and not dest.exists()
