"""Scale `batch.download_many` out over a Dask cluster (the optional `dask` extra).

Use it when one machine's network or CPU is the limit: the job list is cut into shards,
each shard runs on a Dask worker with its own `Client` built from a picklable
`ClientConfig` (inside `asyncio.run`), and the per-job outcomes come back in job order.

Shards are contiguous runs of the job list, so jobs listed together (usually the files of
one sandbox) share a worker and its connection pool to that sandbox host.

A lost worker costs only what it was doing. Dask reruns the shards of a worker that died
(up to `distributed.scheduler.allowed-failures` times); a rerun shard does not fetch again
the files an earlier attempt of the same call finished, and continues the partial files it
left with `Range`. A shard Dask gives up on (`distributed.KilledWorker`) fails only its own
jobs: outcomes are collected shard by shard as they finish, never all-or-nothing.

This module imports `distributed` only inside `download_many_on_dask` (for `as_completed`),
so `import sandboxkit` and `import sandboxkit.dask` work without the extra installed.

Example::

    from dask.distributed import Client as DaskClient
    from sandboxkit import ClientConfig, batch
    from sandboxkit.dask import download_many_on_dask

    config = ClientConfig.from_env()
    with DaskClient("tcp://scheduler:8786") as dask_client:
        result = download_many_on_dask(dask_client, config, jobs, concurrency_per_worker=64)
    print(result.summary)
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pickle
import re
import stat
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from . import batch
from ._client_config import ClientConfig
from ._core.options import Budgets
from ._transfer.sinks import clear_leftovers
from .client import Client
from .errors import SandboxKitError, ValidationError
from .models import DownloadResult

__all__ = ["DaskClientLike", "download_many_on_dask"]

Outcome = batch.JobOutcome[batch.DownloadJob, DownloadResult]
ShardResult = tuple[tuple[Outcome, ...], batch.BatchSummary]


class DaskClientLike(Protocol):
    """The part of `distributed.Client` this module uses (its `loop`, if it has one, is
    handed to `distributed.as_completed`)."""

    def map(self, func: Any, *iterables: Any, **kwargs: Any) -> Any:
        """Submit `func` over the iterables; returns futures."""

    def scheduler_info(self, **kwargs: Any) -> Any:
        """The scheduler's view of the cluster (its `workers`)."""


def download_many_on_dask(
    dask_client: DaskClientLike,
    config: ClientConfig,
    jobs: Iterable[batch.DownloadJob],
    *,
    shards: int | None = None,
    concurrency_per_worker: int | None = None,
    checksum: bool = True,
    skip_existing: bool = False,
) -> batch.BatchResult[batch.DownloadJob, DownloadResult]:
    """Run `batch.download_many` over `jobs`, shard by shard, on Dask workers.

    Local paths are paths on the workers (a shared file system, or each worker's own disk).
    Blocks until every shard is done or lost; call it from synchronous code (or a thread).

    A shard Dask runs again after its worker died skips the jobs whose local file was
    finished during this call: a file that exists with a modification time at or after
    the moment this call started (downloads land whole, by rename). Such a job is done,
    with a `DownloadResult` read back from the disk: its size, its sha256 (the file is
    read when `checksum`), `attempts=0` and `resumes=0` (the requests of the dead attempt
    are not known). An older local file is downloaded again and replaced, as always
    (unless `skip_existing`). The comparison is between this machine's clock and the
    clock that stamps the workers' files: timestamps the file system rounds down, and a
    stamping clock behind this one, only make a finished file look older, so it is
    fetched again (safe). A stamping clock *ahead* of this one by d seconds can make a
    file an earlier call finished less than d seconds before this call started look
    like this call's, and it is kept instead of fetched again: keep the clocks in sync.

    Args:
        dask_client: a connected `distributed.Client`.
        config: how each worker builds its Client (`ClientConfig` pickles by design).
            Its `budgets` limit each shard's Client: with one shard per worker (the
            default), each worker process; the cluster as a whole moves up to that many
            times the limit.
        jobs: the downloads; their shape is checked here before anything is submitted.
        shards: how many pieces to cut the list into (default: one per worker); more
            shards than workers balance uneven shards at the cost of more Client setups.
        concurrency_per_worker: downloads in flight within one shard; None (the default):
            found by each shard as it runs, as `batch.download_many` finds it.
        checksum: compute each file's sha256.
        skip_existing: report a job whose local file exists (from before this call) as
            skipped, sending nothing (see `batch.download_many`); use it to rerun a call
            whose shards were lost.

    Returns:
        One `BatchResult` for the whole list: one outcome per job, in job order, summed
        totals (`concurrency` too: the shards' at their ends added up), every shard's
        throttle events (`pace_events`, shard after shard; each `at` is on its worker's
        own clock), and the elapsed time seen from here. A shard that could not finish (Dask
        gave up on it with `distributed.KilledWorker`, or it raised anything else) reports
        each of its jobs as failed with that exception, counted in `summary.failed`; the
        files it finished are on disk, and a rerun with `skip_existing=True` keeps them.

    Raises:
        ValidationError: a bad job (named by index), config or count, or two jobs with
            the same local path, before any submission; or a shard's own pre-flight check
            on its worker (e.g. a missing local directory), named by the shard's first
            job index and the job's. The latter is a mistake in the job list, as it is
            for `batch.download_many`, so it is raised (as soon as it arrives) rather
            than reported per job; shards already running are not stopped.
    """
    started = time.monotonic()
    since = time.time_ns()  # wall clock: what a rerun shard compares local files with
    if not isinstance(config, ClientConfig):
        raise ValidationError("config must be a sandboxkit.ClientConfig")
    for name, value in (("concurrency_per_worker", concurrency_per_worker), ("shards", shards)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValidationError(f"{name} must be an integer")
        if value is not None and value < 1:
            raise ValidationError(f"{name} must be >= 1, got {value}")
    todo = list(jobs)
    _check_jobs(todo)
    if not todo:
        return batch.BatchResult((), _merge([], time.monotonic() - started, config.budgets))
    count = shards if shards is not None else max(1, len(dask_client.scheduler_info()["workers"]))
    pieces = _split(todo, count)
    offsets = [sum(len(p) for p in pieces[:i]) for i in range(len(pieces))]
    futures = dask_client.map(
        _run_shard,
        [config] * len(pieces),
        pieces,
        offsets,
        [concurrency_per_worker] * len(pieces),
        [checksum] * len(pieces),
        [skip_existing] * len(pieces),
        [since] * len(pieces),
        pure=False,  # the same shard twice is two downloads, not one cached result
    )
    results = _collect(dask_client, list(futures), pieces)
    outcomes = tuple(o for shard_outcomes, _ in results for o in shard_outcomes)
    summaries = [s for _, s in results]
    # The summary's budgets are each worker's own (a limit applies per shard's Client).
    merged = _merge(summaries, time.monotonic() - started, config.budgets)
    return batch.BatchResult(outcomes, merged)


def _check_jobs(todo: Sequence[batch.DownloadJob]) -> None:
    """Each job's shape, and no local path twice: a rerun shard would take one job's
    finished file for the other's."""
    seen: dict[Path, int] = {}
    for index, job in enumerate(todo):
        try:
            batch.check_job(job, batch.DownloadJob)
            if job.dest in seen:  # as given: the workers resolve relative paths, not us
                raise ValidationError(
                    f"local path {str(job.dest)!r} is also jobs[{seen[job.dest]}]'s"
                )
        except ValidationError as exc:
            raise ValidationError(f"jobs[{index}]: {exc}") from None
        seen[job.dest] = index


def _collect(
    dask_client: DaskClientLike, futures: list[Any], pieces: Sequence[list[batch.DownloadJob]]
) -> list[ShardResult]:
    """Each shard's result as its future finishes; a lost shard's jobs fail with its error."""
    from distributed import as_completed  # lazily: the extra is optional

    results: dict[int, ShardResult] = {}
    index_of = {id(future): index for index, future in enumerate(futures)}
    loop = getattr(dask_client, "loop", None)  # the futures' own client, not the default one
    for future in as_completed(futures, loop=loop):  # type: ignore[no-untyped-call]
        index = index_of[id(future)]
        try:
            results[index] = future.result()
        except ValidationError:
            raise  # the job list is wrong (see the docstring), not the cluster
        except Exception as exc:  # KilledWorker, a cancelled future, anything the task raised
            results[index] = _lost(pieces[index], exc)
    return [results[index] for index in range(len(futures))]  # each future comes out once


def _lost(jobs: Sequence[batch.DownloadJob], error: BaseException) -> ShardResult:
    outcomes = tuple(batch.JobOutcome(job, None, error) for job in jobs)
    summary = batch.BatchSummary(
        total=len(jobs),
        done=0,
        failed=len(jobs),
        bytes=0,
        attempts=0,
        retries=0,
        resumes=0,
        elapsed=0.0,
    )
    return outcomes, summary


def _split(todo: Sequence[batch.DownloadJob], count: int) -> list[list[batch.DownloadJob]]:
    """Contiguous pieces whose sizes differ by at most one."""
    count = min(count, len(todo))
    size, extra = divmod(len(todo), count)
    pieces, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        pieces.append(list(todo[start:end]))
        start = end
    return pieces


def _merge(
    summaries: Sequence[batch.BatchSummary], elapsed: float, budgets: Budgets
) -> batch.BatchSummary:
    return batch.BatchSummary(
        total=sum(s.total for s in summaries),
        done=sum(s.done for s in summaries),
        failed=sum(s.failed for s in summaries),
        bytes=sum(s.bytes for s in summaries),
        attempts=sum(s.attempts for s in summaries),
        retries=sum(s.retries for s in summaries),
        resumes=sum(s.resumes for s in summaries),
        elapsed=elapsed,
        skipped=sum(s.skipped for s in summaries),
        concurrency=sum(s.concurrency for s in summaries),
        pace_events=tuple(e for s in summaries for e in s.pace_events),
        budgets=budgets,
    )


def _run_shard(
    config: ClientConfig,
    jobs: list[batch.DownloadJob],
    offset: int,
    concurrency: int | None,
    checksum: bool,
    skip_existing: bool,
    since: int,
) -> ShardResult:
    """On a worker: what an earlier attempt of this call finished, read back from disk;
    then one Client, one event loop, one `download_many` over the rest."""
    started = time.monotonic()
    finished = _finished_since(jobs, since, checksum)
    rest = [index for index in range(len(jobs)) if index not in finished]

    async def main() -> batch.BatchResult[batch.DownloadJob, DownloadResult]:
        async with Client.from_config(config) as client:
            return await batch.download_many(
                client,
                [jobs[index] for index in rest],
                concurrency=concurrency,
                checksum=checksum,
                skip_existing=skip_existing,
            )

    fetched: tuple[Outcome, ...] = ()
    summary = batch.BatchSummary(0, 0, 0, 0, 0, 0, 0, 0.0)
    if rest:
        try:
            # Dask runs tasks in worker threads without a running loop, so a fresh one is ours.
            result = asyncio.run(main())
        except ValidationError as exc:
            # Its job indices count the jobs sent to download_many: name them in the call's.
            message = re.sub(
                r"jobs\[(\d+)\]", lambda m: f"jobs[{offset + rest[int(m[1])]}]", str(exc)
            )
            raise ValidationError(f"shard starting at jobs[{offset}]: {message}") from None
        fetched, summary = tuple(_portable(o) for o in result.outcomes), result.summary
    outcomes = dict(zip(rest, fetched, strict=True))
    outcomes.update((i, batch.JobOutcome(jobs[i], r, None)) for i, r in finished.items())
    summary = batch.BatchSummary(
        total=summary.total + len(finished),
        done=summary.done + len(finished),
        failed=summary.failed,
        skipped=summary.skipped,
        bytes=summary.bytes + sum(r.size for r in finished.values()),
        attempts=summary.attempts,  # the dead attempt's requests are not known: 0
        retries=summary.retries,
        resumes=summary.resumes,
        elapsed=time.monotonic() - started,
        concurrency=summary.concurrency,
        pace_events=summary.pace_events,
        budgets=config.budgets,
    )
    return tuple(outcomes[index] for index in range(len(jobs))), summary


def _finished_since(
    jobs: Sequence[batch.DownloadJob], since: int, checksum: bool
) -> dict[int, DownloadResult]:
    """The jobs whose local file was renamed into place at or after `since` (ns, wall
    clock): an earlier attempt of this call, on a worker since lost, finished them."""
    finished: dict[int, DownloadResult] = {}
    for index, job in enumerate(jobs):
        try:
            info = os.stat(job.dest)
            if not stat.S_ISREG(info.st_mode) or info.st_mtime_ns < since:
                continue
            digest = _sha256(job.dest) if checksum else None
        except OSError:
            continue  # not there, or unreadable: download_many deals with it as usual
        clear_leftovers(job.dest)  # a sidecar a kill between rename and cleanup left
        finished[index] = DownloadResult(
            path=job.dest,
            size=info.st_size,
            sha256=digest,
            attempts=0,
            resumes=0,
            elapsed=0.0,
        )
    return finished


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _portable(outcome: Outcome) -> Outcome:
    """The outcome, with its error replaced by a plain one if that error would not pickle."""
    if outcome.error is None:
        return outcome
    try:
        pickle.dumps(outcome.error)
    except Exception:  # any exception type may fail to pickle in its own way
        error = SandboxKitError(f"{type(outcome.error).__name__}: {outcome.error}")
        return batch.JobOutcome(outcome.job, None, error)
    return outcome
