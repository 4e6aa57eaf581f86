"""The download resume state machine (docs/design.md section 6). Pure: no I/O, no await.

One `ResumeState` follows one logical download across its GET requests. The I/O layer asks it
what to send (`begin_request`), tells it what came back (`on_response`, `on_chunk`,
`on_body_end`) and does what the returned `Decision` says. The rules:

- Range only after range support was shown: a 200 with `Accept-Ranges: bytes`, or any 206.
- A 206 whose `Content-Range` starts at the bytes already held continues; a 200 starts over
  (a `"file"` sink truncates, a `"stream"` sink skips the bytes it already yielded).
- A 416 to our Range with the position equal to the known total is done.
- A size change between attempts starts over; a `Content-Range` that does not start where we
  are, or that disagrees with its own `Content-Length`, is distrusted: start over from zero.
- Done means the body ended cleanly and, where a size is known, position == total.
- Validators (RFC 9110 8.8): the ETag and Last-Modified of the first answer that carries
  them name the version whose bytes are held. Every ranged GET sends the strong one in
  `If-Range` (`Validators.if_range`), so a server whose file changed answers 200: start over.
  A 206 whose validators differ from those held (a server that ignores If-Range) starts over
  too. Without validators nothing tells a same-size replacement: the bytes are resumed blind.
- Every request asks for the identity coding. A content-coded answer anyway (a proxy that
  compresses) is decoded by the I/O layer: its Content-Length and any Content-Range count
  coded bytes, so a coded 200 has no known total and is never resumed by Range, a coded 206
  starts over, and a coding sandboxkit cannot decode fails.

A stream sink can never take back bytes it yielded, so where starting over would hand the
consumer bytes of a different file (the size changed, or the file shrank below what was
yielded, or the validators say it is another version), the decision is `FAIL`, never
silent corruption.
"""

from __future__ import annotations

import calendar
import enum
import re
from collections.abc import Mapping
from email.utils import parsedate_tz
from typing import Literal

import attrs

from .answers import DECODABLE_CODINGS, parse_content_range

__all__ = [
    "Action",
    "Decision",
    "Mode",
    "ResponseInfo",
    "ResumeState",
    "Validators",
    "unsatisfiable_size",
]

Mode = Literal["file", "stream"]

_UNSATISFIED_RANGE = re.compile(r"^\s*bytes\s+\*/(\d+)\s*$", re.IGNORECASE)
# RFC 9110 8.8.3: entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE. What goes back in If-Range is
# held to ASCII: a header value is never where a byte of a sidecar gets to add a line.
_ENTITY_TAG = re.compile(r'(W/)?"([\x21\x23-\x7e\x80-\xff]*)"')
_STRONG_TAG = re.compile(r'"[\x21\x23-\x7e]*"')
# RFC 9110 5.6.7: IMF-fixdate, the one date format a sender generates.
_IMF_FIXDATE = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"\d{4} \d\d:\d\d:\d\d GMT"
)
_RECORD_KEYS = ("etag", "last_modified", "date")


class Action(enum.Enum):
    """What the I/O layer does next."""

    STREAM = "stream"  # read the body, feeding each chunk to `on_chunk`
    DONE = "done"  # the transfer is complete; read nothing more
    RETRY = "retry"  # retryable: raise a connection-class error, the next GET continues
    FAIL = "fail"  # continuing could corrupt the output: raise, do not retry
    ERROR = "error"  # an error status: raise the APIError its status calls for


@attrs.frozen
class Decision:
    """The verdict on a response or a finished body.

    Attributes:
        action: what to do.
        truncate: (STREAM) the file sink must drop everything it holds before writing.
        reason: (RETRY, FAIL) a human explanation for the error message.
    """

    action: Action
    truncate: bool = False
    reason: str = ""


STREAM = Decision(Action.STREAM)
DONE = Decision(Action.DONE)
ERROR = Decision(Action.ERROR)


@attrs.frozen
class Validators:
    """What names one version of the remote file (RFC 9110 8.8), as an answer sent them: its
    ETag and Last-Modified, and the answer's Date (which tells whether that Last-Modified is
    strong). A sidecar stores them (`record`), so a rerun holds them too."""

    etag: str | None = None
    last_modified: str | None = None
    date: str | None = None

    def if_range(self) -> str | None:
        """What an `If-Range` may carry for this version (RFC 9110 13.1.5), or None: a strong
        ETag; only where there is no ETag at all, a Last-Modified that is strong (8.8.2.2: at
        least a second before the answer's Date, so no later write can share it). Never a
        weak ETag, nor a date beside one: equal weak tags do not promise equal bytes."""
        if self.etag is not None:
            tag = self.etag.strip()
            return tag if _STRONG_TAG.fullmatch(tag) else None
        if self.last_modified is None or self.date is None:
            return None
        modified = self.last_modified.strip()
        when, sent = _instant(modified), _instant(self.date)
        if not _IMF_FIXDATE.fullmatch(modified) or when is None or sent is None:
            return None
        return modified if sent - when >= 1 else None

    def differs(self, other: Validators) -> bool:
        """Whether `other` names another version than this. ETags decide when both sides have
        one, compared weakly (`W/` is no difference: a proxy may weaken a tag it passes on);
        else both Last-Modified. A validator only one side has tells nothing."""
        if self.etag is not None and other.etag is not None:
            return _opaque(self.etag) != _opaque(other.etag)
        if self.last_modified is not None and other.last_modified is not None:
            ours, theirs = _instant(self.last_modified), _instant(other.last_modified)
            if ours is None or theirs is None:
                return self.last_modified.strip() != other.last_modified.strip()
            return ours != theirs
        return False

    def describe(self) -> str:
        """The validators for an error message."""
        if self.etag is not None:
            return f"ETag {self.etag}"
        return f"Last-Modified {self.last_modified}"

    def record(self) -> dict[str, str]:
        """The validators known, as a sidecar stores them."""
        return {
            key: value
            for key, value in zip(_RECORD_KEYS, attrs.astuple(self), strict=True)
            if value
        }

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> Validators | None:
        """What `record` stored; None when it stored none.

        Raises:
            ValueError: a value is not a string: the record is not one of ours.
        """
        values: list[str | None] = []
        for key in _RECORD_KEYS:
            value = record.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"a recorded {key} that is not a string: {value!r}")
            values.append(value)
        etag, last_modified, date = values
        if etag is None and last_modified is None:
            return None
        return cls(etag, last_modified, date)


def unsatisfiable_size(content_range: str | None) -> int | None:
    """The file's size a 416 names (`Content-Range: bytes */N`); None where it names none."""
    match = _UNSATISFIED_RANGE.match(content_range or "")
    return int(match[1]) if match else None


def _opaque(tag: str) -> str:
    match = _ENTITY_TAG.fullmatch(tag.strip())
    return match[2] if match else tag.strip()  # not a tag by the grammar: compared whole


def _instant(date: str) -> int | None:
    """An HTTP date in seconds since the epoch; None when it is none. A date without a zone
    (asctime) is GMT, as HTTP dates are, never the local time."""
    parsed = parsedate_tz(date)
    if parsed is None:
        return None
    try:
        return calendar.timegm(parsed[:6]) - (parsed[9] or 0)
    except (ValueError, OverflowError):
        return None


@attrs.frozen
class ResponseInfo:
    """The parts of an answer's head the algorithm looks at."""

    status: int
    content_length: int | None = None
    content_range: str | None = None
    accept_ranges: str | None = None
    content_coding: str | None = None  # None: identity
    etag: str | None = None
    last_modified: str | None = None
    date: str | None = None

    def validators(self) -> Validators | None:
        """The version this answer names; None when it names none."""
        if self.etag is None and self.last_modified is None:
            return None
        return Validators(self.etag, self.last_modified, self.date)


@attrs.define
class ResumeState:
    """Where one download stands; see the module docstring for the rules.

    Attributes:
        mode: "file" (a sink that can truncate) or "stream" (a consumer that cannot un-see).
        position: bytes of the file, from offset 0, that the sink holds (or the stream passed).
        high_water: the most bytes ever held; a stream consumer has seen exactly these.
        total: the file's size when known.
        ranges_supported: the service showed range support for this file.
        validators: the version whose bytes are held (a stream: were yielded), if known.
        attempts: GET requests sent; resumes: how many of them were ranged.
        done: the transfer is complete.
    """

    mode: Mode
    position: int = 0
    high_water: int = 0
    total: int | None = None
    ranges_supported: bool = False
    attempts: int = 0
    resumes: int = 0
    done: bool = False
    validators: Validators | None = None
    _asked: int | None = attrs.field(default=None, init=False)
    _expected_end: int | None = attrs.field(default=None, init=False)
    _overflow: bool = attrs.field(default=False, init=False)
    # The sink may hold bytes the position no longer vouches for (after a start-over).
    _stale: bool = attrs.field(default=False, init=False)

    def range_start(self) -> int | None:
        """The `n` of the `Range: bytes=n-` the next GET should carry; None for a whole GET."""
        if self.ranges_supported and self.position > 0:
            return self.position
        return None

    def range_end(self) -> int | None:
        """The end (exclusive) of the bytes the next GET's Range asks for; None: the file's."""
        return None

    def begin_request(self) -> int | None:
        """Count one GET and return its range start (None: no Range header)."""
        start = self.range_start()
        self.attempts += 1
        if start is not None:
            self.resumes += 1
        self._asked = start
        self._expected_end = None
        self._overflow = False
        return start

    def if_range(self) -> str | None:
        """The `If-Range` of the GET `begin_request` counted, beside its Range: the strong
        validator of the version held; None without a Range or a strong validator."""
        if self._asked is None or self.validators is None:
            return None
        return self.validators.if_range()

    def on_response(self, info: ResponseInfo) -> Decision:
        """Judge an answer's status and headers before any of its body is read."""
        coding = info.content_coding
        if coding is not None and 200 <= info.status < 300:
            if coding not in DECODABLE_CODINGS:
                return Decision(
                    Action.FAIL,
                    reason=(
                        f"the answer is content-coded with {coding!r}, which sandboxkit does "
                        "not decode; something between here and the sandbox ignores "
                        "`Accept-Encoding: identity`"
                    ),
                )
            if info.status == 206:
                return self._start_over("a content-coded 206 answer (its offsets are coded)")
            # Sizes and offsets of a coded answer are not the file's: no total, no resume.
            info = attrs.evolve(info, content_length=None, accept_ranges=None)
        if info.status == 200:
            return self._on_whole(info)
        if info.status == 206:
            return self._on_partial(info)
        if info.status == 416 and self._asked is not None:
            return self._on_unsatisfiable(info)
        if 200 <= info.status < 300:
            return Decision(Action.FAIL, reason=f"unexpected {info.status} answer to a download")
        return ERROR

    def _on_whole(self, info: ResponseInfo) -> Decision:
        accept = (info.accept_ranges or "").strip().lower()
        self.ranges_supported = accept == "bytes"
        new_total = info.content_length
        seen = info.validators()
        if self.mode == "stream" and self.high_water > 0:
            if new_total is not None and self.total is not None and new_total != self.total:
                return self._changed(self.total, new_total)
            if new_total is not None and new_total < self.high_water:
                return self._changed(self.high_water, new_total)
            if self._differs(seen):
                return self._version_changed(seen)
            # The consumer saw bytes of the version held: it stays the one to compare with.
            self.validators = self.validators or seen
        else:
            self.validators = seen  # a whole answer: its version is the one held from now on
        truncate = self.mode == "file" and (self.position > 0 or self._stale)
        self._stale = False
        self.position = 0
        self.total = new_total
        self._expected_end = new_total
        return Decision(Action.STREAM, truncate=truncate)

    def _on_partial(self, info: ResponseInfo) -> Decision:
        self.ranges_supported = True
        seen = info.validators()
        if self._differs(seen):
            # Bytes of another version than those held (a server that ignored If-Range).
            if self.mode == "stream" and self.high_water > 0:
                return self._version_changed(seen)
            assert self.validators is not None and seen is not None  # _differs says so
            return self._start_over(
                f"the remote file changed ({self.validators.describe()}, then {seen.describe()})"
            )
        parsed = parse_content_range(info.content_range)
        if parsed is None:
            return self._start_over(
                f"a 206 answer with an unusable Content-Range {info.content_range!r}"
            )
        if parsed.start != self.position:
            return self._start_over(
                f"a 206 answer for bytes {parsed.start}- to a request for bytes {self.position}-"
            )
        if parsed.total is not None and self.total is not None and parsed.total != self.total:
            if self.mode == "stream" and self.high_water > 0:
                return self._changed(self.total, parsed.total)
            return self._start_over(
                f"the file's size changed from {self.total} to {parsed.total} bytes"
            )
        length = parsed.end - parsed.start + 1
        if info.content_length is not None and info.content_length != length:
            return self._start_over(
                f"Content-Length {info.content_length} disagrees with Content-Range "
                f"{info.content_range!r}"
            )
        if parsed.total is not None:
            self.total = parsed.total
        self._expected_end = parsed.end + 1
        self.validators = self.validators or seen
        truncate = self.mode == "file" and self._stale
        self._stale = False
        return Decision(Action.STREAM, truncate=truncate)

    def _on_unsatisfiable(self, info: ResponseInfo) -> Decision:
        size = unsatisfiable_size(info.content_range)
        size = self.total if size is None else size
        if size is not None and size == self.position:
            self.total = size
            self.done = True
            return DONE
        return self._start_over(
            f"416 to a request for bytes {self.position}- of a file now "
            f"{'of unknown size' if size is None else f'{size} bytes long'}"
        )

    def skips_held(self) -> bool:
        """Whether bytes held already are dropped when an answer carries them again (a
        stream's consumer saw them) rather than written again (a file rewrites them)."""
        return self.mode == "stream"

    def on_chunk(self, size: int) -> tuple[int, int]:
        """Account for `size` body bytes; returns `(skip, keep)`: pass on `chunk[skip:keep]`.

        `keep` stops at the end the answer declared (bytes past it are never written, and
        the body is then distrusted); `skip` covers bytes a stream consumer already saw.
        """
        keep = size
        if self._expected_end is not None and self.position + size > self._expected_end:
            keep = max(0, self._expected_end - self.position)
            self._overflow = True
        skip = 0
        if self.skips_held():
            skip = min(keep, max(0, self.high_water - self.position))
        self.position += keep
        self.high_water = max(self.high_water, self.position)
        return skip, keep

    def on_body_end(self) -> Decision:
        """Judge a body that ended without a transport error."""
        if self._overflow:
            return self._start_over("the answer carried more bytes than it declared")
        if self._expected_end is not None and self.position < self._expected_end:
            return Decision(
                Action.RETRY,
                reason=f"the body ended at byte {self.position} of {self._expected_end}",
            )
        if self.total is not None and self.position < self.total:
            # A 206 for less than we asked: ask again for the rest.
            return Decision(Action.RETRY, reason=f"a partial answer ended at byte {self.position}")
        if self.mode == "stream" and self.position < self.high_water:
            return self._changed(self.high_water, self.position)
        self.total = self.position
        self.done = True
        return DONE

    def on_stop(self) -> Decision:
        """Judge an answer whose reading stopped where its reader asked (`fetch`'s
        `on_stream`), short of its body's end: the bytes past it are not this reader's, so
        this answer is done with (the download itself is done only if `done` says so)."""
        return DONE

    def _start_over(self, why: str) -> Decision:
        # Nothing held can be trusted to line up with what comes next: begin at zero with a
        # whole GET. A file sink truncates on the next answer; a stream skips what it saw.
        self.position = 0
        self._stale = True
        if self.mode == "file":
            self.validators = None  # nothing held is kept: the next answer's version counts
        return Decision(Action.RETRY, reason=f"{why}; starting over from the first byte")

    def _differs(self, seen: Validators | None) -> bool:
        return self.validators is not None and seen is not None and self.validators.differs(seen)

    def _version_changed(self, seen: Validators | None) -> Decision:
        assert self.validators is not None and seen is not None
        return Decision(
            Action.FAIL,
            reason=(
                f"the remote file changed during the transfer ({self.validators.describe()}, "
                f"then {seen.describe()}); bytes already yielded cannot be taken back"
            ),
        )

    def _changed(self, before: int, after: int) -> Decision:
        return Decision(
            Action.FAIL,
            reason=(
                f"the remote file changed during the transfer ({before} bytes, then {after}); "
                "bytes already yielded cannot be taken back"
            ),
        )
