"""The pure part of parallel downloads: the plan of pieces, the ranges written, and what a
slice's answer means. Table-driven, no event loop."""

from __future__ import annotations

import itertools

import pytest

from sandboxkit._core.resume import Action, ResponseInfo, Validators
from sandboxkit._core.slices import (
    RANGES_IGNORED,
    RangesIgnored,
    SliceState,
    StartOver,
    far_enough,
    judge_slice,
    merge,
    missing,
    prefix,
    split,
    valid_done,
)


@pytest.mark.parametrize("total", [1, 2, 1023, 1024, 1025, 4096 * 16 - 1, 4096 * 16, 10**9 + 7])
@pytest.mark.parametrize("parts", [1, 2, 4, 8])
def test_split_covers_every_byte_once_in_file_order(total: int, parts: int) -> None:
    pieces = split([(0, total)], parts, 4, 4096)
    assert pieces[0][0] == 0 and pieces[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    assert all(end > start for start, end in pieces)
    assert len(pieces) <= max(1, parts * 4)
    if total >= 2 * 4096:
        assert min(end - start for start, end in pieces) >= 4096 // 2


def test_split_of_gaps_keeps_them_apart() -> None:
    pieces = split([(10, 20), (30, 1000)], 2, 2, 1)
    assert all(not (start < 20 < end) and not (start < 30 < end) for start, end in pieces)
    assert sum(end - start for start, end in pieces) == 980
    assert split([], 4, 4, 1) == []


def test_merge_missing_prefix() -> None:
    done = merge([(5, 10), (0, 5), (20, 30), (25, 26), (40, 40)])
    assert done == [(0, 10), (20, 30)]
    assert prefix(done) == 10 and prefix([(1, 5)]) == 0 and prefix([]) == 0
    assert missing(done, 35) == [(10, 20), (30, 35)]
    assert missing([], 7) == [(0, 7)] and missing([(0, 7)], 7) == []


@pytest.mark.parametrize(
    "value",
    [None, "x", [[0]], [[0, 1, 2]], [[-1, 3]], [[5, 3]], [[0, 101]], [[0, True]], [["0", 1]]],
)
def test_valid_done_refuses_what_is_not_ranges_of_the_file(value: object) -> None:
    assert valid_done(value, 100) is None


def test_valid_done_merges() -> None:
    assert valid_done([[50, 60], [0, 10], [10, 20]], 100) == [(0, 20), (50, 60)]


def info(status: int, content_range: str | None = None, **rest: object) -> ResponseInfo:
    return ResponseInfo(status, content_range=content_range, **rest)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("answer", "action", "stop"),
    [
        (info(206, "bytes 100-199/1000", content_length=100), Action.STREAM, 200),
        (info(206, "bytes 100-149/1000"), Action.STREAM, 150),  # less than asked: fine
        (info(206, "bytes 100-199/*"), Action.STREAM, 200),
        (info(206, "bytes 100-199/1001"), Action.RETRY, 0),  # the size changed
        (info(206, "bytes 101-199/1000"), Action.RETRY, 0),  # not where we asked
        (info(206, "bytes 100-299/1000"), Action.RETRY, 0),  # past the slice
        (info(206, "bytes 100-199/1000", content_length=99), Action.RETRY, 0),
        (info(206, "nonsense"), Action.RETRY, 0),
        (info(206, "bytes 100-199/1000", content_coding="gzip"), Action.RETRY, 0),
        (info(200, content_length=1001), Action.RETRY, 0),  # the whole file, another size
        (info(200), Action.RETRY, 0),  # a whole file of unknown size: maybe another
        (info(200, content_length=1000, content_coding="gzip"), Action.RETRY, 0),
        (info(416, "bytes */50"), Action.RETRY, 0),
        (info(204), Action.FAIL, 0),
        (info(429), Action.ERROR, 0),
        (info(503), Action.ERROR, 0),
        (info(404), Action.ERROR, 0),
    ],
)
def test_judge_slice(answer: ResponseInfo, action: Action, stop: int) -> None:
    decision, end = judge_slice(answer, 100, 200, 1000)
    assert decision.action is action, decision.reason
    assert end == stop
    if action is Action.RETRY:
        assert "starting over" in decision.reason


V1 = Validators('"v1"')
MODIFIED = "Mon, 01 Jan 2024 00:00:00 GMT"


@pytest.mark.parametrize(
    ("held", "answer"),
    [
        (None, info(200, content_length=1000)),
        (None, info(200, content_length=1000, etag='"v1"')),
        (Validators('W/"v1"'), info(200, content_length=1000, etag='W/"v1"')),  # no If-Range
        (V1, info(200, content_length=1000, etag='"v1"')),  # If-Range honoured would be a 206
        (
            Validators(None, MODIFIED, "Tue, 02 Jan 2024 00:00:00 GMT"),
            info(
                200,
                content_length=1000,
                last_modified=MODIFIED,
                date="Wed, 03 Jan 2024 00:00:00 GMT",
            ),
        ),
    ],
)
def test_a_whole_answer_of_the_same_size_and_version_ends_slicing(
    held: Validators | None, answer: ResponseInfo
) -> None:
    """A 200 to a slice with the size and version held is the file again, its Range
    stripped on the way: stream it whole from byte 0 (never "the file changed")."""
    decision, end = judge_slice(answer, 100, 200, 1000, held)
    assert (decision.action, decision.truncate, end) == (Action.STREAM, True, 1000)
    assert decision.reason == RANGES_IGNORED and "changed" not in decision.reason


@pytest.mark.parametrize(
    ("held", "answer", "action"),
    [
        (V1, info(206, "bytes 100-199/1000", etag='"v1"'), Action.STREAM),
        (V1, info(206, "bytes 100-199/1000", etag='W/"v1"'), Action.STREAM),  # weakened
        (V1, info(206, "bytes 100-199/1000", etag='"v2"'), Action.RETRY),  # another version
        (V1, info(206, "bytes 100-199/1000"), Action.STREAM),  # no validator: no news
        (None, info(206, "bytes 100-199/1000", etag='"v2"'), Action.STREAM),  # none held
        (
            Validators(None, "Mon, 01 Jan 2024 00:00:00 GMT"),
            info(206, "bytes 100-199/1000", last_modified="Tue, 02 Jan 2024 00:00:00 GMT"),
            Action.RETRY,
        ),
        (V1, info(200, content_length=1000, etag='"v2"'), Action.RETRY),  # If-Range said no
        (V1, info(200, content_length=1000), Action.RETRY),  # If-Range sent, no version shown
        (V1, info(200, content_length=1000, etag='W/"v1"'), Action.RETRY),  # not the strong tag
        (
            Validators(None, "Mon, 01 Jan 2024 00:00:00 GMT"),
            info(200, content_length=1000, last_modified="Tue, 02 Jan 2024 00:00:00 GMT"),
            Action.RETRY,
        ),
    ],
)
def test_judge_slice_compares_the_version(
    held: Validators | None, answer: ResponseInfo, action: Action
) -> None:
    """A slice of another version than the download's starts the download over."""
    decision, _ = judge_slice(answer, 100, 200, 1000, held)
    assert decision.action is action, decision.reason
    if action is Action.RETRY:
        assert "changed" in decision.reason


@pytest.mark.parametrize(
    ("min_latency", "rtt", "loopback", "head_seconds", "proxied", "split"),
    [
        (0.0, None, True, 0.0, False, True),  # 0: split whatever the link
        (0.01, 0.00003, True, 0.5, False, False),  # loopback, a slow server: one stream
        (0.01, None, True, 0.5, False, False),  # loopback without TCP_INFO: one stream
        (0.01, 0.002, False, 0.5, False, False),  # a short link, a slow server: one stream
        (0.01, 0.04, False, 0.041, False, True),  # a long link
        (0.01, 0.04, False, 0.0, False, True),  # the RTT decides, not the head's time
        (0.01, 0.0099, False, 1.0, False, False),  # just under the threshold
        (0.01, 0.01, False, 0.0, False, True),  # at it
        (0.01, None, False, 0.02, False, True),  # no RTT known: the head's time
        (0.01, None, False, 0.005, False, False),
        (0.01, 0.0001, True, 0.05, True, True),  # a proxy here: its socket says nothing
        (0.01, 0.0001, True, 0.001, True, False),
    ],
)
def test_far_enough_trusts_the_kernels_rtt_over_the_heads_time(
    min_latency: float,
    rtt: float | None,
    loopback: bool,
    head_seconds: float,
    proxied: bool,
    split: bool,
) -> None:
    """The link's own round trip decides whether slices pay; a loopback peer never splits;
    the head's time (server time included) decides only through a proxy or with no RTT."""
    assert far_enough(min_latency, rtt, loopback, head_seconds, proxied) is split


def test_a_slice_state_asks_for_its_range_and_resumes_after_a_cut() -> None:
    """A slice's GETs ask from the first byte not held to its end, with If-Range; a cut
    resumes there (counted as a resume), and a 206 that ends short asks for the rest."""
    state = SliceState.of(100, 200, 1000, V1, continued=False)
    assert (state.begin_request(), state.range_end(), state.if_range()) == (100, 200, '"v1"')
    assert (state.attempts, state.resumes) == (1, 0)
    decision = state.on_response(info(206, "bytes 100-149/1000", content_length=50))
    assert (decision.action, state.answer_end) == (Action.STREAM, 150)
    assert state.on_chunk(50) == (0, 50)
    retry = state.on_stop()  # read to the answer's end, short of the slice's
    assert retry.action is Action.RETRY and "ended at byte 150" in retry.reason
    assert state.begin_request() == 150 and (state.attempts, state.resumes) == (2, 1)
    state.on_response(info(206, "bytes 150-199/1000", content_length=50))
    state.on_chunk(50)
    assert state.on_stop().action is Action.DONE and state.high_water == 200


def test_a_slice_continuing_an_earlier_part_counts_its_first_get_as_a_resume() -> None:
    state = SliceState.of(100, 200, 1000, None, continued=True)
    assert (state.begin_request(), state.if_range()) == (100, None)
    assert state.resumes == 1


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        (info(206, "bytes 100-199/1001"), StartOver),  # the size changed
        (info(416, "bytes */50"), StartOver),
        (info(200, content_length=1000, etag='"v1"'), RangesIgnored),  # Range stripped
    ],
)
def test_a_slice_state_raises_what_ends_the_split(
    answer: ResponseInfo, raised: type[Exception]
) -> None:
    """What a slice's answer says of the whole download is raised: no retry of this slice
    can answer it."""
    state = SliceState.of(100, 200, 1000, V1, continued=False)
    state.begin_request()
    with pytest.raises(raised):
        state.on_response(answer)
