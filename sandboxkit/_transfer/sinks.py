"""Where a download's bytes go: the sinks `download.fetch` writes an answer's body into, and the
partial file beside `dest` that the file sink fills.

Each sink is a `Sink` (`write`, `flush`, `truncate`): memory (`MemorySink`, `read_bytes`; a
page of a bounded read, `PageSink`), the consumer of `iter_bytes` (`ChannelSink`), a partial
file written and hashed off the event loop, the write and the hash in parallel, in large
batches handed over without waiting (`FileSink`, docs/design.md section 6), and the first
answer of a download that may be split (`Switch`: the file sink as one stream, or once split
the in-place writer of its first slice, `inplace.Writer`).

The partial file (`PartFile`, `open_part`): a deterministic name beside `dest`, a sidecar,
and a lock. `.{name}.part` holds the bytes so far and `.{name}.part.json` what they are a
part of: the sandbox host, remote path and username, the file's total size, whether the data
center showed range support, and the version's validators when the answers carried them
(`etag`, `last_modified`, `date`: a rerun's first Range asks with `If-Range`). A download in
parallel slices (`download`) also records `done`: the byte ranges written so far (only
ranges whose bytes were written before the sidecar was), so the part is no longer a prefix
and its size says nothing. While a download writes the part it holds an exclusive `flock`
on it, so a second writer of the same `dest` (in this process or another) fails at once with
`DestinationLockedError`; the kernel drops the lock of a process that dies. A later download
of the same remote file to the same `dest` finds the part, checks the sidecar, and continues
from the part's size (or its gaps) with `Range`; anything that does not match starts over
from an empty part. Only the token is never written: the sidecar names the host, not its
credentials. `FileSink.commit` renames the finished part into place.

The names are predictable, and the directory may be shared (a results folder, `/tmp`): what
sits there is distrusted. The part and the sidecar are opened with `O_NOFOLLOW`, and only a
regular file of this user with no other link (or one this call created) is ever opened for
writing or believed; a symlink, a FIFO or another user's file in their place is removed (a
link's target is untouched), or, where it cannot be, the download fails with
`DestinationUnsafeError` before any request. The sidecar is replaced through a scratch file
created with `O_EXCL` under a name of its own, and read capped, its JSON distrusted whatever
it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import stat
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Protocol

import anyio
import attrs
from anyio.streams.memory import MemoryObjectSendStream

from .._core.resume import Validators
from .._core.slices import Span, merge, prefix, valid_done
from .._http.cancel import wait_through_cancels
from ..errors import DestinationLockedError, DestinationUnsafeError, ValidationError

try:  # POSIX; elsewhere parts are used without a lock
    import fcntl
except ImportError:  # pragma: no cover - not on the machines this project runs on
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "IN_FLIGHT",
    "WRITE_BATCH",
    "ChannelSink",
    "FileSink",
    "MemorySink",
    "PageSink",
    "PartFile",
    "PartOf",
    "PartialDownload",
    "Piece",
    "Sink",
    "Switch",
    "check_destination",
    "clear_leftovers",
    "find_partial",
    "open_part",
    "part_paths",
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


logger = logging.getLogger("sandboxkit")

# In bytes, as the file system counts: keeps the longest name made from it, the sidecar's
# scratch file `.{stem}.part.json.{8 hex}.new` (stem + 24), under NAME_MAX (255).
_MAX_STEM = 200
_CUT_STEM = 180  # a longer stem keeps this many bytes, then `~` and 16 hex of its hash
# A sidecar is a few hundred bytes (a sliced one's `done` a few KiB): past this it is not one.
_SIDECAR_LIMIT = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@attrs.frozen
class PartOf:
    """What a partial file is a part of."""

    origin: str
    path: str
    username: str | None


def part_paths(dest: Path) -> tuple[Path, Path]:
    """The partial file and its sidecar for `dest` (a long name is cut and hashed, so two
    long names never share a part)."""
    stem = os.fsencode(dest.name)
    if len(stem) > _MAX_STEM:
        cut = _CUT_STEM
        while cut and stem[cut] & 0xC0 == 0x80:  # never half a UTF-8 character
            cut -= 1
        stem = stem[:cut] + b"~" + hashlib.sha256(stem).hexdigest()[:16].encode()
    part = dest.with_name(os.fsdecode(b"." + stem + b".part"))
    return part, part.with_name(part.name + ".json")


@attrs.define
class PartFile:
    """An open, locked partial file, and how many of its bytes a download may continue from.

    `held` bytes are resumable (0: start from scratch); `total` is the size the sidecar saw;
    `done` the byte ranges written (for a prefix part, `[(0, held)]`); `validators` the
    version of the file they are bytes of, when the service named it (ETag, Last-Modified).
    """

    path: Path
    sidecar: Path
    handle: IO[bytes]
    of: PartOf
    held: int = 0
    total: int | None = None
    done: list[Span] = attrs.field(factory=list)
    sliced: bool = False  # its sidecar came from a download in slices
    validators: Validators | None = None
    _recorded: tuple[int | None, bool, Validators | None] | None = None
    _identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file opened

    def record(self, total: int | None, ranges: bool, validators: Validators | None = None) -> None:
        """Write the sidecar for what the service has just shown (only when it changed: a
        restart onto another version of the same size changes the validators only)."""
        if self._recorded == (total, ranges, validators):
            return
        self._recorded = (total, ranges, validators)
        body = {
            **attrs.asdict(self.of),
            "total": total,
            "ranges": ranges,
            **(validators.record() if validators is not None else {}),
        }
        self._write_sidecar(body)

    def record_done(
        self, total: int, done: list[Span], validators: Validators | None = None
    ) -> None:
        """Write the sidecar of a part written in slices: `done` are the ranges written
        (call it only after their bytes are written), of the version `validators` names.
        Safe from any one thread at a time."""
        self._recorded = (total, True, validators)
        body = {
            **attrs.asdict(self.of),
            "total": total,
            "ranges": True,
            "done": done,
            **(validators.record() if validators is not None else {}),
        }
        self._write_sidecar(body)

    def _write_sidecar(self, body: dict[str, Any]) -> None:
        # A scratch file of its own (O_EXCL: never one planted under the name, never through
        # a link), then a rename over the sidecar: whole or not at all, even if the process
        # dies, and a link planted at the sidecar's name is replaced, not followed.
        data = json.dumps(body).encode()
        for tries_left in range(2, -1, -1):
            scratch = self.sidecar.with_name(f"{self.sidecar.name}.{_scratch_tag()}.new")
            try:
                fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
                break
            except FileExistsError:  # planted, or (one in 2**32) another writer's
                if not tries_left:
                    raise
        try:
            try:
                while data:
                    data = data[os.write(fd, data) :]
            finally:
                os.close(fd)
            os.replace(scratch, self.sidecar)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(scratch)
            raise

    @property
    def resumable(self) -> bool:
        """Whether the sidecar says the data center resumes this file (a later download
        may continue the part with `Range`)."""
        return self._recorded is not None and self._recorded[1] and self._recorded[0] is not None

    def let_go(self, *, keep: bool) -> None:
        """Close the part, then remove it and its sidecar unless `keep` and it still holds
        bytes to continue: not renamed into place meanwhile (a cancelled commit), not empty
        (a download stopped before its first batch reached the disk)."""
        self.handle.close()
        if not (keep and self._holds_bytes()):
            self.discard()

    def _holds_bytes(self) -> bool:
        try:
            st = os.lstat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._identity and st.st_size > 0

    def discard(self) -> None:
        """Remove the sidecar and the part (the handle must be closed first)."""
        for path in (self.sidecar, self.path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def open_part(dest: Path, of: PartOf, *, resume: bool, sliced: bool = False) -> PartFile:
    """Open and lock `dest`'s partial file; keep its bytes when the sidecar vouches for them.

    A part written in slices keeps all its written ranges when `sliced` (the caller fetches
    only the gaps); otherwise only its first contiguous range is kept, the rest cut off.

    Raises:
        DestinationLockedError: another download is writing `dest` right now.
        DestinationUnsafeError: something that is not this user's partial file sits at the
            part's name and cannot be removed.
    """
    path, sidecar = part_paths(dest)
    left_behind = os.path.lexists(path)  # by a download that may have died mid-write
    fd = _open_own(path)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DestinationLockedError(
                    f"another download is writing {str(dest)!r} (its partial file "
                    f"{path.name!r} is locked); wait for it, or download elsewhere"
                ) from None
        handle = os.fdopen(fd, "r+b")
    except BaseException:
        os.close(fd)
        raise
    opened = os.fstat(fd)
    part = PartFile(path, sidecar, handle, of, identity=(opened.st_dev, opened.st_ino))
    if left_behind:  # locked now: no live writer of this dest has a scratch file in flight
        _clear_scratch(sidecar)
    size = opened.st_size
    seen = _read_sidecar(sidecar) if resume and size else None
    done = _vouched(seen, of, size) if seen is not None else None
    if done and not sliced:  # a single stream continues the first contiguous bytes only
        held = prefix(done)
        done = [(0, held)] if held else None
        if held and held < size:
            handle.truncate(held)
    if done and seen is not None:
        part.held, part.total, part.done = prefix(done), seen["total"], done
        part.sliced = sliced and "done" in seen
        part.validators = Validators.from_record(seen)  # vouched: its types are checked
    elif size:  # bytes of something else (or unvouched): never appended to
        # Only when there are bytes to drop: on ext4 a truncate to zero (even of an empty
        # file) makes close() write the whole new file back first (auto_da_alloc), which
        # cost 0.58 s per GiB downloaded, in the commit.
        handle.truncate(0)
    return part


def _scratch_tag() -> str:
    return secrets.token_hex(4)


def _clear_scratch(sidecar: Path) -> None:
    """Remove the sidecar scratch files (`{sidecar}.{8 hex}.new`, this user's own) that a
    process killed between writing one and renaming it left beside the part. Only where a
    part was left: a fresh download does not list the directory."""
    # The names `_write_sidecar` gives its scratch files (`_scratch_tag`: 8 hex digits).
    name = re.compile(re.escape(sidecar.name) + r"\.[0-9a-f]{8}\.new")
    try:
        entries = [e for e in os.scandir(sidecar.parent) if name.fullmatch(e.name)]
    except OSError:
        return
    for entry in entries:
        with contextlib.suppress(OSError):
            if _own_file(entry.stat(follow_symlinks=False)):
                os.unlink(entry.path)


def _own_file(st: os.stat_result) -> bool:
    """Whether a file may be taken for a part or sidecar of this user's: a regular file
    (not a FIFO, a device, a directory), this user's, and no hard link to anything else."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink == 1


def _what(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"a file of another user (uid {st.st_uid})"
    return f"a file with {st.st_nlink} hard links"


def _open_own(path: Path) -> int:
    """Open `path` for reading and writing, as this user's own regular file (created, mode
    0600, when absent), never through a link: whatever else sits there is removed first, or
    refused."""
    for _ in range(3):  # another download of the same dest may create or remove it meanwhile
        try:
            st: os.stat_result | None = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and _own_file(st):
            try:
                fd = os.open(path, os.O_RDWR | _NOFOLLOW)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ELOOP):
                    raise
                continue  # removed or replaced since the check
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                return fd  # the very file checked
            os.close(fd)
            continue
        if st is not None:
            _remove_planted(path, st)
        try:
            # O_EXCL: a file this call creates is ours whatever its owner shows (on NFS with
            # root squashing, root's files belong to nobody).
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        except FileExistsError:
            continue
    raise DestinationUnsafeError(
        f"the partial file's name {str(path)!r} kept being taken by something else while the "
        "download opened it (someone else writes that directory); download elsewhere"
    )


def _remove_planted(path: Path, st: os.stat_result) -> None:
    # The name is sandboxkit's own: what sits there is no part a download of ours left (we
    # make neither links nor shared files), so it holds nothing to keep. Unlinking a link
    # removes the link only; its target is never opened.
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DestinationUnsafeError(
            f"the partial file's name {str(path)!r} is taken by {_what(st)}, which sandboxkit "
            f"will not write through and could not remove ({exc.strerror}); remove it, or "
            "download elsewhere"
        ) from None
    logger.warning(
        "sandboxkit: removed %s at %r, where a download's partial file goes (its target, if "
        "any, is untouched)",
        _what(st),
        str(path),
    )


def _read_sidecar(sidecar: Path) -> dict[str, Any] | None:
    """The sidecar's JSON object, or None for anything that is not one of ours: a link, a
    FIFO, another user's file, a huge file, JSON that is invalid or nested past the parser."""
    try:
        fd = os.open(sidecar, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:
        return None
    try:
        if not _own_file(os.fstat(fd)):
            return None
        raw = os.read(fd, _SIDECAR_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) > _SIDECAR_LIMIT:
        return None
    try:
        seen = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return seen if isinstance(seen, dict) else None


def _vouched(seen: dict[str, Any], of: PartOf, size: int) -> list[Span] | None:
    """The ranges of a part of `size` bytes that are bytes of the same file, per its sidecar
    (a prefix part: all of it; a sliced one: its `done`); None when none are."""
    total = seen.get("total")
    if not (
        seen.get("origin") == of.origin
        and seen.get("path") == of.path
        and seen.get("username") == of.username
        and seen.get("ranges") is True
        and type(total) is int
        and 0 < size <= total
    ):
        return None
    try:
        Validators.from_record(seen)  # what open_part hands on: of the types it writes
    except ValueError:
        return None
    if "done" not in seen:
        return [(0, size)]
    done = valid_done(seen["done"], total)
    if done is None or any(end > size for _, end in done):
        return None  # a range the file does not even hold: nothing there is vouched for
    return merge(done) or None


def clear_leftovers(dest: Path) -> None:
    """Remove a partial file and sidecar of a `dest` that is already complete (a process
    killed between its rename and its cleanup leaves the sidecar), unless a download is
    writing them right now."""
    path, sidecar = part_paths(dest)
    if not (path.exists() or sidecar.exists()):
        return
    try:
        part = open_part(dest, PartOf("", "", None), resume=False)
    except DestinationLockedError:
        return  # someone is writing it: theirs to finish or clean
    part.handle.close()
    part.discard()


@attrs.frozen
class PartialDownload:
    """A partial file beside a download's `dest` (`sandboxkit.find_partial`) and its `sidecar`:
    `held` is the bytes the sidecar vouches for, which the next download of the same remote
    file to the same `dest` continues from (0: it starts over); `total` the file's size as
    the sidecar recorded it (None without a valid sidecar)."""

    path: Path
    sidecar: Path
    held: int
    total: int | None


def find_partial(dest: str | os.PathLike[str]) -> PartialDownload | None:
    """The partial file a download to `dest` left, or None when there is none.

    Left by a download with `keep_partial=True` that failed or was cancelled, by one that
    failed for a reason a later try may not meet, by a process that died mid-download; one
    running now has one too. Only reads: nothing is locked, changed or removed.

    Raises:
        ValidationError: `dest` is not a str or os.PathLike path.
    """
    if not isinstance(dest, str | os.PathLike):
        raise ValidationError(f"dest={dest!r}: must be a str or os.PathLike path")
    path, sidecar = part_paths(Path(os.fspath(dest)))
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not _own_file(st):
        return None  # not a partial file of ours: a download removes it
    seen = _read_sidecar(sidecar) if st.st_size else None
    if seen is None:
        return PartialDownload(path, sidecar, 0, None)
    # Vouched as `open_part` vouches, for whatever download the sidecar names.
    done = _vouched(
        seen, PartOf(seen.get("origin", ""), seen.get("path", ""), seen.get("username")), st.st_size
    )
    held = sum(end - start for start, end in done or [])
    return PartialDownload(path, sidecar, held, seen["total"] if done else None)


def check_destination(dest: Any) -> Path:
    """`dest` as a Path whose parent directory exists and which is not itself a directory."""
    if not isinstance(dest, str | os.PathLike):
        raise ValidationError(f"dest={dest!r}: must be a str or os.PathLike path")
    path = Path(os.fspath(dest))
    if not path.name:
        raise ValidationError(f"dest={str(path)!r}: must name a file")
    if path.is_dir():
        raise ValidationError(f"dest={str(path)!r}: is a directory; pass a file path")
    if not path.parent.is_dir():
        raise ValidationError(f"dest={str(path)!r}: its directory does not exist")
    return path
