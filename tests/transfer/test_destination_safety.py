"""What a download does to the directory it writes in (issue 28): nothing planted there is
followed or trusted, whatever it holds, and the file a user gets has the mode they expect.

The partial file's names are predictable (`.{name}.part`, `.json`, the sidecar's scratch
file), and the directory may be shared. A link planted at any of them, to a file outside,
must leave that file's bytes and mode as they were on every path (success, 404, a cut and
its resume, a cancel, slices); a FIFO, a hard link or another user's file is never written
to; a sidecar is distrusted whatever it holds. All over real loopback sockets, on the real
file system; the second-user cases run a real child process under another uid.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit._transfer import sinks as _partial
from sandboxkit._transfer.sinks import part_paths
from sandboxkit.emulator import Emulator, Fault

from ..files_support import Box, new_box, payload, sha
from ..reliability_support import run_script

MiB = 1 << 20
REMOTE = "/home/user/result.bin"
DATA = payload(3 * MiB, seed=28)
PRECIOUS = b"a key nobody may overwrite\n"
NOBODY = 65534


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the download directory, which a planted link points at."""
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "precious.key"
    target.write_bytes(PRECIOUS)
    target.chmod(0o640)
    return target


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    (tmp_path / "shared").mkdir()
    return tmp_path / "shared"


def untouched(target: Path) -> None:
    assert target.read_bytes() == PRECIOUS
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def names(dest: Path) -> dict[str, Path]:
    part, sidecar = part_paths(dest)
    return {"part": part, "sidecar": sidecar, "scratch": sidecar.with_name(sidecar.name + ".new")}


def has_data(path: Path) -> bool:
    return path.read_bytes() == DATA


def regular(path: Path) -> bool:
    return stat.S_ISREG(os.lstat(path).st_mode)


def split_client(emu: Emulator) -> sandboxkit.Client:
    parallel = sandboxkit.ParallelDownloads(threshold=MiB, parts=4, min_latency=0)
    return emu.client(retry=sandboxkit.RetryPolicy.no_delay(), parallel_downloads=parallel)


PATHS = ["success", "404", "cut-and-resume", "cut-kept-then-rerun", "cancel", "sliced"]


async def run_path(emu: Emulator, box: Box, dest: Path, path: str) -> None:
    """One download of REMOTE to `dest` the way `path` says; what must hold after is checked
    by the caller."""
    if path == "404":
        with pytest.raises(sandboxkit.NotFoundError):
            await box.files.download("/home/user/missing.bin", dest)
        return
    box.put(REMOTE, DATA)
    if path == "cut-and-resume":
        emu.faults.script("files.download", Fault.cut(after_bytes=MiB))
    if path == "cut-kept-then-rerun":
        # A cut, then 502s until the attempts run out: the part and its sidecar are kept,
        # and the rerun below continues them.
        emu.faults.script("files.download", Fault.cut(after_bytes=MiB), *[Fault.status(502)] * 5)
        with pytest.raises(sandboxkit.BadGatewayError):
            await box.files.download(REMOTE, dest)
        part, sidecar = part_paths(dest)
        assert regular(part) and part.stat().st_size == MiB and regular(sidecar)
    if path == "cancel":

        def cancel_at_a_mib(done: int, total: int | None) -> None:
            if done >= MiB:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()

        with pytest.raises(asyncio.CancelledError):
            await box.files.download(REMOTE, dest, progress=cancel_at_a_mib)
        return
    if path == "sliced":
        async with split_client(emu) as client:
            sliced = await new_box(emu, client)
            sliced.put(REMOTE, DATA)
            result = await sliced.files.download(REMOTE, dest)
        assert len(emu.journal_for("files.download")) > 1, "the download was not sliced"
    else:
        result = await box.files.download(REMOTE, dest)
    assert result.sha256 == sha(DATA)
    assert regular(dest) and has_data(dest)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("planted", ["part", "sidecar", "scratch"])
async def test_a_link_planted_at_a_partial_name_is_never_followed(
    emulator: Emulator, box: Box, shared: Path, victim: Path, planted: str, path: str
) -> None:
    """The link's target keeps its bytes and mode; `dest`, when it exists, is a regular file
    with the file's bytes."""
    dest = shared / "result.bin"
    names(dest)[planted].symlink_to(victim)
    await run_path(emulator, box, dest, path)
    untouched(victim)
    assert not dest.is_symlink()


@pytest.mark.parametrize("path", ["success", "404", "sliced"])
async def test_a_hard_link_or_fifo_at_the_part_is_replaced_not_written(
    emulator: Emulator, box: Box, shared: Path, victim: Path, path: str
) -> None:
    """A hard link to a file outside is not a part of ours (it has two links); a FIFO would
    hang a reader: both are removed, unread and unwritten."""
    dest = shared / "result.bin"
    part, sidecar = part_paths(dest)
    os.link(victim, part)
    os.mkfifo(sidecar)
    await asyncio.wait_for(run_path(emulator, box, dest, path), 30)
    untouched(victim)
    assert os.stat(victim).st_nlink == 1  # the planted name is gone


def test_the_sidecar_scratch_file_is_never_one_planted_under_its_name(
    shared: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link planted under the exact scratch name the next write would pick (O_EXCL): that
    name is skipped, the link and its target are left alone, and the sidecar is written."""
    dest = shared / "result.bin"
    tags = iter(["guessed0", "fresh001"])
    monkeypatch.setattr(_partial, "_scratch_tag", lambda: next(tags))
    sidecar = part_paths(dest)[1]
    guessed = sidecar.with_name(sidecar.name + ".guessed0.new")
    guessed.symlink_to(victim)
    part = _partial.open_part(dest, _partial.PartOf("http://h", "/f", None), resume=True)
    part.record(10, True)
    part.handle.close()
    untouched(victim)
    assert guessed.is_symlink()
    assert json.loads(sidecar.read_text())["total"] == 10
    assert sorted(p.name for p in shared.iterdir()) == sorted(
        [part.path.name, sidecar.name, guessed.name]
    )


def test_a_partial_name_that_cannot_be_replaced_fails_clearly_before_any_write(
    shared: Path, victim: Path
) -> None:
    """A directory at the part's name is not removed (it is someone's): the download fails
    with DestinationUnsafeError naming the path and what is there."""
    dest = shared / "result.bin"
    part = part_paths(dest)[0]
    part.mkdir()
    with pytest.raises(sandboxkit.DestinationUnsafeError) as caught:
        _partial.open_part(dest, _partial.PartOf("http://h", "/f", None), resume=True)
    assert repr(str(part)) in str(caught.value) and "a directory" in str(caught.value)
    assert part.is_dir()


SIDECARS: dict[str, Any] = {
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "a huge object": b'{"x": "' + b"y" * (2 * MiB) + b'"}',
    "not UTF-8": b'{"total": "\xff\xfe"}',
    "a digit bomb": b'{"total": ' + b"9" * 10_000 + b"}",
    "true as total": "bool",
    "a list": b"[1, 2, 3]",
    "a link to /dev/zero": "zero",
    "a FIFO": "fifo",
}


@pytest.mark.parametrize("content", list(SIDECARS))
async def test_whatever_the_sidecar_holds_the_download_starts_over_and_succeeds(
    emulator: Emulator, box: Box, shared: Path, content: str
) -> None:
    """Every later download to that dest works too (a RecursionError used to stick)."""
    box.put(REMOTE, DATA)
    dest = shared / "result.bin"
    part, sidecar = part_paths(dest)
    part.write_bytes(b"\0" * 1000)  # bytes the sidecar would have to vouch for
    value = SIDECARS[content]
    if value == "zero":
        sidecar.symlink_to("/dev/zero")
    elif value == "fifo":
        os.mkfifo(sidecar)
    elif value == "bool":
        good = {"origin": box.handle.origin, "path": REMOTE, "username": None, "ranges": True}
        sidecar.write_text(json.dumps({**good, "total": True}))
    else:
        sidecar.write_bytes(value)
    for _ in range(2):
        result = await asyncio.wait_for(box.files.download(REMOTE, dest), 30)
        assert result.sha256 == sha(DATA) and dest.read_bytes() == DATA
    assert [r.headers.get("Range") for r in emulator.journal_for("files.download")] == [None] * 2


@pytest.mark.parametrize("left", ["empty part", "part with bytes", "part and sidecar"])
async def test_a_scratch_file_a_killed_writer_left_is_removed_by_the_rerun(
    emulator: Emulator, box: Box, shared: Path, victim: Path, left: str
) -> None:
    """A process killed between writing a sidecar's scratch file and renaming it leaves
    `.{name}.part.json.{8 hex}.new` beside its part: the next download of that dest removes
    it (the dest is locked then: no live writer has one in flight). A link or a file of
    another name is left as it is, and a link's target untouched."""
    box.put(REMOTE, DATA)
    dest = shared / "result.bin"
    part, sidecar = part_paths(dest)
    part.write_bytes(b"" if left == "empty part" else DATA[:1000])
    if left == "part and sidecar":
        sidecar.write_text("{}")
    stale = [sidecar.with_name(f"{sidecar.name}.{tag}.new") for tag in ("0badf00d", "12345678")]
    for each in stale:
        each.write_text('{"half": ')
    link = sidecar.with_name(f"{sidecar.name}.deadbeef.new")
    link.symlink_to(victim)
    other = sidecar.with_name(f"{sidecar.name}.notours.new")
    other.write_text("someone's")
    result = await box.files.download(REMOTE, dest)
    assert result.sha256 == sha(DATA) and dest.read_bytes() == DATA
    assert sorted(os.listdir(shared)) == sorted([dest.name, link.name, other.name])
    assert stat.S_ISLNK(os.lstat(link).st_mode) and other.read_text() == "someone's"
    untouched(victim)


async def test_a_fresh_download_does_not_list_its_directory(
    box: Box, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no part left behind there is nothing to clear: a batch writing thousands of
    files into one directory never lists it once per file."""
    box.put(REMOTE, DATA)
    listed: list[object] = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda *a: listed.append(a) or real(*a))
    await box.files.download(REMOTE, shared / "result.bin")
    assert listed == []


@pytest.mark.parametrize(
    "name",
    [
        "€" * 85,  # 255 bytes in UTF-8: three per character
        "x" * 255,
        "😀" * 63,  # 252 bytes: four per character
        "€" * 60 + "a" * 75,  # a cut at 180 bytes would split a character here
    ],
)
@pytest.mark.parametrize("sliced", [False, True], ids=["one-stream", "sliced"])
async def test_names_up_to_the_file_systems_limit_download_whatever_their_script(
    emulator: Emulator, box: Box, shared: Path, name: str, sliced: bool
) -> None:
    """NAME_MAX counts bytes: the part's name is cut by bytes (at a character boundary), so
    its longest derived name (the scratch file) still fits; a cut-and-resume writes the
    sidecar on the way."""
    assert len(os.fsencode(name)) <= 255
    box.put(REMOTE, DATA)
    dest = shared / name
    emulator.faults.script("files.download", Fault.cut(after_bytes=MiB))
    if sliced:
        await run_path(emulator, box, dest, "sliced")
    else:
        result = await box.files.download(REMOTE, dest)
        assert result.sha256 == sha(DATA)
    assert os.listdir(shared) == [name]
    part, sidecar = part_paths(dest)
    assert len(os.fsencode(sidecar.name + ".01234567.new")) <= 255
    assert part.name.encode().decode("utf-8")  # whole characters only


@pytest.fixture
def umask() -> Iterator[Any]:
    before = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(before)


@pytest.mark.parametrize("mask", [0o002, 0o022, 0o077])
@pytest.mark.parametrize("path", ["success", "sliced"])
async def test_a_new_dest_has_the_mode_open_would_give_it(
    emulator: Emulator, box: Box, shared: Path, umask: Any, mask: int, path: str
) -> None:
    umask(mask)
    dest = shared / "result.bin"
    await run_path(emulator, box, dest, path)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o666 & ~mask


@pytest.mark.parametrize("mode", [0o600, 0o755, 0o444])
@pytest.mark.parametrize("path", ["success", "sliced"])
async def test_a_replaced_dest_keeps_its_mode_and_the_part_is_never_more_open(
    emulator: Emulator, box: Box, shared: Path, mode: int, path: str
) -> None:
    """A 0600 key stays 0600 (as curl, wget and rsync keep it); while the download runs its
    partial file is 0600."""
    dest = shared / "result.bin"
    dest.write_bytes(b"old")
    dest.chmod(mode)
    await run_path(emulator, box, dest, path)
    assert stat.S_IMODE(dest.stat().st_mode) == mode
    assert dest.read_bytes() == DATA


async def test_the_partial_file_is_owner_only_while_it_is_written(
    emulator: Emulator, box: Box, shared: Path, umask: Any
) -> None:
    umask(0o000)
    box.put(REMOTE, DATA)
    dest = shared / "result.bin"
    seen: set[int] = set()

    def look(done: int, total: int | None) -> None:
        seen.add(stat.S_IMODE(part_paths(dest)[0].stat().st_mode))

    await box.files.download(REMOTE, dest, progress=look)
    assert seen == {0o600}
    assert stat.S_IMODE(dest.stat().st_mode) == 0o666


# --- a second user -------------------------------------------------------------------------

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="needs root to act as a second user (setuid in a child, chown)",
)


@needs_root
@pytest.mark.parametrize("planted", ["symlink", "regular file"])
async def test_what_another_user_planted_is_never_written_through(
    emulator: Emulator, box: Box, victim: Path, planted: str
) -> None:
    """A sticky world-writable directory, like /tmp: user `nobody` plants a link (or a file
    of theirs) at the part's name; root's download neither writes through it nor into it."""
    box.put(REMOTE, DATA)
    with tempfile.TemporaryDirectory() as top:
        shared = Path(top) / "shared"
        shared.mkdir(mode=0o777)
        shared.chmod(0o1777)
        dest = shared / "result.bin"
        part = part_paths(dest)[0]
        if planted == "symlink":
            part.symlink_to(victim)
            os.lchown(part, NOBODY, NOBODY)
        else:
            part.write_bytes(DATA[:MiB])
            os.chown(part, NOBODY, NOBODY)
        result = await box.files.download(REMOTE, dest)
        assert result.sha256 == sha(DATA) and dest.read_bytes() == DATA
        assert os.stat(dest).st_uid == 0
        untouched(victim)


VICTIM = """
import asyncio, json, os, sys
import sandboxkit
from sandboxkit.emulator import EmulatorResolver

args = json.loads(sys.argv[1])

async def download(dest):
    client = sandboxkit.Client(
        api_key=args["api_key"], base_url=args["base_url"], data_plane_scheme="http",
        resolver=EmulatorResolver(), retry=sandboxkit.RetryPolicy.no_delay(),
    )
    async with client:
        sbx = client.sandbox(
            sandbox_key=args["key"], domain=args["domain"], access_token=args["token"]
        )
        await sbx.files.download(args["remote"], dest)

# Every module a download imports is loaded now, as root: this Python lives under /root,
# which the second user cannot read.
asyncio.run(download(args["warmup"]))
os.setgid(args["uid"])
os.setuid(args["uid"])
try:
    asyncio.run(download(args["dest"]))
except sandboxkit.SandboxKitError as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
else:
    print(json.dumps(["ok", ""]))
"""


@needs_root
@pytest.mark.parametrize("sticky", [True, False], ids=["sticky", "group-writable"])
async def test_a_second_users_download_never_writes_through_roots_link(
    emulator: Emulator, box: Box, tmp_path: Path, sticky: bool
) -> None:
    """The victim is `nobody`, in a child process; root plants a link at the part's name to
    a file of nobody's. In a sticky directory nobody cannot remove root's link: the download
    fails with DestinationUnsafeError before any request. Elsewhere the link is removed and
    the download succeeds. Either way the target keeps its bytes and mode."""
    box.put(REMOTE, DATA)
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        shared = Path(top) / "shared"
        shared.mkdir()
        shared.chmod(0o1777 if sticky else 0o777)
        target = Path(top) / "nobodys.key"
        target.write_bytes(PRECIOUS)
        target.chmod(0o640)
        os.chown(target, NOBODY, NOBODY)
        dest = shared / "result.bin"
        part_paths(dest)[0].symlink_to(target)
        args = {
            "api_key": emulator.api_key,
            "base_url": emulator.base_url,
            "key": box.key,
            "domain": emulator.domain,
            "token": box.handle._host.token,
            "remote": REMOTE,
            "warmup": str(tmp_path / "warmup.bin"),
            "dest": str(dest),
            "uid": NOBODY,
        }
        code, output = await run_script(VICTIM, args, 60)
        assert code == 0, output
        outcome, message = json.loads(output.splitlines()[0])
        downloads = len(emulator.journal_for("files.download"))
        if sticky:
            assert outcome == "DestinationUnsafeError", message
            assert "a symbolic link" in message and str(part_paths(dest)[0]) in message
            assert downloads == 1  # the warm-up's only
            assert not dest.exists()
        else:
            assert outcome == "ok", message
            assert dest.read_bytes() == DATA and os.stat(dest).st_uid == NOBODY
            assert downloads == 2
        untouched(target)
