"""A partial file written in place from several answers at once (a split download).

Each answer's bytes go to the file at their own offsets with `os.pwritev`, a batch of a few
MiB per worker-thread call, one batch in flight per answer while the next is read. The
`Ledger` keeps the byte ranges written (told after each write returns) and records them in
the sidecar, so what the sidecar vouches for is always on disk (in the page cache) already.
The sha256 follows the written prefix, read back with `os.pread` as it grows.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from .._core.resume import Validators
from .._core.slices import Span, merge, prefix
from .._http.cancel import wait_through_cancels
from .sinks import WRITE_BATCH, PartFile, Piece

__all__ = ["RECORD_EVERY", "InPlace", "Ledger", "Writer"]

T = TypeVar("T")
RECORD_EVERY = 16 << 20  # bytes written between two sidecar updates (and at each slice's end)
_IOV_MAX = 512  # pieces per pwritev (Linux allows 1024)


class Ledger:
    """The byte ranges written, shared by the writer threads; the sidecar is its record (with
    the version they are bytes of, `validators`, for a rerun's If-Range)."""

    def __init__(
        self, part: PartFile, total: int, done: list[Span], validators: Validators | None = None
    ) -> None:
        self.part, self.total, self.done = part, total, done
        self.validators = validators
        self._lock = threading.Lock()
        self._unrecorded = 0

    def add(self, start: int, end: int) -> None:
        """(Any thread.) Bytes [start, end) are written."""
        with self._lock:
            self.done = merge([*self.done, (start, end)])
            self._unrecorded += end - start
            if self._unrecorded >= RECORD_EVERY:
                self._save()

    def save(self) -> None:
        """Record in the sidecar what is written now."""
        with self._lock:
            self._save()

    def _save(self) -> None:
        self._unrecorded = 0
        self.part.record_done(self.total, list(self.done), self.validators)

    def prefix(self) -> int:
        """Bytes written without a gap from offset 0."""
        with self._lock:
            return prefix(self.done)


class InPlace:
    """The part's file descriptor, the ledger, and every thread call that touches them."""

    def __init__(
        self, part: PartFile, ledger: Ledger, moved: Callable[[int], None], answers: int
    ) -> None:
        self.fd = part.handle.fileno()
        # Each of `answers` writers holds up to two batches (one writing, one filling): the
        # batch shrinks as they multiply, so memory stays near 16 MiB whatever `parts` is.
        self.batch = max(1 << 20, 2 * WRITE_BATCH // max(1, answers))
        self.ledger = ledger
        self.moved = moved  # told of each answer's bytes as they are handed over
        self.grew = asyncio.Event()  # set when a write has landed
        self._threads: set[asyncio.Future[Any]] = set()
        self._scratch: bytearray | None = None  # the hash's read-back buffer

    def in_thread(self, work: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`work` in a worker thread; never cancelled: `quiesce` waits for it."""
        future = asyncio.ensure_future(anyio.to_thread.run_sync(work, *args))
        self._threads.add(future)
        future.add_done_callback(self._threads.discard)
        return future

    def write_at(self, batch: list[bytes], offset: int) -> None:
        """(Thread.) Write `batch` at `offset`, then tell the ledger."""
        if len(batch) > _IOV_MAX:
            batch = [b"".join(batch)]
        size = sum(map(len, batch))
        done = os.pwritev(self.fd, batch, offset)
        if done < size:  # a short write (a signal, a full disk): finish it piece by piece
            rest = memoryview(b"".join(batch))
            while done < size:
                done += os.pwrite(self.fd, rest[done:], offset + done)
        self.ledger.add(offset, offset + size)

    async def follow_prefix(self, hasher: Any) -> None:
        """Feed `hasher` the file from byte 0 as its written prefix grows, to the end."""
        hashed, total = 0, self.ledger.total
        while hashed < total:
            self.grew.clear()
            end = self.ledger.prefix()
            if end > hashed:
                await asyncio.shield(self.in_thread(self._hash_range, hasher, hashed, end))
                hashed = end
            else:
                await self.grew.wait()

    def _hash_range(self, hasher: Any, start: int, end: int) -> None:
        # Read back from the page cache (the pages were written moments ago) into one
        # reused buffer: a fresh 4 MiB bytes per read costs an mmap and its page faults.
        if self._scratch is None:
            self._scratch = bytearray(WRITE_BATCH)
        view = memoryview(self._scratch)
        while start < end:
            size = os.preadv(self.fd, [view[: min(WRITE_BATCH, end - start)]], start)
            if not size:
                raise OSError(f"the partial file ended at byte {start} of {end}")
            hasher.update(view[:size])
            start += size

    async def quiesce(self) -> asyncio.CancelledError | None:
        """Wait, through any cancellation, until no thread touches the file."""
        if not self._threads:
            return None
        return await wait_through_cancels(asyncio.gather(*self._threads, return_exceptions=True))


class Writer:
    """One answer's bytes, written in place from `offset` in batches, one batch in flight.
    Its `truncate` raises `restart`: bytes written in place cannot be taken back one by one."""

    def __init__(self, file: InPlace, offset: int, restart: Callable[[], Exception]) -> None:
        self._file = file
        self._offset = offset
        self._restart = restart
        self._batch: list[bytes] = []
        self._batched = 0
        self._pending: asyncio.Future[None] | None = None

    async def write(self, data: Piece) -> None:
        # Bytes: kept until its batch is written, a view would pin its receive buffer (a
        # writer's sink says it takes no views; bytes() of bytes is the object itself).
        self._batch.append(data if type(data) is bytes else bytes(data))
        self._batched += len(data)
        self._file.moved(len(data))
        if self._batched >= self._file.batch:
            await self._settle()
            self._submit()

    def _submit(self) -> None:
        batch, at = self._batch, self._offset
        self._offset += self._batched
        self._batch, self._batched = [], 0
        self._pending = self._file.in_thread(self._file.write_at, batch, at)

    async def _settle(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            await asyncio.shield(pending)  # a failed write raises here
            self._file.grew.set()

    async def flush(self) -> None:
        """Write what is batched and wait until it has landed."""
        await self._settle()
        if self._batch:
            self._submit()
            await self._settle()

    async def truncate(self) -> None:
        raise self._restart()
