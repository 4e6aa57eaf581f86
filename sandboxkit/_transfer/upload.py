"""Uploads: sources turned into streamed multipart bodies, replayed only when they can be.

A source is a local path, bytes-like, a binary file object, or an async iterable of bytes.
Paths, bytes and seekable files are replayable: a retryable failure resends them in full
(the service has no resumable upload). A non-seekable file or an async iterable is one-shot:
never retried, and its error says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import os
import posixpath
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from pathlib import Path
from typing import IO, Any, cast

import anyio
import attrs

from .._core import operations as ops
from .._core.answers import Reply
from .._core.convert import structure
from .._core.options import CallOptions, Progress, Timeout
from .._core.protocol import FILES_PATH, data_request, is_idempotent, request_target
from .._core.retry import is_retryable
from .._http.calls import REPLY_LIMIT, DataPlane
from .._http.cancel import raise_held, wait_through_cancels
from .._http.throttle import paced
from .._http.transport import multipart_file
from ..errors import (
    APIError,
    ResponseDecodeError,
    SandboxKitError,
    TransportError,
    ValidationError,
)
from ..models import FileEntry

__all__ = ["Source", "make_source", "send_file"]

OPERATION = ops.FILES_UPLOAD
# A piece read from a file (one thread hop each) or sliced from bytes. Measured on 1 GiB
# (benchmarks/run.py --case upload): 4 MiB pieces read ahead cost less client CPU than 1 MiB
# ones read in turn; memory holds two of them and the transport's buffer.
READ_SIZE = 4 << 20
# A body piece: bytes, or a view of them (aiohttp writes any bytes-like object).
Chunk = bytes | memoryview


@attrs.frozen
class Source:
    """What to send: a fresh chunk iterator per attempt, its size if known, and whether it
    can be sent twice (`one_shot` says why not, for the error message)."""

    open: Callable[[], AsyncGenerator[Chunk, None]]
    size: int | None
    one_shot: str | None = None


def make_source(source: Any) -> Source:
    """Classify `source`, checking what can be checked before any network."""
    if isinstance(source, str | os.PathLike):
        return _path_source(Path(os.fspath(source)))
    if isinstance(source, bytes | bytearray | memoryview):
        return _bytes_source(source)
    if isinstance(source, io.TextIOBase):
        raise ValidationError("source: a text file object; open the file in binary mode ('rb')")
    if callable(getattr(source, "read", None)):
        return _file_source(source)
    if isinstance(source, AsyncIterable):
        return Source(
            lambda: _checked_chunks(source),
            None,
            one_shot="the source is an async iterable, which cannot be replayed",
        )
    raise ValidationError(
        f"source: {type(source).__name__} is not a path, bytes-like object, binary file "
        "object or async iterable of bytes"
    )


def _path_source(path: Path) -> Source:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ValidationError(f"source: local file {str(path)!r} does not exist") from None
    except OSError as exc:
        raise ValidationError(f"source: cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if not path.is_file():
        raise ValidationError(f"source: {str(path)!r} is not a regular file")
    size = info.st_size

    async def chunks() -> AsyncGenerator[Chunk, None]:
        # Opened on the loop: an open finishing in a thread after a cancellation would leak.
        handle = open(path, "rb")  # noqa: SIM115, ASYNC230 - closed in the finally
        try:
            async for chunk in _exactly(_read_file(handle), size, repr(str(path))):
                yield chunk
        finally:
            handle.close()

    return Source(chunks, size)


def _bytes_source(data: bytes | bytearray | memoryview) -> Source:
    try:
        view = memoryview(data).cast("B")
    except TypeError:
        raise ValidationError("source: a memoryview must be C-contiguous") from None

    # Immutable bytes are sent from views of themselves; anything the caller may change
    # meanwhile (a bytearray, a view) is copied a slice at a time: memory stays at one slice.
    copy = not isinstance(data, bytes)

    async def chunks() -> AsyncGenerator[Chunk, None]:
        for offset in range(0, view.nbytes, READ_SIZE):
            piece = view[offset : offset + READ_SIZE]
            yield piece.tobytes() if copy else piece

    return Source(chunks, view.nbytes)


def _file_source(handle: Any) -> Source:
    seekable = getattr(handle, "seekable", None)
    if not (callable(seekable) and seekable()):
        return Source(
            lambda: _read_file(handle),
            None,
            one_shot="the source is a file object that cannot seek back to its start",
        )
    start = handle.tell()
    size = handle.seek(0, io.SEEK_END) - start
    handle.seek(start)

    async def chunks() -> AsyncGenerator[Chunk, None]:
        await anyio.to_thread.run_sync(handle.seek, start)
        async for chunk in _exactly(_read_file(handle), size, "the source file object"):
            yield chunk

    return Source(chunks, size)


async def _read_file(handle: IO[bytes]) -> AsyncGenerator[Chunk, None]:
    # One piece is read ahead, in a thread, while the one before it is sent: the disk read
    # and the socket send overlap (read then send, in turn, left the socket idle during each
    # read). Two pieces in memory at most.
    ahead = _read_piece(handle)
    try:
        while True:
            chunk = await ahead
            if not isinstance(chunk, bytes | bytearray):
                raise ValidationError(
                    "source: the file object's read() must return bytes (binary mode)"
                )
            if not chunk:
                return
            ahead = _read_piece(handle)
            # A view, not the bytes: what the socket does not take at once is copied into
            # the transport's buffer from it (slicing bytes first made a second copy).
            yield memoryview(bytes(chunk))
    except BaseException as exc:
        # The handle is closed after this generator: never under a read still running.
        held = await wait_through_cancels(ahead)
        if not ahead.cancelled():
            ahead.exception()  # retrieved: the exception on its way matters more
        raise_held(held, exc)
        raise


def _read_piece(handle: IO[bytes]) -> asyncio.Future[bytes]:
    return asyncio.ensure_future(anyio.to_thread.run_sync(handle.read, READ_SIZE))


async def _exactly(
    chunks: AsyncGenerator[Chunk, None], size: int, what: str
) -> AsyncGenerator[Chunk, None]:
    # The Content-Length went out first: a source that grew or shrank since must not send a
    # body of another length (the server would wait forever, or read garbage).
    sent = 0
    async for chunk in chunks:
        if sent + len(chunk) > size:
            raise ValidationError(f"source: {what} grew during the upload (expected {size} bytes)")
        sent += len(chunk)
        yield chunk
    if sent != size:
        raise ValidationError(f"source: {what} shrank during the upload ({sent} of {size} bytes)")


async def _checked_chunks(source: AsyncIterable[Any]) -> AsyncGenerator[Chunk, None]:
    async for chunk in source:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise ValidationError(
                f"source: the async iterable yielded {type(chunk).__name__}, not bytes"
            )
        if chunk:
            yield bytes(chunk)


async def send_file(
    plane: DataPlane,
    remote: str,
    params: list[tuple[str, str]],
    source: Source,
    *,
    progress: Progress | None,
    options: CallOptions,
    tries: list[int] | None = None,
) -> FileEntry:
    """POST the source as the single `file` part; retried only when it can be replayed.
    `tries[0]`, if given, counts the POSTs sent (`batch.upload_many` sums them)."""
    filename = posixpath.basename(remote)
    target = request_target(FILES_PATH, params)
    moved = 0  # bytes handed to the connection, every attempt's (its span tells them)
    throttle = plane.calls.transport.throttle

    async def attempt(timeout: Timeout) -> FileEntry:
        if tries is not None:
            tries[0] += 1
        local_failure: list[BaseException] = []
        sent = 0

        async def body() -> AsyncGenerator[Chunk, None]:
            nonlocal sent, moved
            try:
                # aclosing: the source (an open file) is closed as soon as this body is.
                # The source's chunks are drawn from the upload budget in grains as they go
                # (handed on as they are while nothing is limited).
                async with (
                    contextlib.aclosing(source.open()) as chunks,
                    contextlib.aclosing(paced(chunks, throttle, plane.host.origin)) as pieces,
                ):
                    async for chunk in pieces:
                        yield chunk
                        sent += len(chunk)
                        moved += len(chunk)
                        if progress is not None:
                            progress(sent, source.size)
            except Exception as exc:
                # aiohttp wraps a failing body in a connection error (which would be
                # retried); keep the real cause to raise it instead.
                local_failure.append(exc)
                raise

        async with _Body(body()) as chunks:
            try:
                # Views pass through as they are (the signature says bytes).
                body = multipart_file(filename, cast(AsyncIterable[bytes], chunks), source.size)
                async with plane.open(
                    data_request("POST", target, OPERATION, timeout, data=body)
                ) as response:
                    return _entry(await response.reply(REPLY_LIMIT))
            except SandboxKitError as exc:
                if local_failure and local_failure[0] is not exc:
                    raise local_failure[0] from exc
                raise

    # A POST, resent only because it overwrites with the same bytes: when they can be replayed.
    replayable = source.one_shot is None
    try:
        return await plane.run(
            OPERATION,
            attempt,
            idempotent=is_idempotent("POST", keyed=replayable),
            options=options,
            transfer=lambda: (moved, None),  # an upload never resumes
        )
    except SandboxKitError as error:
        if replayable or not is_retryable(error, plane.calls.policy_for(options)):
            raise
        raise _not_retried(error, source.one_shot or "") from error


def _entry(reply: Reply) -> FileEntry:
    payload = reply.payload
    item = payload[0] if isinstance(payload, list) and len(payload) == 1 else payload
    try:
        return structure(item, FileEntry)
    except Exception as exc:  # cattrs raises many types for a wrong shape
        raise ResponseDecodeError(
            f"{OPERATION}: the {reply.status} answer is not the one-element file list the "
            "interface shows",
            status=reply.status,
            request_id=reply.request_id,
        ) from exc


class _Body:
    """One attempt's body chunks, closed by that attempt rather than left to aiohttp.

    aiohttp pulls the chunks from a task of its own and, when the request ends early (a
    cancellation, a failure), cancels that task without closing the iterator: the source
    (an open file) stayed open until garbage collection. Leaving `async with` closes it,
    after the pull in progress if any, however many times the attempt is cancelled meanwhile.
    """

    def __init__(self, chunks: AsyncGenerator[Chunk, None]) -> None:
        self._chunks = chunks
        self._pull: asyncio.Future[None] | None = None  # done when the pull in progress ends
        self._closed = False

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> Chunk:
        if self._closed:  # the attempt is over: a writer still pulling gets an empty rest
            raise StopAsyncIteration
        self._pull = pull = asyncio.get_running_loop().create_future()
        try:
            return await self._chunks.__anext__()
        finally:
            pull.set_result(None)
            self._pull = None

    async def __aenter__(self) -> _Body:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        self._closed = True
        held: asyncio.CancelledError | None = None
        if self._pull is not None:
            # aiohttp has cancelled its writer by now, so the pull ends at once (and with it,
            # usually, the source); an open generator cannot be closed while it runs.
            held = await wait_through_cancels(self._pull)
        closing = asyncio.ensure_future(self._chunks.aclose())
        late = await wait_through_cancels(closing)
        held = late if held is None else held
        if held is None and exc is None:
            closing.result()  # nothing else is on its way: a failure to close is the error
        elif not closing.cancelled():
            closing.exception()  # retrieved: the exception already on its way matters more
        raise_held(held, exc)


def _not_retried(error: SandboxKitError, why: str) -> SandboxKitError:
    """The same error (same class, same fields) with the reason it was not retried."""
    clone = copy.copy(error)
    message = f"{getattr(error, 'message', str(error))} (not retried: {why})"
    clone.args = (message,)
    if isinstance(clone, APIError | TransportError):
        clone.message = message
    return clone
