"""Bounded reads, the pure part (issue 31): what a page of a file asks for and what its
answers mean, the size cap of a whole read, and how a text page is cut and decoded (their arguments
are checked in `validation`). No I/O, no await.

A page is the bytes [offset, end) of a file (end None: to its end), read into memory by the
download loop (`download.fetch`) under `PageState`, the resume machine of a page:

- Every GET carries `Range: bytes={first byte not held}-{end - 1}`, the first one too (a data
  center without ranges just answers 200), and, once bytes are held, `If-Range` with their
  version's strong validator. After a content-coded answer GETs are whole: a coded answer's
  offsets are the coding's, so it is never resumed by Range.
- A 206 from the first byte not held continues the page; reading stops at `end`, so a 206
  read to its end leaves its connection at the end of an answer, to be reused.
- A 200 is the whole file: its bytes before the first one not held are skipped, and reading
  stops at `end` (its connection is then closed, the rest unread). A 200 whose
  `Content-Length` is at most `offset` is the answer at once: the offset is past the end.
- A 416 (`bytes */N`) says the first byte asked for is at or past the end of the file.
- An answer of another version than the bytes held (other validators, another size, a 200
  to an `If-Range`) replaces them, and a 206 that cannot be trusted starts the page over:
  held bytes are only in memory, handed to nobody yet, so a page is never a mix of two
  versions and never fails for a change it can recover from.
"""

from __future__ import annotations

import codecs

import attrs

from ..errors import FileTooLargeError
from . import operations as ops
from .resume import DONE, Action, Decision, ResponseInfo, ResumeState, unsatisfiable_size

__all__ = [
    "PageState",
    "check_counted",
    "decode_page",
    "stop_under_cap",
    "too_large",
]

# A page of these that starts inside a character skips its continuation bytes (the
# character belongs to the page before).
_UTF8 = frozenset({"utf-8", "utf-8-sig"})


def too_large(
    size: int | None, offset: int, limit: int, counted: int | None = None
) -> FileTooLargeError | None:
    """The error a read from `offset` with `max_size=limit` ends with, or None: more than
    `limit` bytes lie past `offset` in a file of the `size` an answer showed, or the bytes
    `counted` from `offset` (the size unknown) passed `limit`."""
    if size is not None and size - offset > limit:
        past = "" if offset == 0 else f" ({size - offset} from offset {offset})"
        return FileTooLargeError(
            f"{ops.FILES_DOWNLOAD}: the file is {size} bytes{past}, more than max_size={limit}",
            size=size,
            limit=limit,
            operation=ops.FILES_DOWNLOAD,
        )
    if counted is not None and counted > limit:
        return FileTooLargeError(
            f"{ops.FILES_DOWNLOAD}: more than max_size={limit} bytes from offset {offset} (the "
            "answer did not show the file's size; reading stopped there)",
            size=size,
            limit=limit,
            operation=ops.FILES_DOWNLOAD,
        )
    return None


def stop_under_cap(size: int | None, max_size: int) -> int | None:
    """Where a whole download under `max_size` stops reading an answer's body, told the
    `size` its head shows: nowhere within the cap (None); one byte past the cap when it shows
    none (that byte tells a file over it: `too_large` with the bytes counted). A download
    with no cap never asks: it runs no code of this module.

    Raises:
        FileTooLargeError: the size shown is over the cap: before the body, none of it read.
    """
    if error := too_large(size, 0, max_size):
        raise error
    return max_size + 1 if size is None else None


def check_counted(counted: int, max_size: int) -> None:
    """After a whole download under `max_size` whose answers showed no size (`stop_under_cap`
    stopped it one byte past the cap): FileTooLargeError if the bytes `counted` passed it."""
    if error := too_large(None, 0, max_size, counted):
        raise error


def decode_page(
    data: bytes, offset: int, codec: str, errors: str, eof: bool
) -> tuple[str, int, int]:
    """A text page of the bytes `data` read at `offset`: (text, its byte offset, next_offset).

    Bytes of a character the page's end cut are left for the next page (`next_offset`
    excludes them) unless the page reaches the end of the file (`eof`): then they are
    decoded with `errors` as the last bytes. A page that starts inside a UTF-8 character
    (a byte offset not from `next_offset`) begins at the next character: its text's offset
    says where (at most 3 bytes on).

    Raises:
        ValueError: with `errors="strict"`, bytes that are not text in `codec` (the message
            gives their offset in the file).
    """
    skip = 0
    if offset > 0 and codec in _UTF8:
        while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:  # continuation bytes
            skip += 1
    decoder = codecs.getincrementaldecoder(codec)(errors)
    try:
        text = decoder.decode(data[skip:] if skip else data, final=eof)
    except UnicodeDecodeError as exc:
        at = offset + skip + exc.start
        last = offset + skip + exc.end - 1
        raise ValueError(f"bytes {at}-{last} are not {codec}: {exc.reason}") from None
    pending = 0 if eof else len(decoder.getstate()[0])
    return text, offset + skip, offset + len(data) - pending


@attrs.define
class PageState(ResumeState):
    """Where one page read stands; see the module docstring.

    `position` and `high_water` are offsets in the file, as in `ResumeState`: the page holds
    the bytes [offset, high_water). Build one with `PageState.at`.

    Attributes:
        offset: the page's first byte.
        end: the byte after the page's last; None: the file's end.
        status: the latest answer's status (what a body that ends is judged by; for an
            error message).
    """

    offset: int = 0
    end: int | None = None
    status: int = 0
    _coded: bool = attrs.field(default=False, init=False)  # a coded answer came: whole GETs

    @classmethod
    def at(cls, offset: int, end: int | None) -> PageState:
        """The page [offset, end) of a file, none of it held."""
        return cls("file", position=offset, high_water=offset, offset=offset, end=end)

    @property
    def held(self) -> int:
        """How many of the page's bytes are held (the first ones of the sink's)."""
        return self.high_water - self.offset

    @property
    def eof(self) -> bool:
        """The bytes held reach the end of the file."""
        return self.done or (self.total is not None and self.high_water >= self.total)

    def range_start(self) -> int | None:
        return None if self._coded else self.high_water

    def range_end(self) -> int | None:
        return None if self._coded else self.end

    def begin_request(self) -> int | None:
        start = self.range_start()
        self.position = self.high_water  # the bytes before are held, or not wanted
        self.attempts += 1
        self.resumes += self.high_water > self.offset
        self._asked = start
        self._expected_end = None
        self._overflow = False
        return start

    def on_response(self, info: ResponseInfo) -> Decision:
        self.status = info.status
        if info.content_coding is not None and 200 <= info.status < 300:
            self._coded = True
        return super().on_response(info)

    def _on_whole(self, info: ResponseInfo) -> Decision:
        self.ranges_supported = (info.accept_ranges or "").strip().lower() == "bytes"
        seen, size, tag = info.validators(), info.content_length, self.if_range()
        changed = self.high_water > self.offset and (
            self._differs(seen)
            or (size is not None and self.total is not None and size != self.total)
            # A server that honours If-Range answers it with 200 when the file changed.
            or (tag is not None and (seen is None or seen.if_range() != tag))
        )
        truncate = self._stale or changed
        if truncate:
            self.high_water = self.offset
            self.validators = seen
        else:
            self.validators = self.validators or seen
        self._stale = False
        self.position, self.total, self._expected_end = 0, size, size
        if size is not None and size <= self.offset and not truncate:
            self.done = True  # the offset is at or past the end: nothing to read
            return DONE
        return Decision(Action.STREAM, truncate=truncate)

    def _on_unsatisfiable(self, info: ResponseInfo) -> Decision:
        size = unsatisfiable_size(info.content_range)
        size = self.total if size is None else size
        if size is not None and (
            size > self.position or (size < self.position and self.high_water > self.offset)
        ):
            return self._start_over(
                f"416 to a request for bytes {self.position}- of a file now {size} bytes long"
            )
        self.total = size
        self.done = True  # the page ends at the file's end: what is held, maybe nothing
        return DONE

    def skips_held(self) -> bool:
        """A page's sink is memory, which never takes back bytes: those held are skipped."""
        return True

    def on_body_end(self) -> Decision:
        if self.status != 206 or self._overflow or self.position != self._expected_end:
            # The download's rules: a body past its declared end starts over, one short of
            # it is resumed, and a whole answer that ended is the file's end.
            return super().on_body_end()
        # A 206 that ended where it said: the page goes on past it unless it reached the
        # file's end or its own (a 206 of unknown size is no end of the file).
        at_file_end = self.total is not None and self.position >= self.total
        if not at_file_end and (self.end is None or self.position < self.end):
            return Decision(Action.RETRY, reason=f"a partial answer ended at byte {self.position}")
        self.done = at_file_end  # `done` is the file's end (`eof`); the page's alone is not
        return DONE

    def _start_over(self, why: str) -> Decision:
        # Nothing held can be trusted to line up with what comes next: the page begins again,
        # and the next answer's version and size are the ones held.
        self.position = self.high_water = self.offset
        self.total = None
        self.validators = None
        self._stale = True
        return Decision(Action.RETRY, reason=f"{why}; starting the page over")
