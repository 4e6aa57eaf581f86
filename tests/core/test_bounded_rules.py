"""Table-driven tests of the bounded reads' pure rules (`_bounds`): a page's resume machine,
text pages cut and decoded, the size cap, the argument checks (no event loop, no I/O)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from sandboxkit._core.bounds import PageState, decode_page, too_large
from sandboxkit._core.resume import Action, ResponseInfo, unsatisfiable_size
from sandboxkit._core.validation import check_codec, check_length, check_max_size, check_offset
from sandboxkit.errors import ValidationError

# A scenario is a page [offset, end) and a list of steps:
#   ("get", range_start, range_end, if_range)   what begin_request and if_range say
#   ("answer", ResponseInfo, action, truncate)  on_response's decision
#   ("chunk", size, (skip, keep))               on_chunk's
#   ("end", action)                             on_body_end's
# and the state expected at the end.
Step = tuple[Any, ...]
S, D, R, F = Action.STREAM, Action.DONE, Action.RETRY, Action.FAIL


def ok(length: int | None, etag: str | None = None, ranges: str = "none") -> ResponseInfo:
    return ResponseInfo(200, content_length=length, accept_ranges=ranges, etag=etag)


def part(start: int, end: int, total: int | str, etag: str | None = None) -> ResponseInfo:
    return ResponseInfo(206, end - start + 1, f"bytes {start}-{end}/{total}", "bytes", None, etag)


def unsatisfied(total: int | None) -> ResponseInfo:
    return ResponseInfo(416, content_range=None if total is None else f"bytes */{total}")


def coded(info: ResponseInfo) -> ResponseInfo:
    return attrs.evolve(info, content_coding="gzip")


def cut_206(etag: str | None = None) -> list[Step]:
    """The page [100, 200) of a 1000-byte file: its 206 is cut 30 bytes in."""
    return [
        ("get", 100, 200, None),
        ("answer", part(100, 199, 1000, etag), S, False),
        ("chunk", 30, (0, 30)),
        ("end", R),
    ]


def cut_200(etag: str | None = None) -> list[Step]:
    """The page [100, 200) of a 1000-byte file: the whole file's 200 is cut 30 bytes into
    the page."""
    return [
        ("get", 100, 200, None),
        ("answer", ok(1000, etag), S, False),
        ("chunk", 130, (100, 130)),
        ("end", R),
    ]


SCENARIOS: list[tuple[str, tuple[int, int | None], list[Step], dict[str, Any]]] = [
    (
        "a 206 for the page",
        (100, 200),
        [
            ("get", 100, 200, None),
            ("answer", part(100, 199, 1000), S, False),
            ("chunk", 100, (0, 100)),
        ],
        {"held": 100, "eof": False, "total": 1000, "attempts": 1, "resumes": 0},
    ),
    (
        "the last page: a short 206 whose body ends at the file's end",
        (900, 1100),
        [
            ("get", 900, 1100, None),
            ("answer", part(900, 999, 1000), S, False),
            ("chunk", 100, (0, 100)),
            ("end", D),
        ],
        {"held": 100, "eof": True, "total": 1000, "done": True},
    ),
    (
        "a page to the end of the file",
        (100, None),
        [
            ("get", 100, None, None),
            ("answer", part(100, 999, 1000), S, False),
            ("chunk", 900, (0, 900)),
            ("end", D),
        ],
        {"held": 900, "eof": True, "total": 1000},
    ),
    (
        "a 200 (no ranges) is skipped to the offset",
        (100, 200),
        [
            ("get", 100, 200, None),
            ("answer", ok(1000), S, False),
            ("chunk", 150, (100, 150)),
            ("chunk", 50, (0, 50)),
        ],
        {"held": 100, "eof": False, "total": 1000, "ranges_supported": False},
    ),
    (
        "a 200 whose length is at most the offset: past the end, at once",
        (1000, 1100),
        [("get", 1000, 1100, None), ("answer", ok(1000), D, False)],
        {"held": 0, "eof": True, "total": 1000, "done": True},
    ),
    (
        "a chunked 200 that ends before the offset: past the end",
        (5000, 5100),
        [
            ("get", 5000, 5100, None),
            ("answer", ok(None), S, False),
            ("chunk", 1000, (1000, 1000)),
            ("end", D),
        ],
        {"held": 0, "eof": True, "total": 1000},
    ),
    (
        "a 416 names the size: past the end",
        (1000, 1100),
        [("get", 1000, 1100, None), ("answer", unsatisfied(600), D, False)],
        {"held": 0, "eof": True, "total": 600, "done": True},
    ),
    (
        "a 416 without a size: past the end, size unknown",
        (1000, 1100),
        [("get", 1000, 1100, None), ("answer", unsatisfied(None), D, False)],
        {"held": 0, "eof": True, "total": None},
    ),
    (
        "a 416 naming a size past the offset contradicts itself: start over",
        (100, 200),
        [("get", 100, 200, None), ("answer", unsatisfied(1000), R, False), ("get", 100, 200, None)],
        {"held": 0, "total": None},
    ),
    (
        "a cut mid-page resumes from the byte reached, to the page's end, with If-Range",
        (100, 200),
        [
            *cut_206('"v1"'),
            ("get", 130, 200, '"v1"'),
            ("answer", part(130, 199, 1000, '"v1"'), S, False),
            ("chunk", 70, (0, 70)),
        ],
        {"held": 100, "attempts": 2, "resumes": 1},
    ),
    (
        "a 200 of the same version after a cut (no ranges) skips what is held",
        (100, 200),
        [
            *cut_200('"v1"'),
            ("get", 130, 200, '"v1"'),
            ("answer", ok(1000, '"v1"'), S, False),
            ("chunk", 200, (130, 200)),
        ],
        {"held": 100, "total": 1000},
    ),
    (
        "a 200 of another version to If-Range replaces the bytes held",
        (100, 200),
        [
            *cut_206('"v1"'),
            ("get", 130, 200, '"v1"'),
            ("answer", ok(1000, '"v2"', "bytes"), S, True),
            ("chunk", 200, (100, 200)),
        ],
        {"held": 100, "validators_etag": '"v2"'},
    ),
    (
        "a 200 without validators to If-Range is another version too",
        (100, 200),
        [
            *cut_206('"v1"'),
            ("get", 130, 200, '"v1"'),
            ("answer", ok(1000), S, True),
            ("chunk", 200, (100, 200)),
        ],
        {"held": 100, "validators_etag": None},
    ),
    (
        "a 200 of another size after a cut replaces the bytes held",
        (100, 200),
        [
            *cut_200(),
            ("get", 130, 200, None),
            ("answer", ok(2000), S, True),
        ],
        {"held": 0, "total": 2000},
    ),
    (
        "a 206 of another version (If-Range ignored) starts the page over",
        (100, 200),
        [
            *cut_206('"v1"'),
            ("get", 130, 200, '"v1"'),
            ("answer", part(130, 199, 1000, '"v2"'), R, False),
            ("get", 100, 200, None),
            ("answer", part(100, 199, 1000, '"v2"'), S, True),
            ("chunk", 100, (0, 100)),
        ],
        {"held": 100, "validators_etag": '"v2"', "attempts": 3, "resumes": 1},
    ),
    (
        "a 206 of another size starts the page over",
        (100, 200),
        [
            *cut_206(),
            ("get", 130, 200, None),
            ("answer", part(130, 199, 5000), R, False),
            ("get", 100, 200, None),
            ("answer", part(100, 199, 5000), S, True),
        ],
        {"total": 5000},
    ),
    (
        "a 206 that does not start at the byte asked for starts the page over",
        (100, 200),
        [
            ("get", 100, 200, None),
            ("answer", part(0, 199, 1000), R, False),
            ("get", 100, 200, None),
        ],
        {"held": 0},
    ),
    (
        "a 206 of unknown size that ends before the page's end: ask for the rest",
        (100, 200),
        [
            ("get", 100, 200, None),
            ("answer", part(100, 149, "*"), S, False),
            ("chunk", 50, (0, 50)),
            ("end", R),
            ("get", 150, 200, None),
        ],
        {"held": 50, "total": None, "eof": False},
    ),
    (
        "a 206 of unknown size that ends at the page's end: the page is read, no eof",
        (100, 200),
        [
            ("get", 100, 200, None),
            ("answer", part(100, 199, "*"), S, False),
            ("chunk", 100, (0, 100)),
            ("end", D),
        ],
        {"held": 100, "total": None, "eof": False},
    ),
    (
        "a 206 that carries more than it declared starts the page over",
        (100, 200),
        [
            ("get", 100, 200, None),
            ("answer", part(100, 149, 1000), S, False),
            ("chunk", 60, (0, 50)),
            ("end", R),
            ("get", 100, 200, None),
        ],
        {"held": 0},
    ),
    (
        "a content-coded 200: whole GETs from then on, no size",
        (100, 200),
        [
            ("get", 100, 200, None),
            ("answer", coded(ok(600)), S, False),
            ("chunk", 130, (100, 130)),  # then a cut (the decoder says so): no body end
            ("get", None, None, None),
            ("answer", coded(ok(600)), S, False),
            ("chunk", 200, (130, 200)),
        ],
        {"held": 100, "total": None},
    ),
    (
        "a content-coded 206: start over with a whole GET",
        (100, 200),
        [
            ("get", 100, 200, None),
            ("answer", coded(part(100, 199, 1000)), R, False),
            ("get", None, None, None),
            ("answer", coded(ok(None)), S, True),
        ],
        {"held": 0},
    ),
    (
        "a coding sandboxkit cannot decode fails",
        (0, 100),
        [("get", 0, 100, None), ("answer", attrs.evolve(ok(100), content_coding="br"), F, False)],
        {},
    ),
]


@pytest.mark.parametrize(
    ("page", "steps", "expected"),
    [s[1:] for s in SCENARIOS],
    ids=[s[0] for s in SCENARIOS],
)
def test_page_scenarios(
    page: tuple[int, int | None], steps: list[Step], expected: dict[str, Any]
) -> None:
    """Each scenario drives one PageState and checks every decision and the final state."""
    state = PageState.at(*page)
    for step in steps:
        kind = step[0]
        if kind == "get":
            start = state.begin_request()
            assert (start, state.range_end(), state.if_range()) == step[1:], step
        elif kind == "answer":
            decision = state.on_response(step[1])
            assert (decision.action, decision.truncate) == step[2:], (step, decision)
        elif kind == "chunk":
            assert state.on_chunk(step[1]) == step[2], step
        else:
            assert state.on_body_end().action == step[1], step
    for name, value in expected.items():
        if name == "validators_etag":
            assert (state.validators.etag if state.validators else None) == value
        else:
            assert getattr(state, name) == value, name


def test_a_page_stops_at_its_end_with_eof_where_the_size_is_reached() -> None:
    """A page whose end is the file's size says eof once held to it, before any body end."""
    state = PageState.at(900, 1000)
    state.begin_request()
    assert state.on_response(part(900, 999, 1000)).action is S
    state.on_chunk(99)
    assert not state.eof
    state.on_chunk(1)
    assert (state.eof, state.done, state.held) == (True, False, 100)


# -- text pages ----------------------------------------------------------------------------

EURO, SMILE = "€".encode(), "😀".encode()  # 3 and 4 bytes

DECODES: list[tuple[bytes, int, str, str, bool, tuple[str, int, int]]] = [
    (b"abc", 0, "utf-8", "strict", False, ("abc", 0, 3)),
    (b"a" + EURO[:2], 10, "utf-8", "strict", False, ("a", 10, 11)),  # cut inside a 3-byte one
    (b"a" + SMILE[:3], 10, "utf-8", "strict", False, ("a", 10, 11)),  # inside a 4-byte one
    (SMILE[:1], 10, "utf-8", "strict", False, ("", 10, 10)),
    (b"a" + EURO[:2], 10, "utf-8", "replace", True, ("a\ufffd", 10, 13)),  # eof: decoded
    (SMILE[1:] + b"x", 10, "utf-8", "strict", False, ("x", 13, 14)),  # starts inside one
    (EURO[2:] + b"x", 10, "utf-8", "strict", False, ("x", 11, 12)),
    (EURO[2:] + b"x", 0, "utf-8", "replace", False, ("\ufffdx", 0, 2)),  # offset 0: no skip
    (EURO[1:], 10, "utf-8", "strict", False, ("", 12, 12)),
    (EURO[1:] + EURO[:1], 10, "utf-8-sig", "strict", False, ("", 12, 12)),
    ("a😀".encode("utf-16-le")[:4], 0, "utf-16-le", "strict", False, ("a", 0, 2)),
    ("a😀".encode("utf-16-le")[:5], 0, "utf-16-le", "strict", False, ("a", 0, 2)),
    ("ÿ€".encode("cp1252"), 7, "cp1252", "strict", False, ("ÿ€", 7, 9)),
    ("\ufeffa".encode("utf-16-be"), 0, "utf-16", "strict", True, ("a", 0, 4)),
]


@pytest.mark.parametrize(("data", "offset", "codec", "errors", "eof", "expected"), DECODES)
def test_decode_page(
    data: bytes, offset: int, codec: str, errors: str, eof: bool, expected: tuple[str, int, int]
) -> None:
    """(text, its offset, next_offset) of a page's bytes: trailing bytes of a cut character
    are the next page's unless at eof; a page that starts inside a UTF-8 one skips them."""
    assert decode_page(data, offset, codec, errors, eof) == expected


def test_undecodable_bytes_name_their_offset_in_the_file() -> None:
    """Under errors="strict" the message gives the bad bytes' offsets in the file."""
    with pytest.raises(ValueError, match=r"bytes 102-102 are not utf-8: invalid start byte"):
        decode_page(b"ok\xffok", 100, "utf-8", "strict", False)
    with pytest.raises(ValueError, match=r"bytes 101-102 are not utf-8"):
        decode_page(b"k" + EURO[:2], 100, "utf-8", "strict", True)


# -- the cap and the checks ----------------------------------------------------------------

CAPS: list[tuple[int | None, int, int, int | None, tuple[int | None, str] | None]] = [
    (1000, 0, 1000, None, None),
    (1001, 0, 1000, None, (1001, "the file is 1001 bytes, more than max_size=1000")),
    (1500, 500, 1000, None, None),
    (1501, 500, 1000, None, (1501, "1501 bytes (1001 from offset 500), more than max_size=1000")),
    (None, 0, 1000, 1000, None),
    (None, 0, 1000, 1001, (None, "more than max_size=1000 bytes from offset 0")),
    (None, 0, 1000, None, None),
]


@pytest.mark.parametrize(("size", "offset", "limit", "counted", "expected"), CAPS)
def test_too_large(
    size: int | None,
    offset: int,
    limit: int,
    counted: int | None,
    expected: tuple[int | None, str] | None,
) -> None:
    """A cap is passed by a known size past the offset, or by the bytes counted."""
    error = too_large(size, offset, limit, counted)
    if expected is None:
        assert error is None
    else:
        assert error is not None and (error.size, error.limit) == (expected[0], limit)
        assert expected[1] in str(error) and error.operation == "files.download"


REFUSED = ValidationError


@pytest.mark.parametrize(
    ("check", "value", "result"),
    [
        (check_offset, 0, 0),
        (check_offset, 5, 5),
        (check_offset, -1, REFUSED),
        (check_offset, True, REFUSED),
        (check_offset, 1.0, REFUSED),
        (check_length, 1, 1),
        (check_length, 0, REFUSED),
        (check_length, False, REFUSED),
        (check_max_size, None, None),
        (check_max_size, 1, 1),
        (check_max_size, 0, REFUSED),
        (check_max_size, "10", REFUSED),
    ],
)
def test_number_checks(check: Any, value: Any, result: Any) -> None:
    """Offsets are integers >= 0, lengths and caps >= 1; bools and floats are refused."""
    if result is REFUSED:
        with pytest.raises(ValidationError):
            check(value)
    else:
        assert check(value) == result


@pytest.mark.parametrize(
    ("encoding", "errors", "offset", "name", "refusal"),
    [
        ("UTF8", "strict", 0, "utf-8", None),
        ("utf_16_le", "replace", 7, "utf-16-le", None),
        ("latin1", "surrogateescape", 3, "iso8859-1", None),
        ("utf-16", "strict", 0, "utf-16", None),
        ("utf-16", "strict", 2, None, "name it: utf-16-le or utf-16-be"),
        ("utf-32", "strict", 4, None, "name it: utf-32-le or utf-32-be"),
        ("utf-7", "strict", 0, None, "stateful"),
        ("iso2022_jp", "strict", 0, None, "stateful"),
        ("hex", "strict", 0, None, "not a text encoding"),
        ("nope", "strict", 0, None, "no such encoding"),
        (b"utf-8", "strict", 0, None, "must be a str"),
        ("utf-8", "nope", 0, None, "no such error handler"),
        ("utf-8", None, 0, None, "name of an error handler"),
    ],
)
def test_check_codec(
    encoding: Any, errors: Any, offset: int, name: str | None, refusal: str | None
) -> None:
    """The canonical name of a codec that decodes from any offset, or a ValidationError
    that says why not."""
    if refusal is None:
        assert check_codec(encoding, errors, offset) == name
    else:
        with pytest.raises(ValidationError, match=refusal):
            check_codec(encoding, errors, offset)


@pytest.mark.parametrize(
    ("content_range", "size"),
    [("bytes */1000", 1000), (" BYTES */0 ", 0), ("bytes 0-1/2", None), (None, None), ("", None)],
)
def test_unsatisfiable_size(content_range: str | None, size: int | None) -> None:
    """A 416's `bytes */N` names the size; nothing else does."""
    assert unsatisfiable_size(content_range) == size
