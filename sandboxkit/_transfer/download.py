"""Downloads: the resume state machine driven over real requests, into one of three sinks
(`sinks`).

`fetch` is the whole algorithm: one `Calls.run` whose attempt is one GET, judged by
`ResumeState` (docs/design.md section 6). The sinks differ only in where bytes go: a temporary file
(written and hashed off the event loop, in parallel, in 4 MiB batches), memory, or an async
consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import anyio
import attrs

from .._core import operations as ops
from .._core.options import CallOptions, Timeout
from .._core.protocol import (
    ACCEPT_RANGES,
    CONTENT_RANGE,
    DATE,
    ETAG,
    FILES_PATH,
    LAST_MODIFIED,
    data_request,
    is_idempotent,
    request_target,
)
from .._core.resume import Action, Decision, Mode, ResponseInfo, ResumeState
from .._core.retry import TryAgain, is_transient
from .._http.bodies import StreamingResponse
from .._http.cancel import raise_held, wait_through_cancels
from ..errors import ResponseDecodeError, SandboxKitError
from ..models import DownloadResult
from .partial import PartFile, PartOf, open_part
from .plane import DataPlane, Progress
from .sinks import ChannelSink, FileSink, MemorySink, Piece, Sink

__all__ = [
    "Request",
    "download_to_file",
    "fetch",
    "read_all",
    "stream_chunks",
]

OPERATION = ops.FILES_DOWNLOAD


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
    on_stream: Callable[[ResumeState, StreamingResponse], int | None] | None = None,
) -> ResumeState:
    """Run the whole download into `sink`; returns the final state (done).

    One attempt is one GET, judged by the resume machine: its verdicts reach the retry loop
    as they are (`TryAgain` to carry on, an exception to stop), never as a made-up error.

    Args:
        state: where to start (a resumed partial file); default the first byte.
        on_stream: told the state and the answer each time an answer's body is about to be
            read; what it returns, if not None, is the offset at which to stop reading that
            body (the rest of the file is fetched by others: `_ranged`), and fetch then
            returns not done.
    """
    download = _Fetch(
        request, sink, progress, state if state is not None else ResumeState(mode), on_stream
    )
    if type(sink) is MemorySink and mode == "file" and progress is None and on_stream is None:
        download.whole = sink  # read_bytes: an answer that is the whole file goes straight in
    await request.plane.run(
        OPERATION,
        download.attempt,
        idempotent=is_idempotent("GET"),
        options=request.options,
        # A try after which more bytes are held does not count against max_attempts.
        progress=download.held,
        transfer=download.moved,
    )
    return download.state


class _Fetch:
    """One download's attempts over one resume state (`fetch`).

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
        on_stream: Callable[[ResumeState, StreamingResponse], int | None] | None,
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
                    return None
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
                                return None  # the connection is dropped, the body left unread
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
    """What the resume rules (`_resume`, `_slices`) read of an answer's head."""
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


async def download_to_file(
    request: Request,
    dest: Path,
    *,
    checksum: bool,
    progress: Progress | None,
    resume: bool,
    keep_partial: bool,
) -> DownloadResult:
    """Download into `dest`'s partial file, renamed into place only when complete.

    With `resume`, a partial file a dead process left (`_partial`) is continued where its
    sidecar vouches for it. Where the data center showed it can resume, a failure here for a
    reason a later try may not meet (`_retry.is_transient`: an outage, a timeout) keeps the
    partial file for the next download of the same file to continue, and with
    `keep_partial` so does any failure or cancellation; otherwise it is removed.
    """
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
            on_stream=lambda now, _: part.record(now.total, now.ranges_supported, now.validators),
        )
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
