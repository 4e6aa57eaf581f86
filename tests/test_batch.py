"""sandboxkit.batch against the emulator over real loopback sockets."""

from __future__ import annotations

import hashlib
import pickle
import random
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import sandboxkit
from sandboxkit import batch
from sandboxkit.emulator import Emulator

FAST_RETRY = sandboxkit.RetryPolicy(max_attempts=8, initial_backoff=0.001, max_backoff=0.005)


@pytest.fixture
async def batch_client(emulator: Emulator) -> AsyncIterator[sandboxkit.Client]:
    """A client on the emulator whose retries wait a few milliseconds, up to eight attempts."""
    async with emulator.client(retry=FAST_RETRY) as c:
        yield c


async def make_sandboxes(emu: Emulator, count: int) -> list[batch.SandboxRef]:
    refs = []
    for _ in range(count):
        data = (await emu.create_sandbox())["data"]
        refs.append(
            batch.SandboxRef(data["sandbox_key"], data["domain"], data["sandbox_access_token"])
        )
    return refs


def put_files(
    emu: Emulator, refs: list[batch.SandboxRef], per_sandbox: int, seed: int
) -> dict[tuple[str, str], str]:
    """Write random 4-64 KiB files straight into each sandbox; returns their sha256s."""
    rng = random.Random(seed)
    digests = {}
    for ref in refs:
        home = emu.sandbox_root(ref.sandbox_key) / "home" / "user"
        for n in range(per_sandbox):
            data = rng.randbytes(rng.randint(4 << 10, 64 << 10))
            (home / f"f{n}.bin").write_bytes(data)
            digests[(ref.sandbox_key, f"/home/user/f{n}.bin")] = hashlib.sha256(data).hexdigest()
    return digests


def nothing_written(directory: Path) -> bool:
    return not any(directory.iterdir())


def download_jobs(
    refs: list[batch.SandboxRef], per_sandbox: int, dest: Path
) -> list[batch.DownloadJob]:
    return [
        batch.DownloadJob(ref, f"/home/user/f{n}.bin", dest / f"{ref.sandbox_key}-{n}.bin")
        for ref in refs
        for n in range(per_sandbox)
    ]


async def test_thousand_downloads_with_faults_all_complete(
    emulator: Emulator, batch_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """1,000 downloads on 100 sandboxes with 10% injected faults all land with the right sha256."""
    refs = await make_sandboxes(emulator, 100)
    digests = put_files(emulator, refs, 10, seed=1)
    jobs = download_jobs(refs, 10, tmp_path)
    emulator.faults.random(
        seed=7, rates={"429": 0.04, "502": 0.03, "cut": 0.03}, routes=("files.download",)
    )
    seen: list[tuple[int, int]] = []

    result = await batch.download_many(
        batch_client,
        jobs,
        concurrency=256,
        progress=lambda done, total, _: seen.append((done, total)),
    )

    assert [o.job for o in result.outcomes] == jobs
    assert result.ok, result.failures[:3]
    for outcome in result.outcomes:
        assert outcome.result is not None
        want = digests[(outcome.job.sandbox.sandbox_key, outcome.job.remote)]
        assert outcome.result.sha256 == want
        assert hashlib.sha256(outcome.job.dest.read_bytes()).hexdigest() == want
    summary = result.summary
    faults = sum(emulator.faults.injected.values())
    assert 50 <= faults <= 160  # about 10% of ~1,100 requests: the faults really happened
    assert (summary.total, summary.done, summary.failed) == (1000, 1000, 0)
    assert summary.bytes == sum(o.job.dest.stat().st_size for o in result.outcomes)
    # Every injected fault cost exactly one extra GET, and the summary says so.
    assert summary.attempts == 1000 + faults
    assert summary.retries == faults
    # A cut continues with a ranged GET (which a later fault may make ranged again).
    assert emulator.faults.injected["cut"] > 0
    assert summary.resumes is not None and 0 < summary.resumes <= summary.retries
    assert summary.elapsed > 0
    assert seen == [(n, 1000) for n in range(1, 1001)]


async def test_deleted_sandbox_fails_only_its_jobs(
    emulator: Emulator, batch_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """A sandbox deleted mid-run fails exactly its own jobs, each with NotFoundError."""
    refs = await make_sandboxes(emulator, 20)
    put_files(emulator, refs, 10, seed=2)
    doomed = refs[-1]  # its jobs come last, so they start only after the deletion
    jobs = download_jobs(refs, 10, tmp_path)
    emulator.faults.random(seed=3, rates={"429": 0.05, "502": 0.05}, routes=("files.download",))
    halfway = anyio.Event()
    deleted = False

    def progress(done: int, total: int, outcome: object) -> None:
        if done == 50:
            halfway.set()

    async def delete_when_halfway() -> None:
        nonlocal deleted
        await halfway.wait()
        await emulator.delete_sandbox(doomed.sandbox_key)
        deleted = True

    async with anyio.create_task_group() as group:
        group.start_soon(delete_when_halfway)
        result = await batch.download_many(batch_client, jobs, concurrency=8, progress=progress)

    assert deleted
    failed = [o for o in result.outcomes if not o.ok]
    assert [o.job for o in failed] == [j for j in jobs if j.sandbox == doomed]
    assert all(isinstance(o.error, sandboxkit.NotFoundError) for o in failed)
    assert all(o.result is not None and o.result.size > 0 for o in result.outcomes if o.ok)
    assert (result.summary.done, result.summary.failed) == (190, 10)


async def test_upload_many_writes_every_file(
    emulator: Emulator, batch_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """upload_many puts every local file into its sandbox despite injected faults."""
    refs = await make_sandboxes(emulator, 10)
    rng = random.Random(4)
    jobs = []
    for i, ref in enumerate(refs * 5):
        source = tmp_path / f"src{i}.bin"
        source.write_bytes(rng.randbytes(rng.randint(4 << 10, 32 << 10)))
        jobs.append(batch.UploadJob(ref, f"/home/user/up{i}.bin", source))
    emulator.faults.random(seed=5, rates={"429": 0.1, "502": 0.1}, routes=("files.upload",))

    result = await batch.upload_many(batch_client, jobs, concurrency=16)

    assert result.ok, result.failures[:3]
    assert emulator.faults.injected  # the retries were exercised
    for outcome in result.outcomes:
        assert outcome.result is not None and outcome.result.path == outcome.job.remote
        stored = emulator.sandbox_root(outcome.job.sandbox.sandbox_key) / outcome.job.remote[1:]
        assert isinstance(outcome.job.source, Path)
        assert stored.read_bytes() == outcome.job.source.read_bytes()
    summary = result.summary
    assert summary.bytes == sum(j.source.stat().st_size for j in jobs if isinstance(j.source, Path))
    # Counted like downloads: every POST of the uploads that succeeded, a retry each 429/502.
    posts = emulator.journal_for("files.upload")
    assert summary.attempts == len(posts) and summary.retries == len(posts) - len(jobs) > 0
    assert summary.resumes == 0


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda ref, d: batch.DownloadJob(ref, "home/user/f0.bin", d / "x"), "must be absolute"),
        (lambda ref, d: batch.DownloadJob(ref, "/home/../etc", d / "x"), "'..'"),
        (lambda ref, d: batch.DownloadJob(ref, "/home/user/f0.bin", d / "no" / "x"), "directory"),
        (lambda ref, d: batch.DownloadJob(ref, "/home/user/f0.bin", d / "0.bin"), "jobs[0]'s"),
        (
            lambda ref, d: batch.DownloadJob(
                batch.SandboxRef("a/b", ref.domain, "t"), "/x", d / "x"
            ),
            "sandbox_key",
        ),
        (lambda ref, d: batch.UploadJob(ref, "/home/user/x", d / "x"), "expected a DownloadJob"),
    ],
)
async def test_bad_download_job_fails_before_any_request(
    emulator: Emulator, batch_client: sandboxkit.Client, tmp_path: Path, bad: object, message: str
) -> None:
    """A bad job anywhere in the list raises ValidationError naming it, and nothing is sent."""
    (ref,) = await make_sandboxes(emulator, 1)
    put_files(emulator, [ref], 3, seed=6)
    jobs: list[batch.DownloadJob] = download_jobs([ref], 3, tmp_path)
    jobs[0] = batch.DownloadJob(ref, "/home/user/f0.bin", tmp_path / "0.bin")
    jobs.insert(2, bad(ref, tmp_path))  # type: ignore[operator]
    emulator.journal.clear()

    with pytest.raises(sandboxkit.ValidationError, match=r"jobs\[2\]") as caught:
        await batch.download_many(batch_client, jobs)

    assert message in str(caught.value)
    assert emulator.journal == []
    assert nothing_written(tmp_path)


async def test_bad_upload_job_and_concurrency_fail_before_any_request(
    emulator: Emulator, batch_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """A missing upload source or a zero concurrency is refused before any request."""
    (ref,) = await make_sandboxes(emulator, 1)
    good = tmp_path / "a.bin"
    good.write_bytes(b"a")
    jobs = [batch.UploadJob(ref, "/home/user/a", good), batch.UploadJob(ref, "/x", tmp_path / "b")]
    emulator.journal.clear()

    with pytest.raises(sandboxkit.ValidationError, match=r"jobs\[1\].*does not exist"):
        await batch.upload_many(batch_client, jobs)
    with pytest.raises(sandboxkit.ValidationError, match="concurrency"):
        await batch.upload_many(batch_client, jobs[:1], concurrency=0)

    assert emulator.journal == []


def test_refs_hide_tokens_and_results_pickle(tmp_path: Path) -> None:
    """A SandboxRef never shows its token, and a BatchResult with errors survives pickling."""
    ref = batch.SandboxRef("key1", "sandbox.test:1", "tok-SECRET")
    job = batch.DownloadJob(ref, "/a", tmp_path / "a")
    error = sandboxkit.NotFoundError("gone", status=404, surface="data")
    result = batch.BatchResult(
        (batch.JobOutcome(job, None, error),),
        batch.BatchSummary(1, 0, 1, 0, 0, 0, 0, 0.1),
    )

    assert "SECRET" not in repr(ref) and "SECRET" not in repr(result)
    copy = pickle.loads(pickle.dumps(result))
    assert copy.outcomes[0].job == job
    assert isinstance(copy.outcomes[0].error, sandboxkit.NotFoundError)
    assert not copy.ok and copy.failures == copy.outcomes
