"""The agent toolkit's confinement, over real sockets against the emulator: hostile sandbox
paths refused before any request, copies that stay inside the local workspace (links
included), size caps on copies, and a cancelled download that leaves nothing behind."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit.agents import ErrorCode, ToolError, Toolkit, ToolLimits
from sandboxkit.emulator import Emulator

from ..files_support import CHUNKED, Box, new_box, payload


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty local workspace directory, beside (not above) other test files."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the workspace holding a file a model must never reach."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_bytes(b"outside secret")
    return path


@pytest.fixture
def copy_kit(emulator_client: sandboxkit.Client, box: Box, workspace: Path) -> Toolkit:
    """A toolkit with sandbox "dev" and the workspace."""
    return Toolkit(emulator_client, {"dev": box.handle}, workspace=workspace)


async def refused(kit: Toolkit, name: str, arguments: Any) -> ToolError:
    """The ToolError `kit.call` raises."""
    with pytest.raises(ToolError) as caught:
        await kit.call(name, arguments)
    return caught.value


def listing(path: Path) -> list[str]:
    """Every file and directory under `path`, hidden ones included, relative."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# -- sandbox paths ---------------------------------------------------------------------------

HOSTILE_PATHS: list[tuple[Any, ErrorCode]] = [
    ("../etc/passwd", ErrorCode.INVALID_PATH),
    ("../../../../etc/passwd", ErrorCode.INVALID_PATH),
    ("/etc/passwd", ErrorCode.INVALID_PATH),
    ("/home/user/../../root/.ssh/id_rsa", ErrorCode.INVALID_PATH),
    ("/home/username/x", ErrorCode.INVALID_PATH),
    ("a\x00.txt", ErrorCode.INVALID_PATH),
    ("a\r\nHost: evil", ErrorCode.INVALID_PATH),
    ("x" * 10_000, ErrorCode.INVALID_PATH),
    ("", ErrorCode.INVALID_PATH),
    ("docs/", ErrorCode.INVALID_PATH),
    (5, ErrorCode.INVALID_ARGUMENT),
    (["a.txt"], ErrorCode.INVALID_ARGUMENT),
    (None, ErrorCode.INVALID_ARGUMENT),
    ({"path": "a.txt"}, ErrorCode.INVALID_ARGUMENT),
]


@pytest.mark.parametrize(("path", "code"), HOSTILE_PATHS)
async def test_hostile_sandbox_paths_are_refused_before_any_request(
    copy_kit: Toolkit, emulator: Emulator, path: Any, code: ErrorCode
) -> None:
    """Escapes, other roots, NUL, CR/LF, a 10,000-character path, empty and directory
    names, and non-strings are refused by every tool that takes a sandbox path, and the
    emulator's journal shows no request."""
    before = len(emulator.journal)
    calls = [
        ("read_file", {"sandbox": "dev", "remote": path}),
        ("write_file", {"sandbox": "dev", "remote": path, "content": "x"}),
        ("download_file", {"sandbox": "dev", "remote": path, "dest": "x"}),
    ]
    for name, arguments in calls:
        error = await refused(copy_kit, name, arguments)
        assert (error.code, error.retryable) == (code, False), name
        assert len(error.message) < 300
    assert len(emulator.journal) == before


async def test_paths_that_fold_back_under_the_root_are_used(copy_kit: Toolkit, box: Box) -> None:
    """`..` that stays under the root is folded, and the folded path is what is read."""
    box.put("/home/user/b.txt", b"b")
    result = await copy_kit.call("read_file", {"sandbox": "dev", "remote": "/home/user/a/../b.txt"})
    assert (result["remote"], result["content"]) == ("/home/user/b.txt", "b")


# -- upload_file -----------------------------------------------------------------------------


async def test_upload_copies_a_workspace_file_with_progress(
    copy_kit: Toolkit, box: Box, workspace: Path
) -> None:
    """A workspace file lands in the sandbox byte for byte; progress reaches its size."""
    data = payload(300_000, seed=11)
    (workspace / "in").mkdir()
    (workspace / "in" / "data.bin").write_bytes(data)
    seen: list[tuple[int, int | None]] = []
    result = await copy_kit.call(
        "upload_file",
        {"sandbox": "dev", "source": "in/data.bin", "remote": "data.bin"},
        progress=lambda done, total: seen.append((done, total)),
    )
    assert result == {
        "sandbox": "dev",
        "source": "in/data.bin",
        "remote": "/home/user/data.bin",
        "bytes": len(data),
    }
    assert box.get("/home/user/data.bin") == data
    assert seen and seen[-1] == (len(data), len(data))


@pytest.mark.parametrize(
    ("local_path", "code"),
    [
        ("../outside/secret.txt", ErrorCode.INVALID_PATH),
        ("/etc/passwd", ErrorCode.INVALID_PATH),
        ("~/.ssh/id_rsa", ErrorCode.INVALID_PATH),
        ("in/../../outside/secret.txt", ErrorCode.INVALID_PATH),
        ("link-out/secret.txt", ErrorCode.INVALID_PATH),
        ("secret-link", ErrorCode.INVALID_PATH),
        ("fifo", ErrorCode.INVALID_PATH),
        ("a-dir", ErrorCode.INVALID_PATH),
        ("missing.txt", ErrorCode.NOT_FOUND),
        (7, ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_uploads_from_outside_the_workspace_are_refused(
    copy_kit: Toolkit,
    emulator: Emulator,
    workspace: Path,
    outside: Path,
    local_path: Any,
    code: ErrorCode,
) -> None:
    """Escapes, absolute and home paths, a directory link or a file link leading outside,
    a FIFO and a directory are refused, and nothing is sent; no message shows where the
    links lead."""
    (workspace / "link-out").symlink_to(outside, target_is_directory=True)
    (workspace / "secret-link").symlink_to(outside / "secret.txt")
    os.mkfifo(workspace / "fifo")
    (workspace / "a-dir").mkdir()
    before = len(emulator.journal)
    error = await refused(
        copy_kit, "upload_file", {"sandbox": "dev", "source": local_path, "remote": "x"}
    )
    assert error.code is code
    assert str(outside) not in error.message and str(workspace) not in error.message
    assert len(emulator.journal) == before


async def test_a_link_that_stays_inside_the_workspace_is_followed(
    copy_kit: Toolkit, box: Box, workspace: Path
) -> None:
    """A link to another workspace file is fine: what it names is inside."""
    (workspace / "real.txt").write_bytes(b"real")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    await copy_kit.call("upload_file", {"sandbox": "dev", "source": "alias.txt", "remote": "r"})
    assert box.get("/home/user/r") == b"real"


async def test_an_upload_over_the_copy_cap_sends_nothing(
    emulator_client: sandboxkit.Client, box: Box, emulator: Emulator, workspace: Path
) -> None:
    """A local file over max_copy is too_large, before any request."""
    kit = Toolkit(
        emulator_client, {"dev": box.handle}, workspace=workspace, limits=ToolLimits(max_copy=100)
    )
    (workspace / "big").write_bytes(b"x" * 101)
    before = len(emulator.journal)
    error = await refused(kit, "upload_file", {"sandbox": "dev", "source": "big", "remote": "b"})
    assert error.code is ErrorCode.TOO_LARGE and "101 bytes" in error.message
    assert len(emulator.journal) == before


# -- download_file ---------------------------------------------------------------------------


async def test_download_lands_in_the_workspace_making_its_directories(
    copy_kit: Toolkit, box: Box, workspace: Path
) -> None:
    """A sandbox file lands under the workspace (missing directories made) with its
    sha256; the result names it relative to the workspace."""
    data = payload(500_000, seed=12)
    box.put("/home/user/out.bin", data)
    result = await copy_kit.call(
        "download_file", {"sandbox": "dev", "remote": "out.bin", "dest": "new/dir/out.bin"}
    )
    assert json.loads(json.dumps(result)) == result
    assert result == {
        "sandbox": "dev",
        "remote": "/home/user/out.bin",
        "dest": "new/dir/out.bin",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert (workspace / "new/dir/out.bin").read_bytes() == data
    assert listing(workspace) == ["new", "new/dir", "new/dir/out.bin"]


async def test_downloads_never_write_outside_or_through_a_link(
    copy_kit: Toolkit, box: Box, emulator: Emulator, workspace: Path, outside: Path
) -> None:
    """A destination through a directory link leading out, a destination that is itself
    a link (even one pointing inside), an escape, an absolute path and a file used as a
    directory are refused before any request; the outside directory and the link's target
    are untouched, and no message shows where a link leads."""
    box.put("/home/user/a.txt", b"from the sandbox")
    (workspace / "link-out").symlink_to(outside, target_is_directory=True)
    (workspace / "inside.txt").write_bytes(b"inside")
    (workspace / "dest-link").symlink_to(workspace / "inside.txt")
    (workspace / "out-link").symlink_to(outside / "secret.txt")
    before = len(emulator.journal)
    for local_path in (
        "link-out/secret.txt",
        "link-out/new/deeper.txt",
        "dest-link",
        "out-link",
        "../outside/secret.txt",
        str(outside / "secret.txt"),
        "inside.txt/x",
    ):
        arguments = {"sandbox": "dev", "remote": "a.txt", "dest": local_path}
        error = await refused(copy_kit, "download_file", arguments)
        assert error.code is ErrorCode.INVALID_PATH, local_path
        if str(outside) not in local_path:  # a message quotes the model's own path only
            assert str(outside) not in error.message and str(workspace) not in error.message
    assert len(emulator.journal) == before
    assert listing(outside) == ["secret.txt"]
    assert (outside / "secret.txt").read_bytes() == b"outside secret"
    assert (workspace / "inside.txt").read_bytes() == b"inside"
    assert (workspace / "dest-link").is_symlink()


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_download_over_the_copy_cap_leaves_nothing(
    emulator: Emulator,
    emulator_client: sandboxkit.Client,
    workspace: Path,
    chunked: bool,
) -> None:
    """A file over max_copy is too_large whether its size is announced (refused from the
    answer's head, `files.download(max_size=)`) or not (stopped one byte past the cap), in
    one GET; no file or partial file stays in the workspace."""
    box = await new_box(emulator, emulator_client, CHUNKED if chunked else None)
    box.put("/home/user/big.bin", payload(3 << 20, seed=13))
    kit = Toolkit(
        emulator_client,
        {"dev": box.handle},
        workspace=workspace,
        limits=ToolLimits(max_copy=1 << 20),
    )
    error = await refused(
        kit, "download_file", {"sandbox": "dev", "remote": "big.bin", "dest": "big.bin"}
    )
    assert error.code is ErrorCode.TOO_LARGE
    assert ("3145728 bytes" in error.message) is not chunked
    assert listing(workspace) == []
    assert len(emulator.journal_for("files.download")) == 1


async def test_a_cancelled_download_leaves_no_file(
    copy_kit: Toolkit, box: Box, workspace: Path
) -> None:
    """Cancelling download_file mid-transfer raises CancelledError (not a ToolError) and
    leaves neither the file nor a partial file in the workspace."""
    box.put("/home/user/big.bin", payload(8 << 20, seed=14))
    moved = asyncio.Event()
    during: list[list[str]] = []

    def progress(done: int, total: int | None) -> None:
        if not moved.is_set():
            during.append(listing(workspace))
        moved.set()

    task = asyncio.create_task(
        copy_kit.call(
            "download_file",
            {"sandbox": "dev", "remote": "big.bin", "dest": "dl/big.bin"},
            progress=progress,
        )
    )
    await moved.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ".big.bin.part" in "".join(during[0])  # it was half-written when cancelled
    assert listing(workspace) == ["dl"]


async def test_without_a_workspace_the_copy_tools_are_absent(
    emulator_client: sandboxkit.Client, box: Box
) -> None:
    """A toolkit without a workspace has no upload_file or download_file to call."""
    kit = Toolkit(emulator_client, {"dev": box.handle})
    arguments = {"sandbox": "dev", "remote": "a", "dest": "a"}
    error = await refused(kit, "download_file", arguments)
    assert error.code is ErrorCode.INVALID_ARGUMENT and "No tool" in error.message


async def test_the_former_argument_names_are_still_taken_and_never_shown(
    copy_kit: Toolkit, box: Box, workspace: Path
) -> None:
    """A model that calls with the names the tools took before issue 39 (`path`,
    `local_path`, `limit`) is served as with the SDK's (`remote`, `source`, `dest`,
    `length`); no schema shows a former name; a former name given beside its new one is
    refused as no argument of the tool."""
    box.put("/home/user/a.txt", b"abcdef")
    (workspace / "in.txt").write_bytes(b"from the workspace")
    read = await copy_kit.call("read_file", {"sandbox": "dev", "path": "a.txt", "limit": 4})
    assert (read["remote"], read["content"], read["next_offset"]) == ("/home/user/a.txt", "abcd", 4)
    down = await copy_kit.call(
        "download_file", {"sandbox": "dev", "path": "a.txt", "local_path": "a"}
    )
    assert (down["remote"], down["dest"]) == ("/home/user/a.txt", "a")
    assert (workspace / "a").read_bytes() == b"abcdef"
    up = {"sandbox": "dev", "local_path": "in.txt", "path": "up.txt"}
    assert (await copy_kit.call("upload_file", up))["remote"] == "/home/user/up.txt"
    assert box.get("/home/user/up.txt") == b"from the workspace"
    written = await copy_kit.call("write_file", {"sandbox": "dev", "path": "w.txt", "content": "w"})
    assert written["remote"] == "/home/user/w.txt"
    for tool in copy_kit.tools:
        assert not {"path", "local_path"} & set(tool.input_schema["properties"]), tool.name
        assert "local_path" not in tool.description
    assert (
        "limit" not in {t.name: t for t in copy_kit.tools}["read_file"].input_schema["properties"]
    )
    both = {"sandbox": "dev", "remote": "a.txt", "path": "b.txt"}
    error = await refused(copy_kit, "read_file", both)
    assert error.code is ErrorCode.INVALID_ARGUMENT and "path: is not an argument" in error.message
