"""Records of file operations, public through `models` (kept apart only so that `models.py`
stays short enough to read in one sitting): what an upload did (`UploadResult`), and the
pages of bounded reads (`files.read_range`, `files.read_text`).

Offsets are byte offsets in the remote file. A reader pages by passing `next_offset` as the
next call's `offset` until `eof`: no byte is read twice and none is skipped, and a text page
never ends inside a character.
"""

from __future__ import annotations

import attrs

__all__ = ["FileRange", "TextPage", "UploadResult"]


@attrs.frozen(slots=False)
class UploadResult:
    """What `files.upload` wrote: the file the service reports (`path`, `name`, `type`, the
    fields of the `FileEntry` upload returned before), and how it went.

    Attributes:
        path: the file's path in the sandbox, as the service reports it.
        name: its base name.
        type: what the service calls it (`file`).
        size: the bytes sent (the body of the POST that succeeded).
        attempts: the POSTs sent, the one that succeeded included: a retry sends the whole
            file again (an upload never resumes).
        elapsed: seconds, from the call to the service's answer.
    """

    path: str
    name: str
    type: str
    size: int
    attempts: int
    elapsed: float = attrs.field(repr=lambda seconds: f"{seconds:.3f}")  # shown rounded


@attrs.frozen
class FileRange:
    """Part of a remote file: `data` starts at byte `offset`.

    Attributes:
        data: the bytes read; shorter than asked only at the end of the file (empty when
            `offset` is at or past it).
        offset: the byte offset of `data[0]` in the file, as asked.
        size: the file's size in bytes where an answer showed it (a 206's `Content-Range`
            total, a 416's `bytes */N`, a 200's `Content-Length`), else None.
        eof: `data` reaches the end of the file.
    """

    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")
    offset: int
    size: int | None
    eof: bool

    @property
    def next_offset(self) -> int:
        """Where the next range starts: `offset + len(data)`."""
        return self.offset + len(self.data)


@attrs.frozen
class TextPage:
    """Whole characters of a remote file, decoded.

    Attributes:
        text: the characters of the page.
        offset: the byte offset where `text` starts (past the asked offset when that fell
            inside a UTF-8 character: see `files.read_text`).
        next_offset: the byte offset just past the last whole character in `text`: where
            the next page starts (the bytes of a character the page's end cut are its).
        size: the file's size in bytes where an answer showed it, else None.
        eof: `next_offset` is the end of the file.
    """

    text: str
    offset: int
    next_offset: int
    size: int | None
    eof: bool
