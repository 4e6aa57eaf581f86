"""Table-driven tests of the download resume state machine (no event loop, no I/O)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from sandboxkit._core.resume import Action, Mode, ResponseInfo, ResumeState, Validators

# A scenario is a list of steps:
#   ("get", expected_range_start) or ("get", expected_range_start, expected_if_range)
#   ("answer", ResponseInfo, expected_action, expected_truncate)
#   ("chunk", size, (expected_skip, expected_keep))
#   ("end", expected_action)
Step = tuple[Any, ...]


def ok(length: int | None, ranges: str | None = "bytes") -> ResponseInfo:
    return ResponseInfo(200, content_length=length, accept_ranges=ranges)


def partial(start: int, end: int, total: int | str, length: int | None = None) -> ResponseInfo:
    size = end - start + 1 if length is None else length
    return ResponseInfo(206, content_length=size, content_range=f"bytes {start}-{end}/{total}")


def tagged(info: ResponseInfo, etag: str | None = None, **more: str) -> ResponseInfo:
    """The same answer carrying validators (an ETag, a Last-Modified, a Date)."""
    return attrs.evolve(info, etag=etag, **more)


# A Last-Modified and two answer Dates: the same second (weak, RFC 9110 8.8.2.2), a second on.
LM = "Mon, 01 Jan 2024 00:00:00 GMT"
SAME_SECOND = LM
LATER = "Mon, 01 Jan 2024 00:00:01 GMT"
OTHER_LM = "Tue, 02 Jan 2024 00:00:00 GMT"


def gzipped(info: ResponseInfo) -> ResponseInfo:
    """The same answer, gzip-coded by a proxy on the way."""
    return attrs.evolve(info, content_coding="gzip")


S, D, R, F, E = Action.STREAM, Action.DONE, Action.RETRY, Action.FAIL, Action.ERROR

SCENARIOS: list[tuple[str, Mode, list[Step], dict[str, Any]]] = [
    (
        "whole file in one answer",
        "file",
        [("get", None), ("answer", ok(100), S, False), ("chunk", 100, (0, 100)), ("end", D)],
        {"attempts": 1, "resumes": 0, "total": 100, "done": True},
    ),
    (
        "empty file",
        "file",
        [("get", None), ("answer", ok(0), S, False), ("end", D)],
        {"total": 0, "done": True},
    ),
    (
        "cut after a 200 with Accept-Ranges: bytes resumes with a Range and a 206",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", partial(40, 99, 100), S, False),
            ("chunk", 60, (0, 60)),
            ("end", D),
        ],
        {"attempts": 2, "resumes": 1, "position": 100, "done": True},
    ),
    (
        "no Range before range support is shown (Accept-Ranges: none); the 200 truncates",
        "file",
        [
            ("get", None),
            ("answer", ok(100, "none"), S, False),
            ("chunk", 40, (0, 40)),
            ("get", None),
            ("answer", ok(100, "none"), S, True),
            ("chunk", 100, (0, 100)),
            ("end", D),
        ],
        {"attempts": 2, "resumes": 0, "done": True},
    ),
    (
        "a missing Accept-Ranges header is not range support",
        "file",
        [("get", None), ("answer", ok(100, None), S, False), ("chunk", 1, (0, 1)), ("get", None)],
        {"ranges_supported": False},
    ),
    (
        "a stream skips what it already yielded after a 200 restart",
        "stream",
        [
            ("get", None),
            ("answer", ok(100, "none"), S, False),
            ("chunk", 40, (0, 40)),
            ("get", None),
            ("answer", ok(100, "none"), S, False),
            ("chunk", 30, (30, 30)),
            ("chunk", 30, (10, 30)),
            ("chunk", 40, (0, 40)),
            ("end", D),
        ],
        {"high_water": 100, "position": 100, "done": True},
    ),
    (
        "a 200 to a Range request starts over and forgets range support",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", ok(100, "none"), S, True),
            ("chunk", 10, (0, 10)),
            ("get", None),
        ],
        {"ranges_supported": False, "attempts": 3, "resumes": 1},
    ),
    (
        "a 206 without Accept-Ranges keeps range support",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", partial(40, 99, 100), S, False),
            ("chunk", 20, (0, 20)),
            ("get", 60),
        ],
        {"ranges_supported": True, "resumes": 2},
    ),
    (
        "a 206 that does not start at n starts over from byte zero",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", partial(30, 99, 100), R, False),
            ("get", None),
            ("answer", ok(100), S, True),
            ("chunk", 100, (0, 100)),
            ("end", D),
        ],
        {"position": 100, "done": True},
    ),
    (
        "a 206 with an unusable Content-Range starts over",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", ResponseInfo(206, 60, "bytes 40-99/x"), R, False),
            ("get", None),
        ],
        {"position": 0},
    ),
    (
        "a 206 whose Content-Length disagrees with its Content-Range starts over",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", partial(40, 99, 100, length=61), R, False),
        ],
        {"position": 0},
    ),
    (
        "a size change seen on a 206 starts a file over",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", partial(40, 119, 120), R, False),
            ("get", None),
            ("answer", ok(120), S, True),
            ("chunk", 120, (0, 120)),
            ("end", D),
        ],
        {"total": 120, "done": True},
    ),
    (
        "a size change seen on a 206 fails a stream that yielded bytes",
        "stream",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", partial(40, 119, 120), F, False),
        ],
        {"done": False},
    ),
    (
        "a size change seen on a 200 truncates a file",
        "file",
        [
            ("get", None),
            ("answer", ok(100, "none"), S, False),
            ("chunk", 40, (0, 40)),
            ("get", None),
            ("answer", ok(80, "none"), S, True),
            ("chunk", 80, (0, 80)),
            ("end", D),
        ],
        {"total": 80, "done": True},
    ),
    (
        "a size change seen on a 200 fails a stream that yielded bytes",
        "stream",
        [
            ("get", None),
            ("answer", ok(100, "none"), S, False),
            ("chunk", 40, (0, 40)),
            ("get", None),
            ("answer", ok(120, "none"), F, False),
        ],
        {},
    ),
    (
        "a chunked file that shrank below what a stream yielded fails",
        "stream",
        [
            ("get", None),
            ("answer", ok(None, "none"), S, False),
            ("chunk", 50, (0, 50)),
            ("get", None),
            ("answer", ok(None, "none"), S, False),
            ("chunk", 30, (30, 30)),
            ("end", F),
        ],
        {"done": False},
    ),
    (
        "a stream with nothing yielded may restart on a new size",
        "stream",
        [
            ("get", None),
            ("answer", ok(100, "none"), S, False),
            ("get", None),
            ("answer", ok(120, "none"), S, False),
            ("chunk", 120, (0, 120)),
            ("end", D),
        ],
        {"total": 120},
    ),
    (
        "416 with n == total is done",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 100, (0, 100)),
            ("get", 100),
            ("answer", ResponseInfo(416, content_range="bytes */100"), D, False),
        ],
        {"done": True, "attempts": 2, "resumes": 1},
    ),
    (
        "416 naming the held size is done for a chunked file of unknown size",
        "file",
        [
            ("get", None),
            ("answer", ok(None), S, False),
            ("chunk", 70, (0, 70)),
            ("get", 70),
            ("answer", ResponseInfo(416, content_range="bytes */70"), D, False),
        ],
        {"done": True, "total": 70},
    ),
    (
        "416 for a file now smaller starts over",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 60, (0, 60)),
            ("get", 60),
            ("answer", ResponseInfo(416, content_range="bytes */50"), R, False),
            ("get", None),
            ("answer", ok(50), S, True),
        ],
        {"total": 50},
    ),
    (
        "416 of unknown size for a chunked file starts over",
        "file",
        [
            ("get", None),
            ("answer", ok(None), S, False),
            ("chunk", 70, (0, 70)),
            ("get", 70),
            ("answer", ResponseInfo(416), R, False),
        ],
        {"position": 0},
    ),
    (
        "416 to a request without Range is an error status",
        "file",
        [("get", None), ("answer", ResponseInfo(416), E, False)],
        {},
    ),
    (
        "chunked bodies are done when they end cleanly",
        "file",
        [
            ("get", None),
            ("answer", ok(None), S, False),
            ("chunk", 10, (0, 10)),
            ("chunk", 20, (0, 20)),
            ("end", D),
        ],
        {"total": 30, "done": True},
    ),
    (
        "a body that ends short of its Content-Length is retried from where it stopped",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 70, (0, 70)),
            ("end", R),
            ("get", 70),
        ],
        {"done": False, "position": 70},
    ),
    (
        "a 206 for less than asked is followed by another Range for the rest",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", partial(40, 59, 100), S, False),
            ("chunk", 20, (0, 20)),
            ("end", R),
            ("get", 60),
        ],
        {"position": 60, "resumes": 2},
    ),
    (
        "bytes past the declared length are never passed on, and the body is distrusted",
        "file",
        [
            ("get", None),
            ("answer", ok(10), S, False),
            ("chunk", 15, (0, 10)),
            ("end", R),
            ("get", None),
            ("answer", ok(10), S, True),
        ],
        {"position": 0},
    ),
    (
        "a gzip-coded 200 has no known total and is never resumed by Range",
        "file",
        [
            ("get", None),
            ("answer", gzipped(ok(70)), S, False),
            ("chunk", 100, (0, 100)),
            ("chunk", 50, (0, 50)),  # decoded bytes: more than the coded Content-Length
            ("get", None),
            ("answer", gzipped(ok(70)), S, True),
            ("chunk", 300, (0, 300)),
            ("end", D),
        ],
        {"attempts": 2, "resumes": 0, "total": 300, "ranges_supported": False, "done": True},
    ),
    (
        "after a coded 200 an identity 200 with Accept-Ranges: bytes brings resume back",
        "file",
        [
            ("get", None),
            ("answer", gzipped(ok(70)), S, False),
            ("chunk", 10, (0, 10)),
            ("get", None),
            ("answer", ok(100), S, True),
            ("chunk", 40, (0, 40)),
            ("get", 40),
        ],
        {"ranges_supported": True, "total": 100},
    ),
    (
        "a coded 206 starts over with a whole GET",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", gzipped(partial(40, 99, 100)), R, False),
            ("get", None),
            ("answer", ok(100), S, True),
        ],
        {"position": 0, "resumes": 1},
    ),
    (
        "a stream skips what it yielded when a coded 200 restarts it",
        "stream",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40),
            ("answer", gzipped(ok(30)), S, False),
            ("chunk", 100, (40, 100)),
            ("end", D),
        ],
        {"high_water": 100, "done": True},
    ),
    (
        "a coding sandboxkit cannot decode fails, whatever the status's success",
        "file",
        [("get", None), ("answer", attrs.evolve(ok(10), content_coding="br"), F, False)],
        {},
    ),
    (
        "a coded error answer is still the caller's error",
        "file",
        [("get", None), ("answer", ResponseInfo(404, content_coding="br"), E, False)],
        {},
    ),
    (
        "a resume carries the first answer's ETag in If-Range; the 200 it gets starts over",
        "file",
        [
            ("get", None, None),
            ("answer", tagged(ok(100), '"v1"'), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, '"v1"'),
            ("answer", tagged(ok(100), '"v2"'), S, True),
            ("chunk", 60, (0, 60)),
            ("get", 60, '"v2"'),  # the new version's, from then on
            ("answer", tagged(partial(60, 99, 100), '"v2"'), S, False),
            ("chunk", 40, (0, 40)),
            ("end", D),
        ],
        {"validators": Validators('"v2"'), "done": True, "position": 100},
    ),
    (
        "a 206 of another ETag (If-Range ignored) starts a file over, with a whole GET",
        "file",
        [
            ("get", None),
            ("answer", tagged(ok(100), '"v1"'), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, '"v1"'),
            ("answer", tagged(partial(40, 99, 100), '"v2"'), R, False),
            ("get", None, None),
            ("answer", tagged(ok(100), '"v2"'), S, True),
            ("chunk", 100, (0, 100)),
            ("end", D),
        ],
        {"validators": Validators('"v2"'), "done": True},
    ),
    (
        "a 206 of the same ETag continues, a weakened tag (a proxy's W/) too",
        "file",
        [
            ("get", None),
            ("answer", tagged(ok(100), '"v1"'), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, '"v1"'),
            ("answer", tagged(partial(40, 59, 100), '"v1"'), S, False),
            ("chunk", 20, (0, 20)),
            ("end", R),
            ("get", 60, '"v1"'),
            ("answer", tagged(partial(60, 99, 100), 'W/"v1"'), S, False),
        ],
        {"validators": Validators('"v1"'), "resumes": 2},
    ),
    (
        "a weak ETag is never sent in If-Range, nor a date beside it; a new weak tag restarts",
        "file",
        [
            ("get", None),
            ("answer", tagged(ok(100), 'W/"v1"', last_modified=LM, date=LATER), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, None),
            ("answer", tagged(partial(40, 99, 100), 'W/"v2"'), R, False),
        ],
        {"position": 0, "validators": None},
    ),
    (
        "without an ETag a Last-Modified a second before the Date goes in If-Range",
        "file",
        [
            ("get", None),
            ("answer", tagged(ok(100), last_modified=LM, date=LATER), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, LM),
            ("answer", tagged(partial(40, 99, 100), last_modified=OTHER_LM), R, False),
        ],
        {"position": 0},
    ),
    (
        "a Last-Modified of the answer's own second is weak: no If-Range, still compared",
        "file",
        [
            ("get", None),
            ("answer", tagged(ok(100), last_modified=LM, date=SAME_SECOND), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, None),
            ("answer", tagged(partial(40, 99, 100), last_modified=LM, date=LATER), S, False),
        ],
        {"validators": Validators(None, LM, SAME_SECOND)},
    ),
    (
        "validators a resume's 206 brings first are held from then on",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, None),
            ("answer", tagged(partial(40, 59, 100), '"v1"'), S, False),
            ("chunk", 20, (0, 20)),
            ("end", R),
            ("get", 60, '"v1"'),
        ],
        {"validators": Validators('"v1"')},
    ),
    (
        "without validators a same-size change is invisible: the resume continues blind",
        "file",
        [
            ("get", None),
            ("answer", ok(100), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, None),
            ("answer", partial(40, 99, 100), S, False),
        ],
        {"validators": None},
    ),
    (
        "a stream that yielded bytes fails on a same-size 200 of another version",
        "stream",
        [
            ("get", None),
            ("answer", tagged(ok(100), '"v1"'), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, '"v1"'),
            ("answer", tagged(ok(100), '"v2"'), F, False),
        ],
        {"done": False},
    ),
    (
        "a stream that yielded bytes fails on a 206 of another version",
        "stream",
        [
            ("get", None),
            ("answer", tagged(ok(100), '"v1"'), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, '"v1"'),
            ("answer", tagged(partial(40, 99, 100), '"v2"'), F, False),
        ],
        {"done": False},
    ),
    (
        "a stream whose 200 is of the same version skips what it yielded",
        "stream",
        [
            ("get", None),
            ("answer", tagged(ok(100), '"v1"'), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, '"v1"'),
            ("answer", tagged(ok(100), '"v1"'), S, False),
            ("chunk", 100, (40, 100)),
            ("end", D),
        ],
        {"done": True, "validators": Validators('"v1"')},
    ),
    (
        "after a start-over a file holds nothing: the next answer's version is adopted",
        "file",
        [
            ("get", None),
            ("answer", tagged(ok(100), '"v1"'), S, False),
            ("chunk", 40, (0, 40)),
            ("get", 40, '"v1"'),
            ("answer", tagged(partial(30, 99, 100), '"v1"'), R, False),  # not where asked
            ("get", None, None),
            ("answer", tagged(partial(0, 99, 100), '"v2"'), S, True),
        ],
        {"validators": Validators('"v2"')},
    ),
    (
        "an unexpected 2xx fails",
        "file",
        [("get", None), ("answer", ResponseInfo(204), F, False)],
        {},
    ),
]


@pytest.mark.parametrize(
    ("mode", "steps", "final"),
    [pytest.param(mode, steps, final, id=name) for name, mode, steps, final in SCENARIOS],
)
def test_resume_scenario(mode: Mode, steps: list[Step], final: dict[str, Any]) -> None:
    """Each scenario's requests, decisions and final state follow docs/design.md section 6."""
    state = ResumeState(mode)
    for step in steps:
        kind = step[0]
        if kind == "get":
            assert state.begin_request() == step[1], step
            if len(step) > 2:
                assert state.if_range() == step[2], step
        elif kind == "answer":
            decision = state.on_response(step[1])
            assert (decision.action, decision.truncate) == (step[2], step[3]), step
            if decision.action in (Action.RETRY, Action.FAIL):
                assert decision.reason
        elif kind == "chunk":
            assert state.on_chunk(step[1]) == step[2], step
        else:
            assert state.on_body_end().action == step[1], step
    for name, value in final.items():
        assert getattr(state, name) == value, name


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308, 400, 401, 403, 404, 429, 500, 502])
def test_error_statuses_are_left_to_the_caller(status: int) -> None:
    """Redirects and error statuses come back as ERROR, without touching the position."""
    state = ResumeState("file", position=5, ranges_supported=True)
    state.begin_request()
    assert state.on_response(ResponseInfo(status)).action is Action.ERROR
    assert state.position == 5


def test_stale_sink_is_truncated_even_when_the_restart_answer_is_a_206() -> None:
    """After a start-over, the next streamed answer asks the file sink to truncate once."""
    state = ResumeState("file")
    state.begin_request()
    state.on_response(ok(100))
    state.on_chunk(40)
    state.begin_request()
    assert state.on_response(partial(10, 99, 100)).action is Action.RETRY
    assert state.begin_request() is None
    first = state.on_response(partial(0, 99, 100))
    assert (first.action, first.truncate) == (Action.STREAM, True)
    state.on_chunk(10)
    assert state.begin_request() == 10
    assert state.on_response(partial(10, 99, 100)).truncate is False


def test_failure_reason_names_both_sizes() -> None:
    """A stream's size-change failure says what the size was and became."""
    state = ResumeState("stream")
    state.begin_request()
    state.on_response(ok(100, "none"))
    state.on_chunk(1)
    state.begin_request()
    decision = state.on_response(ok(7, "none"))
    assert decision.action is Action.FAIL
    assert "100" in decision.reason and "7" in decision.reason


def test_a_resumed_part_sends_its_recorded_validator_and_a_200_truncates() -> None:
    """The state a sidecar resumes (validators from the killed process's first answer): the
    first GET carries If-Range; the 200 of a changed file truncates the part."""
    state = ResumeState(
        "file",
        position=40,
        high_water=40,
        total=100,
        ranges_supported=True,
        validators=Validators('"v1"'),
    )
    assert (state.begin_request(), state.if_range()) == (40, '"v1"')
    decision = state.on_response(tagged(ok(100), '"v2"'))
    assert (decision.action, decision.truncate) == (Action.STREAM, True)
    assert state.validators == Validators('"v2"')


def test_a_version_change_names_both_validators() -> None:
    state = ResumeState("stream")
    state.begin_request()
    state.on_response(tagged(ok(100), '"v1"'))
    state.on_chunk(1)
    state.begin_request()
    decision = state.on_response(tagged(ok(100), '"v2"'))
    assert decision.action is Action.FAIL
    assert '"v1"' in decision.reason and '"v2"' in decision.reason


@pytest.mark.parametrize(
    ("validators", "if_range"),
    [
        (Validators('"abc"'), '"abc"'),
        (Validators('"abc"', LM, LATER), '"abc"'),  # the ETag wins over a strong date
        (Validators('W/"abc"'), None),  # RFC 9110 13.1.5: never a weak tag
        (Validators('W/"abc"', LM, LATER), None),  # nor a date when there is an ETag
        (Validators("abc"), None),  # not an entity-tag (unquoted)
        (Validators('"a\r\nX-Evil: 1"'), None),  # never a line break into a request
        (Validators('"caf\xe9"'), None),  # obs-text: compared, never sent back
        (Validators(None, LM, LATER), LM),
        (Validators(None, LM, "Mon, 01 Jan 2024 00:10:00 GMT"), LM),
        (Validators(None, LM, SAME_SECOND), None),  # weak: two writes may share the second
        (Validators(None, LM, "Sun, 31 Dec 2023 23:59:59 GMT"), None),  # Date before it
        (Validators(None, LM, None), None),  # no Date: strength unknown
        (Validators(None, "Monday, 01-Jan-24 00:00:00 GMT", LATER), None),  # not IMF-fixdate
        (Validators(None, "yesterday", LATER), None),
        (Validators(None, LM, "garbage"), None),
    ],
)
def test_which_validator_may_go_in_if_range(validators: Validators, if_range: str | None) -> None:
    assert validators.if_range() == if_range


@pytest.mark.parametrize(
    ("ours", "theirs", "differs"),
    [
        (Validators('"a"'), Validators('"a"'), False),
        (Validators('"a"'), Validators('"b"'), True),
        (Validators('"a"'), Validators('W/"a"'), False),  # weak comparison: W/ is no change
        (Validators('W/"a"'), Validators('W/"b"'), True),
        (Validators('"a"', LM), Validators('"a"', OTHER_LM), False),  # ETags decide
        (Validators('"a"', LM), Validators(None, OTHER_LM), True),  # else Last-Modified
        (Validators(None, LM), Validators(None, "Mon, 1 Jan 2024 00:00:00 +0000"), False),
        (Validators(None, LM), Validators(None, OTHER_LM), True),
        (Validators(None, "odd"), Validators(None, "other"), True),  # unparsed: compared whole
        (Validators('"a"'), Validators(None, LM), False),  # nothing to compare: no news
    ],
)
def test_when_validators_name_another_version(
    ours: Validators, theirs: Validators, differs: bool
) -> None:
    assert ours.differs(theirs) is differs
    assert theirs.differs(ours) is differs


def test_validators_round_trip_through_a_sidecar_record() -> None:
    for validators in (Validators('"a"'), Validators(None, LM, LATER), Validators('"a"', LM)):
        assert Validators.from_record(validators.record()) == validators
    assert Validators('"a"').record() == {"etag": '"a"'}
    assert Validators.from_record({"total": 5}) is None  # a sidecar from before validators
    assert Validators.from_record({"date": LATER}) is None  # a Date alone names nothing
    for bad in ({"etag": 5}, {"last_modified": ["x"]}, {"etag": '"a"', "date": 1.5}):
        with pytest.raises(ValueError, match="not a string"):
            Validators.from_record(bad)
