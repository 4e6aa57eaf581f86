"""Parallel ranged downloads (docs/design.md section 6, item 9): one file on several
connections.

The first GET has no Range (docs/design.md section 6, item 1). When its answer shows
`Accept-Ranges: bytes`, a size of at least `ParallelDownloads.threshold`, and came over a
link whose round trip is `min_latency` or more (`_slices.far_enough`: the kernel's RTT of
the connection; a short link is as fast on one stream), the file is cut into pieces in file
order (`_slices.split`, a few per connection). The first GET's body is the first piece: it
is read up to the piece's end, then its connection is dropped. The other pieces are a work
queue for `parts - 1` more connections, and the first one's once its piece is done. Each
piece is one `Calls.run` of `Range: bytes=a-b` GETs on the host's own pool (so within
`per_host_connections` and the host's 429 window), resumed from where it got to after a
cut; its bytes are written in place with `os.pwritev` from worker threads, a few MiB a
call. Each piece carries `If-Range` with the download's strong validator (the first answer's,
or the sidecar's), so a piece answer shows a file that changed (a 200, another total, other
validators, a 416), which starts the whole download over from an empty part. A piece
answered with the whole file of the same size and version means Range is stripped on the
way (a proxy or CDN that passes `Accept-Ranges: bytes` on): slicing stops, and the file is
fetched once more, whole, as one stream; that is no change of the file, and no restart.

The sha256 follows the written prefix: a task reads back from the page cache (`preadv`)
what is contiguous from byte 0 and hashes it as the prefix grows; with pieces handed out in
file order it trails the download by a few pieces. The sidecar records the byte ranges
written (after their bytes are), so a rerun after a killed process fetches only the gaps.

A file that is small, of unknown size, or on a data center without range support goes on
as one stream in the same first GET: exactly the single-stream download.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import attrs

from .._core.options import ParallelDownloads, Timeout
from .._core.protocol import data_request
from .._core.resume import Action, ResumeState, Validators
from .._core.retry import TryAgain
from .._core.slices import Span, far_enough, judge_slice, missing, split
from .._http.bodies import StreamingResponse
from .._http.cancel import raise_held, wait_through_cancels
from ..errors import APITimeoutError, ResponseDecodeError, SandboxKitError, ValidationError
from ..models import DownloadResult
from .download import OPERATION, Request, _part_of, continue_part, fetch, let_go, response_info
from .inplace import InPlace, Ledger, Writer
from .partial import PartFile, open_part
from .plane import Progress
from .sinks import FileSink, Switch

__all__ = ["check_parts", "download_to_file"]

logger = logging.getLogger("sandboxkit")

PIECES_PER_PART = 4  # pieces per connection: the slowest holds the end back by one piece
MIN_PIECE = 8 << 20  # below this a piece's extra request costs more than it brings


def check_parts(parts: Any) -> int:
    """`parts` of `files.download`: an integer >= 1."""
    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise ValidationError(f"parts={parts!r}: must be an integer >= 1")
    return parts


class _Restart(Exception):
    """The file or the data center changed under a split download: begin again."""


class _RangesIgnored(Exception):
    """A piece was answered with the whole file, unchanged: Range is stripped on the way,
    so the download goes on as one stream."""


@attrs.define
class _Run:
    """One split-capable download into `part`; see the module docstring."""

    request: Request
    part: PartFile
    sink: FileSink
    parallel: ParallelDownloads
    checksum: bool
    progress: Progress | None
    attempts: int = 0
    resumes: int = 0
    file: InPlace | None = None  # once split
    _queue: deque[Span] = attrs.field(factory=deque)
    _continued: set[int] = attrs.field(factory=set)
    _tasks: list[asyncio.Task[Any]] = attrs.field(factory=list)
    _changed: asyncio.Event = attrs.field(factory=asyncio.Event)
    _hash: Any = None
    _moved: int = 0
    _first: ResumeState | None = None
    _stop: int | None = None
    _one_stream: bool = False  # once a piece showed Range stripped: never split again
    # The version every piece must be of: the first answer's, or a sliced part's sidecar's.
    _validators: Validators | None = None

    def _moved_on(self, size: int) -> None:
        self._moved += size
        if self.progress is not None and self.file is not None:
            self.progress(self._moved, self.file.ledger.total)

    # --- the whole download --------------------------------------------------------------

    async def run(self) -> tuple[int, str | None]:
        """Download the file; its size and sha256."""
        restarts = 0
        while True:
            try:
                return await self._attempt_all()
            except _RangesIgnored as ignored:
                await self._stop_all()
                # Once at most: from now on the download is one stream, which never splits.
                logger.debug("%s: %s; fetching it once more, as one stream", OPERATION, ignored)
                self._one_stream = True
                await self._forget()
            except _Restart as restart:
                await self._stop_all()
                restarts += 1
                if (
                    restarts
                    >= self.request.plane.calls.policy_for(self.request.options).max_attempts
                ):
                    raise ResponseDecodeError(  # the reason says whether the file changed
                        f"{OPERATION}: started over {restarts} times, giving up ({restart})",
                        status=206,  # the answers were each fine; together, inconsistent
                    ) from None
                logger.warning("%s: %s", OPERATION, restart)
                await self._forget()

    async def _stop_all(self) -> None:
        """Every task stopped and waited for; the first GET's requests counted."""
        self._count_first()
        held = await self.quiesce()
        raise_held(held, None)

    async def _forget(self) -> None:
        """Start again from an empty part."""
        await self.sink.truncate()
        self.part.held, self.part.total, self.part.done = 0, None, []
        self.part.sliced, self.part.validators, self._validators = False, None, None
        self.file, self._stop, self._moved = None, None, 0
        self._queue.clear()
        self._continued.clear()

    async def _attempt_all(self) -> tuple[int, str | None]:
        part = self.part
        if (
            part.sliced
            and not self._one_stream
            and part.total is not None
            and part.total >= self.parallel.threshold
        ):
            # A part an earlier download wrote in slices (so the link was long enough):
            # fetch only its gaps, in slices again.
            self._continued = {end for _, end in part.done if end < part.total}
            self._validators = part.validators
            self._begin_split(part.total, part.done, self.parallel.parts)
        else:
            if len(part.done) > 1:  # one stream continues the first range only
                part.handle.truncate(part.held)
            self._first = state = await continue_part(self.sink, part)
            self._spawn(self._first_stream(state))
        await self._supervise()
        first = self._first
        self._count_first()
        if self.file is None:  # one stream
            assert first is not None
            return first.position, self.sink.hexdigest()
        self.file.ledger.save()
        return self.file.ledger.total, None if self._hash is None else self._hash.hexdigest()

    def _count_first(self) -> None:
        if self._first is not None:
            self.attempts += self._first.attempts
            self.resumes += self._first.resumes
            self._first = None

    async def _first_stream(self, state: ResumeState) -> None:
        switch = Switch(self.sink)

        def on_stream(now: ResumeState, response: StreamingResponse) -> int | None:
            if self._stop is not None:
                return self._stop  # a resumed first answer still stops at its piece's end
            total = now.total
            if (
                now.position == 0
                and not self._one_stream
                and now.ranges_supported
                and total is not None
                and total >= self.parallel.threshold
                # A short path: one stream is as fast, slices would only cost CPU.
                and self._far_enough(response)
            ):
                pieces = self._plan([(0, total)], self.parallel.parts)
                if len(pieces) > 1:
                    self._validators = now.validators
                    self._stop = pieces[0][1]
                    self._queue.extend(pieces[1:])
                    self._begin_split(total, [], self.parallel.parts - 1, queued=True)
                    switch.writer = self._writer(0)
                    return self._stop
            self.part.record(total, now.ranges_supported, now.validators)
            return None

        def progress(done: int, total: int | None) -> None:
            if self.file is None and self.progress is not None:
                self.progress(done, total)

        await fetch(self.request, "file", switch, progress, state=state, on_stream=on_stream)
        if self._stop is not None:  # its piece is written: this connection takes more
            await self._worker()

    def _far_enough(self, response: StreamingResponse) -> bool:
        """Whether the link `response` came over is long enough to split its download."""
        link, plane = response.link(), self.request.plane
        proxied = plane.calls.transport.proxies.for_origin(plane.host.origin) is not None
        return far_enough(
            self.parallel.min_latency, link.rtt, link.loopback, response.head_seconds, proxied
        )

    def _plan(self, gaps: list[Span], parts: int) -> list[Span]:
        min_piece = min(MIN_PIECE, -(-self.parallel.threshold // self.parallel.parts))
        return split(gaps, parts, PIECES_PER_PART, min_piece)

    def _begin_split(
        self, total: int, done: list[Span], workers: int, queued: bool = False
    ) -> None:
        ledger = Ledger(self.part, total, list(done), self._validators)
        self.file = InPlace(self.part, ledger, self._moved_on, self.parallel.parts)
        # Before any byte lands where a prefix part's size would vouch for it.
        self.file.ledger.save()
        if not queued:
            self._queue.extend(self._plan(missing(done, total), self.parallel.parts))
        self._moved = sum(end - start for start, end in done)
        for _ in range(min(workers, len(self._queue))):
            self._spawn(self._worker())
        if self.checksum:
            self._hash = hashlib.sha256()
            self._spawn(self.file.follow_prefix(self._hash))

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        task.add_done_callback(lambda _: self._changed.set())
        self._tasks.append(task)

    async def _supervise(self) -> None:
        """Wait until every task is done; the first failure is raised (cleanup cancels the
        rest: `quiesce`)."""
        while True:
            self._changed.clear()
            for task in self._tasks:
                if task.done() and (task.cancelled() or task.exception() is not None):
                    task.result()  # raises
            if all(task.done() for task in self._tasks):
                return
            await self._changed.wait()

    async def quiesce(self) -> asyncio.CancelledError | None:
        """Cancel every task and wait, through any cancellation, until none runs and no
        thread touches the file; returns the cancellation held back."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        held = None
        if tasks:
            held = await wait_through_cancels(asyncio.gather(*tasks, return_exceptions=True))
        if self.file is not None:
            held = await self.file.quiesce() or held
        return held

    def _writer(self, offset: int) -> Writer:
        assert self.file is not None
        return Writer(self.file, offset, lambda: _Restart("the first answer started over"))

    # --- pieces --------------------------------------------------------------------------

    async def _worker(self) -> None:
        while self._queue:
            start, end = self._queue.popleft()
            await self._piece(start, end)

    async def _piece(self, start: int, end: int) -> None:
        request, file, held = self.request, self.file, self._validators
        assert file is not None
        if_range = None if held is None else held.if_range()
        at = start

        async def attempt(timeout: Timeout) -> TryAgain | None:
            nonlocal at
            self.attempts += 1
            self.resumes += at > start or start in self._continued
            get = data_request(
                "GET", request.target, OPERATION, timeout, start=at, end=end, if_range=if_range
            )
            async with request.plane.open(get) as response:
                decision, stop = judge_slice(
                    response_info(response), at, end, file.ledger.total, held
                )
                if decision.action is Action.RETRY:
                    raise _Restart(decision.reason)
                if decision.truncate:  # the whole file again, unchanged
                    raise _RangesIgnored(decision.reason)
                if decision.action is Action.FAIL:
                    raise ResponseDecodeError(
                        f"{OPERATION}: {decision.reason}", status=response.status
                    )
                if decision.action is Action.ERROR:
                    raise await response.error()
                writer = self._writer(at)
                try:
                    async with contextlib.aclosing(
                        response.iter_chunks(request.chunk_size)
                    ) as body:
                        async for chunk in body:
                            keep = min(len(chunk), stop - at)
                            await writer.write(chunk if keep == len(chunk) else chunk[:keep])
                            at += keep
                            if at >= stop:
                                break
                except SandboxKitError:
                    await writer.flush()  # what came before the cut is good: resume after it
                    raise
                await writer.flush()
            if at < end:
                return TryAgain(f"the slice {start}-{end - 1} ended at byte {at}")
            return None

        await request.plane.run(
            OPERATION,
            attempt,
            idempotent=True,
            options=request.options,
            progress=lambda: at,  # a try that moved the slice on is not a failed attempt
            transfer=lambda: (at - start, 0),
        )
        file.ledger.save()


async def download_to_file(
    request: Request,
    dest: Path,
    *,
    checksum: bool,
    progress: Progress | None,
    resume: bool,
    keep_partial: bool,
    parallel: ParallelDownloads,
) -> DownloadResult:
    """`_download.download_to_file`, split into parallel slices where it pays (see above),
    with the same promises: `dest` appears whole or not at all, and a failure or cancellation
    keeps the part (its sidecar recording every range written) exactly when one stream's is
    kept (`_download.let_go`, `keep_partial` included), for the next download to continue."""
    clock = request.plane.calls.clock
    started = clock()
    part = open_part(dest, _part_of(request), resume=resume, sliced=True)
    sink = FileSink(part.handle, checksum)
    run = _Run(request, part, sink, parallel, checksum, progress)
    total_time = (request.options.timeout or request.plane.calls.timeout).total
    try:
        try:
            with anyio.fail_after(total_time):
                size, sha256 = await run.run()
        except TimeoutError as exc:
            raise APITimeoutError(
                f"{OPERATION}: no success within the call's total timeout of {total_time}s",
                operation=OPERATION,
            ) from exc
        await sink.commit(part.path, dest)
        part.discard()
    except BaseException as exc:
        if isinstance(exc, SandboxKitError) and exc.operation is None:
            exc.operation = OPERATION  # raised here, between the calls (a give-up, a restart)
        held = await run.quiesce()
        if run.file is not None and part.resumable:
            with contextlib.suppress(OSError):
                run.file.ledger.save()  # every range written, for the next download to continue
        await let_go(sink, part, exc, resume=resume, keep_partial=keep_partial, held=held)
        raise
    return DownloadResult(
        path=dest,
        size=size,
        sha256=sha256,
        attempts=run.attempts,
        resumes=run.resumes,
        elapsed=clock() - started,
    )
