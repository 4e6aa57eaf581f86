"""Where a model's paths may lead: under the sandbox root, inside the local workspace.

A sandbox path is resolved lexically (the sandbox's own links are the service's business):
relative to the root, `.` and `..` folded, and the result must be the root or below it. A
workspace path is relative to the workspace, and is resolved on this machine's disk: a link
that leads outside the workspace is refused, and a download never writes through a link.

Messages show the path as the model gave it (shortened) or relative to the workspace, never
where a link on this machine leads.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path
from typing import IO

from ..errors import ValidationError
from ._errors import ErrorCode, ToolError

__all__ = ["LocalSource", "check_root", "local_dest", "local_source", "sandbox_path"]

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
# A FIFO planted in the workspace would block an ordinary open forever.
_OPEN_FLAGS |= getattr(os, "O_NONBLOCK", 0)


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 80 else repr(value[:77]) + "..."


def _bad(value: str, rule: str) -> ToolError:
    return ToolError(ErrorCode.INVALID_PATH, f"Path {_shown(value)}: {rule}.")


def _check_text(value: str, max_length: int) -> None:
    """Refuse what no file name should hold, before anything is resolved."""
    if len(value) > max_length:
        raise ToolError(
            ErrorCode.INVALID_PATH,
            f"Path of {len(value)} characters: the limit is {max_length}.",
        )
    if not value.strip():
        raise _bad(value, "is empty")
    for char in value:
        # Cc: NUL and the other control characters; Cs: a lone surrogate, no valid text.
        if unicodedata.category(char) in ("Cc", "Cs"):
            raise _bad(value, f"holds the control character {char!r}; remove it")
    if value.endswith("/"):
        raise _bad(value, "ends with '/': name a file, not a directory")


def _fold(segments: list[str]) -> list[str] | None:
    """`.` and `..` folded away; None if a `..` climbs above the start."""
    out: list[str] = []
    for segment in segments:
        if segment in ("", "."):
            continue
        if segment == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(segment)
    return out


def check_root(root: object) -> str:
    """The sandbox root as an absolute, folded path.

    Raises:
        ValidationError: not an absolute path of plain text.
    """
    if not isinstance(root, str) or not root.startswith("/"):
        raise ValidationError(f"root={root!r}: must be an absolute path in the sandbox")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in root):
        raise ValidationError("root: must not hold control characters")
    folded = _fold(root.split("/"))
    if folded is None:
        raise ValidationError(f"root={root!r}: climbs above '/'")
    return "/" + "/".join(folded)


def sandbox_path(value: str, root: str, max_length: int) -> str:
    """The absolute sandbox path `value` names: relative ones under `root`, absolute ones
    as they are; after folding `.` and `..` it must be `root` or below it.

    Raises:
        ToolError: `invalid_path`, saying which rule the path breaks.
    """
    _check_text(value, max_length)
    joined = value if value.startswith("/") else f"{root}/{value}"
    folded = _fold(joined.split("/"))
    path = None if folded is None else "/" + "/".join(folded)
    if path is None or not (root == "/" or path == root or path.startswith(root + "/")):
        raise _bad(value, f"leads outside {root}, the only place these tools may use")
    return path


def _relative(value: str, max_length: int) -> list[str]:
    _check_text(value, max_length)
    if value.startswith("/") or value.startswith("~"):
        raise _bad(value, "must be relative to the workspace (no leading '/' or '~')")
    folded = _fold(value.split("/"))
    if not folded:
        raise _bad(value, "leads outside the workspace" if folded is None else "is empty")
    return folded


def _inside(real: str, workspace: Path) -> bool:
    return real == str(workspace) or real.startswith(str(workspace).rstrip("/") + "/")


class LocalSource:
    """A workspace file opened for reading (without following a last link), its size and
    the name shown to the model."""

    def __init__(self, handle: IO[bytes], size: int, shown: str) -> None:
        self.handle = handle
        self.size = size
        self.shown = shown


def local_source(value: str, workspace: Path, max_length: int) -> LocalSource:
    """Open the workspace file `value` names, for an upload.

    Raises:
        ToolError: `invalid_path` (outside the workspace, through a link, not a regular
            file), `not_found`.
    """
    shown = "/".join(_relative(value, max_length))
    real = os.path.realpath(workspace.joinpath(shown))
    if not _inside(real, workspace):
        raise _bad(value, "leads outside the workspace (through a symbolic link)")
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except FileNotFoundError:
        raise ToolError(
            ErrorCode.NOT_FOUND, f"Local file {_shown(shown)}: not in the workspace."
        ) from None
    except OSError as exc:
        raise _bad(value, f"cannot be opened ({os.strerror(exc.errno or 0)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _bad(value, "is not a regular file")
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return LocalSource(handle, info.st_size, shown)


def local_dest(value: str, workspace: Path, max_length: int) -> tuple[Path, str]:
    """Where a download of `value` lands: inside the workspace, its missing directories
    made, never through a link; and the name shown to the model.

    Raises:
        ToolError: `invalid_path` (outside the workspace, through a link, a directory).
    """
    parts = _relative(value, max_length)
    shown = "/".join(parts)
    # The deepest directory that exists decides where the rest goes: resolved, it must be
    # in the workspace; below it nothing exists yet, so no link can stand in the way.
    depth = len(parts) - 1
    while depth > 0 and not os.path.lexists(workspace.joinpath(*parts[:depth])):
        depth -= 1
    real_base = os.path.realpath(workspace.joinpath(*parts[:depth]))
    if not _inside(real_base, workspace):
        raise _bad(value, "leads outside the workspace (through a symbolic link)")
    if not os.path.isdir(real_base):
        raise _bad(value, f"{'/'.join(parts[:depth])!r} is not a directory")
    parent = Path(real_base).joinpath(*parts[depth:-1])
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _bad(value, f"its directory cannot be made ({os.strerror(exc.errno or 0)})") from None
    dest = parent / parts[-1]
    if os.path.islink(dest):
        raise _bad(value, "is a symbolic link; a download never writes through one")
    if os.path.isdir(dest):
        raise _bad(value, "is a directory; name a file")
    return dest, shown
