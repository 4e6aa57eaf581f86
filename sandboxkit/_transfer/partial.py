"""A download's partial file: a deterministic name beside `dest`, a sidecar, and a lock.

`.{name}.part` holds the bytes so far and `.{name}.part.json` what they are a part of: the
sandbox host, remote path and username, the file's total size, whether the data center
showed range support, and the version's validators when the answers carried them (`etag`,
`last_modified`, `date`: a rerun's first Range asks with `If-Range`). A download in
parallel slices (`download`) also records `done`: the byte ranges written so far (only
ranges whose bytes were written before the sidecar was), so the part is no longer a prefix
and its size says nothing. While a download writes the
part it holds an exclusive `flock` on it, so a second writer of the same `dest` (in this
process or another) fails at once with `DestinationLockedError`; the kernel drops the lock
of a process that dies. A later download of the same remote file to the same `dest` finds
the part, checks the sidecar, and continues from the part's size (or its gaps) with `Range`;
anything that does not match starts over from an empty part. Only the token is never
written: the sidecar names the host, not its credentials.

The names are predictable, and the directory may be shared (a results folder, `/tmp`): what
sits there is distrusted. The part and the sidecar are opened with `O_NOFOLLOW`, and only a
regular file of this user with no other link (or one this call created) is ever opened for
writing or believed; a symlink, a FIFO or another user's file in their place is removed (a
link's target is untouched), or, where it cannot be, the download fails with
`DestinationUnsafeError` before any request.
The sidecar is replaced through a scratch file created with `O_EXCL` under a name of its own,
and read capped, its JSON distrusted whatever it holds.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import stat
from pathlib import Path
from typing import IO, Any

import attrs

from .._core.resume import Validators
from .._core.slices import Span, merge, prefix, valid_done
from ..errors import DestinationLockedError, DestinationUnsafeError, ValidationError

try:  # POSIX; elsewhere parts are used without a lock
    import fcntl
except ImportError:  # pragma: no cover - not on the machines this project runs on
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "PartFile",
    "PartOf",
    "PartialDownload",
    "clear_leftovers",
    "find_partial",
    "open_part",
    "part_paths",
]

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
