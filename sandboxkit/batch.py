"""Fan one operation out over many sandboxes with bounded concurrency on one Client.

Every job is checked before any request is sent; then jobs run in an anyio task group under
a `CapacityLimiter`: its size is the `concurrency` given, or, by default, found as the batch
runs (`_core.pacing.ConcurrencyController`: it starts at 4 per host and grows while
transfers finish as fast as its model predicts or more at once moves more, shrinks on
queueing, lost throughput, 429s, 503s and failures; in background mode also as the round
trip inflates). A job's failure is recorded in its outcome and never
cancels the others (cancelling the batch itself still cancels everything). Outcomes come
back in job order.

Example::

    jobs = [batch.DownloadJob(ref, "/home/user/out.bin", f"out/{ref.sandbox_key}.bin")
            for ref in refs]
    result = await batch.download_many(client, jobs)
    print(result.summary)
    for outcome in result.failures:
        print(outcome.job.sandbox.sandbox_key, outcome.error)
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import attrs

from ._core.options import Budgets
from ._core.pacing import PAUSE, SHRINK, START, ConcurrencyController, PaceEvent
from ._core.retry import is_transient
from ._core.validation import check_remote_path
from ._http.telemetry import PACE_EVENT, pace_attributes
from ._transfer.sinks import clear_leftovers
from .errors import ValidationError
from .models import DownloadResult, UploadResult
from .resources.sandbox import SandboxRef

if TYPE_CHECKING:
    from .client import Client
    from .resources.sandbox import Sandbox

__all__ = [
    "BatchResult",
    "BatchSummary",
    "DownloadJob",
    "JobOutcome",
    "JobProgress",
    "PaceEvent",
    "SandboxRef",
    "UploadJob",
    "check_job",
    "download_many",
    "upload_many",
]

J = TypeVar("J", "DownloadJob", "UploadJob")
R = TypeVar("R", DownloadResult, UploadResult)


def _to_path(value: str | os.PathLike[str]) -> Path:
    return Path(value)


def _to_path_or_bytes(value: str | os.PathLike[str] | bytes) -> Path | bytes:
    return value if isinstance(value, bytes) else Path(value)


def _source_repr(value: Path | bytes) -> str:
    return f"<{len(value)} bytes>" if isinstance(value, bytes) else repr(value)


@attrs.frozen(init=False)
class DownloadJob:
    """Download `remote` from `sandbox` to the local file `dest` (as `files.download`
    names it; `local=` is its old name, deprecated)."""

    sandbox: SandboxRef
    remote: str
    dest: Path = attrs.field(converter=_to_path)

    def __init__(
        self, sandbox: SandboxRef, remote: str, dest: Any = None, *, local: Any = None
    ) -> None:
        self.__attrs_init__(sandbox, remote, _renamed("DownloadJob", "dest", dest, local))

    @property
    def local(self) -> Path:
        """Deprecated: `dest`."""
        _warn_renamed("DownloadJob", "dest")
        return self.dest


@attrs.frozen(init=False)
class UploadJob:
    """Upload `source` to `remote` on `sandbox` (overwriting it): the local file at that
    path, or, given `bytes`, those bytes from memory (no file is written; the job holds the
    bytes it was given, without a copy, until the caller lets go of it). `repr` shows their
    size. `source` is what `files.upload` calls it; `local=` is its old name, deprecated.

    Example::

        UploadJob(ref, "/home/user/task.py", b"print('hello')")
        UploadJob(ref, "/home/user/data.csv", "local/data.csv")
    """

    sandbox: SandboxRef
    remote: str
    source: Path | bytes = attrs.field(converter=_to_path_or_bytes, repr=_source_repr)

    def __init__(
        self, sandbox: SandboxRef, remote: str, source: Any = None, *, local: Any = None
    ) -> None:
        self.__attrs_init__(sandbox, remote, _renamed("UploadJob", "source", source, local))

    @property
    def local(self) -> Path | bytes:
        """Deprecated: `source`."""
        _warn_renamed("UploadJob", "source")
        return self.source


def _warn_renamed(job: str, name: str) -> None:
    method = "download" if name == "dest" else "upload"
    warnings.warn(
        f"{job}.local is now {job}.{name}, the name files.{method} gives it; `local` will be "
        "removed",
        DeprecationWarning,
        stacklevel=3,
    )


def _renamed(job: str, name: str, value: Any, local: Any) -> Any:
    """A job's local path given under its name or, deprecated, as `local=`."""
    if local is None:
        if value is None:
            raise TypeError(f"{job}() missing its local path: {name}=")
        return value
    if value is not None:
        raise TypeError(f"{job}() got both {name}= and its old name local=")
    _warn_renamed(job, name)
    return local


@attrs.frozen
class JobOutcome(Generic[J, R]):
    """What became of one job: `result` when it ran and succeeded, `error` when it failed,
    neither when it was `skipped` (`skip_existing` found its destination already there)."""

    job: J
    result: R | None
    error: BaseException | None
    skipped: bool = False

    @property
    def ok(self) -> bool:
        """Whether the job succeeded."""
        return self.error is None


@attrs.frozen
class BatchSummary:
    """Totals of one batch.

    Attributes:
        total: jobs in the batch.
        done: jobs that succeeded (skipped ones not included).
        failed: jobs that failed.
        bytes: bytes moved by the jobs that succeeded.
        attempts: requests made by the jobs that succeeded.
        retries: `attempts` less one per succeeded job.
        resumes: ranged requests that continued a cut download (0 for uploads, which send
            the whole file again).
        elapsed: wall-clock seconds for the whole batch.
        budgets: the client's bandwidth and request limits when the batch ended
            (`Client.budgets`; shown as `budgets.describe()`).
        skipped: jobs not run because their destination existed (`skip_existing`).
        concurrency: jobs in flight at once at the end: the `concurrency` given, or the one
            found.
        pace_events: every throttle event of the batch's hosts while it ran, in order:
            each pause of one of them after a 429 (one another call's answer began too:
            the batch's calls waited all the same), each change of the found concurrency
            (`host` ""), and each change of one of its hosts' own (named by `host`). Other
            hosts the client calls meanwhile are not the batch's: their events are not here.
    """

    total: int
    done: int
    failed: int
    bytes: int
    attempts: int
    retries: int
    resumes: int
    # Shown rounded (`elapsed=0.051`): a summary is read by people; the value keeps it all.
    elapsed: float = attrs.field(repr=lambda seconds: f"{seconds:.3f}")
    skipped: int = 0
    concurrency: int = 0
    pace_events: tuple[PaceEvent, ...] = attrs.field(default=(), repr=False)
    budgets: Budgets = attrs.field(factory=Budgets, repr=lambda value: repr(value.describe()))

    @property
    def pauses(self) -> Mapping[str, int]:
        """Pauses per host (`scheme://host:port`) that a 429 began while the batch ran."""
        counts: dict[str, int] = {}
        for event in self.pace_events:
            if event.kind == PAUSE:
                counts[event.host] = counts.get(event.host, 0) + 1
        return counts

    @property
    def paused_seconds(self) -> float:
        """The pauses' lengths added up (hosts paused at once each count)."""
        return sum(e.seconds for e in self.pace_events if e.kind == PAUSE)

    @property
    def shrinks(self) -> int:
        """How many times the batch's found concurrency shrank (a host's own, with
        `Limits.found_host_concurrency`, are the events that name their host)."""
        return sum(e.kind == SHRINK and not e.host for e in self.pace_events)


@attrs.frozen
class BatchResult(Generic[J, R]):
    """Per-job outcomes in job order, and the summary."""

    outcomes: tuple[JobOutcome[J, R], ...]
    summary: BatchSummary

    @property
    def failures(self) -> tuple[JobOutcome[J, R], ...]:
        """The outcomes that failed, in job order."""
        return tuple(o for o in self.outcomes if o.error is not None)

    @property
    def ok(self) -> bool:
        """Whether every job succeeded."""
        return not self.failures


JobProgress = Callable[[int, int, JobOutcome[Any, Any]], object]
"""Called after each finished job with (finished so far, total, that job's outcome). Not a
transfer's `sandboxkit.Progress` (bytes): a batch counts jobs."""


def __getattr__(name: str) -> Any:
    # `batch.Progress` was this type's name until it met `sandboxkit.Progress`, the bytes one.
    if name == "Progress":
        warnings.warn(
            "sandboxkit.batch.Progress is now sandboxkit.batch.JobProgress (sandboxkit.Progress "
            "is a transfer's); `batch.Progress` will be removed",
            DeprecationWarning,
            stacklevel=2,
        )
        return JobProgress
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def download_many(
    client: Client,
    jobs: Iterable[DownloadJob],
    *,
    concurrency: int | None = None,
    progress: JobProgress | None = None,
    checksum: bool = True,
    skip_existing: bool = False,
    resume: bool = True,
    background: bool = False,
    on_pace: Callable[[PaceEvent], object] | None = None,
) -> BatchResult[DownloadJob, DownloadResult]:
    """Download every job's file, at most `concurrency` at a time.

    Rerunning a batch that was killed continues it: with `skip_existing`, a job whose local
    file exists is not fetched (downloads land whole or not at all, so an existing file is a
    finished one), and a file a dead process left half-written continues from its partial
    file with `Range` (see `files.download`).

    Args:
        client: the Client whose pools and retry policy every job shares.
        jobs: what to download; all are checked before the first request.
        concurrency: downloads in flight at once; None (the default): found as the batch
            runs, from 4 per host (4 in all in background mode) up to 256 and what
            `Limits` allows (per host, and all hosts), grown while downloads finish as
            fast as they did with nothing queued or more at once moves more, shrunk as
            they slow down past that, as more at once moves less, and on 429s, 503s and
            failures.
        progress: called in the event loop after each finished job; keep it quick, and do
            not let it raise (an exception from it stops the batch).
        background: yield the link to other work: the found concurrency also shrinks as
            soon as answers' round trips grow past their minimum by a quarter of it
            (within 5-25 ms; LEDBAT), before any loss, and grows back one at a time. Only
            with `concurrency=None`.
        on_pace: called in the event loop at each throttle event (`PaceEvent`): a host
            paused by a 429, the found concurrency shrinking or growing (its new value).
        checksum: compute each file's sha256 (see `files.download`).
        skip_existing: report a job whose local file exists as skipped, sending nothing.
        resume: continue partial files a dead process left (see `files.download`).

    Raises:
        ValidationError: a bad job (named by its index) or a bad `concurrency`; nothing was
            sent.
    """
    todo = _check_jobs(client, jobs, DownloadJob, concurrency, background)

    async def run(sandbox: Sandbox, job: DownloadJob) -> DownloadResult | None:
        if skip_existing and await anyio.Path(job.dest).exists():
            clear_leftovers(job.dest)  # a sidecar a kill after the rename left behind
            return None  # skipped
        return await sandbox.files.download(job.remote, job.dest, checksum=checksum, resume=resume)

    outcomes, elapsed, pace = await _run_all(
        client, todo, run, _pacer(client, todo, concurrency, background), progress, on_pace
    )
    done = [o.result for o in outcomes if o.result is not None]
    skipped = sum(o.skipped for o in outcomes)
    attempts = sum(r.attempts for r in done)
    summary = BatchSummary(
        total=len(outcomes),
        done=len(done),
        failed=len(outcomes) - len(done) - skipped,
        skipped=skipped,
        bytes=sum(r.size for r in done),
        attempts=attempts,
        retries=attempts - len(done),
        resumes=sum(r.resumes for r in done),
        elapsed=elapsed,
        budgets=client.budgets,
        concurrency=pace.concurrency,
        pace_events=tuple(pace.events),
    )
    return BatchResult(tuple(outcomes), summary)


async def upload_many(
    client: Client,
    jobs: Iterable[UploadJob],
    *,
    concurrency: int | None = None,
    progress: JobProgress | None = None,
    background: bool = False,
    on_pace: Callable[[PaceEvent], object] | None = None,
) -> BatchResult[UploadJob, UploadResult]:
    """Upload every job's local file or bytes, at most `concurrency` at a time.

    There is no `skip_existing` here: the data plane shows no way to learn whether a remote
    file exists, or what it holds, short of downloading it, and an upload replaces the file
    whole. Rerunning a killed batch uploads every job again, which is safe (each upload is
    idempotent) but not free.

    Args:
        client: the Client whose pools and retry policy every job shares.
        jobs: what to upload; all are checked (local files must exist) before any request.
            A job's `bytes` are sent from memory and are resent whole on a retry.
        concurrency: uploads in flight at once; None: found (as for `download_many`).
        progress: as for `download_many`.
        background: as for `download_many`.
        on_pace: as for `download_many`.

    Raises:
        ValidationError: a bad job (named by its index) or a bad `concurrency`; nothing was
            sent.
    """
    todo = _check_jobs(client, jobs, UploadJob, concurrency, background)

    async def run(sandbox: Sandbox, job: UploadJob) -> UploadResult:
        return await sandbox.files.upload(job.remote, job.source)

    outcomes, elapsed, pace = await _run_all(
        client, todo, run, _pacer(client, todo, concurrency, background), progress, on_pace
    )
    done = [o.result for o in outcomes if o.result is not None]
    attempts = sum(r.attempts for r in done)  # the POSTs of the uploads that succeeded
    summary = BatchSummary(
        total=len(outcomes),
        done=len(done),
        failed=len(outcomes) - len(done),
        bytes=sum(r.size for r in done),
        attempts=attempts,
        retries=attempts - len(done),
        resumes=0,  # an upload never resumes: a retry sends the whole file again
        elapsed=elapsed,
        budgets=client.budgets,
        concurrency=pace.concurrency,
        pace_events=tuple(pace.events),
    )
    return BatchResult(tuple(outcomes), summary)


def _check_jobs(
    client: Client, jobs: Iterable[J], kind: type[J], concurrency: int | None, background: bool
) -> list[tuple[Sandbox, J]]:
    """Validate every job and make one Sandbox handle per distinct sandbox (no network)."""
    if concurrency is not None and (
        not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1
    ):
        raise ValidationError(f"concurrency must be an integer >= 1 or None, got {concurrency!r}")
    if not isinstance(background, bool):
        raise ValidationError(f"background must be a bool, got {background!r}")
    if background and concurrency is not None:
        raise ValidationError(
            "background=True finds its own concurrency: leave concurrency=None with it"
        )
    handles: dict[SandboxRef, Sandbox] = {}
    todo: list[tuple[Sandbox, J]] = []
    locals_seen: dict[Path, int] = {}
    for index, job in enumerate(jobs):
        try:
            check_job(job, kind)
            _check_local(job, locals_seen, index)
            ref = job.sandbox
            if ref not in handles:
                handles[ref] = client.sandbox(
                    sandbox_key=ref.sandbox_key, domain=ref.domain, access_token=ref.access_token
                )
        except ValidationError as exc:
            raise ValidationError(f"jobs[{index}]: {exc}") from None
        todo.append((handles[ref], job))
    return todo


def check_job(job: object, kind: type[DownloadJob] | type[UploadJob]) -> None:
    """Check a job's shape without touching the disk: its type, remote path and sandbox.

    `download_many` and `upload_many` also check local paths and the sandbox's names; this
    is the part a coordinator can check before sending jobs to other machines.

    Raises:
        ValidationError: what is wrong (the caller adds the job's index).
    """
    if not isinstance(job, kind):
        raise ValidationError(f"expected a {kind.__name__}, got {type(job).__name__}")
    check_remote_path(job.remote)
    if not isinstance(job.sandbox, SandboxRef):
        raise ValidationError("sandbox must be a sandboxkit.batch.SandboxRef")


def _check_local(job: DownloadJob | UploadJob, seen: dict[Path, int], index: int) -> None:
    local = job.dest if isinstance(job, DownloadJob) else job.source
    if isinstance(local, bytes):
        return  # an upload from memory: any bytes, none at all included, make a file
    if not str(local) or local == Path():
        raise ValidationError("local path must not be empty")
    if isinstance(job, UploadJob):
        if not local.is_file():
            raise ValidationError(f"local file {str(local)!r} does not exist")
        return
    # Two downloads into one file would race each other's rename: refuse the batch instead.
    key = local.absolute()
    if key in seen:
        raise ValidationError(f"local path {str(local)!r} is also jobs[{seen[key]}]'s")
    seen[key] = index
    if not local.parent.is_dir():
        raise ValidationError(f"local directory {str(local.parent)!r} does not exist")


# The most a batch's found concurrency may reach (the fixed default this replaced), within
# `Limits`; it starts at `pacing.START` per host.
FOUND_MAXIMUM = 256


def _pacer(
    client: Client, todo: Sequence[tuple[Sandbox, Any]], concurrency: int | None, background: bool
) -> _Pace:
    """The batch's concurrency: fixed, or a controller bounded by what `Limits` lets run."""
    if concurrency is not None:
        return _Pace(concurrency, None)
    limits = client.limits
    hosts = len({id(sandbox) for sandbox, _ in todo}) or 1
    ceiling = min(
        FOUND_MAXIMUM, limits.max_sandbox_connections, hosts * limits.per_host_connections
    )
    # hf_xet starts each endpoint at 4: so does each host here. In background mode the
    # whole batch starts at 4: it must not flood a link it shares before it hears how full.
    start = min(ceiling, START if background else START * hosts)
    controller = _controller(ceiling, background, start)
    return _Pace(controller.limit, controller)


def _controller(ceiling: int, background: bool, start: int) -> ConcurrencyController:
    """A found concurrency's controller (tests give theirs a shorter interval)."""
    return ConcurrencyController(maximum=ceiling, limit=start, background=background)


@attrs.define
class _Pace:
    """A batch's concurrency as it runs, and the throttle events it met."""

    concurrency: int
    controller: ConcurrencyController | None
    events: list[PaceEvent] = attrs.field(factory=list)


async def _run_all(
    client: Client,
    todo: Sequence[tuple[Sandbox, J]],
    run: Callable[[Sandbox, J], Awaitable[R | None]],
    pace: _Pace,
    progress: JobProgress | None,
    on_pace: Callable[[PaceEvent], object] | None,
) -> tuple[list[JobOutcome[J, R]], float, _Pace]:
    clock = time.monotonic
    started = clock()
    outcomes: list[JobOutcome[J, R] | None] = [None] * len(todo)
    limiter = anyio.CapacityLimiter(pace.concurrency)
    finished = 0
    controller = pace.controller
    telemetry = client._calls.telemetry
    span = None
    if telemetry is not None and telemetry.tracer is not None:
        span = telemetry.start_span("sandboxkit.batch", None)

    def paced(event: PaceEvent | None) -> None:
        if event is None:
            return
        if controller is not None and event.kind != PAUSE and not event.host:
            limiter.total_tokens = pace.concurrency = controller.limit
        pace.events.append(event)
        if span is not None and span.is_recording():
            span.add_event(PACE_EVENT, pace_attributes(event))
        if on_pace is not None:
            on_pace(event)

    # The batch's own hosts: another batch or call on the client meanwhile, to other hosts,
    # neither shows in this one's summary nor moves its concurrency.
    origins = {sandbox.origin for sandbox, _ in todo}

    def heard(origin: str, status: int, seconds: float, paused: PaceEvent | None) -> None:
        if origin not in origins:
            return
        paced(paused)
        if controller is None:
            return
        if status in (429, 503):
            # Heard by the batch as well as by the host's own concurrency: a server whose
            # capacity all its hosts share says so only through every host's answers
            # (benchmarks/README.md, case 12: the batch left 503s to the hosts and got 16%).
            paced(controller.congested(clock(), str(status)))
        elif 200 <= status < 300:
            paced(controller.round_trip(clock(), seconds))

    def hosts_paced(event: PaceEvent) -> None:
        if event.host in origins:
            paced(event)

    async def one(index: int, sandbox: Sandbox, job: J, slot: object) -> None:
        nonlocal finished
        try:
            begun = clock()
            try:
                result = await run(sandbox, job)  # None: skipped
                outcome: JobOutcome[J, R] = JobOutcome(job, result, None, result is None)
                if controller is not None and result is not None:
                    paced(controller.completed(clock(), result.size, clock() - begun))
            except Exception as exc:  # one job's failure is data; cancellation is not caught
                outcome = JobOutcome(job, None, exc)
                if controller is not None and is_transient(exc):
                    paced(controller.congested(clock(), "failure"))
            outcomes[index] = outcome
            finished += 1
            if progress is not None:
                progress(finished, len(todo), outcome)
        finally:
            limiter.release_on_behalf_of(slot)

    hosts = client._transport.hosts
    hosts.listeners.append(heard)
    hosts.paced.append(hosts_paced)  # each host's found concurrency
    # A batch that finds its concurrency has its hosts find theirs too (unless the client's
    # limits say never): one busy sandbox then slows itself, not every job (case 12).
    finding = controller is not None and client.limits.found_host_concurrency is not False
    if finding:
        hosts.find_concurrency(True)
    try:
        async with anyio.create_task_group() as group:
            for index, (sandbox, job) in enumerate(todo):
                # Acquire before spawning: a million-job list holds `concurrency` tasks, not
                # a million parked ones.
                slot = object()
                await limiter.acquire_on_behalf_of(slot)
                group.start_soon(one, index, sandbox, job, slot)
    finally:
        if finding:
            hosts.find_concurrency(False)
        hosts.listeners.remove(heard)
        hosts.paced.remove(hosts_paced)
        if span is not None:
            if span.is_recording():
                span.set_attribute("sandboxkit.concurrency", pace.concurrency)
                span.set_attribute("sandboxkit.batch.jobs", len(todo))
            span.end()
    return [o for o in outcomes if o is not None], clock() - started, pace
