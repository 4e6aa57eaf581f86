"""Issue 28: a remote file replaced between two answers of one download (after a cut, after a
killed process, under a slice) is never resumed into a mix of two versions where the server
names its versions. Every continuation carries If-Range with the strong validator held (the
first answer's, or the sidecar's); a changed file answers 200, or a 206 of other validators
where the server ignores If-Range, and the download starts over. Without validators nothing
tells a same-size replacement: the resume stays blind, as before (the README says so).

The server is aiohttp's own `web.FileResponse` (`versions_support.FileServer`), not written
for sandboxkit; each test asserts on the bytes, the sha256 and the headers the server saw.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import attrs
import pytest

import sandboxkit
from sandboxkit._core.resume import Validators
from sandboxkit._core.slices import RANGES_IGNORED
from sandboxkit._transfer.sinks import PartOf, open_part, part_paths

from ..conftest import hostile_client
from ..files_support import payload, sha
from ..reliability_support import part_files, run_script, started
from ..versions_support import NEW_MTIME, OLD_MTIME, CutProxy, Exchange, FileServer, Mode, place

MiB = 1 << 20
REMOTE = "/home/user/big.bin"
TOKEN = "sat-VERSIONS-TOKEN"
SPLIT = sandboxkit.ParallelDownloads(threshold=MiB, parts=4, min_latency=0)


def serving(
    root: Path, mode: Mode, *, strip_ranges: bool = False
) -> contextlib.AbstractAsyncContextManager[FileServer]:
    return started(FileServer(root, mode, strip_ranges=strip_ranges))


def cutting(server: FileServer) -> contextlib.AbstractAsyncContextManager[CutProxy]:
    return started(CutProxy(server.port))


def client_of(port: int, **options: Any) -> sandboxkit.Client:
    """A client for sandboxes on the loopback server at `port` (no console is ever asked)."""
    return hostile_client(f"http://127.0.0.1:{port}", **options)


def sandbox(client: sandboxkit.Client, domain: str) -> sandboxkit.Sandbox:
    return client.sandbox(sandbox_key="sbx", domain=domain, access_token=TOKEN)


def the_validator(mode: Mode, answer: Exchange) -> str | None:
    """What the SDK must put in If-Range after `answer`: its ETag; with none, its date."""
    return answer.last_modified if mode == "last-modified" else answer.etag


def spliced(old: bytes, new: bytes, held: list[tuple[int, int]]) -> bytes:
    """The mix a blind resume makes: `new`, with `old`'s bytes where the part held them."""
    out = bytearray(new)
    for start, end in held:
        out[start:end] = old[start:end]
    return bytes(out)


def paths(tmp_path: Path) -> tuple[Path, Path]:
    """The server's file and the download's destination (in a directory of its own)."""
    (tmp_path / "out").mkdir()
    return tmp_path / "remote" / REMOTE.lstrip("/"), tmp_path / "out" / "big.bin"


# -- one process, one stream, a cut -----------------------------------------------------------


@pytest.mark.parametrize("parts", [1, 8], ids=["one-stream", "split-capable"])
@pytest.mark.parametrize("mode", ["rfc", "aiohttp", "last-modified", "none"])
async def test_a_file_replaced_during_a_cut_is_fetched_anew_never_spliced(
    tmp_path: Path, mode: Mode, parts: int
) -> None:
    """The answer is cut at 1 MiB and the file replaced (same size) before the resume: the
    resume's If-Range gets the whole new file (or a 206 whose ETag shows the change, from a
    server that ignores If-Range): `dest` and the sha256 are the new file's. Without
    validators the resume is blind and splices, as it always did."""
    old, new = payload(2 * MiB, seed=1), payload(2 * MiB, seed=2)
    target, dest = paths(tmp_path)
    place(target, old, OLD_MTIME)
    async with serving(tmp_path / "remote", mode) as server, cutting(server) as proxy:
        proxy.cut_next(MiB, lambda: place(target, new, NEW_MTIME))
        async with client_of(proxy.port) as client:
            result = await sandbox(client, proxy.domain).files.download(REMOTE, dest, parts=parts)
    first, resume, *rest = server.seen
    assert proxy.cuts == 1 and (first.range, first.if_range, first.status) == (None, None, 200)
    assert resume.range is not None and resume.range.endswith("-")
    held = int(resume.range.removeprefix("bytes=")[:-1])
    assert 0 < held < len(old)
    if mode == "none":
        assert (resume.if_range, resume.status, rest) == (None, 206, [])
        expected = old[:held] + new[held:]  # the limitation the README names
    else:
        assert resume.if_range is not None and resume.if_range == the_validator(mode, first)
        expected = new
        if mode == "aiohttp":  # If-Range ignored: a 206 of the new version, then a whole GET
            assert resume.status == 206 and resume.etag != first.etag
            assert [(e.range, e.status) for e in rest] == [(None, 200)]
        else:
            assert (resume.status, rest) == (200, [])
    assert dest.read_bytes() == expected
    assert (result.size, result.sha256) == (len(expected), sha(expected))
    assert part_files(dest.parent) == []


@pytest.mark.parametrize("mode", ["rfc", "aiohttp", "last-modified"])
async def test_an_unchanged_file_is_resumed_with_if_range_and_a_206(
    tmp_path: Path, mode: Mode
) -> None:
    """The control: with the file left alone the If-Range matches, the server answers 206 for
    the rest, and nothing is fetched twice (If-Range costs a resume nothing)."""
    data = payload(2 * MiB, seed=3)
    target, dest = paths(tmp_path)
    place(target, data, OLD_MTIME)
    async with serving(tmp_path / "remote", mode) as server, cutting(server) as proxy:
        proxy.cut_next(MiB, lambda: None)
        async with client_of(proxy.port) as client:
            result = await sandbox(client, proxy.domain).files.download(REMOTE, dest)
    first, resume = server.seen
    assert resume.if_range == the_validator(mode, first) and resume.status == 206
    assert dest.read_bytes() == data and result.sha256 == sha(data) and result.resumes == 1


@pytest.mark.parametrize("mode", ["rfc", "aiohttp"])
async def test_a_stream_never_yields_bytes_of_two_versions(tmp_path: Path, mode: Mode) -> None:
    """`iter_bytes` cannot take back what it yielded: a resume that finds another version
    fails (ResponseDecodeError naming both ETags) instead of going on with the new file."""
    old, new = payload(2 * MiB, seed=4), payload(2 * MiB, seed=5)
    target, _ = paths(tmp_path)
    place(target, old, OLD_MTIME)
    got = bytearray()
    async with serving(tmp_path / "remote", mode) as server, cutting(server) as proxy:
        proxy.cut_next(MiB, lambda: place(target, new, NEW_MTIME))
        async with client_of(proxy.port) as client:
            with pytest.raises(sandboxkit.ResponseDecodeError, match="changed") as caught:
                async with sandbox(client, proxy.domain).files.iter_bytes(REMOTE) as chunks:
                    async for chunk in chunks:
                        got += chunk
    first, resume = server.seen
    assert resume.if_range == first.etag and resume.etag is not None
    assert first.etag in str(caught.value) and resume.etag in str(caught.value)
    assert got and old.startswith(got)  # only the old version's bytes were yielded


# -- one process, slices --------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rfc", "aiohttp"])
async def test_a_slice_of_another_version_restarts_the_whole_download(
    tmp_path: Path, mode: Mode
) -> None:
    """The file is replaced (same size) as the first slice is asked for: every slice carries
    the first answer's ETag in If-Range, the answer shows the change (a 200, or a 206 of
    another ETag), and the download begins again, whole, with the new file's slices."""
    old, new = payload(4 * MiB, seed=6), payload(4 * MiB, seed=7)
    target, dest = paths(tmp_path)
    place(target, old, OLD_MTIME)
    async with serving(tmp_path / "remote", mode) as server:

        def swap(index: int) -> None:
            if index == 1:  # the first slice's request: the first answer is under way
                place(target, new, NEW_MTIME)

        server.before_answer = swap
        async with client_of(server.port, parallel_downloads=SPLIT) as client:
            result = await sandbox(client, server.domain).files.download(REMOTE, dest)
    wholes = [e for e in server.seen if e.range is None]
    assert [e.status for e in wholes] == [200, 200] and wholes[0].etag != wholes[1].etag
    old_tag, new_tag = wholes[0].etag, wholes[1].etag
    slices = [e for e in server.seen if e.range is not None]
    assert {e.if_range for e in slices} == {old_tag, new_tag}
    changed = {(e.status, e.etag) for e in slices if e.if_range == old_tag and e.etag == new_tag}
    assert changed == ({(200, new_tag)} if mode == "rfc" else {(206, new_tag)})
    assert {e.status for e in slices if e.if_range == new_tag} == {206}
    assert dest.read_bytes() == new and result.sha256 == sha(new)


# -- a host that strips Range ---------------------------------------------------------------


def why(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """What the split download logged at `level` (why it started over or stopped slicing)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "sandboxkit" and r.levelno == level and r.module == "download"
    ]


@pytest.mark.parametrize("mode", ["rfc", "aiohttp", "last-modified", "none"])
async def test_a_host_that_strips_range_gets_the_file_as_one_stream(
    tmp_path: Path, mode: Mode, caplog: pytest.LogCaptureFixture
) -> None:
    """`Accept-Ranges: bytes` is shown but every Range is answered 200 with the whole file
    (a proxy strips it): the first slice's answer ends slicing, the file is fetched once more,
    whole, and the download succeeds in at most parts + 2 requests (it used to start over 5
    times, 20 requests, and fail with "the file kept changing"). DEBUG says why; no warning."""
    caplog.set_level(logging.DEBUG, logger="sandboxkit")
    data = payload(8 * MiB, seed=12)
    target, dest = paths(tmp_path)
    place(target, data, OLD_MTIME)
    async with (
        serving(tmp_path / "remote", mode, strip_ranges=True) as server,
        client_of(server.port, parallel_downloads=SPLIT) as client,
    ):
        result = await sandbox(client, server.domain).files.download(REMOTE, dest)
    seen = server.seen
    assert (seen[0].range, seen[-1].range) == (None, None)
    assert [e for e in seen if e.range is None] == [seen[0], seen[-1]]
    # The first GET; a slice on each connection at most (the first one's, too, once its
    # piece is read); the whole GET.
    assert 3 <= len(seen) <= 1 + SPLIT.parts + 1
    assert {e.status for e in seen} == {200}
    if mode in ("rfc", "aiohttp", "last-modified"):  # each slice carried the version
        assert all(e.if_range is not None for e in seen[1:-1])
    assert dest.read_bytes() == data
    assert (result.size, result.sha256) == (len(data), sha(data))
    assert part_files(dest.parent) == []
    ignored = why(caplog, logging.DEBUG)
    assert len(ignored) == 1 and RANGES_IGNORED in ignored[0], ignored
    assert why(caplog, logging.WARNING) == []


@pytest.mark.parametrize("mode", ["rfc", "last-modified"])
async def test_a_file_replaced_behind_a_range_stripping_host_restarts_once_then_one_stream(
    tmp_path: Path, mode: Mode, caplog: pytest.LogCaptureFixture
) -> None:
    """The file is replaced (same size) as the first slice is asked for: that slice's 200
    names another version, which is a change (one warning, the download starts over); the
    next round's slices are answered 200 with the new version, which is Range stripped:
    one whole GET more, and the new file's bytes."""
    caplog.set_level(logging.DEBUG, logger="sandboxkit")
    old, new = payload(4 * MiB, seed=13), payload(4 * MiB, seed=14)
    target, dest = paths(tmp_path)
    place(target, old, OLD_MTIME)
    async with serving(tmp_path / "remote", mode, strip_ranges=True) as server:

        def swap(index: int) -> None:
            if index == 1:
                place(target, new, NEW_MTIME)

        server.before_answer = swap
        async with client_of(server.port, parallel_downloads=SPLIT) as client:
            result = await sandbox(client, server.domain).files.download(REMOTE, dest)
    wholes = [e for e in server.seen if e.range is None]
    assert len(wholes) == 3 and server.seen[-1] is wholes[-1]
    assert {e.status for e in server.seen} == {200}
    assert dest.read_bytes() == new and result.sha256 == sha(new)
    warned = why(caplog, logging.WARNING)
    assert len(warned) == 1 and "the file changed" in warned[0], warned
    ignored = why(caplog, logging.DEBUG)
    assert len(ignored) == 1 and RANGES_IGNORED in ignored[0], ignored


async def test_a_file_that_keeps_changing_still_fails_and_says_so(tmp_path: Path) -> None:
    """The other side of the rule: a file replaced (same size) at every slice's request,
    behind a host that strips Range, is a change each time, never Range stripped: the
    download starts over until `max_attempts` and fails naming the change."""
    target, dest = paths(tmp_path)
    place(target, payload(2 * MiB, seed=15), OLD_MTIME)
    async with serving(tmp_path / "remote", "rfc", strip_ranges=True) as server:
        versions = iter(range(1, 100))

        def swap(index: int) -> None:
            if server.seen[index].range is not None:
                version = next(versions)
                place(target, payload(2 * MiB, seed=15 + version), OLD_MTIME + version * 86_400)

        server.before_answer = swap
        retry = sandboxkit.RetryPolicy.no_delay(max_attempts=3)
        async with client_of(server.port, parallel_downloads=SPLIT, retry=retry) as client:
            with pytest.raises(sandboxkit.ResponseDecodeError, match="the file changed") as caught:
                await sandbox(client, server.domain).files.download(REMOTE, dest)
    assert "started over 3 times" in str(caught.value)
    # Raised between its calls, named all the same.
    assert caught.value.operation == "files.download"
    assert len([e for e in server.seen if e.range is None]) == 3
    assert part_files(dest.parent) == []


# -- a killed process, and a rerun ----------------------------------------------------------

CHILD = """
import asyncio, json, os, signal, sys
import sandboxkit
from sandboxkit.emulator import EmulatorResolver

args = json.loads(sys.argv[1])

async def main() -> None:
    options = {}
    if args["split"]:
        options["parallel_downloads"] = sandboxkit.ParallelDownloads(
            threshold=1 << 20, parts=4, min_latency=0
        )
    client = sandboxkit.Client(
        api_key="sk-child", base_url=args["base_url"], data_plane_scheme="http",
        resolver=EmulatorResolver(), retry=sandboxkit.RetryPolicy.no_delay(), **options,
    )
    box = client.sandbox(sandbox_key="sbx", domain=args["domain"], access_token=args["token"])

    def progress(done: int, total: int | None) -> None:
        if total and done >= total // 2:
            os.kill(os.getpid(), signal.SIGKILL)  # about half: the part and sidecar exist

    async with client:
        await box.files.download(args["remote"], args["dest"], progress=progress,
                                 parts=args["parts"])

asyncio.run(main())
"""


async def killed_at_half(server: FileServer, dest: Path, *, parts: int, split: bool) -> None:
    """A child process downloads REMOTE to `dest` and SIGKILLs itself at about half."""
    args = {
        "base_url": f"http://127.0.0.1:{server.port}",
        "domain": server.domain,
        "token": TOKEN,
        "remote": REMOTE,
        "dest": str(dest),
        "parts": parts,
        "split": split,
    }
    code, output = await run_script(CHILD, args)
    assert code == -9, output


def recorded(dest: Path, mode: Mode, first: Exchange) -> dict[str, Any]:
    """The killed process's sidecar, checked to name the version of its first answer."""
    record: dict[str, Any] = json.loads(part_paths(dest)[1].read_text())
    if mode == "none":
        assert not {"etag", "last_modified", "date"} & record.keys()  # as before issue 28
    else:
        assert record["etag"] == first.etag and record["last_modified"] == first.last_modified
        assert record["etag"] and record["date"]
    return record


@pytest.mark.parametrize("parts", [1, 8], ids=["one-stream", "split-capable"])
@pytest.mark.parametrize("mode", ["rfc", "aiohttp", "none"])
async def test_a_rerun_after_sigkill_fetches_a_replaced_file_anew(
    tmp_path: Path, mode: Mode, parts: int
) -> None:
    """The issue's case, on one stream: killed at about half, the file replaced by another of
    the same size, the same download run again (in this process). The rerun's first request
    continues the part with If-Range and the sidecar's ETag; it ends with the new file's
    bytes and sha256. Without validators it splices, as before."""
    old, new = payload(32 * MiB, seed=8), payload(32 * MiB, seed=9)
    target, dest = paths(tmp_path)
    place(target, old, OLD_MTIME)
    async with serving(tmp_path / "remote", mode) as server:
        await killed_at_half(server, dest, parts=parts, split=False)
        held = part_paths(dest)[0].stat().st_size
        assert 0 < held < len(old)
        record = recorded(dest, mode, server.seen[0])
        place(target, new, NEW_MTIME)
        before = len(server.seen)
        async with client_of(server.port) as client:
            result = await sandbox(client, server.domain).files.download(REMOTE, dest, parts=parts)
    first, *rest = server.seen[before:]
    assert first.range == f"bytes={held}-"
    if mode == "none":
        assert (first.if_range, first.status, rest) == (None, 206, [])
        expected = old[:held] + new[held:]
    else:
        assert first.if_range == record["etag"]
        expected = new
        if mode == "aiohttp":
            assert first.status == 206 and first.etag != record["etag"]
            assert [(e.range, e.status) for e in rest] == [(None, 200)]
        else:
            assert (first.status, rest) == (200, [])
    assert dest.read_bytes() == expected
    assert (result.size, result.sha256) == (len(expected), sha(expected))
    assert part_files(dest.parent) == []


@pytest.mark.parametrize("mode", ["rfc", "aiohttp", "none"])
async def test_a_sliced_rerun_after_sigkill_fetches_a_replaced_file_anew(
    tmp_path: Path, mode: Mode
) -> None:
    """The same in slices: the killed process's sidecar lists the ranges written and the ETag;
    the rerun's slices for the gaps carry it in If-Range, the answers show the change, and
    the download starts over whole: the new file's bytes and sha256. Without validators the
    gaps are filled from the new file around the old ranges, as before."""
    old, new = payload(24 * MiB, seed=10), payload(24 * MiB, seed=11)
    target, dest = paths(tmp_path)
    place(target, old, OLD_MTIME)
    async with serving(tmp_path / "remote", mode) as server:
        await killed_at_half(server, dest, parts=4, split=True)
        record = recorded(dest, mode, server.seen[0])
        done = [(start, end) for start, end in record["done"]]
        assert done and sum(end - start for start, end in done) < len(old)
        place(target, new, NEW_MTIME)
        before = len(server.seen)
        async with client_of(server.port, parallel_downloads=SPLIT) as client:
            result = await sandbox(client, server.domain).files.download(REMOTE, dest)
    rerun = server.seen[before:]
    assert rerun[0].range is not None and not rerun[0].range.endswith("-")  # a gap's slice
    if mode == "none":
        assert all(e.if_range is None and e.status == 206 for e in rerun)
        expected = spliced(old, new, done)
    else:
        old_tag = record["etag"]
        assert rerun[0].if_range == old_tag
        wholes = [e for e in rerun if e.range is None]
        assert [(e.status, e.etag != old_tag) for e in wholes] == [(200, True)]
        new_tag = wholes[0].etag
        ranged = [e for e in rerun if e.range is not None]
        assert {e.if_range for e in ranged} == {old_tag, new_tag}
        stale = {(e.status, e.etag) for e in ranged if e.if_range == old_tag}
        assert stale == ({(200, new_tag)} if mode == "rfc" else {(206, new_tag)})
        expected = new
    assert dest.read_bytes() == expected
    assert (result.size, result.sha256) == (len(expected), sha(expected))
    assert part_files(dest.parent) == []


# -- the sidecar ------------------------------------------------------------------------------

OF = PartOf("http://sbx.sandbox.test:1", REMOTE, None)
V1 = Validators('"v1"', "Mon, 01 Jan 2024 00:00:00 GMT", "Tue, 02 Jan 2024 00:00:00 GMT")


def test_a_part_opens_with_the_version_its_sidecar_names(tmp_path: Path) -> None:
    part, sidecar = part_paths(tmp_path / "big.bin")
    part.write_bytes(b"x" * 100)
    sidecar.write_text(
        json.dumps({**attrs.asdict(OF), "total": 300, "ranges": True, **V1.record()})
    )
    opened = open_part(tmp_path / "big.bin", OF, resume=True)
    opened.handle.close()
    assert (opened.held, opened.validators) == (100, V1)


@pytest.mark.parametrize("bad", [{"etag": 5}, {"last_modified": ["x"]}, {"date": {}}])
def test_a_sidecar_whose_validators_are_not_strings_vouches_for_nothing(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    part, sidecar = part_paths(tmp_path / "big.bin")
    part.write_bytes(b"x" * 100)
    body = {**attrs.asdict(OF), "total": 300, "ranges": True, "etag": '"v1"', **bad}
    sidecar.write_text(json.dumps(body))
    opened = open_part(tmp_path / "big.bin", OF, resume=True)
    opened.handle.close()
    assert (opened.held, opened.validators, part.stat().st_size) == (0, None, 0)


def test_the_sidecar_follows_a_new_version_of_the_same_size(tmp_path: Path) -> None:
    """After a restart onto another version the total is the same: the sidecar is rewritten
    all the same, or a rerun would send the old ETag (and restart for nothing)."""
    opened = open_part(tmp_path / "big.bin", OF, resume=True)
    try:
        sidecar = opened.sidecar
        opened.record(300, True, V1)
        assert json.loads(sidecar.read_text())["etag"] == '"v1"'
        opened.record(300, True, Validators('"v2"'))
        assert json.loads(sidecar.read_text())["etag"] == '"v2"'
        opened.record(300, True)
        assert "etag" not in json.loads(sidecar.read_text())
        opened.record_done(300, [(0, 10)], V1)
        assert json.loads(sidecar.read_text())["etag"] == '"v1"'
    finally:
        opened.handle.close()


@pytest.mark.parametrize("mode", ["rfc", "last-modified", "none"])
async def test_a_page_names_the_version_its_bytes_are_of(tmp_path: Path, mode: Mode) -> None:
    """`read_range` and `read_text` carry the answer's ETag and Last-Modified (None where the
    server sends none): what the agent kit's version token is made of."""
    target, _ = paths(tmp_path)
    place(target, b"hello, versions\n", OLD_MTIME)
    async with serving(tmp_path / "remote", mode) as server, client_of(server.port) as client:
        files = sandbox(client, server.domain).files
        page = await files.read_range(REMOTE, 0, 5)
        text = await files.read_text(REMOTE, 7, 8)
    first, second = server.seen
    assert (page.data, text.text) == (b"hello", "versions")
    assert (page.etag, page.last_modified) == (first.etag, first.last_modified)
    assert (text.etag, text.last_modified) == (second.etag, second.last_modified)
    assert (page.etag is None) is (mode != "rfc")
    assert (page.last_modified is None) is (mode == "none")
