"""Partial files that outlive the process: a batch killed at any moment and rerun ends with
every file right, nothing fetched twice that was already on disk, and nothing left behind."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit import batch
from sandboxkit._transfer.sinks import part_paths
from sandboxkit.emulator import Emulator

from ..files_support import NO_RESUME, Box, new_box, payload, sha
from ..reliability_support import run_script

MiB = 1 << 20
REMOTE = "/home/user/big.bin"


def leave_part(dest: Path, data: bytes, held: int, **sidecar: Any) -> None:
    """What a process killed after writing `held` bytes of `data` to `dest` leaves behind."""
    part, side = part_paths(dest)
    part.write_bytes(data[:held])
    side.write_text(json.dumps(sidecar))


def sidecar_for(box: Box, remote: str, size: int, **changes: Any) -> dict[str, Any]:
    """The sidecar a download of `remote` from `box` writes, with `changes` made to it."""
    return {
        "origin": box.handle.origin,
        "path": remote,
        "username": None,
        "total": size,
        "ranges": True,
        **changes,
    }


def ranges(emu: Emulator) -> list[str | None]:
    """The Range header of every download request, in order."""
    return [r.headers.get("Range") for r in emu.journal_for("files.download")]


async def test_a_part_left_by_a_dead_process_is_continued_with_range(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """The download asks only for the bytes after the part's, and the sha256 still covers
    the whole file (the part's bytes are read back); part and sidecar are gone after."""
    data = payload(3 * MiB, seed=1)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    leave_part(dest, data, 1_234_567, **sidecar_for(box, REMOTE, len(data)))
    result = await box.files.download(REMOTE, dest)
    assert ranges(emulator) == ["bytes=1234567-"]
    assert (result.size, result.sha256, result.resumes) == (len(data), sha(data), 1)
    assert dest.read_bytes() == data
    assert sorted(os.listdir(tmp_path)) == ["big.bin"]


@pytest.mark.parametrize(
    "changes",
    [
        {"path": "/home/user/other.bin"},
        {"origin": "http://other.sandbox.test:1"},
        {"username": "root"},
        {"ranges": False},
        {"total": None},
        {"total": 1000},  # the part is longer than the file it claims to be part of
    ],
    ids=["other-path", "other-host", "other-user", "no-ranges", "no-total", "part-too-long"],
)
async def test_a_part_of_something_else_is_replaced_never_appended_to(
    emulator: Emulator, box: Box, tmp_path: Path, changes: dict[str, Any]
) -> None:
    """A sidecar that does not vouch for the part starts the download over from byte 0."""
    data = payload(2 * MiB, seed=2)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    leave_part(dest, b"\xff" * len(data), 5000, **sidecar_for(box, REMOTE, len(data), **changes))
    result = await box.files.download(REMOTE, dest)
    assert ranges(emulator) == [None]
    assert (dest.read_bytes(), result.sha256) == (data, sha(data))
    assert sorted(os.listdir(tmp_path)) == ["big.bin"]


@pytest.fixture
def part_truncations(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The sizes partial files were truncated to, in order (their handles are spied on)."""
    calls: list[int | None] = []
    real_fdopen = os.fdopen

    class Spied(io.BufferedRandom):
        def truncate(self, size: int | None = None) -> int:
            calls.append(size)
            return super().truncate(size)

    def fdopen(fd: int, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if mode == "r+b":  # the partial file's handle (open_part)
            return Spied(io.FileIO(fd, "r+"))
        return real_fdopen(fd, mode, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    return calls


async def test_a_fresh_part_is_never_truncated(
    emulator: Emulator, box: Box, tmp_path: Path, part_truncations: list[int | None]
) -> None:
    """On ext4 a truncate to zero, even of an empty file, makes close() write the whole file
    back before it returns (auto_da_alloc): 0.58 s per GiB in every download's commit."""
    data = payload(MiB, seed=8)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    result = await box.files.download(REMOTE, dest)
    assert (dest.read_bytes(), result.sha256) == (data, sha(data))
    assert part_truncations == []


async def test_a_longer_part_of_something_else_is_cut_to_nothing_first(
    emulator: Emulator, box: Box, tmp_path: Path, part_truncations: list[int | None]
) -> None:
    """Stale bytes past the new file's end must not survive into it."""
    data = payload(MiB, seed=9)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    leave_part(dest, b"\xff" * 3 * MiB, 3 * MiB, **sidecar_for(box, REMOTE, 3 * MiB, path="/x"))
    result = await box.files.download(REMOTE, dest)
    assert ranges(emulator) == [None]
    assert (dest.read_bytes(), result.sha256) == (data, sha(data))
    assert part_truncations == [0]


async def test_a_file_that_changed_size_starts_over(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """The part claims a total the file no longer has: the 206 for the resume is distrusted
    and the whole file is fetched again."""
    data = payload(2 * MiB, seed=3)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    leave_part(dest, data, 4096, **sidecar_for(box, REMOTE, len(data) + 10))
    result = await box.files.download(REMOTE, dest)
    assert ranges(emulator) == ["bytes=4096-", None]
    assert (dest.read_bytes(), result.sha256) == (data, sha(data))


async def test_resume_false_and_a_no_resume_data_center_fetch_the_whole_file(
    emulator: Emulator, emulator_client: sandboxkit.Client, box: Box, tmp_path: Path
) -> None:
    """`resume=False` ignores a valid part; a data center without range support answers the
    Range with a 200, which restarts the file."""
    data = payload(MiB, seed=4)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    leave_part(dest, data, 999, **sidecar_for(box, REMOTE, len(data)))
    await box.files.download(REMOTE, dest, resume=False)
    assert ranges(emulator) == [None]
    lite = await new_box(emulator, emulator_client, NO_RESUME)
    lite.put(REMOTE, data)
    other = tmp_path / "lite.bin"
    leave_part(other, data, 999, **sidecar_for(lite, REMOTE, len(data)))
    result = await lite.files.download(REMOTE, other)
    assert (other.read_bytes(), result.sha256) == (data, sha(data))
    assert sorted(os.listdir(tmp_path)) == ["big.bin", "lite.bin"]


async def test_a_second_writer_of_the_same_dest_fails_clearly_and_sends_nothing(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """While one download holds `dest`'s partial file, another raises DestinationLockedError
    before any request; the first one completes unharmed."""
    data = payload(8 * MiB, seed=5)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    started = asyncio.Event()

    def progress(done: int, total: int | None) -> None:
        started.set()

    first = asyncio.create_task(box.files.download(REMOTE, dest, progress=progress))
    await started.wait()
    with pytest.raises(sandboxkit.DestinationLockedError, match="another download"):
        await box.files.download(REMOTE, dest)
    result = await first
    assert (result.sha256, len(emulator.journal_for("files.download"))) == (sha(data), 1)


async def test_the_sidecar_names_the_host_never_its_token(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """What a killed download leaves on disk holds no access token."""
    data = payload(4 * MiB, seed=6)
    box.put(REMOTE, data)
    dest = tmp_path / "big.bin"
    seen: list[str] = []

    def progress(done: int, total: int | None) -> None:
        seen.append(part_paths(dest)[1].read_text())

    await box.files.download(REMOTE, dest, progress=progress)
    assert seen and json.loads(seen[0]) == sidecar_for(box, REMOTE, len(data))
    assert all(box.handle._host.token not in text for text in seen)


async def test_skip_existing_reports_skipped_jobs_and_sends_nothing_for_them(
    emulator: Emulator, emulator_client: sandboxkit.Client, box: Box, tmp_path: Path
) -> None:
    """Jobs whose destination exists are skipped (outcome and summary say so); the rest run."""
    ref = batch.SandboxRef(box.key, emulator.domain, box.handle._host.token)
    jobs = []
    for i in range(4):
        box.put(f"/home/user/f{i}.bin", payload(1000 + i, seed=i))
        jobs.append(batch.DownloadJob(ref, f"/home/user/f{i}.bin", tmp_path / f"f{i}.bin"))
    (tmp_path / "f1.bin").write_bytes(b"finished earlier")
    (tmp_path / "f3.bin").write_bytes(b"finished earlier")
    result = await batch.download_many(emulator_client, jobs, skip_existing=True)
    assert [o.skipped for o in result.outcomes] == [False, True, False, True]
    assert all(o.ok for o in result.outcomes)
    assert (result.summary.done, result.summary.skipped, result.summary.failed) == (2, 2, 0)
    assert sorted(r.query["path"] for r in emulator.journal_for("files.download")) == [
        "/home/user/f0.bin",
        "/home/user/f2.bin",
    ]
    assert (tmp_path / "f1.bin").read_bytes() == b"finished earlier"


CHILD = """
import asyncio, json, os, signal, sys
import sandboxkit
from sandboxkit import batch
from sandboxkit.emulator import EmulatorResolver
from sandboxkit._transfer import sinks as _sinks

args = json.loads(sys.argv[1])
finished = 0
written = {}  # bytes on disk per partial file (by inode)
write_all = _sinks._write_all


def write_and_maybe_die(fd, pieces):
    # The kill lands at a byte offset the test controls, not at a moment: once
    # `kill_after` jobs are done, right after a file's second whole batch is on disk (its
    # sidecar was written before its body), so a part with bytes is always left.
    size = sum(len(piece) for piece in pieces)
    write_all(fd, pieces)
    inode = os.fstat(fd).st_ino
    written[inode] = written.get(inode, 0) + size
    if 0 <= args["kill_after"] <= finished and written[inode] >= 2 * _sinks.WRITE_BATCH:
        os.kill(os.getpid(), signal.SIGKILL)


_sinks._write_all = write_and_maybe_die

async def main() -> None:
    client = sandboxkit.Client(
        api_key=args["api_key"], base_url=args["base_url"], data_plane_scheme="http",
        resolver=EmulatorResolver(), retry=sandboxkit.RetryPolicy.no_delay(),
    )
    ref = batch.SandboxRef(args["key"], args["domain"], args["token"])
    jobs = [batch.DownloadJob(ref, remote, os.path.join(args["dir"], os.path.basename(remote)))
            for remote in args["remotes"]]

    def progress(done: int, total: int, outcome: object) -> None:
        global finished
        finished = done

    async with client:
        result = await batch.download_many(
            client, jobs, concurrency=3, progress=progress, skip_existing=True
        )
    print(json.dumps({"done": result.summary.done, "skipped": result.summary.skipped,
                      "failed": result.summary.failed}))

asyncio.run(main())
"""


async def _run_child(args: dict[str, Any]) -> tuple[int, str]:
    return await run_script(CHILD, args)


async def test_a_batch_killed_twice_and_rerun_ends_right_without_fetching_twice(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """SIGKILL after the 2nd and then the 5th finished job, then a full rerun: every sha256 is
    right, finished files are not fetched again, each part left with bytes is continued with
    a Range from its size, and no part or sidecar is left."""
    # Large enough that a job in flight at a kill has written whole 4 MiB batches.
    files = {f"/home/user/f{i}.bin": payload(20 * MiB + i, seed=10 + i) for i in range(9)}
    for remote, data in files.items():
        box.put(remote, data)
    args = {
        "api_key": emulator.api_key,
        "base_url": emulator.base_url,
        "key": box.key,
        "domain": emulator.domain,
        "token": box.handle._host.token,
        "dir": str(tmp_path),
        "remotes": sorted(files),
    }
    journal = emulator.journal_for
    left: tuple[set[str], dict[str, int]] | None = None  # what the last killed run left
    resumed = 0
    kills_that_left_parts = 0
    for kill_after in (2, 5, -1):
        before = len(journal("files.download"))
        code, output = await _run_child({**args, "kill_after": kill_after})
        if kill_after > 0:
            assert code == -9, output
        else:
            assert code == 0 and json.loads(output.splitlines()[-1])["failed"] == 0, output
        if left is not None:
            finished, parts = left
            rerun = journal("files.download")[before:]
            assert not {r.query["path"] for r in rerun} & finished  # nothing fetched twice
            first_range: dict[str, str | None] = {}
            for r in rerun:
                first_range.setdefault(r.query["path"], r.headers.get("Range"))
            for remote, size in parts.items():
                if remote in first_range:  # a killed rerun may not have reached it
                    assert first_range[remote] == (f"bytes={size}-" if size else None)
                    resumed += bool(size)
        names = os.listdir(tmp_path)
        left = (
            {f"/home/user/{n}" for n in names if not n.startswith(".")},
            {
                f"/home/user/{n[1:-5]}": (tmp_path / n).stat().st_size
                for n in names
                if n.endswith(".part")
            },
        )
        if kill_after > 0:  # the kill came right after a part's second batch was written
            assert max(left[1].values(), default=0) >= 8 * MiB, left
            kills_that_left_parts += 1
    assert kills_that_left_parts == 2
    assert resumed >= 2, "a rerun did not continue a part with bytes in it"
    for remote, data in files.items():
        local = tmp_path / Path(remote).name
        assert hashlib.sha256(local.read_bytes()).hexdigest() == sha(data), remote
    assert sorted(os.listdir(tmp_path)) == sorted(Path(r).name for r in files)
