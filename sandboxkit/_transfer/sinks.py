"""Where a download's bytes go: the sinks `download.fetch` writes an answer's body into.

Each is a `Sink` (`write`, `flush`, `truncate`): memory (`MemorySink`, `read_bytes`; a page
of a bounded read, `PageSink`), the consumer of `iter_bytes` (`ChannelSink`), a partial file
written and hashed off the event loop, the write and the hash in parallel, in large batches
handed over without waiting (`FileSink`, docs/design.md section 6), and the first answer of
a download that may be split (`Switch`: the file sink as one stream, or once split the
in-place writer of its first slice, `inplace.Writer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import stat
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Protocol

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from .._http.cancel import wait_through_cancels

__all__ = [
    "IN_FLIGHT",
    "WRITE_BATCH",
    "ChannelSink",
    "FileSink",
    "MemorySink",
    "PageSink",
    "Piece",
    "Sink",
    "Switch",
]

# A piece of the body: bytes, or a memoryview of a receive buffer the sink may keep.
Piece = bytes | memoryview
# Disk writes and hashing leave the event loop in batches of about this size
# (docs/design.md section 6): every batch costs thread hops and GIL hand-backs, so fewer is
# cheaper.
WRITE_BATCH = 4 << 20
# Batches with the threads while the next one fills: the threads never wait for the loop to
# hand them work, and memory stays bounded (see _FileSink).
IN_FLIGHT = 2
# writev takes at most this many pieces at once (IOV_MAX on Linux and the BSDs).
_IOV_MAX = 1024


class Sink(Protocol):
    """Where `fetch` puts the body's bytes, in order.

    `write` gets `bytes` objects, unless the sink has a true attribute `views`: then large
    bodies come as memoryviews of up to 4 MiB receive buffers (`ring`). A sink may keep
    either as long as it likes (a buffer is never refilled while a view of it is alive),
    and must assume nothing of a view beyond the buffer protocol and `len`. `flush` is
    awaited at the end of each answer's body and before a retry after a cut: everything
    written so far must then be in the sink. `truncate` drops everything (a restart).
    """

    async def write(self, data: Piece) -> None: ...

    async def flush(self) -> None: ...

    async def truncate(self) -> None: ...


class MemorySink:
    """The whole file in memory (`read_bytes`).

    Pieces are kept and joined at the end rather than appended to a bytearray: the usual
    small file is one `bytes` piece, which `join` hands back as it is, so its body is never
    copied (a bytearray and `bytes()` of it would copy it twice).
    """

    views = True  # a view is copied at once: kept, it would keep its whole receive buffer

    __slots__ = ("pieces",)

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    async def write(self, data: Piece) -> None:
        self.pieces.append(data if type(data) is bytes else bytes(data))

    async def flush(self) -> None:
        pass

    async def truncate(self) -> None:
        self.pieces.clear()

    def value(self) -> bytes:
        return b"".join(self.pieces)


class PageSink(MemorySink):
    """A page in memory, given pieces as the connection delivers them (never the 4 MiB
    buffers a large body is read into below the parser, `ring`, which read that far ahead
    of where a page stops)."""

    __slots__ = ()
    views = False


class ChannelSink:
    """Hands each chunk to the consumer of `iter_bytes`; waits while it is busy."""

    views = False  # the consumer keeps bytes objects, cut to its chunk_size

    def __init__(self, send: MemoryObjectSendStream[bytes]) -> None:
        self._send = send

    async def write(self, data: Piece) -> None:
        assert isinstance(data, bytes)  # views is False: fetch hands bytes only
        await self._send.send(data)

    async def flush(self) -> None:
        pass

    async def truncate(self) -> None:  # pragma: no cover - stream mode never truncates
        raise AssertionError("a stream cannot take back bytes it yielded")


class Switch:
    """The first answer's sink of a download that may be split: the file sink as one
    stream, or, once split (`writer` set, before the body is read), the in-place writer of
    its first slice."""

    def __init__(self, sink: FileSink) -> None:
        self.sink = sink
        self.writer: Sink | None = None

    @property
    def views(self) -> bool:
        """Whether `fetch` may hand this answer's pieces as views of a reused buffer: the
        file sink copies them; a writer keeps each piece until its batch is written, so it
        needs bytes. Asked once the answer is judged (the writer, if any, set)."""
        return self.writer is None

    async def write(self, data: Piece) -> None:
        await (self.writer or self.sink).write(data)

    async def flush(self) -> None:
        await (self.writer or self.sink).flush()

    async def truncate(self) -> None:
        await (self.writer or self.sink).truncate()


def _write_all(fd: int, pieces: list[Piece]) -> None:
    """A batch's write, in its thread; it empties `pieces` (see FileSink._hand_over)."""
    try:
        _writev_fully(fd, pieces)
    finally:
        pieces.clear()


def _writev_fully(fd: int, pieces: list[Piece]) -> None:
    # One writev per batch: one system call and one GIL release for up to 4 MiB.
    for first in range(0, len(pieces), _IOV_MAX):
        group = pieces[first : first + _IOV_MAX]
        left = sum(len(piece) for piece in group)
        while left:
            done = os.writev(fd, group)
            left -= done
            if left:  # a short write (rare on a regular file): go on after what was written
                views = [memoryview(piece) for piece in group]
                while done >= len(views[0]):
                    done -= len(views.pop(0))
                views[0] = views[0][done:]
                group = list(views)


def _hash_all(digest: Any, pieces: list[Piece]) -> None:
    """A batch's hash, in its thread; it empties `pieces` (see FileSink._hand_over)."""
    try:
        for piece in pieces:
            digest.update(piece)  # hashlib lets go of the GIL for large pieces
    finally:
        pieces.clear()


class FileSink:
    """A temporary file, written and hashed off the loop, in parallel, a batch at a time.

    A full batch goes to two threads of its own at once (a writer and a hasher, each taking
    batches in order: writev and sha256 both let go of the GIL, so the file is written while
    it is hashed), and the next batch fills meanwhile. At most `IN_FLIGHT` batches are with
    the threads: the body's bytes held here are at most (IN_FLIGHT + 1) batches, 12 MiB, and
    with the one `ring` holds ready meanwhile, 16 MiB (its four buffers). A file smaller
    than a batch never starts the threads: it is written and hashed in one thread call at
    its flush.
    Cancelling the download never cancels thread work on the file: `quiesce()` waits for all
    of it before the file is closed.
    """

    views = True

    def __init__(self, handle: IO[bytes], checksum: bool) -> None:
        self._handle = handle
        self._fd = handle.fileno()
        self._hash = hashlib.sha256() if checksum else None
        self._batch: list[Piece] = []
        self._batched = 0
        # Thread work on the file not yet awaited, oldest first: each entry a batch (its
        # write and its hash) or one whole-file step (reset, adopt, commit).
        self._running: deque[list[asyncio.Future[None]]] = deque()
        self._lanes: list[ThreadPoolExecutor] = []

    async def write(self, data: Piece) -> None:
        self._batch.append(data)
        self._batched += len(data)
        if self._batched >= WRITE_BATCH:
            while len(self._running) >= IN_FLIGHT:
                await self._settle_oldest()
            self._hand_over()

    def _hand_over(self) -> None:
        batch, self._batch, self._batched = self._batch, [], 0
        if not self._lanes:
            # Made for files of a batch or more only: the thread start costs ~0.1 ms.
            lanes = 1 if self._hash is None else 2
            self._lanes = [ThreadPoolExecutor(1, "sandboxkit-download") for _ in range(lanes)]
        # A list each, which its thread empties before its future resolves: the executor
        # lets go of a call's arguments only after that, when the loop may already want the
        # receive buffer back (`ring` refills one only once no view of it is left). Held
        # there, it cost a fresh 4 MiB buffer, one more than the pipeline needs.
        work = [asyncio.wrap_future(self._lanes[0].submit(_write_all, self._fd, batch[:]))]
        if self._hash is not None:
            work.append(asyncio.wrap_future(self._lanes[1].submit(_hash_all, self._hash, batch)))
        self._running.append(work)

    async def _step(self, work: Callable[..., None], *args: Any) -> None:
        """Run one whole-file step in a thread once every batch before it is done."""
        await self._settle()
        self._running.append([asyncio.ensure_future(anyio.to_thread.run_sync(work, *args))])
        await self._settle()

    async def _settle_oldest(self) -> None:
        # Shielded: a cancellation must not cancel the thread work (its thread would run
        # on, unowned, while the file is closed under it); quiesce() waits for it instead.
        for future in self._running[0]:
            await asyncio.shield(future)  # a failed write or hash raises here
        self._running.popleft()

    async def _settle(self) -> None:
        while self._running:
            await self._settle_oldest()

    async def flush(self) -> None:
        if not self._batch:
            await self._settle()
        elif self._lanes:
            self._hand_over()
            await self._settle()
        else:  # a small file: one thread call writes and hashes it
            batch, self._batch, self._batched = self._batch, [], 0
            await self._step(self._write_small, batch)

    def _write_small(self, batch: list[Piece]) -> None:
        _writev_fully(self._fd, batch)
        if self._hash is not None:
            _hash_all(self._hash, batch)

    async def commit(self, temp: Path, dest: Path) -> None:
        """Close the file and rename it to `dest` (everything was flushed)."""
        await self._step(_commit, self._handle, temp, dest)
        self._stop_lanes()

    async def quiesce(self) -> asyncio.CancelledError | None:
        """Wait, however many times the task is cancelled meanwhile, until no thread touches
        the file (before it is closed and removed); returns the cancellation held back."""
        held: asyncio.CancelledError | None = None
        while self._running:
            for future in self._running.popleft():
                cancelled = await wait_through_cancels(future)
                held = held or cancelled
                if not future.cancelled():
                    future.exception()  # the error that matters is already propagating
        self._stop_lanes()
        return held

    def _stop_lanes(self) -> None:
        for lane in self._lanes:
            lane.shutdown(wait=False)  # idle by now: its thread ends at once
        self._lanes = []

    async def truncate(self) -> None:
        self._batch, self._batched = [], 0
        await self._step(self._reset)

    def _reset(self) -> None:
        self._handle.seek(0)
        self._handle.truncate()
        if self._hash is not None:
            self._hash = hashlib.sha256()

    async def adopt(self, held: int) -> None:
        """Take the file's first `held` bytes as already written (a resumed partial file):
        hash them, off the loop, so the sha256 still covers the whole file."""
        await self._step(self._adopt, held)

    def _adopt(self, held: int) -> None:
        self._handle.seek(0)
        left = held
        while left:
            piece = self._handle.read(min(WRITE_BATCH, left))
            if not piece:
                raise OSError(f"the partial file ended {left} bytes early")
            if self._hash is not None:
                self._hash.update(piece)
            left -= len(piece)
        self._handle.seek(held)

    def hexdigest(self) -> str | None:
        return self._hash.hexdigest() if self._hash is not None else None


def _commit(handle: IO[bytes], temp: Path, dest: Path) -> None:
    # No fsync: like curl and pip, durability against power loss is the filesystem's job;
    # the rename still guarantees no reader ever sees a partial file under `dest`.
    # The part was made 0600 (never more open than the file it becomes); `dest` gets the
    # mode the user expects before it has the name: an existing file's own (a 0600 key stays
    # 0600, as curl, wget and rsync keep it), else what `open()` would give a new file.
    os.fchmod(handle.fileno(), _mode_for(dest))
    handle.close()
    os.replace(temp, dest)  # a link at `dest` is replaced, never followed


def _mode_for(dest: Path) -> int:
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        return stat.S_IMODE(st.st_mode) & 0o777  # no set-id bits on a file we wrote
    return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask, read without changing it where the system shows it (changing
    it, even for an instant, races with files other threads create)."""
    with (
        contextlib.suppress(OSError, ValueError),
        open("/proc/self/status", encoding="ascii", errors="replace") as status,
    ):
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # pragma: no cover - Linux before 4.7, and other systems
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover
