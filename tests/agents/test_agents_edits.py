"""Safe edits: `edit_file`, the sha256 a whole read shows, the version token a page shows, and
`expected_sha256`/`expected_version` on `write_file` and `edit_file`.

Every refusal is shown to write nothing: the emulator's bytes are unchanged and its journal
holds no upload.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit.agents import ErrorCode, ToolError, Toolkit, ToolLimits
from sandboxkit.agents._edits import replaced, replaced_as_read, unified_diff
from sandboxkit.emulator import Emulator

from ..conftest import hostile_client
from ..files_support import Box
from ..reliability_support import started
from ..versions_support import NEW_MTIME, OLD_MTIME, FileServer, place

FILE = "/home/user/app.py"
SOURCE = b"def f():\n    return 1\n\n\ndef g():\n    return 1\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def edit_kit(emulator_client: sandboxkit.Client, box: Box) -> Toolkit:
    """A toolkit with one sandbox, "dev", holding FILE."""
    box.put(FILE, SOURCE)
    return Toolkit(emulator_client, {"dev": box.handle})


async def call(kit: Toolkit, tool: str, /, **arguments: Any) -> dict[str, Any]:
    result = await kit.call(tool, {"sandbox": "dev", **arguments})
    assert json.loads(json.dumps(result)) == result
    return result


async def refused(kit: Toolkit, tool: str, /, **arguments: Any) -> ToolError:
    with pytest.raises(ToolError) as caught:
        await kit.call(tool, {"sandbox": "dev", **arguments})
    assert caught.value.retryable is False
    return caught.value


def uploads(emulator: Emulator) -> int:
    return len(emulator.journal_for("files.upload"))


# -- the pure parts: matching and the diff ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "old", "new", "replace_all", "expected"),
    [
        ("a b a", "b", "c", False, ("a c a", 1)),
        ("a b a", "a", "x", True, ("x b x", 2)),
        ("aaa", "aa", "b", True, ("ba", 1)),  # non-overlapping, left to right
        ("line\n", "line\n", "", False, ("", 1)),
    ],
)
def test_an_edit_replaces_what_it_matches(
    text: str, old: str, new: str, replace_all: bool, expected: tuple[str, int]
) -> None:
    """One occurrence, or every one with replace_all, is replaced; the count is returned."""
    assert replaced(text, old, new, replace_all, "f") == expected


@pytest.mark.parametrize(
    ("text", "old", "new", "code"),
    [
        ("abc", "x", "y", ErrorCode.NO_MATCH),
        ("abc", "ABC", "y", ErrorCode.NO_MATCH),  # exact: case counts
        ("a a", "a", "b", ErrorCode.AMBIGUOUS_MATCH),
        ("aaa", "aa", "b", ErrorCode.AMBIGUOUS_MATCH),  # overlapping occurrences count
        ("abc", "", "y", ErrorCode.INVALID_ARGUMENT),
        ("abc", "b", "b", ErrorCode.INVALID_ARGUMENT),
    ],
)
def test_an_edit_that_matches_no_or_many_places_is_refused(
    text: str, old: str, new: str, code: ErrorCode
) -> None:
    """Absent, non-unique (overlapping too), empty or unchanged old text is refused by code."""
    with pytest.raises(ToolError) as caught:
        replaced(text, old, new, False, "f")
    assert caught.value.code is code


@pytest.mark.parametrize(
    ("text", "old", "new", "replace_all", "expected"),
    [
        # CRLF throughout: LF text as read matches, and the new text is written with CRLF.
        ("a\r\nb\r\nc\r\n", "a\nb\n", "x\ny\n", False, ("x\r\ny\r\nc\r\n", 1)),
        ("a\r\nb\r\n", "b", "b1\nb2", False, ("a\r\nb1\r\nb2\r\n", 1)),
        ("a\r\nb\r\n", "a\r\nb", "c\r\nd", False, ("c\r\nd\r\n", 1)),
        ("x\r\nx\r\n", "x\n", "y\n", True, ("y\r\ny\r\n", 2)),
        # LF: as given; CRLF text (copied from bytes) matched and written with LF.
        ("a\nb\n", "a\nb", "c\nd", False, ("c\nd\n", 1)),
        ("a\nb\n", "a\r\nb", "c\r\nd", False, ("c\nd\n", 1)),
        ("abc", "b", "x\ny", False, ("ax\nyc", 1)),  # no line end to keep
        # Mixed: deepagents' sandbox backend's order (as given, CRLF, LF); the match's kind.
        ("a\r\nb\nc\n", "b\nc\n", "B\nC\n", False, ("a\r\nB\nC\n", 1)),
        ("a\r\nb\r\nc\n", "a\nb\n", "x\n", False, ("x\r\nc\n", 1)),
    ],
)
def test_an_edit_as_read_keeps_the_files_line_ends(
    text: str, old: str, new: str, replace_all: bool, expected: tuple[str, int]
) -> None:
    """Text copied from a read that showed LF matches in the file's line ends, kept on write."""
    assert replaced_as_read(text, old, new, replace_all, "f") == expected


@pytest.mark.parametrize(
    ("text", "old", "new", "code", "says"),
    [
        ("a\r\nb\nc\n", "a\nb\n", "x", ErrorCode.NO_MATCH, "mixes CRLF and LF"),
        ("a\r\nb\r\n", "z", "y", ErrorCode.NO_MATCH, "must match exactly"),
        ("x\r\nx\r\n", "x\n", "y", ErrorCode.AMBIGUOUS_MATCH, "2 occurrences"),
        ("a\r\n", "", "y", ErrorCode.INVALID_ARGUMENT, "must not be empty"),
        ("a\r\n", "a\r\n", "a\n", ErrorCode.INVALID_ARGUMENT, "the same"),  # line ends only
    ],
)
def test_an_edit_as_read_is_refused_as_an_exact_one(
    text: str, old: str, new: str, code: ErrorCode, says: str
) -> None:
    """Absent, non-unique, empty or unchanged text is refused by code; text across mixed line
    ends is refused saying so."""
    with pytest.raises(ToolError, match=says) as caught:
        replaced_as_read(text, old, new, False, "f")
    assert caught.value.code is code


def test_the_diff_is_diff_u_with_its_missing_newline_marker() -> None:
    """The diff is unified, 3 lines of context, and marks a last line without a newline."""
    assert unified_diff("a\nb\nc", "a\nB\nc", "/f") == (
        "--- /f\n+++ /f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\\ No newline at end of file\n"
    )
    assert unified_diff("same\n", "same\n", "/f") == ""


# -- edit_file against the emulator ----------------------------------------------------------


async def test_an_edit_writes_the_one_replacement(edit_kit: Toolkit, box: Box) -> None:
    """A unique old text is replaced; the result's sha256 is the new bytes'."""
    result = await call(
        edit_kit, "edit_file", remote="app.py", old_text="def g():\n    return 1",
        new_text="def g():\n    return 2",
    )  # fmt: skip
    after = SOURCE.replace(b"return 1\n", b"return 2\n").replace(b"return 2\n", b"return 1\n", 1)
    assert box.get(FILE) == after
    assert result == {
        "sandbox": "dev",
        "remote": FILE,
        "replacements": 1,
        "dry_run": False,
        "bytes_written": len(after),
        "sha256": sha(after),
    }


async def test_absent_or_ambiguous_old_text_writes_nothing(
    edit_kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """no_match and ambiguous_match (without replace_all) leave the file's bytes as they
    were, and no upload reaches the emulator."""
    before = uploads(emulator)
    missing = await refused(
        edit_kit, "edit_file", remote="app.py", old_text="return 3", new_text="x"
    )
    assert missing.code is ErrorCode.NO_MATCH and "Nothing was written" in missing.message
    twice = await refused(edit_kit, "edit_file", remote="app.py", old_text="return 1", new_text="x")
    assert twice.code is ErrorCode.AMBIGUOUS_MATCH and "replace_all" in twice.message
    assert box.get(FILE) == SOURCE
    assert uploads(emulator) == before


async def test_the_tools_edit_matches_a_crlf_file_exactly(
    edit_kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """`read_file` shows a CRLF file's `\\r`, so `edit_file` takes its text as given: LF
    text is no match (nothing sent), CRLF text edits it."""
    box.put(FILE, b"a = 1\r\nb = 2\r\n")
    before = uploads(emulator)
    lf = await refused(edit_kit, "edit_file", remote="app.py", old_text="a = 1\nb", new_text="c")
    assert lf.code is ErrorCode.NO_MATCH and uploads(emulator) == before
    await call(edit_kit, "edit_file", remote="app.py", old_text="1\r\nb", new_text="1\r\nB")
    assert box.get(FILE) == b"a = 1\r\nB = 2\r\n"


async def test_replace_all_replaces_every_occurrence(edit_kit: Toolkit, box: Box) -> None:
    """With replace_all every occurrence is replaced and counted."""
    result = await call(
        edit_kit, "edit_file", remote="app.py", old_text="return 1", new_text="return 0",
        replace_all=True,
    )  # fmt: skip
    assert box.get(FILE) == SOURCE.replace(b"return 1", b"return 0")
    assert result["replacements"] == 2 and result["sha256"] == sha(box.get(FILE))


async def test_a_dry_run_returns_the_exact_diff_and_writes_nothing(
    edit_kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """dry_run returns the unified diff the edit would make and the hash it would give;
    the file and the journal show nothing written."""
    before = uploads(emulator)
    result = await call(
        edit_kit, "edit_file", remote="app.py", old_text="def f():\n    return 1",
        new_text="def f():\n    return 10", dry_run=True,
    )  # fmt: skip
    assert result["diff"] == (
        f"--- {FILE}\n+++ {FILE}\n@@ -1,5 +1,5 @@\n def f():\n-    return 1\n"
        "+    return 10\n \n \n def g():\n"
    )
    assert (result["dry_run"], result["bytes_written"], result["replacements"]) == (True, 0, 1)
    assert result["sha256"] == sha(SOURCE.replace(b"return 1", b"return 10", 1))
    assert box.get(FILE) == SOURCE
    assert uploads(emulator) == before


async def test_edit_bounds_encodings_and_bad_hashes_write_nothing(
    emulator_client: sandboxkit.Client, box: Box, emulator: Emulator
) -> None:
    """A file over max_write, or growing past it, is too_large; bytes that are not the
    declared encoding are invalid_argument; a missing file is not_found; a malformed
    expected_sha256 is refused before any request. Nothing is uploaded."""
    kit = Toolkit(emulator_client, {"dev": box.handle}, limits=ToolLimits(max_write=16))
    box.put("/home/user/big.txt", b"x" * 17)
    box.put("/home/user/ok.txt", b"0123456789")
    box.put("/home/user/latin.txt", "café".encode("latin-1"))
    before = uploads(emulator)
    cases: list[tuple[dict[str, Any], ErrorCode]] = [
        ({"remote": "big.txt", "old_text": "x", "new_text": "y"}, ErrorCode.TOO_LARGE),
        ({"remote": "ok.txt", "old_text": "0", "new_text": "0" * 8}, ErrorCode.TOO_LARGE),
        ({"remote": "latin.txt", "old_text": "caf", "new_text": "k"}, ErrorCode.INVALID_ARGUMENT),
        ({"remote": "none.txt", "old_text": "a", "new_text": "b"}, ErrorCode.NOT_FOUND),
    ]
    for arguments, code in cases:
        assert (await refused(kit, "edit_file", **arguments)).code is code, arguments
    journal = len(emulator.journal)
    for bad in ("abc", "g" * 64):
        error = await refused(
            kit, "edit_file", remote="ok.txt", old_text="0", new_text="1", expected_sha256=bad
        )
        assert error.code is ErrorCode.INVALID_ARGUMENT
    assert len(emulator.journal) == journal
    latin = await call(
        kit, "edit_file", remote="latin.txt", old_text="é", new_text="è", encoding="latin-1"
    )
    assert box.get("/home/user/latin.txt") == "cafè".encode("latin-1")
    assert latin["bytes_written"] == 4
    assert uploads(emulator) == before + 1


# -- hashes: what a read shows, what a change expects ----------------------------------------


async def test_a_whole_read_shows_the_files_sha256_and_a_part_shows_none(
    edit_kit: Toolkit, box: Box
) -> None:
    """A page that is the whole file carries hashlib's sha256 of its bytes (text and base64
    alike); a truncated page, a page from an offset and a text page holding U+FFFD carry
    none (the emulator names no versions, so no version token either)."""
    whole = await call(edit_kit, "read_file", remote="app.py")
    assert whole["eof"] and whole["sha256"] == hashlib.sha256(box.get(FILE)).hexdigest()
    raw = await call(edit_kit, "read_file", remote="app.py", encoding="base64")
    assert raw["sha256"] == sha(SOURCE)
    part = await call(edit_kit, "read_file", remote="app.py", length=8)
    tail = await call(edit_kit, "read_file", remote="app.py", offset=8)
    assert tail["eof"]
    for page in (part, tail):
        assert "sha256" not in page and "version" not in page
    box.put("/home/user/bad.txt", b"caf\xe9")
    assert "sha256" not in await call(edit_kit, "read_file", remote="bad.txt")


async def test_a_stale_hash_refuses_a_write_and_an_edit_writing_nothing(
    edit_kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """After the file changes under the model, write_file and edit_file with the hash it
    read are refused with conflict (never showing the new hash); the file keeps the other
    writer's bytes and no upload is sent. With the current hash both go through."""
    seen = (await call(edit_kit, "read_file", remote="app.py"))["sha256"]
    theirs = SOURCE + b"# someone else's line\n"
    box.put(FILE, theirs)
    before = uploads(emulator)
    write = await refused(
        edit_kit, "write_file", remote="app.py", content="mine", expected_sha256=seen
    )
    edit = await refused(
        edit_kit, "edit_file", remote="app.py", old_text="def f", new_text="def h",
        expected_sha256=seen.upper(),
    )  # fmt: skip
    for error in (write, edit):
        assert error.code is ErrorCode.CONFLICT and sha(theirs) not in error.message
    assert box.get(FILE) == theirs
    assert uploads(emulator) == before
    fresh = (await call(edit_kit, "read_file", remote="app.py"))["sha256"]
    edited = await call(
        edit_kit, "edit_file", remote="app.py", old_text="def f", new_text="def h",
        expected_sha256=fresh,
    )  # fmt: skip
    written = await call(
        edit_kit, "write_file", remote="app.py", content="mine", expected_sha256=edited["sha256"]
    )
    assert box.get(FILE) == b"mine" and written["sha256"] == sha(b"mine")
    assert uploads(emulator) == before + 2


async def test_absent_means_the_file_must_not_exist_yet(
    edit_kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """expected_sha256='absent' writes a new file and refuses (conflict, nothing written)
    where one exists; a hash expected of a file that is gone is a conflict too."""
    created = await call(
        edit_kit, "write_file", remote="new.txt", content="n", expected_sha256="absent"
    )
    assert box.get("/home/user/new.txt") == b"n" and created["bytes_written"] == 1
    before = uploads(emulator)
    error = await refused(
        edit_kit, "write_file", remote="app.py", content="x", expected_sha256="absent"
    )
    assert error.code is ErrorCode.CONFLICT and "exists" in error.message
    gone = await refused(
        edit_kit, "write_file", remote="gone.txt", content="x", expected_sha256=sha(b"x")
    )
    assert gone.code is ErrorCode.CONFLICT
    assert box.get(FILE) == SOURCE and uploads(emulator) == before


# -- version tokens, from a data center that sends validators --------------------------------


async def test_a_page_carries_a_version_and_a_changed_file_refuses_it(tmp_path: Path) -> None:
    """Where the data center sends an ETag, a partial page carries it as `version`; once
    the file is replaced, write_file and edit_file with that version are refused with
    conflict and the file is left as the other writer left it (the server saw only GETs)."""
    root = tmp_path / "remote"
    target = root / "home/user/log.txt"
    place(target, b"line one\nline two\n", OLD_MTIME)
    async with (
        started(FileServer(root, "rfc")) as server,
        hostile_client("http://127.0.0.1:9") as client,
    ):
        sandbox = client.sandbox(sandbox_key="sbx", domain=server.domain, access_token="t")
        kit = Toolkit(client, {"dev": sandbox})
        page = await call(kit, "read_file", remote="log.txt", length=8)
        assert "sha256" not in page
        assert page["version"] == f"etag:{server.seen[-1].etag}"
        again = await call(kit, "read_file", remote="log.txt", length=8)
        assert again["version"] == page["version"]  # the same file, the same version
        place(target, b"line ONE\nline two\n", NEW_MTIME)
        for tool, arguments in [
            ("write_file", {"content": "mine"}),
            ("edit_file", {"old_text": "two", "new_text": "2"}),
        ]:
            error = await refused(
                kit, tool, remote="log.txt", expected_version=page["version"], **arguments
            )
            assert error.code is ErrorCode.CONFLICT, tool
        assert target.read_bytes() == b"line ONE\nline two\n"
        assert all(exchange.status in (200, 206) for exchange in server.seen)
