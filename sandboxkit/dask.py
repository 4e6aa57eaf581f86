"""Scale `batch.download_many` out over a Dask cluster (the optional `dask` extra).

Use it when one machine's network or CPU is the limit: the job list is cut into shards,
each shard runs on a Dask worker with its own `Client` built from a picklable
`ClientConfig` (inside `asyncio.run`), and the per-job outcomes come back in job order.

Shards are contiguous runs of the job list, so jobs listed together (usually the files of
one sandbox) share a worker and its connection pool to that sandbox host.

This module never imports dask: it only calls `map` and `gather` on the `distributed.Client`
you pass, so `import sandboxkit` works without the extra installed.

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
import pickle
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from . import batch
from ._client_config import ClientConfig
from .client import Client
from .errors import SandboxKitError, ValidationError
from .models import DownloadResult

__all__ = ["DaskClientLike", "download_many_on_dask"]

Outcome = batch.JobOutcome[batch.DownloadJob, DownloadResult]
ShardResult = tuple[tuple[Outcome, ...], batch.BatchSummary]


class DaskClientLike(Protocol):
    """The part of `distributed.Client` this module uses."""

    def map(self, func: Any, *iterables: Any, **kwargs: Any) -> Any:
        """Submit `func` over the iterables; returns futures."""

    def gather(self, futures: Any, **kwargs: Any) -> Any:
        """Wait for futures and return their results."""

    def scheduler_info(self, **kwargs: Any) -> Any:
        """The scheduler's view of the cluster (its `workers`)."""


def download_many_on_dask(
    dask_client: DaskClientLike,
    config: ClientConfig,
    jobs: Iterable[batch.DownloadJob],
    *,
    shards: int | None = None,
    concurrency_per_worker: int = 64,
    checksum: bool = True,
) -> batch.BatchResult[batch.DownloadJob, DownloadResult]:
    """Run `batch.download_many` over `jobs`, shard by shard, on Dask workers.

    Local paths are paths on the workers (a shared file system, or each worker's own disk).
    Blocks until every shard is done; call it from synchronous code (or a thread).

    Args:
        dask_client: a connected `distributed.Client`.
        config: how each worker builds its Client (`ClientConfig` pickles by design).
        jobs: the downloads; their shape is checked here before anything is submitted.
        shards: how many pieces to cut the list into (default: one per worker); more
            shards than workers balance uneven shards at the cost of more Client setups.
        concurrency_per_worker: downloads in flight within one shard.
        checksum: compute each file's sha256.

    Returns:
        One `BatchResult` for the whole list: outcomes in job order, summed totals, and the
        elapsed time seen from here.

    Raises:
        ValidationError: a bad job (named by index), config or count, before any submission;
            or a shard's own pre-flight check on its worker (e.g. a missing local directory),
            named by the shard's first job index.
    """
    started = time.monotonic()
    if not isinstance(config, ClientConfig):
        raise ValidationError("config must be a sandboxkit.ClientConfig")
    for name, value in (("concurrency_per_worker", concurrency_per_worker), ("shards", shards)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValidationError(f"{name} must be an integer")
        if value is not None and value < 1:
            raise ValidationError(f"{name} must be >= 1, got {value}")
    todo = list(jobs)
    for index, job in enumerate(todo):
        try:
            batch.check_job(job, batch.DownloadJob)
        except ValidationError as exc:
            raise ValidationError(f"jobs[{index}]: {exc}") from None
    if not todo:
        return batch.BatchResult((), _merge([], time.monotonic() - started))
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
        pure=False,  # the same shard twice is two downloads, not one cached result
    )
    results: list[ShardResult] = dask_client.gather(futures)
    outcomes = tuple(o for shard_outcomes, _ in results for o in shard_outcomes)
    return batch.BatchResult(outcomes, _merge([s for _, s in results], time.monotonic() - started))


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


def _merge(summaries: Sequence[batch.BatchSummary], elapsed: float) -> batch.BatchSummary:
    def total(name: str) -> int | None:
        values = [getattr(s, name) for s in summaries]
        return None if any(v is None for v in values) else sum(values)

    return batch.BatchSummary(
        total=sum(s.total for s in summaries),
        done=sum(s.done for s in summaries),
        failed=sum(s.failed for s in summaries),
        bytes=sum(s.bytes for s in summaries),
        attempts=total("attempts"),
        retries=total("retries"),
        resumes=total("resumes"),
        elapsed=elapsed,
        skipped=sum(s.skipped for s in summaries),
    )


def _run_shard(
    config: ClientConfig,
    jobs: list[batch.DownloadJob],
    offset: int,
    concurrency: int,
    checksum: bool,
) -> ShardResult:
    """On a worker: one Client, one event loop, one `download_many` over the shard."""

    async def main() -> batch.BatchResult[batch.DownloadJob, DownloadResult]:
        async with Client.from_config(config) as client:
            return await batch.download_many(
                client, jobs, concurrency=concurrency, checksum=checksum
            )

    try:
        # Dask runs tasks in worker threads without a running loop, so a fresh one is ours.
        result = asyncio.run(main())
    except ValidationError as exc:
        raise ValidationError(f"shard starting at jobs[{offset}]: {exc}") from None
    return tuple(_portable(o) for o in result.outcomes), result.summary


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
