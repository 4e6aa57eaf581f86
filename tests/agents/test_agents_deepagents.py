"""`sandboxkit.agents.deepagents.SandboxBackend` against the emulator, with the real
`deepagents` package: an agent run end to end on a scripted chat model, the line window's
bounded reads (the 64 MiB acceptance), edits that refuse without writing, the batches' per-file
codes, and the honest "not supported" of listing, glob and grep.
"""

from __future__ import annotations

import base64
import itertools
import subprocess
import sys
from typing import Any

import pytest
from deepagents import create_deep_agent
from deepagents.backends.sandbox import TRUNCATION_MSG
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import sandboxkit
from sandboxkit.agents import ToolLimits
from sandboxkit.agents.deepagents import SandboxBackend
from sandboxkit.emulator import Emulator

from ..files_support import Box, payload

MiB = 1 << 20


class ScriptedModel(GenericFakeChatModel):
    """langchain-core's fake chat model, which answers from a script; deepagents binds its
    tools to the model, which a script needs none of."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def tool_call(number: int, name: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call-{number}"}])


@pytest.fixture
def backend(box: Box) -> SandboxBackend:
    return SandboxBackend(box.handle)


def requests(emulator: Emulator, route: str) -> int:
    return len(emulator.journal_for(route))


# -- end to end ------------------------------------------------------------------------------


async def test_a_deep_agent_writes_reads_edits_and_is_told_of_a_hostile_path(
    emulator: Emulator, box: Box
) -> None:
    """A deep agent on a scripted model writes a file, reads it back, edits it, asks for a
    path outside the root and for a listing: the file's bytes are the edit's, the hostile
    path and the listing come back as error results the run goes on after (nothing is sent
    for the path), and no tool output holds the sandbox's token or the API key."""
    script = iter(
        [
            tool_call(1, "write_file", file_path="/home/user/notes.txt", content="alpha\nbeta\n"),
            tool_call(2, "read_file", file_path="/home/user/notes.txt"),
            tool_call(
                3,
                "edit_file",
                file_path="/home/user/notes.txt",
                old_string="beta",
                new_string="gamma",
            ),
            tool_call(4, "read_file", file_path="/etc/passwd"),
            tool_call(5, "ls", path="/home/user"),
            tool_call(6, "read_file", file_path="/home/user/notes.txt", offset=1, limit=1),
            "done",
        ]
    )
    agent = create_deep_agent(
        model=ScriptedModel(messages=script), backend=SandboxBackend(box.handle)
    )
    downloads = requests(emulator, "files.download")
    answer = await agent.ainvoke({"messages": [HumanMessage("edit my notes")]})
    results = {m.tool_call_id: m for m in answer["messages"] if isinstance(m, ToolMessage)}
    assert box.get("/home/user/notes.txt") == b"alpha\ngamma\n"
    assert results["call-1"].status == "success"
    shown = str(results["call-2"].content)  # numbered or not, as the deepagents version does
    assert results["call-2"].status == "success" and shown.index("alpha") < shown.index("beta")
    assert results["call-3"].status == "success"
    hostile = results["call-4"]
    assert hostile.status == "error" and "invalid_path (retryable: false)" in hostile.content
    assert results["call-5"].status == "error" and "not supported" in results["call-5"].content
    assert "gamma" in results["call-6"].content and "alpha" not in results["call-6"].content
    assert answer["messages"][-1].content == "done"
    paths = [r.query.get("path") for r in emulator.journal_for("files.download")[downloads:]]
    assert "/etc/passwd" not in paths and len(paths) == 3  # two reads, the edit's read
    said = " ".join(str(m.content) for m in answer["messages"])
    assert box.handle._host.token not in said and emulator.api_key not in said


def test_import_sandboxkit_agents_loads_no_framework() -> None:
    """`import sandboxkit.agents` imports no agent framework; the deepagents module loads
    deepagents only when it is imported itself."""
    code = (
        "import sys, sandboxkit.agents; "
        "loaded = [m for m in ('deepagents', 'langchain_core', 'langgraph') if m in sys.modules]; "
        "assert not loaded, loaded; "
        "import sandboxkit.agents.deepagents; assert 'deepagents' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()


# -- the line window ---------------------------------------------------------------------------


async def test_lines_10_to_20_of_a_64_mib_file_move_under_1_mib(
    emulator: Emulator, box: Box, backend: SandboxBackend
) -> None:
    """The acceptance: reading lines 10-20 of a 64 MiB file asks the data plane for less
    than 1 MiB in all (every GET a Range), and returns exactly those lines."""
    line = b"%08d " + b"x" * 90 + b"\n"
    count = 64 * MiB // 100
    box.put(
        "/home/user/huge.log", b"".join(line.replace(b"%08d", b"%08d" % i) for i in range(count))
    )
    before = requests(emulator, "files.download")
    result = await backend.aread("/home/user/huge.log", offset=9, limit=11)
    asked = [r.headers["Range"] for r in emulator.journal_for("files.download")[before:]]
    moved = 0
    for header in asked:
        first, last = header.removeprefix("bytes=").split("-")
        moved += int(last) - int(first) + 1
    assert moved < MiB
    assert asked == ["bytes=0-65535"]  # one first page holds the window
    assert result.file_data is not None
    assert result.file_data["content"].split("\n") == [f"{i:08d} " + "x" * 90 for i in range(9, 20)]
    assert (result.start_line, result.end_line, result.next_offset) == (10, 20, 20)
    assert result.total_lines is None  # the file's end was never read


async def test_a_window_deep_in_a_file_pages_on_from_the_start(
    emulator: Emulator, box: Box, backend: SandboxBackend
) -> None:
    """A window 3 MB in is reached by contiguous pages from byte 0 (doubling from 64 KiB to
    1 MiB), lines across their seams read whole, and nothing is read past the page holding
    the window's last line."""
    lines = [f"{i:06d}-" + "y" * (i % 190) for i in range(60_000)]
    data = "\n".join(lines).encode() + b"\n"
    box.put("/home/user/deep.txt", data)
    before = requests(emulator, "files.download")
    result = await backend.aread("/home/user/deep.txt", offset=30_000, limit=3)
    assert result.file_data is not None
    assert result.file_data["content"] == "\n".join(lines[30_000:30_003])
    spans = [
        tuple(int(n) for n in r.headers["Range"].removeprefix("bytes=").split("-"))
        for r in emulator.journal_for("files.download")[before:]
    ]
    assert spans[0] == (0, (64 << 10) - 1)
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans))
    end_of_window = len("\n".join(lines[:30_003]).encode()) + 1
    assert spans[-2][1] < end_of_window <= spans[-1][1] + 1
    assert max(last - first + 1 for first, last in spans) == MiB


@pytest.mark.parametrize(
    ("data", "offset", "limit", "content", "window"),
    [
        (b"a\nb\nc\n", 0, 2000, "a\nb\nc", (1, 3, None, 3)),
        (b"a\r\nb\rc", 1, 1, "b", (2, 2, 2, 3)),  # CRLF and CR end lines too
        (b"a\nb\nc", 2, 5, "c", (3, 3, None, 3)),  # the last line has no line end
        (b"a\nb\n", 0, 2, "a\nb", (1, 2, None, 2)),
        (b"\n\n", 0, 10, "\n", (1, 2, None, 2)),  # blank lines are lines
    ],
)
async def test_a_window_is_split_and_numbered_as_deepagents_does(
    box: Box,
    backend: SandboxBackend,
    data: bytes,
    offset: int,
    limit: int,
    content: str,
    window: tuple[int, int, int | None, int],
) -> None:
    """Lines end at LF, CRLF or CR; the window comes back raw with LF between lines, with
    its first and last line, where to go on (None at the end) and the total once known."""
    box.put("/home/user/w.txt", data)
    result = await backend.aread("/home/user/w.txt", offset, limit)
    assert result.error is None and result.file_data is not None
    assert result.file_data["content"] == content
    assert (result.start_line, result.end_line, result.next_offset, result.total_lines) == window


async def test_a_line_across_pages_and_a_crlf_split_by_a_page_read_whole(
    box: Box, backend: SandboxBackend
) -> None:
    """A line longer than the first page, and a CRLF whose two bytes fall in two pages, read
    as one line each."""
    long_line = "é" * 40_000  # 80,000 bytes: past the 64 KiB first page
    head = b"h" * ((64 << 10) - 1) + b"\r"  # the first page ends between CR and LF
    box.put("/home/user/l.txt", long_line.encode() + b"\n" + head + b"\nnext\n")
    result = await backend.aread("/home/user/l.txt")
    assert result.file_data is not None
    lines = result.file_data["content"].split("\n")
    assert lines == [long_line, "h" * ((64 << 10) - 1), "next"]
    assert result.total_lines == 3


async def test_degenerate_windows_empty_and_binary_files(box: Box, backend: SandboxBackend) -> None:
    """A limit of 0 asks nothing and says so; an offset past the end is an error naming the
    file's length; an empty file is empty content; a binary file comes back whole as base64;
    a window over deepagents' output cap is cut with its note, and moves on by one line."""
    box.put("/home/user/t.txt", b"one\ntwo\n")
    nothing = await backend.aread("/home/user/t.txt", 0, 0)
    assert nothing.no_lines_requested and nothing.start_line is None
    past = await backend.aread("/home/user/t.txt", 5, 10)
    assert past.error == "Line offset 5 exceeds file length (2 lines)"
    box.put("/home/user/empty.txt", b"")
    empty = await backend.aread("/home/user/empty.txt")
    assert empty.file_data == {"content": "", "encoding": "utf-8"} and empty.start_line is None
    blob = payload(1000, seed=2)
    box.put("/home/user/b.bin", b"\xff\xfe" + blob)
    binary = await backend.aread("/home/user/b.bin")
    assert binary.file_data is not None and binary.file_data["encoding"] == "base64"
    assert base64.b64decode(binary.file_data["content"]) == b"\xff\xfe" + blob
    box.put("/home/user/wide.txt", b"y" * (600 << 10) + b"\nz\n")
    wide = await backend.aread("/home/user/wide.txt")
    assert wide.file_data is not None and wide.file_data["content"].endswith(TRUNCATION_MSG)
    assert (wide.start_line, wide.end_line, wide.next_offset) == (1, 1, 1)


# -- write, edit, batches ----------------------------------------------------------------------


async def test_edits_that_match_nothing_or_many_places_write_nothing(
    emulator: Emulator, box: Box, backend: SandboxBackend
) -> None:
    """The backend's edit is the tool kit's: absent or non-unique old text is an error
    result with its code, the file unchanged and no upload sent; replace_all counts."""
    box.put("/home/user/e.txt", b"x = 1\ny = 1\n")
    before = requests(emulator, "files.upload")
    missing = await backend.aedit("/home/user/e.txt", "z = 1", "z = 2")
    twice = await backend.aedit("/home/user/e.txt", "= 1", "= 2")
    assert missing.error is not None and missing.error.startswith("no_match (retryable: false)")
    assert twice.error is not None and twice.error.startswith("ambiguous_match")
    assert box.get("/home/user/e.txt") == b"x = 1\ny = 1\n"
    assert requests(emulator, "files.upload") == before
    done = await backend.aedit("e.txt", "= 1", "= 2", replace_all=True)
    assert (done.error, done.path, done.occurrences) == (None, "/home/user/e.txt", 2)
    assert box.get("/home/user/e.txt") == b"x = 2\ny = 2\n"


@pytest.mark.parametrize(
    ("data", "edited"),
    [
        (
            b"def f():\r\n    return 1\r\n\r\nx = f()\r\n",
            b"def f():\r\n    y = 2\r\n    return y\r\n\r\nx = f()\r\n",
        ),
        (
            b"def f():\n    return 1\n\nx = f()\n",
            b"def f():\n    y = 2\n    return y\n\nx = f()\n",
        ),
    ],
)
async def test_an_edit_copied_from_read_keeps_the_files_line_ends(
    box: Box, backend: SandboxBackend, data: bytes, edited: bytes
) -> None:
    """Lines copied from `aread` (LF between them) edit a CRLF file, which stays CRLF, the
    new lines too; an LF file is edited as before."""
    box.put("/home/user/crlf.py", data)
    shown = await backend.aread("/home/user/crlf.py")
    assert shown.file_data is not None
    old = "\n".join(shown.file_data["content"].split("\n")[:2])  # as a model copies it
    assert old == "def f():\n    return 1"
    done = await backend.aedit("/home/user/crlf.py", old, "def f():\n    y = 2\n    return y")
    assert (done.error, done.occurrences) == (None, 1)
    assert box.get("/home/user/crlf.py") == edited


async def test_an_edit_across_mixed_line_ends_is_refused_saying_so(
    emulator: Emulator, box: Box, backend: SandboxBackend
) -> None:
    """Old text spanning a CRLF line and an LF one matches neither way: `no_match` naming the
    mixed line ends, nothing sent; within one kind of line it edits in that kind."""
    box.put("/home/user/mixed.txt", b"a\r\nb\nc\n")
    before = requests(emulator, "files.upload")
    across = await backend.aedit("/home/user/mixed.txt", "a\nb\nc", "x")
    assert across.error is not None and across.error.startswith("no_match (retryable: false)")
    assert "mixes CRLF and LF" in across.error
    assert requests(emulator, "files.upload") == before
    within = await backend.aedit("/home/user/mixed.txt", "b\nc", "B\nC")
    assert within.error is None
    assert box.get("/home/user/mixed.txt") == b"a\r\nB\nC\n"


async def test_writes_are_bounded_and_need_their_directory(
    emulator_client: sandboxkit.Client, box: Box, emulator: Emulator
) -> None:
    """A write over max_write is refused before any request; one into a missing directory
    says the directory must exist."""
    backend = SandboxBackend(box.handle, limits=ToolLimits(max_write=4))
    before = requests(emulator, "files.upload")
    big = await backend.awrite("/home/user/a.txt", "12345")
    assert big.error is not None and big.error.startswith("too_large")
    assert requests(emulator, "files.upload") == before
    nowhere = await backend.awrite("/home/user/no/dir/a.txt", "1")
    assert nowhere.error is not None and "directory must exist" in nowhere.error
    ok = await backend.awrite("a.txt", "1234")
    assert (ok.error, ok.path) == (None, "/home/user/a.txt") and box.get(
        "/home/user/a.txt"
    ) == b"1234"


async def test_batches_answer_each_file_with_deepagents_codes(
    box: Box, backend: SandboxBackend
) -> None:
    """upload_files and download_files answer each file in order: the bytes, or
    invalid_path, file_not_found, permission_denied, or the tool kit's code as said."""
    uploaded = await backend.aupload_files(
        [("/home/user/u1.bin", b"one"), ("../../etc/x", b"bad"), ("/home/user/no/dir/u", b"u")]
    )
    assert [(r.path, r.error) for r in uploaded[:2]] == [
        ("/home/user/u1.bin", None),
        ("../../etc/x", "invalid_path"),
    ]
    assert uploaded[2].error == "file_not_found"
    assert box.get("/home/user/u1.bin") == b"one"
    box.put("/home/user/d.txt", b"down")
    downloaded = await backend.adownload_files(
        ["/home/user/d.txt", "/home/user/missing", "/tmp/outside"]
    )
    assert [(r.content, r.error) for r in downloaded] == [
        (b"down", None),
        (None, "file_not_found"),
        (None, "invalid_path"),
    ]
    box.put("/root/secret", b"s")
    everywhere = SandboxBackend(box.handle, root="/")
    [denied] = await everywhere.adownload_files(["/root/secret"])
    assert denied.error == "permission_denied"


async def test_no_listing_and_no_blocking_twins(backend: SandboxBackend) -> None:
    """ls, glob and grep answer 'not supported' (the interface lists nothing); the blocking
    read, write, edit and batches raise, pointing at the async API."""
    assert "not supported" in ((await backend.als("/home/user")).error or "")
    assert "not supported" in ((await backend.aglob("*.py")).error or "")
    assert "not supported" in ((await backend.agrep("TODO")).error or "")
    for blocking in (
        lambda: backend.read("/home/user/a"),
        lambda: backend.write("/home/user/a", "x"),
        lambda: backend.edit("/home/user/a", "x", "y"),
        lambda: backend.upload_files([]),
        lambda: backend.download_files([]),
    ):
        with pytest.raises(NotImplementedError, match="ainvoke"):
            blocking()
