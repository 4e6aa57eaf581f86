"""Downloads: the resume state machine driven over real requests, into a sink, on one
stream or in Range slices on several connections (docs/design.md section 6).

The loop is `fetch`: one `Calls.run` whose attempt is one GET (`Fetch.attempt`), judged by
a resume state (`ResumeState`), its body streamed into a sink (`sinks`) until it ends or
the caller stops it; the state's verdicts reach the retry loop as they are (`TryAgain` to
carry on, an exception to stop). Every download runs it: into memory (`read_all`, and the
pages of `reads`), to the consumer of `iter_bytes` (`stream_chunks`), to a file on one
stream, and for each slice of a split one (under a `slices.SliceState`).

A download to a file (`download_to_file`) lands in `dest`'s partial file (`sinks.PartFile`), renamed
into place only when complete. With `ParallelDownloads.parts` above 1 it may be split
(docs/design.md section 6, item 9): the first GET has no Range (item 1). When its answer
shows `Accept-Ranges: bytes`, a size of at least `ParallelDownloads.threshold`, and came over
a link whose round trip is `min_latency` or more (`slices.far_enough`: the kernel's RTT of
the connection, or where it tells none the time the head took, both noted on the answer; a
short link is as fast on one stream), the file is cut into pieces in file order
(`slices.split`, a few per connection). The first GET's body is the first piece: it is read
up to the piece's end, then its connection is dropped. The other pieces are a work queue for
`parts - 1` more connections, and the first one's once its piece is done. Each piece is one
`fetch` of `Range: bytes=a-b` GETs on the host's own pool (so within `per_host_connections`
and the host's 429 window), resumed from where it got to after a cut; its bytes are written
in place with `os.pwritev` from worker threads, a few MiB a call (`inplace`). Each piece
carries `If-Range` with the download's strong validator (the first answer's, or the
sidecar's), so a piece answer shows a file that changed (a 200, another total, other
validators, a 416), which starts the whole download over from an empty part. A piece
answered with the whole file of the same size and version means Range is stripped on the
way (a proxy or CDN that passes `Accept-Ranges: bytes` on): slicing stops, and the file is
fetched once more, whole, as one stream; that is no change of the file, and no restart.

The sha256 of a split download follows the written prefix: a task reads back from the page
cache (`preadv`) what is contiguous from byte 0 and hashes it as the prefix grows; with
pieces handed out in file order it trails the download by a few pieces. The sidecar records
the byte ranges written (after their bytes are), so a rerun after a killed process fetches
only the gaps. A file that is small, of unknown size, or on a data center without range
support goes on as one stream in the same first GET: exactly the single-stream download.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs

from .._core import operations as ops
from .._core.bounds import check_counted, stop_under_cap
from .._core.options import CallOptions, ParallelDownloads, Progress, Timeout
from .._core.protocol import (
    ACCEPT_RANGES,
    CONTENT_RANGE,
    DATE,
    ETAG,
    FILES_PATH,
    LAST_MODIFIED,
    data_request,
    request_target,
)
from .._core.resume import Action, Decision, Mode, ResponseInfo, ResumeState, Validators
from .._core.retry import TryAgain, is_transient
from .._core.slices import (
    RangesIgnored,
    SliceState,
    Span,
    StartOver,
    far_enough,
    missing,
    split,
)
from .._http.calls import DataPlane
from .._http.cancel import raise_held, wait_through_cancels
from .._http.transport import StreamingResponse
from ..errors import APITimeoutError, ResponseDecodeError, SandboxKitError
from ..models import DownloadResult
from .inplace import InPlace, Ledger, Writer
from .sinks import (
    ChannelSink,
    FileSink,
    MemorySink,
    PartFile,
    PartOf,
    Piece,
    Sink,
    Switch,
    open_part,
)

__all__ = [
    "OPERATION",
    "Fetch",
    "Request",
    "download_to_file",
    "fetch",
    "read_all",
    "response_info",
    "stream_chunks",
]

OPERATION = ops.FILES_DOWNLOAD
PIECES_PER_PART = 4  # pieces per connection: the slowest holds the end back by one piece
MIN_PIECE = 8 << 20  # below this a piece's extra request costs more than it brings

logger = logging.getLogger("sandboxkit")
# Told the state and the answer before an answer's body is read: the offset at which to
# stop reading it (None: its end). See `fetch`.
OnStream = Callable[[ResumeState, StreamingResponse], int | None]


@attrs.frozen
class Request:
    """One logical download's fixed inputs."""

    plane: DataPlane
    params: list[tuple[str, str]]
    chunk_size: int
    options: CallOptions
    # Written once: every attempt and slice of the download sends the same path and query.
    target: str = attrs.field(init=False)

    @target.default
    def _target(self) -> str:
        return request_target(FILES_PATH, self.params)


async def fetch(
    request: Request,
    mode: Mode,
    sink: Sink,
    progress: Progress | None = None,
    *,
    state: ResumeState | None = None,
    on_stream: OnStream | None = None,
) -> ResumeState:
    """Run the download into `sink` (the one loop: see the module docstring); returns the
    final state (done, unless `on_stream` stopped it).

    Args:
        state: where to start (a resumed partial file, a page, a slice); default the first
            byte, in `mode`.
        on_stream: told the state and the answer each time an answer's body is about to be
            read; what it returns, if not None, is the offset at which to stop reading that
            body, and the state judges the answer so stopped (`ResumeState.on_stop`: the
            rest of the file is fetched by others, or is not wanted).
    """
    download = Fetch(
        request, sink, progress, state if state is not None else ResumeState(mode), on_stream
    )
    if type(sink) is MemorySink and mode == "file" and progress is None and on_stream is None:
        download.whole = sink  # read_bytes: an answer that is the whole file goes straight in
    await request.plane.run(
        OPERATION,
        download.attempt,
        idempotent=True,  # a GET
        options=request.options,
        # A try after which more bytes are held does not count against max_attempts.
        progress=download.held,
        transfer=download.moved,
    )
    return download.state


class Fetch:
    """One download's attempts over one resume state (`fetch`): each a GET, judged by the
    state, its body streamed into the sink.

    A class rather than closures: each closure cell, function and coroutine is an object the
    garbage collector walks while the download is in flight, and with 10,000 small downloads
    at once (benchmarks/run.py --case hosts) the collector was most of what sandboxkit cost
    over raw aiohttp.
    """

    __slots__ = ("on_stream", "progress", "received", "request", "sink", "state", "stop", "whole")

    def __init__(
        self,
        request: Request,
        sink: Sink,
        progress: Progress | None,
        state: ResumeState,
        on_stream: OnStream | None,
    ) -> None:
        self.request = request
        self.sink = sink
        self.progress = progress
        self.state = state
        self.on_stream = on_stream
        self.received = 0  # the file's bytes that came, every attempt's (its span tells them)
        self.stop: int | None = None  # where this answer's body stops being read
        self.whole: MemorySink | None = None  # read_all's sink (see `attempt`), else None

    def held(self) -> int:
        """The bytes held: a try after which there are more moved the transfer forward."""
        return self.state.high_water

    def moved(self) -> tuple[int, int]:
        """(bytes received, resumes), for the operation's span."""
        return self.received, self.state.resumes

    async def attempt(self, timeout: Timeout) -> TryAgain | None:
        """One GET, from where the state says, its body into the sink."""
        request, state, sink = self.request, self.state, self.sink
        start = state.begin_request()
        if start is None:
            get = data_request("GET", request.target, OPERATION, timeout)
        else:
            get = data_request(
                "GET",
                request.target,
                OPERATION,
                timeout,
                start=start,
                end=state.range_end(),
                if_range=state.if_range(),
            )
        async with request.plane.open(get) as response:
            whole = self.whole
            if whole is not None and start is None and response.status == 200 and not whole.pieces:
                # A fresh GET answered 200 with all of its Content-Length here (aiohttp's
                # parser ends it at exactly that length) is the file: no later request will
                # resume it, so the resume machine has nothing to judge.
                length = response.content_length
                body = None if length is None else response.arrived_whole(length)
                if body is not None:
                    self.received = len(body)
                    whole.pieces.append(body)
                    return None
            decision = state.on_response(response_info(response))
            if decision.action is Action.ERROR:
                raise await response.error()
            if decision.action is not Action.STREAM:
                return _verdict(decision, response.status)
            if decision.truncate:
                await sink.truncate()
            self.stop = self.on_stream(state, response) if self.on_stream is not None else None
            body = response.arrived_whole(request.chunk_size)
            if body is not None:
                # The usual small file: its body came with its head, so there is nothing to
                # wait for and no reader to start (three async generators a download).
                if body and await self._take(body):
                    return _verdict(state.on_stop(), response.status)
            else:
                pieces = (
                    response.iter_pieces(request.chunk_size)
                    if getattr(sink, "views", False)  # optional: a sink without it gets bytes
                    else response.iter_chunks(request.chunk_size)
                )
                try:
                    # aclosing: a body read below the parser gives its connection back to
                    # aiohttp (to be closed) now, not whenever the generator is collected.
                    async with contextlib.aclosing(pieces) as chunks:
                        async for chunk in chunks:
                            if await self._take(chunk):
                                # The connection is dropped, the body left unread.
                                return _verdict(state.on_stop(), response.status)
                except SandboxKitError:
                    # What arrived before the cut is good: keep it so the next GET resumes
                    # there.
                    await sink.flush()
                    raise
            await sink.flush()
            return _verdict(state.on_body_end(), response.status)

    async def _take(self, chunk: Piece) -> bool:
        """Put the part of `chunk` still wanted in the sink; True once at `stop`."""
        state, stop = self.state, self.stop
        if stop is not None and state.position + len(chunk) >= stop:
            chunk = chunk[: stop - state.position]
        self.received += len(chunk)
        skip, keep = state.on_chunk(len(chunk))
        if keep > skip:
            whole = keep - skip == len(chunk)
            await self.sink.write(chunk if whole else chunk[skip:keep])
        if self.progress is not None:
            self.progress(state.position, state.total)
        if stop is not None and state.position >= stop:
            await self.sink.flush()
            return True
        return False


def response_info(response: StreamingResponse) -> ResponseInfo:
    """What the resume rules (`resume`, `slices`) read of an answer's head."""
    headers = response.headers
    return ResponseInfo(
        response.status,
        response.content_length,
        headers.get(CONTENT_RANGE),
        headers.get(ACCEPT_RANGES),
        response.coding,
        headers.get(ETAG),
        headers.get(LAST_MODIFIED),
        headers.get(DATE),
    )


def _verdict(decision: Decision, status: int) -> TryAgain | None:
    """What the retry loop is told of a decision (not ERROR, which reads the answer's body):
    done (None), carry on (TryAgain), or an exception."""
    if decision.action is Action.RETRY:
        return TryAgain(decision.reason)
    if decision.action is Action.FAIL:
        raise ResponseDecodeError(f"{OPERATION}: {decision.reason}", status=status)
    return None  # DONE, or a body that ended where it should


async def read_all(request: Request) -> bytes:
    """Download into memory."""
    sink = MemorySink()
    await fetch(request, "file", sink)
    return sink.value()


async def stream_chunks(request: Request) -> AsyncGenerator[bytes, None]:
    """Yield the file's bytes, each exactly once, across resumes and restarts.

    The download runs in its own task, handing chunks over an unbuffered channel: the retry
    loop needs one coroutine around every attempt, which a generator that yields to its
    consumer cannot be. Closing the generator cancels that task and drops its connection.
    """
    send, receive = anyio.create_memory_object_stream[bytes](0)

    async def produce() -> None:
        async with send:
            await fetch(request, "stream", ChannelSink(send))

    task = asyncio.create_task(produce())
    try:
        async with receive:
            async for chunk in receive:
                yield chunk
        await task  # the channel closed: the download ended, or failed with this error
    except BaseException as exc:  # GeneratorExit (closed early) and cancellation included
        task.cancel()
        # However many cancellations arrive meanwhile: the stream is not over until its
        # download has let go of its connection.
        held = await wait_through_cancels(task)
        if not task.cancelled():
            task.exception()  # retrieved here, so asyncio never logs it as forgotten
        raise_held(held, exc)
        raise


async def download_to_file(
    request: Request,
    dest: Path,
    *,
    checksum: bool,
    progress: Progress | None,
    resume: bool,
    keep_partial: bool,
    parallel: ParallelDownloads,
    max_size: int | None = None,
) -> DownloadResult:
    """Download into `dest`'s partial file, renamed into place only when complete; split
    into slices where it pays and `parallel.parts` allows (see the module docstring).

    With `resume`, a partial file a dead process left (`sinks.PartFile`) is continued where its
    sidecar vouches for it. Where the data center showed it can resume, a failure here for a
    reason a later try may not meet (`retry.is_transient`: an outage, a timeout) keeps the
    partial file (and its sidecar, recording every range written) for the next download of
    the same file to continue, and with `keep_partial` so does any failure or cancellation;
    otherwise it is removed.
    """
    if parallel.parts > 1:
        return await _split_to_file(
            request,
            dest,
            checksum=checksum,
            progress=progress,
            resume=resume,
            keep_partial=keep_partial,
            parallel=parallel,
            max_size=max_size,
        )

    def on_stream(now: ResumeState, _: StreamingResponse) -> int | None:
        stop = None if max_size is None else stop_under_cap(now.total, max_size)
        part.record(now.total, now.ranges_supported, now.validators)
        return stop

    clock = request.plane.calls.clock
    started = clock()
    # Opened (and locked) on the loop on purpose: an open in a worker thread could finish
    # after a cancellation and leave a file (and a handle) nobody owns.
    part = open_part(dest, _part_of(request), resume=resume)
    sink = FileSink(part.handle, checksum)
    try:
        state = await fetch(
            request,
            "file",
            sink,
            progress,
            state=await continue_part(sink, part),
            on_stream=on_stream,
        )
        if max_size is not None:
            check_counted(state.position, max_size)
        await sink.commit(part.path, dest)
        part.discard()  # the sidecar; the part itself is `dest` now
    except BaseException as exc:
        # Cancelled again while this runs, it still closes (and removes or keeps) the file; a
        # cancellation that arrives during a commit lets the rename finish (dest is then the
        # whole file), and the call ends cancelled all the same.
        await let_go(sink, part, exc, resume=resume, keep_partial=keep_partial)
        raise
    return DownloadResult(
        path=dest,
        size=state.position,
        sha256=sink.hexdigest(),
        attempts=state.attempts,
        resumes=state.resumes,
        elapsed=clock() - started,
    )


async def continue_part(sink: FileSink, part: PartFile) -> ResumeState:
    """Where one stream starts in `part`: after its held bytes (hashed first, so the sha256
    covers the whole file, and known to be resumable, of the version the sidecar names, whose
    validator goes in the first GET's If-Range), or at the first byte."""
    if not part.held:
        return ResumeState("file")
    await sink.adopt(part.held)
    return ResumeState(
        "file",
        position=part.held,
        high_water=part.held,
        total=part.total,
        ranges_supported=True,
        validators=part.validators,
    )


async def let_go(
    sink: FileSink,
    part: PartFile,
    exc: BaseException,
    *,
    resume: bool,
    keep_partial: bool,
    held: asyncio.CancelledError | None = None,
) -> None:
    """After a failed or cancelled download: wait until no thread touches the file, close
    it, and keep it (and its sidecar) only where a later download may continue it: the data
    center resumes, the part holds bytes, and the failure was transient or `keep_partial`
    asks. Raises the cancellation held back meanwhile (or `held`) unless `exc` is one
    already; else returns for the caller's `raise`."""
    held = await sink.quiesce() or held
    part.let_go(keep=part.resumable and (keep_partial or (resume and is_transient(exc))))
    raise_held(held, exc)


def _part_of(request: Request) -> PartOf:
    query = dict(request.params)
    return PartOf(request.plane.host.origin, query["path"], query.get("username"))


@attrs.define
class _Split:
    """One download into `part` that may be split into slices; see the module docstring."""

    request: Request
    part: PartFile
    sink: FileSink
    parallel: ParallelDownloads
    checksum: bool
    progress: Progress | None
    max_size: int | None = None
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
            except RangesIgnored as ignored:
                await self._stop_all()
                # Once at most: from now on the download is one stream, which never splits.
                logger.debug("%s: %s; fetching it once more, as one stream", OPERATION, ignored)
                self._one_stream = True
                await self._forget()
            except StartOver as restart:
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
            if self.max_size is not None:
                stop_under_cap(part.total, self.max_size)
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
            stop = None if self.max_size is None else stop_under_cap(now.total, self.max_size)
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
            return stop

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
        return Writer(self.file, offset, lambda: StartOver("the first answer started over"))

    # --- pieces --------------------------------------------------------------------------

    async def _worker(self) -> None:
        while self._queue:
            start, end = self._queue.popleft()
            await self._piece(start, end)

    async def _piece(self, start: int, end: int) -> None:
        """The slice [start, end): the download's loop under the slice's own state, into
        its own in-place writer, each answer read to its end (`SliceState.answer_end`)."""
        file = self.file
        assert file is not None
        state = SliceState.of(
            start, end, file.ledger.total, self._validators, start in self._continued
        )
        try:
            await fetch(
                self.request,
                "file",
                self._writer(start),
                state=state,
                on_stream=lambda now, _: state.answer_end,
            )
        finally:
            self.attempts += state.attempts
            self.resumes += state.resumes
        file.ledger.save()


async def _split_to_file(
    request: Request,
    dest: Path,
    *,
    checksum: bool,
    progress: Progress | None,
    resume: bool,
    keep_partial: bool,
    parallel: ParallelDownloads,
    max_size: int | None,
) -> DownloadResult:
    """`download_to_file` where it may split: the same promises, by `_Split`."""
    clock = request.plane.calls.clock
    started = clock()
    part = open_part(dest, _part_of(request), resume=resume, sliced=True)
    sink = FileSink(part.handle, checksum)
    run = _Split(request, part, sink, parallel, checksum, progress, max_size)
    total_time = (request.options.timeout or request.plane.calls.timeout).total
    try:
        try:
            with anyio.fail_after(total_time):
                size, sha256 = await run.run()
            if max_size is not None:
                check_counted(size, max_size)
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
