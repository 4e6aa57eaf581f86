"""sandboxkit.dask on a real two-process LocalCluster against the emulator."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import anyio.from_thread
import pytest

import sandboxkit
from sandboxkit import batch
from sandboxkit.dask import download_many_on_dask
from sandboxkit.emulator import Emulator, EmulatorResolver

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def dask_client() -> Iterator[object]:
    """Two worker processes of one thread each: the CI machine has two cores."""
    with (
        distributed.LocalCluster(
            processes=True,
            n_workers=2,
            threads_per_worker=1,
            dashboard_address=None,  # no web UI: nothing to bind, nothing to warn about
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
        assert hashlib.sha256(outcome.job.local.read_bytes()).hexdigest() == want
    summary = result.summary
    faults = sum(emu.faults.injected.values())
    assert faults > 0
    assert (summary.total, summary.done, summary.failed) == (200, 200, 0)
    assert summary.attempts == 200 + faults and summary.retries == faults
    assert len(emu.journal_for("files.download")) == 200 + faults


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
    """A relative remote path or a bad shard count fails on the driver, before any submission."""

    class NoCluster:
        def map(self, *args: object, **kwargs: object) -> object:
            raise AssertionError("submitted")

        gather = scheduler_info = map

    config = sandboxkit.ClientConfig(api_key="k", base_url="http://127.0.0.1:1")
    ref = batch.SandboxRef("key", "sandbox.test:1", "tok")
    good = batch.DownloadJob(ref, "/a", tmp_path / "a")
    with pytest.raises(sandboxkit.ValidationError, match=r"jobs\[1\].*absolute"):
        download_many_on_dask(NoCluster(), config, [good, batch.DownloadJob(ref, "a", "b")])
    with pytest.raises(sandboxkit.ValidationError, match="shards"):
        download_many_on_dask(NoCluster(), config, [good], shards=0)
    with pytest.raises(sandboxkit.ValidationError, match="ClientConfig"):
        download_many_on_dask(NoCluster(), object(), [good])  # type: ignore[arg-type]
