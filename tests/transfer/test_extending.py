"""Adding a data-plane operation takes a model, one short function over `DataPlane`, and an
emulator route: shown with a made-up `GET /files/stat` living in tests/stat_operation.py."""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit.emulator import Fault

from ..stat_operation import FileStat, StatEmulator, stat

MODULE = Path(__file__).parent.parent / "stat_operation.py"


def code_lines(path: Path) -> int:
    """Lines of code: neither blank, nor comments, nor docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            docstrings.update(range(first.lineno, (first.end_lineno or 0) + 1))
    lines = path.read_text().splitlines()
    return sum(
        1
        for number, text in enumerate(lines, 1)
        if text.strip() and not text.strip().startswith("#") and number not in docstrings
    )


def test_the_whole_operation_is_under_sixty_lines() -> None:
    """Model, SDK function and emulator route together stay under 60 lines of code."""
    assert code_lines(MODULE) < 60


@pytest.fixture
async def stat_emulator() -> AsyncIterator[StatEmulator]:
    """An emulator that also serves the made-up GET /files/stat."""
    async with StatEmulator() as running:
        yield running


async def test_the_new_operation_gets_everything_the_call_path_gives(
    stat_emulator: StatEmulator,
) -> None:
    """It sends the host's token and identity encoding, is retried through a 502 and a 429
    (that halves the host's window), checks the path before any request, and decodes errors
    by status, all without code of its own for any of it."""
    body = await stat_emulator.create_sandbox()
    root = stat_emulator.sandbox_root(body["data"]["sandbox_key"])
    (root / "home/user/f.bin").write_bytes(b"x" * 1234)
    stat_emulator.faults.script("files.stat", Fault.status(502), Fault.status(429, retry_after="0"))
    async with stat_emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        sbx = client.sandbox_from_response(body)
        assert await stat(sbx, "/home/user/f.bin") == FileStat("/home/user/f.bin", 1234, "file")
        assert (await stat(sbx, "/home/user")).type == "directory"
        with pytest.raises(sandboxkit.NotFoundError):
            await stat(sbx, "/home/user/missing")
        with pytest.raises(sandboxkit.ValidationError):
            await stat(sbx, "relative/path")
        window = client._transport.hosts.get(sbx._host)
        assert window is not None and window.window.size < window.window.maximum
    journal = stat_emulator.journal_for("files.stat")
    assert [r.status for r in journal] == [502, 429, 200, 200, 404]
    token = body["data"]["sandbox_access_token"]
    assert {r.headers.get("X-Access-Token") for r in journal} == {token}
    assert {r.headers.get("Accept-Encoding") for r in journal} == {"identity"}
