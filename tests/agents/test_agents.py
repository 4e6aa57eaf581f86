"""The agent toolkit over real loopback sockets against the emulator: the tools' shapes and
hints, paged reads, writes, error codes, and the template tools.

Every test that refuses an input checks the emulator's journal: nothing was sent.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import logging
import random
import subprocess
import sys
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit.agents import ErrorCode, ToolError, Toolkit, ToolLimits
from sandboxkit.emulator import Emulator, Fault, ManualClock

from ..files_support import Box, new_box, payload

ALL_TOOLS = [
    "list_sandboxes",
    "read_file",
    "write_file",
    "edit_file",
    "upload_file",
    "download_file",
    "create_template",
    "list_builds",
    "get_build",
    "read_build_logs",
    "wait_for_build",
]
# (read_only, destructive, idempotent) of each tool.
HINTS = {
    "list_sandboxes": (True, False, True),
    "read_file": (True, False, True),
    "write_file": (False, True, True),
    "edit_file": (False, True, False),
    "upload_file": (False, True, True),
    "download_file": (False, True, True),
    "create_template": (False, False, False),
    "list_builds": (True, False, True),
    "get_build": (True, False, True),
    "read_build_logs": (True, False, True),
    "wait_for_build": (True, False, True),
}


@pytest.fixture
def kit(emulator_client: sandboxkit.Client, box: Box, tmp_path: Path) -> Toolkit:
    """A toolkit on the emulator's client with one sandbox, "dev", and a workspace."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return Toolkit(emulator_client, {"dev": box.handle}, workspace=workspace)


async def call(kit: Toolkit, tool: str, /, **arguments: Any) -> dict[str, Any]:
    """`kit.call`, checking that the result survives `json.dumps`."""
    result = await kit.call(tool, arguments)
    assert json.loads(json.dumps(result)) == result
    return result


async def refused(kit: Toolkit, name: str, arguments: Any) -> ToolError:
    """The ToolError `kit.call` raises, checking that its JSON form is complete."""
    with pytest.raises(ToolError) as caught:
        await kit.call(name, arguments)
    error = caught.value
    assert set(json.loads(json.dumps(error.to_json()))) == {"code", "message", "retryable"}
    return error


# -- the tools as a model sees them ----------------------------------------------------------


def test_every_tool_has_a_closed_object_schema_and_its_hints(kit: Toolkit) -> None:
    """Each tool's schema is a JSON Schema object (properties described, required among
    them, no other property allowed) and its read-only/destructive/idempotent hints are
    the ones its effect calls for; none reaches the open world."""
    assert [t.name for t in kit.tools] == ALL_TOOLS
    for tool in kit.tools:
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        for name, rule in schema["properties"].items():
            types = {"string", "integer", "number", "boolean", "array", "object"}
            assert rule.get("type") in types, name
            assert rule["description"], name
        assert (tool.read_only, tool.destructive, tool.idempotent) == HINTS[tool.name]
        assert tool.open_world is False
        assert tool.title and len(tool.description) > 40
        json.dumps(schema)


def test_exports_share_one_definition(kit: Toolkit) -> None:
    """to_openai, to_openai_responses and to_anthropic carry the same name, description
    and schema, and give copies the caller may change."""
    tool = kit.tools[1]
    chat = tool.to_openai()
    assert chat == {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": tool.description,
            "parameters": dict(tool.input_schema),
        },
    }
    assert tool.to_openai_responses() == {"type": "function", **chat["function"]}
    assert tool.to_anthropic()["input_schema"] == tool.input_schema
    chat["function"]["parameters"]["properties"].clear()
    assert tool.input_schema["properties"]


def test_limits_and_names_reach_the_schema_and_description(
    emulator_client: sandboxkit.Client, box: Box
) -> None:
    """The sandbox names are the schema's enum; the limits are its bounds and defaults
    and are named in the descriptions; without a workspace or templates those tools are
    absent."""
    limits = ToolLimits(read_page=4096, max_read=8192, max_log_page=50)
    kit = Toolkit(emulator_client, {"a": box.handle, "b": box.handle}, limits=limits)
    tools = {t.name: t for t in kit.tools}
    assert "upload_file" not in tools and "download_file" not in tools
    read = tools["read_file"]
    assert read.input_schema["properties"]["sandbox"]["enum"] == ["a", "b"]
    assert read.input_schema["properties"]["length"]["maximum"] == 8192
    assert read.input_schema["properties"]["length"]["default"] == 4096
    assert "8192 bytes (8 KiB)" in read.description
    assert tools["read_build_logs"].input_schema["properties"]["limit"]["maximum"] == 50
    bare = Toolkit(emulator_client, {}, templates=False)
    assert [t.name for t in bare.tools] == ["list_sandboxes"]


def test_bad_construction_is_a_validation_error(
    emulator_client: sandboxkit.Client, box: Box, tmp_path: Path
) -> None:
    """A toolkit refuses what it cannot use: not a client, not a sandbox, an untypable
    name, a missing workspace, a relative root."""
    bad: list[tuple[Any, Any, dict[str, Any]]] = [
        (object(), {"dev": box.handle}, {}),
        (emulator_client, {"dev": object()}, {}),
        (emulator_client, {"a\nb": box.handle}, {}),
        (emulator_client, {"": box.handle}, {}),
        (emulator_client, {"dev": box.handle}, {"workspace": tmp_path / "missing"}),
        (emulator_client, {"dev": box.handle}, {"root": "home/user"}),
        (emulator_client, {"dev": box.handle}, {"limits": {"max_read": 1}}),
    ]
    for client, sandboxes, options in bad:
        with pytest.raises(sandboxkit.ValidationError):
            Toolkit(client, sandboxes, **options)


async def test_list_sandboxes_shows_names_only(kit: Toolkit, box: Box) -> None:
    """list_sandboxes names the sandboxes and their root: no key, domain or token."""
    result = await call(kit, "list_sandboxes")
    assert result == {"sandboxes": [{"name": "dev", "root": "/home/user"}], "workspace": True}
    text = json.dumps(result)
    assert box.key not in text and box.handle.domain not in text


# -- read_file ---------------------------------------------------------------------------


def text_of(mebibytes: int) -> str:
    """About that many MiB of text mixing 1- to 4-byte UTF-8 characters (a random MiB,
    repeated: its byte length is no multiple of a page, so page ends fall everywhere)."""
    pieces = ["a", "é", "✓", "😀", "\n", "word "]
    block = "".join(random.Random(7).choices(pieces, k=400_000))
    return block * mebibytes


async def test_a_10_mib_file_pages_back_whole_by_next_offset(
    kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """Reading a 10 MiB multi-byte text file in default (64 KiB) pages, each from the last
    next_offset, joins into the file's text; pages end between characters, every page but
    the last says how to go on, and each is one request."""
    text = text_of(10)
    data = text.encode()
    box.put("/home/user/big.txt", data)
    before = len(emulator.journal_for("files.download"))
    pages: list[str] = []
    offset, count = 0, 0
    while True:
        result = await call(kit, "read_file", sandbox="dev", path="big.txt", offset=offset)
        assert result["offset"] == offset and result["size"] == len(data)
        assert result["next_offset"] - offset <= 64 << 10
        pages.append(result["content"])
        count += 1
        if result["eof"]:
            assert "hint" not in result
            break
        assert f"offset={result['next_offset']}" in result["hint"]
        offset = result["next_offset"]
    assert "".join(pages) == text
    assert len(data) >= 10 << 20 and count >= 160
    assert len(emulator.journal_for("files.download")) - before == count


async def test_base64_pages_join_into_a_binary_file(kit: Toolkit, box: Box) -> None:
    """A binary file read in base64 pages decodes and joins into its bytes."""
    data = payload(300_000, seed=3)
    box.put("/home/user/blob.bin", data)
    got, offset = b"", 0
    while True:
        result = await call(
            kit, "read_file", sandbox="dev", path="/home/user/blob.bin", offset=offset,
            limit=100_000, encoding="base64",
        )  # fmt: skip
        got += base64.b64decode(result["content"])
        if result["eof"]:
            break
        offset = result["next_offset"]
    assert got == data


async def test_a_page_never_splits_a_character(kit: Toolkit, box: Box) -> None:
    """A page whose end falls inside a character stops before it; the next page starts
    with it, and an offset inside a character starts at the next one."""
    box.put("/home/user/u.txt", "ab😀c".encode())  # 😀 is bytes 2-5
    first = await call(kit, "read_file", sandbox="dev", path="u.txt", limit=4)
    assert (first["content"], first["next_offset"], first["eof"]) == ("ab", 2, False)
    rest = await call(kit, "read_file", sandbox="dev", path="u.txt", offset=2, limit=8)
    assert (rest["content"], rest["next_offset"], rest["eof"]) == ("😀c", 7, True)
    inside = await call(kit, "read_file", sandbox="dev", path="u.txt", offset=3)
    assert (inside["offset"], inside["content"]) == (6, "c")


async def test_a_binary_file_read_as_text_says_to_use_base64(kit: Toolkit, box: Box) -> None:
    """Text asked of a file with NUL bytes is refused as binary, pointing at base64."""
    box.put("/home/user/a.out", b"\x7fELF\x00\x00\x01")
    error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "a.out"})
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert "binary" in error.message and "base64" in error.message


async def test_invalid_utf8_reads_as_replacement_characters(kit: Toolkit, box: Box) -> None:
    """Bytes that are not UTF-8 come back as U+FFFD, not as an error."""
    box.put("/home/user/latin.txt", "café".encode("latin-1"))
    result = await call(kit, "read_file", sandbox="dev", path="latin.txt")
    assert result["content"] == "caf\ufffd"


async def test_read_limits_are_enforced_before_any_request(
    kit: Toolkit, emulator: Emulator
) -> None:
    """A length over max_read or under 4, a negative or huge offset, an unknown encoding,
    an unknown argument and an unknown sandbox are refused with nothing sent."""
    before = len(emulator.journal)
    cases: list[tuple[dict[str, Any], ErrorCode]] = [
        ({"length": (1 << 20) + 1}, ErrorCode.INVALID_ARGUMENT),
        ({"length": 3}, ErrorCode.INVALID_ARGUMENT),
        ({"offset": -1}, ErrorCode.INVALID_ARGUMENT),
        ({"offset": 1 << 60}, ErrorCode.INVALID_ARGUMENT),
        ({"encoding": "latin-1"}, ErrorCode.INVALID_ARGUMENT),
        ({"mode": "fast"}, ErrorCode.INVALID_ARGUMENT),
        ({"sandbox": "prod"}, ErrorCode.UNKNOWN_SANDBOX),
        ({"sandbox": 7}, ErrorCode.INVALID_ARGUMENT),
    ]
    for extra, code in cases:
        error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "a.txt", **extra})
        assert error.code is code, extra
        assert error.retryable is False
    assert (await refused(kit, "no_such_tool", {})).code is ErrorCode.INVALID_ARGUMENT
    assert (await refused(kit, "read_file", ["dev", "a.txt"])).code is ErrorCode.INVALID_ARGUMENT
    assert len(emulator.journal) == before


# -- write_file --------------------------------------------------------------------------


async def test_write_then_read_back(kit: Toolkit, box: Box) -> None:
    """Text and base64 writes land as their bytes and read back the same."""
    written = await call(kit, "write_file", sandbox="dev", path="out/../w.txt", content="hé\n")
    assert written == {
        "sandbox": "dev",
        "remote": "/home/user/w.txt",
        "bytes_written": 4,
        "sha256": hashlib.sha256("hé\n".encode()).hexdigest(),
    }
    assert box.get("/home/user/w.txt") == "hé\n".encode()
    read = await call(kit, "read_file", sandbox="dev", path="w.txt")
    assert read["content"] == "hé\n"
    data = payload(1000, seed=5)
    content = base64.b64encode(data).decode()
    await call(kit, "write_file", sandbox="dev", path="b.bin", content=content, encoding="base64")
    assert box.get("/home/user/b.bin") == data


async def test_write_caps_and_bad_base64_send_nothing(
    emulator_client: sandboxkit.Client, box: Box, emulator: Emulator
) -> None:
    """Content over max_write (as text, as UTF-8 bytes, or as base64) and base64 that does
    not decode are refused before any request."""
    kit = Toolkit(emulator_client, {"dev": box.handle}, limits=ToolLimits(max_write=10))
    before = len(emulator.journal)
    for content, encoding, code in [
        ("x" * 11, "text", ErrorCode.TOO_LARGE),
        ("é" * 6, "text", ErrorCode.TOO_LARGE),  # 6 characters, 12 bytes
        (base64.b64encode(b"x" * 11).decode(), "base64", ErrorCode.TOO_LARGE),
        ("x" * 10_000_000, "base64", ErrorCode.TOO_LARGE),
        ("not base64!", "base64", ErrorCode.INVALID_ARGUMENT),
        ("\ud800", "text", ErrorCode.INVALID_ARGUMENT),
    ]:
        arguments = {"sandbox": "dev", "remote": "w", "content": content, "encoding": encoding}
        assert (await refused(kit, "write_file", arguments)).code is code
    assert len(emulator.journal) == before
    ok = await call(kit, "write_file", sandbox="dev", path="w", content="x" * 10)
    assert ok["bytes_written"] == 10


async def test_a_write_into_a_missing_directory_says_so(kit: Toolkit) -> None:
    """Writing under a directory that does not exist is not_found, saying it must exist."""
    error = await refused(
        kit, "write_file", {"sandbox": "dev", "remote": "no/such/dir/f.txt", "content": "x"}
    )
    assert error.code is ErrorCode.NOT_FOUND
    assert "directory must exist" in error.message


# -- errors from the service ---------------------------------------------------------------


async def test_a_missing_file_is_not_found(kit: Toolkit) -> None:
    """A 404 is not_found, not retryable, naming the file."""
    error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "nope.txt"})
    assert (error.code, error.retryable) == (ErrorCode.NOT_FOUND, False)
    assert "/home/user/nope.txt" in error.message


async def test_a_directory_read_as_a_file_is_invalid_argument(kit: Toolkit, box: Box) -> None:
    """The service's 400 for a directory is invalid_argument, suggesting what to check."""
    box.put("/home/user/docs/a.txt", b"a")
    error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "docs"})
    assert (error.code, error.retryable) == (ErrorCode.INVALID_ARGUMENT, False)
    assert "(400)" in error.message and "directory" in error.message


async def test_a_forbidden_file_is_permission_denied(
    emulator_client: sandboxkit.Client, box: Box
) -> None:
    """A 403 (root's files, with the root set to "/") is permission_denied."""
    box.put("/root/secret", b"s")
    kit = Toolkit(emulator_client, {"dev": box.handle}, root="/")
    error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "/root/secret"})
    assert (error.code, error.retryable) == (ErrorCode.PERMISSION_DENIED, False)


async def test_an_expired_token_is_authentication_failed(
    kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """A 401 is authentication_failed, not retryable."""
    box.put("/home/user/a.txt", b"a")
    emulator.expire_token(box.key)
    error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "a.txt"})
    assert (error.code, error.retryable) == (ErrorCode.AUTHENTICATION_FAILED, False)


async def test_a_429_storm_past_the_retries_is_rate_limited(
    kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """More 429s than the client's five attempts: the client retried them all, and the
    tool says rate_limited, retryable."""
    box.put("/home/user/a.txt", b"a")
    emulator.faults.script("files.download", *[Fault.status(429)] * 8)
    error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "a.txt"})
    assert (error.code, error.retryable) == (ErrorCode.RATE_LIMITED, True)
    assert len(emulator.journal_for("files.download")) == 5


async def test_server_errors_and_an_outage_are_unavailable(
    kit: Toolkit, box: Box, emulator: Emulator
) -> None:
    """503s past the retries, and a data plane that is down, are unavailable, retryable;
    the same call succeeds once the service is back."""
    box.put("/home/user/a.txt", b"a")
    emulator.faults.script("files.download", *[Fault.status(503)] * 5)
    error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "a.txt"})
    assert (error.code, error.retryable) == (ErrorCode.UNAVAILABLE, True)
    async with emulator.outage() as down:
        error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "a.txt"})
    assert (error.code, error.retryable) == (ErrorCode.UNAVAILABLE, True)
    assert down.requests
    assert (await call(kit, "read_file", sandbox="dev", path="a.txt"))["content"] == "a"


async def test_an_unexpected_failure_is_internal_and_logged_without_its_text(
    kit: Toolkit, box: Box, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception that is not sandboxkit's becomes internal with a generic message; the
    log names its type and where it came from, never its text (which could hold anything)."""

    secret = "-".join(["sbx", "SECRET", "123"])  # made here: a frame's source line shows

    async def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError(f"token {secret} in a message")

    monkeypatch.setattr(box.handle.files, "read_text", broken)
    caplog.set_level(logging.DEBUG, logger="sandboxkit")
    error = await refused(kit, "read_file", {"sandbox": "dev", "remote": "a.txt"})
    assert (error.code, error.retryable) == (ErrorCode.INTERNAL, False)
    assert secret not in error.message and error.__cause__ is None
    assert error.__suppress_context__
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "sandboxkit.agents")
    assert "RuntimeError" in logged and "broken" in logged
    assert secret not in caplog.text


# -- template tools --------------------------------------------------------------------------


@pytest.fixture
async def build_kit(
    clocked_emulator: Emulator, manual_clock: ManualClock
) -> AsyncIterator[Toolkit]:
    """A toolkit (no sandboxes) on clocked_emulator, whose client's sleeps move its clock."""

    async def clocked_sleep(delay: float) -> None:
        manual_clock.advance(delay)

    async with clocked_emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        client._calls.sleep = clocked_sleep
        client._calls.clock = manual_clock
        yield Toolkit(client, {})


async def test_create_wait_and_read_a_build(
    build_kit: Toolkit, clocked_emulator: Emulator, manual_clock: ManualClock
) -> None:
    """create_template starts a build; wait_for_build says finished=false (with a hint)
    while it runs and returns it once ready; get_build agrees; read_build_logs pages the
    log by next_offset into the same entries the SDK reads, and filters by level."""
    created = await call(
        build_kit, "create_template", name="agent-t", cpu_count=1, memory_mb=512,
        disk_size_mb=1024, commands=["make"],
    )  # fmt: skip
    template_id, build_id = created["template_id"], created["build_id"]
    waiting = await call(
        build_kit, "wait_for_build", template_id=template_id, build_id=build_id, timeout=0.05
    )
    assert waiting["finished"] is False and "wait_for_build again" in waiting["hint"]
    manual_clock.advance(5)
    done = await call(build_kit, "wait_for_build", template_id=template_id, build_id=build_id)
    assert done["finished"] is True and done["build"]["status"] == "ready"
    got = await call(build_kit, "get_build", template_id=template_id, build_id=build_id)
    assert got["build"] == done["build"]

    client = build_kit._setup.client
    expected = [e.message async for e in client.templates.build_logs(template_id, build_id)]
    messages: list[str] = []
    offset = 0
    while True:
        page = await call(
            build_kit, "read_build_logs", template_id=template_id, build_id=build_id,
            offset=offset, limit=2,
        )  # fmt: skip
        assert len(page["entries"]) <= 2
        messages += [e["message"] for e in page["entries"]]
        offset = page["next_offset"]
        if not page["has_more"]:
            break
    assert messages == expected and len(expected) > 2
    errors_only = await call(
        build_kit, "read_build_logs", template_id=template_id, build_id=build_id, level="error"
    )
    assert errors_only["entries"] and {e["level"] for e in errors_only["entries"]} == {"error"}


async def test_list_builds_pages_with_a_bounded_size(
    build_kit: Toolkit, clocked_emulator: Emulator
) -> None:
    """list_builds returns one page, says whether older builds remain, and refuses a page
    size over the bound before any request."""
    created = await call(build_kit, "create_template", name="many", product="sku-small")
    clocked_emulator.add_builds(created["template_id"], 3)
    first = await call(build_kit, "list_builds", template_id=created["template_id"], page_size=3)
    assert len(first["builds"]) == 3 and first["total"] == 4 and first["has_more"] is True
    assert "page=2" in first["hint"]
    second = await call(
        build_kit, "list_builds", template_id=created["template_id"], page=2, page_size=3
    )
    assert len(second["builds"]) == 1 and second["has_more"] is False
    before = len(clocked_emulator.journal)
    arguments = {"template_id": created["template_id"], "page_size": 101}
    assert (await refused(build_kit, "list_builds", arguments)).code is ErrorCode.INVALID_ARGUMENT
    assert len(clocked_emulator.journal) == before


async def test_template_tool_errors(build_kit: Toolkit, clocked_emulator: Emulator) -> None:
    """Half a size, a size and a product, and a bad name are refused before any request;
    an unknown template or build is not_found; a key reused with other arguments is a
    conflict, and reused with the same ones replays the same template."""
    before = len(clocked_emulator.journal)
    for arguments in (
        {"name": "t", "cpu_count": 1},
        {"name": "t", "product": "sku-small", "cpu_count": 1},
        {"name": "bad name!", "product": "sku-small"},
        {"name": "t", "product": "sku-small", "commands": "make"},
    ):
        error = await refused(build_kit, "create_template", arguments)
        assert error.code is ErrorCode.INVALID_ARGUMENT, arguments
    assert len(clocked_emulator.journal) == before
    missing = {"template_id": "tpl-missing", "build_id": "b"}
    assert (await refused(build_kit, "get_build", missing)).code is ErrorCode.NOT_FOUND
    assert (await refused(build_kit, "wait_for_build", missing)).code is ErrorCode.NOT_FOUND
    first = await call(
        build_kit, "create_template", name="k", product="sku-small", idempotency_key="key-1"
    )
    again = await call(
        build_kit, "create_template", name="k", product="sku-small", idempotency_key="key-1"
    )
    assert again["replayed"] is True and again["template_id"] == first["template_id"]
    other = {"name": "k2", "product": "sku-small", "idempotency_key": "key-1"}
    assert (await refused(build_kit, "create_template", other)).code is ErrorCode.CONFLICT
    unknown = {"template_id": first["template_id"], "build_id": "nope"}
    assert (await refused(build_kit, "get_build", unknown)).code is ErrorCode.NOT_FOUND


# -- no credential anywhere ------------------------------------------------------------------


def exception_text(exc: BaseException) -> str:
    """All a traceback of `exc` shows, its whole chain included."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen), repr(seen.args)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


async def test_no_result_error_or_log_line_shows_a_credential(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Every tool run to success and to failure at DEBUG: no result, error (with its
    chain) or log line holds the API key or a sandbox's access token."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="sandboxkit")
    texts: list[str] = []
    async with (
        Emulator(build_seconds=0) as emulator,  # builds are ready at once: no wait
        emulator.client(retry=sandboxkit.RetryPolicy.no_delay(2)) as client,
    ):
        box = await new_box(emulator, client)
        token = (await emulator.create_sandbox())["data"]["sandbox_access_token"]
        box.put("/home/user/a.txt", b"hello")
        (tmp_path / "up.txt").write_bytes(b"up")
        kit = Toolkit(client, {"dev": box.handle}, workspace=tmp_path)
        template = await kit.call("create_template", {"name": "s", "product": "sku-small"})
        ids = {"template_id": template["template_id"], "build_id": template["build_id"]}
        runs: list[tuple[str, dict[str, Any]]] = [
            ("list_sandboxes", {}),
            ("read_file", {"sandbox": "dev", "remote": "a.txt"}),
            ("read_file", {"sandbox": "dev", "remote": "missing"}),
            ("write_file", {"sandbox": "dev", "remote": "w.txt", "content": "w"}),
            ("upload_file", {"sandbox": "dev", "source": "up.txt", "remote": "up.txt"}),
            ("download_file", {"sandbox": "dev", "remote": "a.txt", "dest": "a.txt"}),
            ("download_file", {"sandbox": "dev", "remote": "gone", "dest": "g"}),
            ("list_builds", {"template_id": ids["template_id"]}),
            ("get_build", ids),
            ("read_build_logs", ids),
            ("wait_for_build", {**ids, "timeout": 5}),
            ("get_build", {"template_id": "none", "build_id": "x"}),
        ]
        emulator.expire_token(box.key)
        runs.append(("read_file", {"sandbox": "dev", "remote": "a.txt"}))
        for name, arguments in runs:
            try:
                texts.append(json.dumps(await kit.call(name, arguments)))
            except ToolError as error:
                texts += [json.dumps(error.to_json()), exception_text(error)]
        texts.append(repr(kit))
        texts += [json.dumps(t.to_openai()) for t in kit.tools]
    texts += [r.getMessage() for r in caplog.records]
    texts.append(caplog.text)
    secrets = [emulator.api_key, token, box.handle._host.token]
    found = [s for s in secrets if any(s in text for text in texts)]
    assert found == []
    assert len(texts) > 20


# -- where the package sits --------------------------------------------------------------------

AGENTS = Path(sandboxkit.__file__).parent / "agents"


def test_the_toolkit_uses_only_the_public_sdk() -> None:
    """The toolkit's modules import from the SDK only `sandboxkit`, `sandboxkit.errors`,
    `sandboxkit.models` and `sandboxkit.rules` (and each other): nothing private of the SDK."""
    allowed = {"sandboxkit", "sandboxkit.errors", "sandboxkit.models", "sandboxkit.rules"}
    allowed.add("sandboxkit.agents")
    for path in sorted(AGENTS.glob("*.py")):
        if path.name.startswith("_mcp"):
            continue  # the MCP server's, with rules of its own
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = "sandboxkit" if node.level == 2 else "sandboxkit.agents"
                names = [f"{target}.{node.module}" if node.module else target]
                if not node.module:  # `from .. import errors`: modules by name
                    names = [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("sandboxkit"):
                    inside = name.startswith("sandboxkit.agents.")
                    assert name in allowed or inside, f"{path.name} imports {name}"


def test_import_sandboxkit_does_not_load_the_toolkit() -> None:
    """`import sandboxkit` (and using its names) never imports `sandboxkit.agents`."""
    code = (
        "import sys, sandboxkit; sandboxkit.Client; sandboxkit.Sandbox; "
        "assert 'sandboxkit.agents' not in sys.modules, 'loaded'; "
        "import sandboxkit.agents; assert 'sandboxkit.agents' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()


async def test_a_tool_without_arguments_takes_none_and_a_huge_name_is_shortened(
    kit: Toolkit,
) -> None:
    """None stands for no arguments; an unknown tool's name is quoted shortened."""
    assert (await kit.call("list_sandboxes", None))["sandboxes"][0]["name"] == "dev"
    error = await refused(kit, "x" * 100_000, {})
    assert error.code is ErrorCode.INVALID_ARGUMENT and len(error.message) < 400


def test_the_workspace_path_is_never_shown(kit: Toolkit) -> None:
    """An error message holding the workspace's absolute path (as an SDK message about a
    local file may) shows `<workspace>` instead; others are kept as they are."""
    workspace = str(kit._setup.workspace)
    error = ToolError(ErrorCode.INVALID_ARGUMENT, f"dest={workspace}/a: no", retryable=False)
    assert kit._scrubbed(error).message == "dest=<workspace>/a: no"
    plain = ToolError(ErrorCode.NOT_FOUND, "nope")
    assert kit._scrubbed(plain) is plain
