"""Downloads against the emulator over real sockets: resume, restarts, cleanup, errors."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import sandboxkit
from sandboxkit.emulator import Emulator, Fault

from ..files_support import CHUNKED, NO_RESUME, RESUME, Box, dir_listing, new_box, payload, sha

KiB = 1024
MiB = 1024 * KiB
SIZES = [0, 1, 64 * KiB - 1, 64 * KiB + 1, 10 * MiB]


@pytest.mark.parametrize("idc", [RESUME, NO_RESUME, CHUNKED])
async def test_sha256_matches_through_random_faults(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path, idc: str
) -> None:
    """Every size lands byte-exact while seeded-random cuts, 429s and 502s hit the GETs."""
    sbx = await new_box(emulator, emulator_client, idc)
    emulator.faults.random(
        seed=7, rates={"429": 0.1, "502": 0.1, "cut": 0.2}, routes=["files.download"]
    )
    retry = sandboxkit.RetryPolicy.no_delay(max_attempts=8)
    for size in SIZES:
        data = payload(size, seed=size)
        sbx.put(f"/home/user/f{size}.bin", data)
        dest = tmp_path / f"f{size}.bin"
        result = await sbx.files.download(f"/home/user/f{size}.bin", dest, retry=retry)
        assert (result.size, result.sha256) == (size, sha(data))
        assert sha(dest.read_bytes()) == sha(data)
        assert result.attempts >= 1
    assert emulator.faults.injected["cut"] > 0 and emulator.faults.injected["429"] > 0
    ranges = [r.headers.get("Range") for r in emulator.journal_for("files.download")]
    if idc == NO_RESUME:
        assert ranges == [None] * len(ranges)  # whole-file GETs only
    else:
        assert any(ranges)
    assert dir_listing(tmp_path) == sorted(f"f{size}.bin" for size in SIZES)


async def test_resume_asks_for_the_bytes_already_written(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """Each retry on a resume IDC carries `Range: bytes=<bytes written>-`."""
    data = payload(1 * MiB)
    box.put("/home/user/big.bin", data)
    emulator.faults.script(
        "files.download",
        Fault.cut(after_bytes=100_000),
        Fault.cut(after_bytes=50_000),
        Fault.status(429, retry_after="0"),
        Fault.status(502),
    )
    result = await box.files.download("/home/user/big.bin", tmp_path / "big.bin")
    journal = emulator.journal_for("files.download")
    assert [r.headers.get("Range") for r in journal] == [
        None,
        "bytes=100000-",
        "bytes=150000-",
        "bytes=150000-",
        "bytes=150000-",
    ]
    assert [r.status for r in journal] == [200, 206, 429, 502, 206]
    assert (result.attempts, result.resumes, result.sha256) == (5, 4, sha(data))


async def test_connection_closed_before_headers_is_retried(emulator: Emulator, box: Box) -> None:
    """A connection closed before any answer is retried until the file arrives."""
    box.put("/home/user/c.bin", b"content")
    emulator.faults.script("files.download", *[Fault.cut_before_headers()] * 3)
    assert await box.files.read_bytes("/home/user/c.bin") == b"content"
    assert [r.status for r in emulator.journal_for("files.download")][-1] == 200


async def test_no_resume_idc_refetches_whole_file(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """Without `Accept-Ranges: bytes` a retry is a whole-file GET and the file starts over."""
    sbx = await new_box(emulator, emulator_client, NO_RESUME)
    data = payload(300 * KiB)
    sbx.put("/home/user/a.bin", data)
    emulator.faults.script("files.download", Fault.cut(after_bytes=200_000))
    result = await sbx.files.download("/home/user/a.bin", tmp_path / "a.bin")
    journal = emulator.journal_for("files.download")
    assert [(r.headers.get("Range"), r.status) for r in journal] == [(None, 200), (None, 200)]
    assert (result.attempts, result.resumes, result.size) == (2, 0, len(data))
    assert (tmp_path / "a.bin").read_bytes() == data


async def test_chunked_download_resumes_with_range(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """A chunked body (no Content-Length) cut midway resumes with a Range and completes."""
    sbx = await new_box(emulator, emulator_client, CHUNKED)
    data = payload(700 * KiB)
    sbx.put("/home/user/c.bin", data)
    emulator.faults.script("files.download", Fault.cut(after_bytes=300_000))
    result = await sbx.files.download("/home/user/c.bin", tmp_path / "c.bin")
    journal = emulator.journal_for("files.download")
    assert journal[0].status == 200 and journal[1].status == 206
    assert journal[1].headers["Range"].startswith("bytes=")
    assert int(journal[1].headers["Range"][6:-1]) > 0
    assert (result.size, result.sha256) == (len(data), sha(data))


async def test_chunked_download_without_faults(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """A clean chunked body of unknown size is complete when it ends."""
    sbx = await new_box(emulator, emulator_client, CHUNKED)
    data = payload(200 * KiB)
    sbx.put("/home/user/c.bin", data)
    assert await sbx.files.read_bytes("/home/user/c.bin") == data


async def test_iter_bytes_skips_what_it_yielded_after_a_restart(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """After a 200 restart the stream skips the bytes already yielded: none is seen twice."""
    sbx = await new_box(emulator, emulator_client, NO_RESUME)
    data = payload(600 * KiB)
    sbx.put("/home/user/s.bin", data)
    emulator.faults.script("files.download", Fault.cut(after_bytes=250_000), Fault.status(502))
    chunks = []
    async with sbx.files.iter_bytes("/home/user/s.bin", chunk_size=32 * KiB) as stream:
        async for chunk in stream:
            chunks.append(chunk)
    assert b"".join(chunks) == data
    assert [r.status for r in emulator.journal_for("files.download")] == [200, 502, 200]


async def test_iter_bytes_resumes_with_range(emulator: Emulator, box: Box) -> None:
    """On a resume IDC the stream continues with a ranged GET after a cut."""
    data = payload(400 * KiB)
    box.put("/home/user/s.bin", data)
    emulator.faults.script("files.download", Fault.cut(after_bytes=123_457))
    got = b"".join([c async for c in box.files.iter_bytes("/home/user/s.bin")])
    assert got == data
    assert emulator.journal_for("files.download")[1].headers["Range"] == "bytes=123457-"


async def test_iter_bytes_closed_early_releases_its_connection(
    emulator_client: sandboxkit.Client, box: Box
) -> None:
    """Leaving `async with` after one chunk frees the host slot and leaves nothing running."""
    box.put("/home/user/s.bin", payload(2 * MiB))
    async with box.files.iter_bytes("/home/user/s.bin", chunk_size=16 * KiB) as stream:
        first = await stream.__anext__()
        pool = emulator_client._transport.hosts.get(box.handle._host)
        assert pool is not None and pool.in_flight == 1
    assert len(first) <= 16 * KiB
    assert pool.in_flight == 0 and pool.limiter.borrowed_tokens == 0


async def test_iter_bytes_raises_the_final_error(emulator: Emulator, box: Box) -> None:
    """A stream whose file is missing raises NotFoundError to its consumer."""
    with pytest.raises(sandboxkit.NotFoundError):
        async for _ in box.files.iter_bytes("/home/user/missing.bin"):
            pass
    assert len(emulator.journal_for("files.download")) == 1


async def test_read_bytes_and_progress(box: Box, tmp_path: Path) -> None:
    """read_bytes returns the content; progress reports (done, total) up to (size, size)."""
    data = payload(300 * KiB)
    box.put("/home/user/r.bin", data)
    assert await box.files.read_bytes("/home/user/r.bin") == data
    seen: list[tuple[int, int | None]] = []
    await box.files.download(
        "/home/user/r.bin", tmp_path / "r.bin", progress=lambda d, t: seen.append((d, t))
    )
    assert seen[-1] == (len(data), len(data))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


async def test_checksum_off_and_local_name_from_dest(box: Box, tmp_path: Path) -> None:
    """checksum=False gives sha256 None; the file lands at dest, not the server's name."""
    box.put("/home/user/server-name.bin", b"abc")
    result = await box.files.download(
        "/home/user/server-name.bin", tmp_path / "mine.bin", checksum=False
    )
    assert result.sha256 is None and result.path == tmp_path / "mine.bin"
    assert dir_listing(tmp_path) == ["mine.bin"]


async def test_failed_download_leaves_dest_untouched(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """A download that fails after writing bytes keeps the old dest. Failing for a reason a
    later try may not meet (502s), it keeps its partial file too, which the next download
    continues with Range: nothing is fetched twice, and nothing is left after it."""
    data = payload(500 * KiB)
    box.put("/home/user/x.bin", data)
    dest = tmp_path / "x.bin"
    dest.write_bytes(b"precious")
    emulator.faults.script(
        "files.download", Fault.cut(after_bytes=200_000), *[Fault.status(502)] * 5
    )
    with pytest.raises(sandboxkit.BadGatewayError):
        await box.files.download("/home/user/x.bin", dest)
    assert dest.read_bytes() == b"precious"
    assert dir_listing(tmp_path) == [".x.bin.part", ".x.bin.part.json", "x.bin"]
    assert len(emulator.journal_for("files.download")) == 6  # the cut try made progress: free
    result = await box.files.download("/home/user/x.bin", dest)
    assert (dest.read_bytes(), result.sha256) == (data, sha(data))
    assert emulator.journal_for("files.download")[-1].headers["Range"] == "bytes=200000-"
    assert dir_listing(tmp_path) == ["x.bin"]


@pytest.mark.parametrize(
    "fault",
    [Fault.status(404), Fault.status(500)],
    ids=["not-found", "server-error"],
)
async def test_a_download_failing_for_good_removes_its_partial_file(
    emulator: Emulator, box: Box, tmp_path: Path, fault: Fault
) -> None:
    """After a 404 or a 500 (not retried) there is nothing worth continuing."""
    box.put("/home/user/x.bin", payload(500 * KiB))
    emulator.faults.script("files.download", Fault.cut(after_bytes=200_000), fault)
    with pytest.raises(sandboxkit.APIError):
        await box.files.download("/home/user/x.bin", tmp_path / "x.bin")
    assert dir_listing(tmp_path) == []


async def test_cancelled_download_leaves_dest_untouched(
    emulator_client: sandboxkit.Client, box: Box, tmp_path: Path
) -> None:
    """Cancelling mid-body keeps the old dest, deletes the temp file, frees the connection."""
    box.put("/home/user/x.bin", payload(8 * MiB))
    dest = tmp_path / "x.bin"
    dest.write_bytes(b"precious")
    calls = []
    with anyio.CancelScope() as scope:

        def cancel_midway(done: int, total: int | None) -> None:
            calls.append(done)
            if done >= 1 * MiB:
                scope.cancel()

        await box.files.download(
            "/home/user/x.bin", dest, chunk_size=64 * KiB, progress=cancel_midway
        )
    assert scope.cancelled_caught and 0 < calls[-1] < 8 * MiB
    assert dest.read_bytes() == b"precious"
    assert dir_listing(tmp_path) == ["x.bin"]
    pool = emulator_client._transport.hosts.get(box.handle._host)
    assert pool is not None and pool.in_flight == 0


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (401, sandboxkit.AuthenticationError),
        (403, sandboxkit.PermissionDeniedError),
        (404, sandboxkit.NotFoundError),
        (413, sandboxkit.PayloadTooLargeError),
        (415, sandboxkit.UnsupportedMediaTypeError),
        (416, sandboxkit.RangeNotSatisfiableError),
    ],
)
async def test_client_errors_are_not_retried(
    emulator: Emulator, box: Box, status: int, error: type[sandboxkit.APIError]
) -> None:
    """401/403/404/413/415/416 raise their class after exactly one request."""
    box.put("/home/user/e.bin", b"x")
    emulator.faults.script("files.download", Fault.status(status))
    with pytest.raises(error) as caught:
        await box.files.read_bytes("/home/user/e.bin")
    assert (caught.value.status, caught.value.surface) == (status, "data")
    assert len(emulator.journal_for("files.download")) == 1


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (429, sandboxkit.RateLimitError),
        (502, sandboxkit.BadGatewayError),
        (503, sandboxkit.ServiceUnavailableError),
        (504, sandboxkit.GatewayTimeoutError),
    ],
)
async def test_server_errors_are_retried(
    emulator: Emulator, box: Box, status: int, error: type[sandboxkit.APIError]
) -> None:
    """429/502/503/504 are retried: one then success; max_attempts of them raise the class."""
    box.put("/home/user/e.bin", b"xyz")
    emulator.faults.script("files.download", Fault.status(status))
    assert await box.files.read_bytes("/home/user/e.bin") == b"xyz"
    emulator.faults.script("files.download", *[Fault.status(status)] * 3)
    with pytest.raises(error):
        await box.files.read_bytes(
            "/home/user/e.bin", retry=sandboxkit.RetryPolicy.no_delay(max_attempts=3)
        )
    assert len(emulator.journal_for("files.download")) == 2 + 3


async def test_missing_remote_file(box: Box, tmp_path: Path) -> None:
    """A missing file is NotFoundError and creates nothing locally."""
    with pytest.raises(sandboxkit.NotFoundError):
        await box.files.download("/home/user/none.bin", tmp_path / "n.bin")
    assert dir_listing(tmp_path) == []
