"""sandboxkit.dask on a real two-process LocalCluster against the emulator."""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

import sandboxkit
from sandboxkit import batch
from sandboxkit._transfer.sinks import part_paths
from sandboxkit.dask import _run_shard, download_many_on_dask
from sandboxkit.emulator import Emulator, EmulatorResolver, Fault
from sandboxkit.models import DownloadResult

from .dask_support import (
    Portal,
    RecordingClient,
    eventually,
    finished_in,
    kill_worker_of,
    shard_files,
    wait_for_replacement,
)

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def dask_client() -> Iterator[object]:
    """Two worker processes of one thread each: the CI machine has two cores."""
    with (
        distributed.LocalCluster(
            processes=True,
            n_workers=2,
            threads_per_worker=1,
            # The scheduler's HTTP server starts even with dashboard_address=None, on 8787:
            # any free port on loopback instead, so an open dashboard is no conflict.
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture
def dask_emulator() -> Iterator[tuple[Emulator, anyio.from_thread.BlockingPortal]]:
    """An emulator on a loop thread of this process, which worker processes reach over loopback."""
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Emulator()) as emu,
    ):
        yield emu, portal


def config_for(emu: Emulator) -> sandboxkit.ClientConfig:
    # The resolver class is the factory: it pickles by reference, and each worker's Client
    # gets its own instance that maps *.sandbox.test (the port is in the domain) to loopback.
    return sandboxkit.ClientConfig(
        api_key=emu.api_key,
        base_url=emu.base_url,
        data_plane_scheme=emu.data_plane_scheme,
        resolver=EmulatorResolver,
        retry=sandboxkit.RetryPolicy(max_attempts=8, initial_backoff=0.001, max_backoff=0.005),
    )


def run_killing_shard_0(
    dask_client: object,
    recording: RecordingClient,
    emu: Emulator,
    jobs: list[batch.DownloadJob],
    far_enough: Callable[[], bool],
) -> tuple[batch.BatchResult[batch.DownloadJob, Any], int]:
    """Two shards, one job at a time, from a thread; the worker running shard 0 is killed
    once `far_enough()` holds. The call's result, and the killed worker's pid."""
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(
            download_many_on_dask,
            recording,
            config_for(emu),
            jobs,
            shards=2,
            concurrency_per_worker=1,
        )
        eventually(lambda: recording.futures, "the shards to be submitted")
        killed = kill_worker_of(dask_client, recording.futures[0], far_enough)
        return call.result(timeout=60), killed


def test_downloads_on_two_worker_processes_match_sha256(
    dask_client: object,
    dask_emulator: tuple[Emulator, anyio.from_thread.BlockingPortal],
    tmp_path: Path,
) -> None:
    """Shards run on Dask worker processes and every file comes back with its sha256, in order."""
    emu, portal = dask_emulator
    rng = random.Random(11)
    jobs, digests = [], []
    for s in range(8):
        data = portal.call(emu.create_sandbox)["data"]
        ref = batch.SandboxRef(data["sandbox_key"], data["domain"], data["sandbox_access_token"])
        home = emu.sandbox_root(ref.sandbox_key) / "home" / "user"
        for n in range(25):
            body = rng.randbytes(rng.randint(4 << 10, 64 << 10))
            (home / f"f{n}.bin").write_bytes(body)
            digests.append(hashlib.sha256(body).hexdigest())
            jobs.append(batch.DownloadJob(ref, f"/home/user/f{n}.bin", tmp_path / f"{s}-{n}"))
    emu.faults.random(seed=9, rates={"429": 0.05, "502": 0.05}, routes=("files.download",))

    with distributed.get_task_stream(dask_client) as tasks:
        result = download_many_on_dask(
            dask_client,  # type: ignore[arg-type]
            config_for(emu),
            jobs,
            shards=4,
            concurrency_per_worker=16,
        )

    shard_runs = [t for t in tasks.data if "_run_shard" in t["key"]]
    assert len(shard_runs) == 4
    assert len({t["worker"] for t in shard_runs}) == 2  # both worker processes took shards

    assert [o.job for o in result.outcomes] == jobs
    assert result.ok, result.failures[:3]
    for outcome, want in zip(result.outcomes, digests, strict=True):
        assert outcome.result is not None and outcome.result.sha256 == want
        assert hashlib.sha256(outcome.job.dest.read_bytes()).hexdigest() == want
    summary = result.summary
    faults = sum(emu.faults.injected.values())
    assert faults > 0
    assert (summary.total, summary.done, summary.failed) == (200, 200, 0)
    assert summary.attempts == 200 + faults and summary.retries == faults
    assert len(emu.journal_for("files.download")) == 200 + faults
    assert summary.concurrency == 4 * 16  # each shard's fixed one, added up


def test_shards_find_their_concurrency_by_default_and_tell_its_changes(
    dask_client: object,
    dask_emulator: tuple[Emulator, anyio.from_thread.BlockingPortal],
    tmp_path: Path,
) -> None:
    """Without `concurrency_per_worker`, each shard finds its own as `download_many` does:
    the merged summary carries each shard's changes and pauses (a 429 saying wait 50 ms)
    and adds up where each ended."""
    emu, portal = dask_emulator
    jobs = []
    for s in range(2):
        data = portal.call(emu.create_sandbox)["data"]
        ref = batch.SandboxRef(data["sandbox_key"], data["domain"], data["sandbox_access_token"])
        home = emu.sandbox_root(ref.sandbox_key) / "home" / "user"
        for n in range(20):
            (home / f"f{n}.bin").write_bytes(b"x" * (n + 1))
            jobs.append(batch.DownloadJob(ref, f"/home/user/f{n}.bin", tmp_path / f"{s}-{n}"))
    emu.faults.script("files.download", Fault.status(429, retry_after="0.05"))
    result = download_many_on_dask(dask_client, config_for(emu), jobs, shards=2)  # type: ignore[arg-type]
    assert result.ok, result.failures[:3]
    summary = result.summary
    (throttled,) = emu.journal_for("files.download")[:1]
    assert throttled.status == 429
    assert summary.pauses == {f"http://{throttled.sandbox_key}.{emu.domain}": 1}
    # The shard whose first answer was the 429 halved at once; the other doubled from 4.
    changes = {(e.kind, e.reason) for e in summary.pace_events if not e.host}
    assert {("shrink", "429"), ("grow", "room")} <= changes
    assert summary.concurrency >= 2 + 8  # where each ended, added up: 2, and 8 or more


def test_missing_sandbox_fails_only_its_jobs_across_processes(
    dask_client: object,
    dask_emulator: tuple[Emulator, anyio.from_thread.BlockingPortal],
    tmp_path: Path,
) -> None:
    """A NotFoundError raised in a worker process comes back as that job's outcome."""
    emu, portal = dask_emulator
    data = portal.call(emu.create_sandbox)["data"]
    ref = batch.SandboxRef(data["sandbox_key"], data["domain"], data["sandbox_access_token"])
    (emu.sandbox_root(ref.sandbox_key) / "home" / "user" / "a").write_bytes(b"a")
    jobs = [
        batch.DownloadJob(ref, "/home/user/a", tmp_path / "a"),
        batch.DownloadJob(ref, "/home/user/missing", tmp_path / "m"),
    ]

    result = download_many_on_dask(dask_client, config_for(emu), jobs)  # type: ignore[arg-type]

    assert result.outcomes[0].ok
    assert isinstance(result.outcomes[1].error, sandboxkit.NotFoundError)
    assert result.outcomes[1].error.status == 404


def test_bad_jobs_are_refused_before_submission(tmp_path: Path) -> None:
    """A relative remote path, a local path given twice or a bad shard count fails on the
    driver, before any submission."""

    class NoCluster:
        def map(self, *args: object, **kwargs: object) -> object:
            raise AssertionError("submitted")

        scheduler_info = map

    config = sandboxkit.ClientConfig(api_key="k", base_url="http://127.0.0.1:1")
    ref = batch.SandboxRef("key", "sandbox.test:1", "tok")
    good = batch.DownloadJob(ref, "/a", tmp_path / "a")
    with pytest.raises(sandboxkit.ValidationError, match=r"jobs\[1\].*absolute"):
        download_many_on_dask(NoCluster(), config, [good, batch.DownloadJob(ref, "a", "b")])
    other = batch.DownloadJob(ref, "/b", tmp_path / "b")
    with pytest.raises(sandboxkit.ValidationError, match=r"jobs\[2\].*also jobs\[0\]'s"):
        # In shards apart, but a rerun would take one's finished file for the other's.
        download_many_on_dask(NoCluster(), config, [good, other, good], shards=3)
    with pytest.raises(sandboxkit.ValidationError, match="shards"):
        download_many_on_dask(NoCluster(), config, [good], shards=0)
    with pytest.raises(sandboxkit.ValidationError, match="ClientConfig"):
        download_many_on_dask(NoCluster(), object(), [good])  # type: ignore[arg-type]


# --- lost workers ------------------------------------------------------------------------


def test_rerun_shard_fetches_only_what_the_killed_worker_left(
    dask_client: Any, dask_emulator: tuple[Emulator, Portal], tmp_path: Path
) -> None:
    """A worker SIGKILLed mid-shard: Dask reruns the shard, which takes the files the dead
    attempt finished from disk (not fetched again) and downloads only the rest."""
    emu, portal = dask_emulator
    per_shard = 10
    jobs, digests, _ = shard_files(emu, portal, tmp_path, shards=2, per_shard=per_shard)
    # One download at a time, each held 50 ms: the kill lands mid-shard, by construction.
    emu.faults.script("files.download", *[Fault.delay(0.05)] * (4 * per_shard))
    recording = RecordingClient(dask_client)
    done_before_kill: set[str] = set()

    def far_enough() -> bool:
        done_before_kill.update(finished_in(tmp_path / "s0"))
        return len(done_before_kill) >= 3

    result, killed = run_killing_shard_0(dask_client, recording, emu, jobs, far_enough)
    wait_for_replacement(dask_client, killed)

    assert [o.job for o in result.outcomes] == jobs
    assert result.ok, result.failures[:3]
    for outcome, want in zip(result.outcomes, digests, strict=True):
        assert outcome.result is not None and outcome.result.sha256 == want
        assert hashlib.sha256(outcome.job.dest.read_bytes()).hexdigest() == want
    journal = emu.journal_for("files.download")
    gets = Counter(r.query["path"] for r in journal)
    whole = Counter(r.query["path"] for r in journal if r.headers.get("Range") is None)
    assert len(done_before_kill) < per_shard
    for name in done_before_kill:  # finished by the dead attempt: read back, never refetched
        assert gets[f"/home/user/{name}"] == 1
        outcome = result.outcomes[int(name[3:-4])]
        assert outcome.result is not None and outcome.result.attempts == 0
    # At most the one download in flight at the kill was asked for twice (whole or ranged).
    assert max(whole.values()) <= 2 and sum(n > 1 for n in whole.values()) <= 1
    assert 2 * per_shard <= len(journal) <= 2 * per_shard + 1
    summary = result.summary
    assert (summary.total, summary.done, summary.failed) == (20, 20, 0)


def test_shard_dask_gives_up_on_fails_only_its_jobs(
    dask_client: Any, dask_emulator: tuple[Emulator, Portal], tmp_path: Path
) -> None:
    """With no failures allowed, one kill is KilledWorker: that shard's jobs fail with it,
    and the other shard's outcomes still come back, in job order."""
    emu, portal = dask_emulator
    per_shard = 10
    jobs, digests, sizes = shard_files(emu, portal, tmp_path, shards=2, per_shard=per_shard)
    emu.faults.script("files.download", *[Fault.delay(0.05)] * (4 * per_shard))
    recording = RecordingClient(dask_client)

    def allow(failures: int) -> int:
        def swap(dask_scheduler: Any) -> int:
            before: int = dask_scheduler.allowed_failures
            dask_scheduler.allowed_failures = failures
            return before

        before: int = dask_client.run_on_scheduler(swap)
        return before

    allowed = allow(0)
    try:
        result, killed = run_killing_shard_0(
            dask_client, recording, emu, jobs, lambda: len(finished_in(tmp_path / "s0")) >= 3
        )
    finally:
        allow(allowed)
    wait_for_replacement(dask_client, killed)

    assert [o.job for o in result.outcomes] == jobs
    lost, kept = result.outcomes[:per_shard], result.outcomes[per_shard:]
    errors = {id(o.error) for o in lost}
    assert len(errors) == 1  # the one exception Dask raised, stored for each job
    for outcome in lost:
        assert isinstance(outcome.error, distributed.KilledWorker)
        assert outcome.result is None
    for outcome, want in zip(kept, digests[per_shard:], strict=True):
        assert outcome.ok and outcome.result is not None and outcome.result.sha256 == want
    summary = result.summary
    assert (summary.total, summary.done, summary.failed, summary.skipped) == (20, 10, 10, 0)
    assert summary.bytes == sum(sizes[per_shard:])
    assert result.failures == lost


def test_shard_that_raised_fails_its_jobs_with_that_exception(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a shard's task raised is each of its jobs' error; shards finishing out of
    order still give outcomes in job order."""
    ref = batch.SandboxRef("key", "sandbox.test:1", "tok")
    jobs = [batch.DownloadJob(ref, f"/f{i}", tmp_path / f"f{i}") for i in range(5)]
    boom = RuntimeError("the shard's task raised")

    class Done:
        """A finished future: its result, or the exception its task raised."""

        def __init__(self, value: object) -> None:
            self.value = value

        def result(self) -> object:
            if isinstance(self.value, BaseException):
                raise self.value
            return self.value

    def ran(piece: list[batch.DownloadJob]) -> object:
        outcomes = tuple(
            batch.JobOutcome(j, DownloadResult(j.dest, 7, None, 1, 0, 0.0), None) for j in piece
        )
        n = len(piece)
        return outcomes, batch.BatchSummary(n, n, 0, 7 * n, n, 0, 0, 0.0)

    class FakeCluster:
        def map(
            self, func: object, configs: object, pieces: Any, *more: object, **kw: object
        ) -> Any:
            return [Done(boom if i == 1 else ran(p)) for i, p in enumerate(pieces)]

        def scheduler_info(self, **kwargs: object) -> object:
            raise AssertionError("shards= was given")

    monkeypatch.setattr(distributed, "as_completed", lambda futures, **kwargs: reversed(futures))
    config = sandboxkit.ClientConfig(api_key="k", base_url="http://127.0.0.1:1")

    result = download_many_on_dask(FakeCluster(), config, jobs, shards=3)

    assert [o.job for o in result.outcomes] == jobs
    assert [o.error for o in result.outcomes] == [None, None, boom, boom, None]
    summary = result.summary
    assert (summary.total, summary.done, summary.failed, summary.bytes) == (5, 3, 2, 21)
    assert (summary.attempts, summary.retries) == (3, 0)


def test_old_files_are_replaced_or_skipped_as_asked(
    dask_client: Any, dask_emulator: tuple[Emulator, Portal], tmp_path: Path
) -> None:
    """A local file from before the call is no rerun's work: it is skipped with
    `skip_existing`, and downloaded again and replaced without it."""
    emu, portal = dask_emulator
    jobs, digests, _ = shard_files(emu, portal, tmp_path, shards=2, per_shard=2)
    stale = [jobs[0].dest, jobs[3].dest]  # one in each shard
    for path in stale:
        path.write_bytes(b"stale")

    skipping = download_many_on_dask(dask_client, config_for(emu), jobs, skip_existing=True)

    assert [o.skipped for o in skipping.outcomes] == [True, False, False, True]
    assert all(o.ok for o in skipping.outcomes)
    fetched = {r.query["path"] for r in emu.journal_for("files.download")}
    assert fetched == {jobs[1].remote, jobs[2].remote}
    assert all(path.read_bytes() == b"stale" for path in stale)
    s = skipping.summary
    assert (s.total, s.done, s.skipped, s.failed) == (4, 2, 2, 0)

    replacing = download_many_on_dask(dask_client, config_for(emu), jobs)

    assert replacing.ok and not any(o.skipped for o in replacing.outcomes)
    for outcome, want in zip(replacing.outcomes, digests, strict=True):
        assert outcome.result is not None and outcome.result.attempts == 1
        assert hashlib.sha256(outcome.job.dest.read_bytes()).hexdigest() == want
    assert len(emu.journal_for("files.download")) == 2 + 4
    assert (replacing.summary.done, replacing.summary.skipped) == (4, 0)


def test_shard_preflight_error_is_raised_naming_the_job(
    dask_client: Any, dask_emulator: tuple[Emulator, Portal], tmp_path: Path
) -> None:
    """A shard's own check failing on its worker (a missing local directory) is a mistake in
    the job list: raised, naming the shard and the job by their index in the whole list."""
    emu, portal = dask_emulator
    jobs, _, _ = shard_files(emu, portal, tmp_path, shards=2, per_shard=2)
    jobs[3] = batch.DownloadJob(jobs[3].sandbox, jobs[3].remote, tmp_path / "nowhere" / "f")

    with pytest.raises(
        sandboxkit.ValidationError,
        match=r"shard starting at jobs\[2\]: jobs\[3\]: local directory .*nowhere",
    ):
        download_many_on_dask(dask_client, config_for(emu), jobs, shards=2)


def test_rerun_reads_back_files_this_call_finished(
    dask_emulator: tuple[Emulator, Portal], tmp_path: Path
) -> None:
    """What a rerun shard does, in this process: a file stamped since the call started is
    done from disk (its leftover sidecar removed) and not fetched; the others are fetched."""
    emu, portal = dask_emulator
    jobs, digests, sizes = shard_files(emu, portal, tmp_path, shards=1, per_shard=3)
    since = time.time_ns()
    jobs[1].dest.write_bytes(b"left by the dead attempt")
    part, sidecar = part_paths(jobs[1].dest)
    sidecar.write_text("{}")  # killed between the rename and the cleanup

    outcomes, summary = _run_shard(
        config_for(emu),
        jobs,
        offset=0,
        concurrency=4,
        checksum=True,
        skip_existing=False,
        since=since,
    )

    assert [o.job for o in outcomes] == jobs
    read_back = outcomes[1].result
    assert read_back == DownloadResult(
        jobs[1].dest,
        size=24,
        sha256=hashlib.sha256(b"left by the dead attempt").hexdigest(),
        attempts=0,
        resumes=0,
        elapsed=0.0,
    )
    assert not sidecar.exists() and not part.exists()
    assert [outcomes[i].result.sha256 for i in (0, 2)] == [digests[0], digests[2]]  # type: ignore[union-attr]
    assert {r.query["path"] for r in emu.journal_for("files.download")} == {
        jobs[0].remote,
        jobs[2].remote,
    }
    assert (summary.total, summary.done, summary.failed) == (3, 3, 0)
    assert summary.bytes == sizes[0] + 24 + sizes[2]
    assert (summary.attempts, summary.retries, summary.resumes) == (2, 0, 0)
