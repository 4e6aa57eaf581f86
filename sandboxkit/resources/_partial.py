"""A download's partial file: a deterministic name beside `dest`, a sidecar, and a lock.

`.{name}.part` holds the bytes so far and `.{name}.part.json` what they are a part of: the
sandbox host, remote path and username, the file's total size and whether the data center
showed range support. A download in parallel slices (`_ranged`) also records `done`: the
byte ranges written so far (only ranges whose bytes were written before the sidecar was),
so the part is no longer a prefix and its size says nothing. While a download writes the
part it holds an exclusive `flock` on it, so a second writer of the same `dest` (in this
process or another) fails at once with `DestinationLockedError`; the kernel drops the lock
of a process that dies. A later download of the same remote file to the same `dest` finds
the part, checks the sidecar, and continues from the part's size (or its gaps) with `Range`;
anything that does not match starts over from an empty part. Only the token is never
written: the sidecar names the host, not its credentials.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import IO, Any

import attrs

from .._slices import Span, merge, prefix, valid_done
from ..errors import DestinationLockedError

try:  # POSIX; elsewhere parts are used without a lock
    import fcntl
except ImportError:  # pragma: no cover - not on the machines this project runs on
    fcntl = None  # type: ignore[assignment]

__all__ = ["PartFile", "PartOf", "clear_leftovers", "open_part", "part_paths"]

_MAX_STEM = 200  # keeps `.{stem}.part.json` under NAME_MAX (255)


@attrs.frozen
class PartOf:
    """What a partial file is a part of."""

    origin: str
    path: str
    username: str | None


def part_paths(dest: Path) -> tuple[Path, Path]:
    """The partial file and its sidecar for `dest` (a long name is cut and hashed, so two
    long names never share a part)."""
    stem = dest.name
    if len(stem) > _MAX_STEM:
        stem = f"{stem[:180]}~{hashlib.sha256(stem.encode()).hexdigest()[:16]}"
    part = dest.with_name(f".{stem}.part")
    return part, part.with_name(part.name + ".json")


@attrs.define
class PartFile:
    """An open, locked partial file, and how many of its bytes a download may continue from.

    `held` bytes are resumable (0: start from scratch); `total` is the size the sidecar saw;
    `done` the byte ranges written (for a prefix part, `[(0, held)]`).
    """

    path: Path
    sidecar: Path
    handle: IO[bytes]
    of: PartOf
    held: int = 0
    total: int | None = None
    done: list[Span] = attrs.field(factory=list)
    sliced: bool = False  # its sidecar came from a download in slices
    _recorded: tuple[int | None, bool] | None = None

    def record(self, total: int | None, ranges: bool) -> None:
        """Write the sidecar for what the service has just shown (only when it changed)."""
        if self._recorded == (total, ranges):
            return
        self._recorded = (total, ranges)
        body = {**attrs.asdict(self.of), "total": total, "ranges": ranges}
        scratch = self.sidecar.with_name(self.sidecar.name + ".new")
        scratch.write_text(json.dumps(body))
        os.replace(scratch, self.sidecar)  # whole or not at all, even if the process dies

    def record_done(self, total: int, done: list[Span]) -> None:
        """Write the sidecar of a part written in slices: `done` are the ranges written
        (call it only after their bytes are written). Safe from any one thread at a time."""
        self._recorded = (total, True)
        body = {**attrs.asdict(self.of), "total": total, "ranges": True, "done": done}
        scratch = self.sidecar.with_name(self.sidecar.name + ".new")
        scratch.write_text(json.dumps(body))
        os.replace(scratch, self.sidecar)

    @property
    def resumable(self) -> bool:
        """Whether the sidecar says the data center resumes this file (a later download
        may continue the part with `Range`)."""
        return self._recorded is not None and self._recorded[1] and self._recorded[0] is not None

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
    """
    path, sidecar = part_paths(dest)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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
    part = PartFile(path, sidecar, handle, of)
    size = os.fstat(handle.fileno()).st_size
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
    elif size:  # bytes of something else (or unvouched): never appended to
        # Only when there are bytes to drop: on ext4 a truncate to zero (even of an empty
        # file) makes close() write the whole new file back first (auto_da_alloc), which
        # cost 0.58 s per GiB downloaded, in the commit.
        handle.truncate(0)
    return part


def _read_sidecar(sidecar: Path) -> dict[str, Any] | None:
    try:
        seen = json.loads(sidecar.read_text())
    except (OSError, ValueError):
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
        and isinstance(total, int)
        and 0 < size <= total
    ):
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
