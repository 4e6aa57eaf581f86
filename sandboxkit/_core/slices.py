"""Parallel ranged downloads, the pure part: which byte ranges to fetch, and what a slice's
answer means (docs/design.md section 6, item 9). No I/O, no await.

A download split into slices keeps one fact: the byte ranges of the file already written
(`done`, sorted and disjoint, half-open). What is missing is split into pieces in file
order, a few per connection, handed out as a work queue: the connections stay busy to the
end whatever their speeds, and the written prefix (which the sha256 follows) trails the
fastest connection by a few pieces only.

A slice asks for `Range: bytes=a-b` (with `If-Range` and the download's strong validator,
when it has one) and trusts only a 206 for exactly what it asked, of a file of the size and
version the download began with. A 200 of the same size and version is the whole file
again: something on the way (a proxy, a CDN) strips Range while the host shows
`Accept-Ranges: bytes`, so slicing is over and the file comes as one stream. Anything else
(a 200 of another size or version, or of none where If-Range named one; another total; a
416; a coded answer) means the file or the data center changed under the download: it
starts over, whole, from the first byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from .answers import parse_content_range
from .resume import DONE, Action, Decision, ResponseInfo, ResumeState, Validators

__all__ = [
    "RANGES_IGNORED",
    "RangesIgnored",
    "SliceState",
    "Span",
    "StartOver",
    "far_enough",
    "judge_slice",
    "merge",
    "missing",
    "prefix",
    "split",
    "valid_done",
]

# The verdict on a whole-file answer to a slice that shows the same size and version: the
# Range was stripped on the way; the download goes on as one stream (never "the file changed").
RANGES_IGNORED = "the host answered a Range with the whole file (Range stripped on the way)"

Span = tuple[int, int]  # [start, end): half-open byte range


def far_enough(
    min_latency: float, rtt: float | None, loopback: bool, head_seconds: float, proxied: bool
) -> bool:
    """Whether a download's link is long enough for slices to pay (`min_latency` seconds of
    round trip or more; 0 splits whatever the link).

    The kernel's smoothed RTT of the connection decides where there is one; a loopback peer
    never splits. Through a proxy the connection's socket reaches the proxy, not the host,
    so neither says anything of the host's link: there, and where the platform tells no
    RTT, the time the answer's head took decides (server time included, so it may split a
    slow nearby server: a fallback, not the rule).
    """
    if min_latency <= 0:
        return True
    if not proxied:
        if loopback:
            return False
        if rtt is not None:
            return rtt >= min_latency
    return head_seconds >= min_latency


def merge(spans: Iterable[Span]) -> list[Span]:
    """The spans sorted, touching and overlapping ones joined, empty ones dropped."""
    out: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def prefix(done: Sequence[Span]) -> int:
    """How many bytes from offset 0 are written without a gap (`done` merged)."""
    return done[0][1] if done and done[0][0] == 0 else 0


def missing(done: Sequence[Span], total: int) -> list[Span]:
    """The ranges of [0, total) not in `done` (merged)."""
    out: list[Span] = []
    at = 0
    for start, end in done:
        if start > at:
            out.append((at, min(start, total)))
        at = max(at, end)
    if at < total:
        out.append((at, total))
    return [s for s in out if s[1] > s[0]]


def split(gaps: Sequence[Span], parts: int, per_part: int, min_piece: int) -> list[Span]:
    """The gaps cut into pieces in file order: about `per_part` pieces per connection, none
    shorter than `min_piece` (unless its gap is), every byte in exactly one piece."""
    left = sum(end - start for start, end in gaps)
    if left == 0:
        return []
    size = max(min_piece, -(-left // (parts * per_part)))
    pieces: list[Span] = []
    for start, end in gaps:
        count = max(1, round((end - start) / size))
        for i in range(count):
            pieces.append(
                (start + (end - start) * i // count, start + (end - start) * (i + 1) // count)
            )
    return pieces


def valid_done(value: object, total: int) -> list[Span] | None:
    """A sidecar's `done` list as spans within [0, total), or None when it is not one."""
    if not isinstance(value, list):
        return None
    spans: list[Span] = []
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in item)
            or not 0 <= item[0] <= item[1] <= total
        ):
            return None
        spans.append((item[0], item[1]))
    return merge(spans)


def judge_slice(
    info: ResponseInfo, start: int, end: int, total: int, held: Validators | None = None
) -> tuple[Decision, int]:
    """The verdict on the answer to `Range: bytes={start}-{end - 1}` of a `total`-byte file
    whose version is `held` (None: unknown), and the offset its body ends at (STREAM only).

    RETRY here means: start the whole download over (the file or the data center changed).
    STREAM with `truncate` means: this answer is the whole file, of the size and version held,
    from byte 0 (its body ends at `total`): the Range was stripped on the way, stop slicing.
    """
    if info.status == 206:
        if info.content_coding is not None:
            return _over("a content-coded answer to a slice (its offsets are coded)"), 0
        seen = info.validators()
        if held is not None and seen is not None and held.differs(seen):
            # Bytes of another version (the server ignored If-Range, or was never asked).
            return _over(f"the file changed ({held.describe()}, then {seen.describe()})"), 0
        parsed = parse_content_range(info.content_range)
        if parsed is None:
            return _over(f"a slice answered with Content-Range {info.content_range!r}"), 0
        if parsed.total is not None and parsed.total != total:
            return _over(f"the file's size changed from {total} to {parsed.total} bytes"), 0
        if parsed.start != start or parsed.end >= end:
            return _over(
                f"a 206 answer for bytes {parsed.start}-{parsed.end} to a request for bytes "
                f"{start}-{end - 1}"
            ), 0
        length = parsed.end - parsed.start + 1
        if info.content_length is not None and info.content_length != length:
            return _over(
                f"Content-Length {info.content_length} disagrees with Content-Range "
                f"{info.content_range!r}"
            ), 0
        return Decision(Action.STREAM), parsed.end + 1
    if info.status == 200:
        return _whole(info, total, held)
    if info.status == 416:
        return _over(f"416 to a request for bytes {start}-{end - 1}: the file shrank"), 0
    if 200 <= info.status < 300:
        return Decision(Action.FAIL, reason=f"unexpected {info.status} answer to a slice"), 0
    return Decision(Action.ERROR), 0


def _whole(info: ResponseInfo, total: int, held: Validators | None) -> tuple[Decision, int]:
    """The verdict on a 200 to a slice: the whole file, again or of another version."""
    if info.content_coding is not None:
        return _over("a content-coded answer to a slice (its size is the coding's)"), 0
    if info.content_length is None:  # no telling whether it is the file held
        return _over("a slice was answered with a whole file of unknown size"), 0
    if info.content_length != total:
        return _over(f"the file's size changed from {total} to {info.content_length} bytes"), 0
    seen = info.validators()
    if held is not None and seen is not None and held.differs(seen):
        return _over(f"the file changed ({held.describe()}, then {seen.describe()})"), 0
    tag = None if held is None else held.if_range()
    if tag is not None and (seen is None or seen.if_range() != tag):
        # A server that honours If-Range answers 200 when the version changed; only an
        # answer naming the very version asked for shows the Range was dropped instead.
        return _over(f"the file changed (a whole answer to If-Range {tag})"), 0
    return Decision(Action.STREAM, truncate=True, reason=RANGES_IGNORED), total


def _over(why: str) -> Decision:
    return Decision(Action.RETRY, reason=f"{why}; starting over from the first byte")


class StartOver(Exception):
    """A split download begins again from an empty part: the file or the data center
    changed under it (the message says how)."""


class RangesIgnored(Exception):
    """A slice was answered with the whole file, unchanged: Range is stripped on the way, so
    the download goes on as one stream."""


@attrs.define
class SliceState(ResumeState):
    """Where one slice stands: the bytes [start, end) of a `total`-byte file of the version
    `validators` (None: unknown), held up to `position` (resumed from there after a cut).
    Build one with `SliceState.of`.

    The download loop drives it as it drives any `ResumeState`; each GET asks for
    `Range: bytes={position}-{end - 1}` with `If-Range`, and `judge_slice` judges the answer.
    What it finds of the download as a whole is raised, not returned, since no retry of this
    slice can answer it: `StartOver` (the file changed) and `RangesIgnored` (Range stripped).

    Attributes:
        start, end: the slice.
        continued: its first bytes continue a part an earlier download wrote (a resume).
    """

    start: int = 0
    end: int = 0
    continued: bool = False

    @classmethod
    def of(
        cls, start: int, end: int, total: int, held: Validators | None, continued: bool
    ) -> SliceState:
        """The slice [start, end) of a `total`-byte file of the version `held`."""
        return cls(
            "file",
            position=start,
            high_water=start,
            total=total,
            ranges_supported=True,
            validators=held,
            start=start,
            end=end,
            continued=continued,
        )

    @property
    def answer_end(self) -> int | None:
        """Where the latest answer's bytes end (its Content-Range's), once it is judged."""
        return self._expected_end

    def range_start(self) -> int | None:
        return self.position

    def range_end(self) -> int | None:
        return self.end

    def begin_request(self) -> int | None:
        self.attempts += 1
        self.resumes += self.position > self.start or self.continued
        self._asked = self.position
        self._expected_end = None
        self._overflow = False
        return self.position

    def on_response(self, info: ResponseInfo) -> Decision:
        """`judge_slice`'s verdict on this slice's answer.

        Raises:
            StartOver: the file or the data center changed.
            RangesIgnored: the answer is the whole file, unchanged.
        """
        assert self.total is not None  # `of` sets it
        decision, stop = judge_slice(info, self.position, self.end, self.total, self.validators)
        if decision.action is Action.RETRY:
            raise StartOver(decision.reason)
        if decision.truncate:
            raise RangesIgnored(decision.reason)
        self._expected_end = stop
        return decision

    def on_chunk(self, size: int) -> tuple[int, int]:
        """Account for `size` body bytes, all kept: the loop reads a slice's answer only up to
        its end (`answer_end`), and a slice skips nothing (its bytes go in place)."""
        self.position += size
        self.high_water = self.position  # a slice resumes where it got to: never behind
        return 0, size

    def on_stop(self) -> Decision:
        """Reading stopped at the answer's end (`answer_end`): the slice is done, or asks
        for its rest."""
        return self.on_body_end()

    def on_body_end(self) -> Decision:
        if self.position < self.end:
            return Decision(
                Action.RETRY,
                reason=f"the slice {self.start}-{self.end - 1} ended at byte {self.position}",
            )
        return DONE
