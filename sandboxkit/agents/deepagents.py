"""`SandboxBackend`: one sandbox's files as a deepagents `BackendProtocol` backend.

`pip install 'sandboxkit-sdk[deepagents]'`; this module is the only one that imports
`deepagents`, and only when it is imported itself (`import sandboxkit.agents` does not).

Async-native: `aread`, `awrite`, `aedit`, `aupload_files` and `adownload_files` are the
SDK's own coroutines, no thread in between; run the agent with `ainvoke`/`astream`. The
sync methods raise `NotImplementedError` saying so (a blocking call would need a loop of
its own per call). The data plane has no listing, so `ls`, `glob` and `grep` answer with an
error result that says they are not supported (the model reads it and goes on), and
`delete` is absent (deepagents then leaves its tool out).

Paths are the tool kit's: relative ones resolve under `root`, absolute ones must lie under
it (no `..` out, no control characters); a path that breaks a rule is an `invalid_path`
error the model reads. Every failure is a result, never an exception ending the run: its
text is `<code> (retryable: <true|false>): <message>`, with the tool kit's codes and
messages, which never hold a token.

`read(path, offset, limit)` moves only the bytes the window needs: pages of the file from
its start (64 KiB, doubling to 1 MiB), read with `files.read_range` and decoded as UTF-8 as
they come, stopping once the window's last line has ended: past it, `total_lines` is
unknown (None) and `next_offset` is the line after the window, as deepagents' sandbox
backend reports a large file. Lines before the window are counted, never kept. Lines are
split as deepagents' own backends split them (`\\n`, `\\r\\n`, `\\r`), the window comes back
raw with `\\n` line ends (deepagents' middleware adds the numbers), and its text is capped
as deepagents' sandbox backend caps it. `edit` is the tool kit's `edit_file` (one
implementation): exact text, unique unless `replace_all`, on a file of at most
`ToolLimits.max_write` bytes, but in the file's own line ends: `read` shows a CRLF file's
lines with LF, so the text a model copies from it is matched, and written, with CRLF there
(deepagents' sandbox backend's rule; `_edits.replaced_as_read`).
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import logging
import re
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from deepagents.backends.protocol import (
    FILE_NOT_FOUND,
    INVALID_PATH,
    PERMISSION_DENIED,
    BackendProtocol,
    EditResult,
    FileData,
    FileDownloadResponse,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.sandbox import MAX_BINARY_BYTES, MAX_OUTPUT_BYTES, TRUNCATION_MSG

# Private, but the one rule its middleware reads a file's kind by (since 0.7.1, the floor):
# a backend that judged otherwise would hand it text where it shows base64.
from deepagents.backends.utils import _get_backend_read_file_type

import sandboxkit

from ..errors import ValidationError
from . import _edits
from ._errors import ErrorCode, ToolError, about
from ._paths import check_root, sandbox_path
from ._tool import ToolLimits

__all__ = ["SandboxBackend"]

logger = logging.getLogger("sandboxkit.agents")

_T = TypeVar("_T")
_FIRST_PAGE = 64 << 10
_MAX_PAGE = 1 << 20
_BREAK = re.compile(r"\r\n|\r|\n")
_NO_LISTING = (
    "not supported: this backend is a sandbox's file transfer interface, which has no "
    "listing, glob or search. Read and write files by their paths."
)
# deepagents' per-file codes for the tool kit's.
_FILE_CODES = {
    ErrorCode.NOT_FOUND: FILE_NOT_FOUND,
    ErrorCode.PERMISSION_DENIED: PERMISSION_DENIED,
    ErrorCode.INVALID_PATH: INVALID_PATH,
}


def _said(error: ToolError) -> str:
    """A failure as the model reads it."""
    retryable = "true" if error.retryable else "false"
    return f"{error.code.value} (retryable: {retryable}): {error.message}"


def _sync_only(name: str) -> NoReturn:
    raise NotImplementedError(
        f"SandboxBackend.{name} is async-only: run the agent with ainvoke() or astream() "
        f"(deepagents then calls a{name})."
    )


class _Window:
    """The lines [offset, offset + limit) of a text fed in pieces, split as deepagents
    splits them (`\\n`, `\\r\\n`, `\\r`): the lines before and after are only counted, and
    the window's text is capped at deepagents' `MAX_OUTPUT_BYTES`."""

    def __init__(self, offset: int, limit: int) -> None:
        self.offset, self.limit = offset, limit
        self.count = 0  # lines ended so far
        self.lines: list[str] = []  # the window's whole lines
        self.cut: str | None = None  # what fits of the line the cap cut, if it cut one
        self._room = MAX_OUTPUT_BYTES - len(TRUNCATION_MSG.encode())
        self._size = 0  # UTF-8 bytes of the lines kept, joined by '\\n'
        self._line: list[str] = []  # the window's line being read
        self._line_size = 0
        self._begun = False  # the line being read has text
        self._cr = False  # the text so far ended with '\\r': a '\\n' next belongs to it

    @property
    def full(self) -> bool:
        """The window holds every line it may: no more need reading."""
        return self.cut is not None or len(self.lines) >= self.limit

    def feed(self, text: str) -> None:
        """Take the next piece of the text."""
        if self._cr and text.startswith("\n"):
            text = text[1:]
        self._cr = False
        start = 0
        for found in _BREAK.finditer(text):
            self._add(text[start : found.start()])
            self._end()
            start = found.end()
            self._cr = found.group() == "\r" and start == len(text)
        self._add(text[start:])

    def finish(self) -> None:
        """The text ended: a last line without a line end counts."""
        if self._begun:
            self._end()

    def _wanted(self) -> bool:
        return self.offset <= self.count and not self.full

    def _add(self, piece: str) -> None:
        if not piece:
            return
        self._begun = True
        if not self._wanted():
            return  # a line outside the window: only where it ends matters
        self._line.append(piece)
        self._line_size += len(piece.encode("utf-8", "surrogatepass"))
        if self._over(self._line_size):
            self._keep_cut()

    def _end(self) -> None:
        if self._wanted():
            line = "".join(self._line)
            size = self._line_size + (1 if self.lines else 0)
            if self._over(self._line_size):
                self._keep_cut()
            else:
                self.lines.append(line)
                self._size += size
        self._line, self._line_size, self._begun = [], 0, False
        self.count += 1

    def _over(self, line_size: int) -> bool:
        return self._size + (1 if self.lines else 0) + line_size > self._room

    def _keep_cut(self) -> None:
        room = self._room - self._size - (1 if self.lines else 0)
        encoded = "".join(self._line).encode("utf-8", "surrogatepass")
        self.cut = encoded[: max(room, 0)].decode("utf-8", "ignore")
        self._line, self._line_size = [], 0

    @property
    def shown(self) -> int:
        """Lines the window shows as read: a cut line only when it is the only one (so a
        next read moves on), else it is read again from its start."""
        return len(self.lines) or (1 if self.cut is not None else 0)

    def text(self) -> str:
        """The window's text: its lines joined by `\\n`, and the cut line with the note."""
        if self.cut is None:
            return "\n".join(self.lines)
        return "\n".join([*self.lines, self.cut]) + TRUNCATION_MSG


class SandboxBackend(BackendProtocol):
    """A deepagents backend over one sandbox's files (see the module docstring).

    Args:
        sandbox: the sandbox whose files the agent reads and writes.
        root: the sandbox directory paths resolve under, and may not leave.
        limits: the tool kit's bounds: `max_write` for `write` and `edit`, `max_copy` for
            each file of `upload_files` and `download_files`, `max_path_length`.

    Raises:
        ValidationError: a sandbox, root or limits that is not usable.

    Example::

        from deepagents import create_deep_agent
        from sandboxkit.agents.deepagents import SandboxBackend

        agent = create_deep_agent(model=model, backend=SandboxBackend(sandbox))
        await agent.ainvoke({"messages": [{"role": "user", "content": "..."}]})
    """

    def __init__(
        self,
        sandbox: sandboxkit.Sandbox,
        *,
        root: str = "/home/user",
        limits: ToolLimits | None = None,
    ) -> None:
        if not isinstance(sandbox, sandboxkit.Sandbox):
            raise ValidationError("sandbox must be a sandboxkit.Sandbox")
        if limits is not None and not isinstance(limits, ToolLimits):
            raise ValidationError("limits must be a sandboxkit.agents.ToolLimits")
        self._sandbox = sandbox
        self._root = check_root(root)
        self._limits = limits or ToolLimits()

    def __repr__(self) -> str:
        return f"SandboxBackend(root={self._root!r})"

    def _path(self, path: str) -> str:
        return sandbox_path(path, self._root, self._limits.max_path_length)

    async def _guarded(
        self, what: str, run: Callable[[], Awaitable[_T]], failed: Callable[[ToolError], _T]
    ) -> _T:
        """`run()`, its failures made `failed(error)`: a ToolError as it is, anything
        unexpected as `internal` (logged by type, never by its text)."""
        try:
            return await run()
        except ToolError as error:
            logger.debug("deepagents %s failed: %s", what, error.code.value)
            return failed(error)
        except Exception as exc:
            logger.error("deepagents %s: unexpected %s", what, type(exc).__qualname__)
            internal = ToolError(
                ErrorCode.INTERNAL,
                f"{what} failed on an internal error; it was logged for the application's "
                "developers. Retrying will not help.",
                retryable=False,
            )
            return failed(internal)

    # -- read ------------------------------------------------------------------------------

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """The lines [offset, offset + limit) of a text file, raw; a binary file (not
        UTF-8, or an image, audio, video or document by its extension) of at most
        500 KiB whole, as base64. Reads pages from the file's start up to the window's
        last line (see the module docstring)."""
        offset, limit = max(int(offset), 0), max(int(limit), 0)

        async def run() -> ReadResult:
            path = self._path(file_path)
            if limit == 0:
                return ReadResult(
                    file_data=FileData(content="", encoding="utf-8"), no_lines_requested=True
                )
            with about(f"File {path}"):
                return await self._read_window(path, offset, limit)

        return await self._guarded("read", run, lambda e: ReadResult(error=_said(e)))

    async def _read_window(self, path: str, offset: int, limit: int) -> ReadResult:
        files = self._sandbox.files
        if _binary_by_name(path):
            return await self._read_binary(path)
        window = _Window(offset, limit)
        # Binary as deepagents' sandbox backend judges it: the first 8 KiB is no UTF-8.
        # Past it a bad byte reads as U+FFFD.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        position, length, eof = 0, _FIRST_PAGE, False
        while not (eof or window.full):
            page = await files.read_range(path, position, length)
            eof = page.eof
            if position == 0:
                if eof and not page.data:
                    return ReadResult(file_data=FileData(content="", encoding="utf-8"))
                try:
                    codecs.getincrementaldecoder("utf-8")().decode(
                        page.data[:8192], final=eof and len(page.data) <= 8192
                    )
                except UnicodeDecodeError:
                    return await self._read_binary(path)
            window.feed(decoder.decode(page.data, final=eof))
            position, length = page.next_offset, min(length * 2, _MAX_PAGE)
        if eof:
            window.finish()
        if not window.shown:
            return ReadResult(
                error=f"Line offset {offset} exceeds file length ({window.count} lines)"
            )
        end_line = offset + window.shown
        total = window.count if eof else None
        return ReadResult(
            file_data=FileData(content=window.text(), encoding="utf-8"),
            total_lines=total,
            start_line=offset + 1,
            end_line=end_line,
            next_offset=end_line if total is None or end_line < total else None,
        )

    async def _read_binary(self, path: str) -> ReadResult:
        try:
            data = await self._sandbox.files.read_bytes(path, max_size=MAX_BINARY_BYTES)
        except sandboxkit.FileTooLargeError:
            return ReadResult(
                error=f"Binary file exceeds maximum preview size of {MAX_BINARY_BYTES} bytes"
            )
        encoded = base64.b64encode(data).decode("ascii")
        return ReadResult(file_data=FileData(content=encoded, encoding="base64"))

    # -- write and edit --------------------------------------------------------------------

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        """Write a whole text file (UTF-8, at most `max_write` bytes; its directory must
        exist: the interface makes none), replacing it if it exists."""

        async def run() -> WriteResult:
            path = self._path(file_path)
            data = content.encode("utf-8", "strict")
            cap = self._limits.max_write
            if len(data) > cap:
                raise ToolError(
                    ErrorCode.TOO_LARGE, f"content is {len(data)} bytes, over the limit of {cap}."
                )
            hints = {ErrorCode.NOT_FOUND: "Its directory must exist first."}
            with about(f"File {path}", hints):
                await self._sandbox.files.upload(path, data)
            return WriteResult(path=path)

        return await self._guarded("write", run, lambda e: WriteResult(error=_said(e)))

    async def aedit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        """Replace exact text (the tool kit's `edit_file`): `old_string` must occur once
        unless `replace_all`; a file of at most `max_write` bytes, UTF-8. Line ends are the
        file's: text copied from `read` (which shows them as LF) matches a CRLF file, and
        `new_string` is written there with CRLF."""

        async def run() -> EditResult:
            path = self._path(file_path)
            edited = await _edits.edit_file(
                self._sandbox,
                path,
                f"File {path}",
                old_string,
                new_string,
                replace_all=bool(replace_all),
                max_size=self._limits.max_write,
                read_as_lf=True,
            )
            return EditResult(path=path, occurrences=edited.replacements)

        return await self._guarded("edit", run, lambda e: EditResult(error=_said(e)))

    # -- batches ---------------------------------------------------------------------------

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Upload each `(path, bytes)` (at most `max_copy` bytes each), concurrently; one
        response per file, in order, with deepagents' per-file error codes where one fits
        (`invalid_path`, `permission_denied`, `file_not_found` for a missing directory),
        else `<code> (retryable: ...): <message>`."""

        async def one(path: str, data: bytes) -> FileUploadResponse:
            async def run() -> FileUploadResponse:
                where = self._path(path)
                if len(data) > self._limits.max_copy:
                    raise ToolError(
                        ErrorCode.TOO_LARGE, f"over the copy limit of {self._limits.max_copy}."
                    )
                with about(f"File {where}"):
                    await self._sandbox.files.upload(where, bytes(data))
                return FileUploadResponse(path=path)

            return await self._guarded(
                "upload", run, lambda e: FileUploadResponse(path=path, error=_file_error(e))
            )

        return list(await asyncio.gather(*(one(path, data) for path, data in files)))

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Read each file whole (at most `max_copy` bytes each), concurrently; one response
        per path, in order, with the per-file codes as `aupload_files`."""

        async def one(path: str) -> FileDownloadResponse:
            async def run() -> FileDownloadResponse:
                where = self._path(path)
                with about(f"File {where}"):
                    data = await self._sandbox.files.read_bytes(
                        where, max_size=self._limits.max_copy
                    )
                return FileDownloadResponse(path=path, content=data)

            return await self._guarded(
                "download", run, lambda e: FileDownloadResponse(path=path, error=_file_error(e))
            )

        return list(await asyncio.gather(*(one(path) for path in paths)))

    # -- what the interface has not --------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        """Not supported: the interface has no listing (an error result says so)."""
        return LsResult(error=_NO_LISTING)

    async def als(self, path: str) -> LsResult:
        """Not supported, as `ls`."""
        return self.ls(path)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Not supported: the interface has no listing (an error result says so)."""
        return GlobResult(error=_NO_LISTING)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Not supported, as `glob`."""
        return self.glob(pattern, path)

    def grep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        """Not supported: the interface has no listing or search (an error result says so)."""
        return GrepResult(error=_NO_LISTING)

    async def agrep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        """Not supported, as `grep`."""
        return self.grep(pattern, path, glob, max_count=max_count)

    # -- the blocking twins, which an async-native backend has not -------------------------

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """Raises NotImplementedError: use `aread` (run the agent with `ainvoke`)."""
        _sync_only("read")

    def write(self, file_path: str, content: str) -> WriteResult:
        """Raises NotImplementedError: use `awrite` (run the agent with `ainvoke`)."""
        _sync_only("write")

    def edit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        """Raises NotImplementedError: use `aedit` (run the agent with `ainvoke`)."""
        _sync_only("edit")

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Raises NotImplementedError: use `aupload_files`."""
        _sync_only("upload_files")

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Raises NotImplementedError: use `adownload_files`."""
        _sync_only("download_files")


def _file_error(error: ToolError) -> str:
    """deepagents' per-file code for `error` where one fits, else the failure as said."""
    return _FILE_CODES.get(error.code) or _said(error)


def _binary_by_name(path: str) -> bool:
    """Whether deepagents reads `path` as binary by its extension (images, audio, video,
    documents): its middleware shows such content as base64, whatever a backend says."""
    return _get_backend_read_file_type(path) != "text"
