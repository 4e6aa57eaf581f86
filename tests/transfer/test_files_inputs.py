"""Bad input is refused before any request; good input reaches the server exactly."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit.emulator import Emulator, Fault

from ..files_support import Box, dir_listing, new_box, payload, sha

BAD_REMOTE = ["", "home/user/x", "/home/./x", "/home/../etc/passwd", "/a/b/..", "/x\x00y", None, 7]


@pytest.mark.parametrize("remote", BAD_REMOTE)
async def test_bad_remote_paths_send_nothing(
    emulator: Emulator, box: Box, tmp_path: Path, remote: Any
) -> None:
    """Empty, relative, `.`/`..`, NUL and non-string paths raise ValidationError, offline."""
    with pytest.raises(sandboxkit.ValidationError, match="remote path"):
        await box.files.download(remote, tmp_path / "x")
    with pytest.raises(sandboxkit.ValidationError, match="remote path"):
        await box.files.read_bytes(remote)
    with pytest.raises(sandboxkit.ValidationError, match="remote path"):
        box.files.iter_bytes(remote)
    with pytest.raises(sandboxkit.ValidationError, match="remote path"):
        await box.files.upload(remote, b"x")
    assert emulator.journal == []
    assert dir_listing(tmp_path) == []


async def test_bad_local_arguments_send_nothing(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """A directory as dest, a missing dest directory, a missing source file and other bad
    arguments raise ValidationError before any request."""
    text_file = io.StringIO("text")
    cases: list[tuple[Any, str]] = [
        (box.files.download("/home/user/x", tmp_path), "is a directory"),
        (box.files.download("/home/user/x", tmp_path / "no" / "x"), "does not exist"),
        (box.files.download("/home/user/x", 42), "path"),
        (box.files.download("/home/user/x", tmp_path / "x", chunk_size=0), "chunk_size"),
        (box.files.read_bytes("/home/user/x", username=""), "username"),
        (box.files.upload("/home/user/x", tmp_path / "missing.bin"), "does not exist"),
        (box.files.upload("/home/user/x", tmp_path), "not a regular file"),
        (box.files.upload("/home/user/x", text_file), "binary mode"),
        (box.files.upload("/home/user/x", 12345), "not a path"),
        (box.files.upload("/home/user/", b"x"), "must name a file"),
    ]
    for call, message in cases:
        with pytest.raises(sandboxkit.ValidationError, match=message):
            await call
    assert emulator.journal == []
    assert dir_listing(tmp_path) == []


@pytest.mark.parametrize(
    "name",
    [
        "with space.txt",
        "hash#frag.txt",
        "amp&x=1.txt",
        "q?uery.txt",
        "pct%20lit.txt",
        "plus+semi;.txt",
        "caf\u00e9-\u65e5\u672c-\U0001f600.txt",
    ],
)
async def test_query_reaches_the_server_exactly(emulator: Emulator, box: Box, name: str) -> None:
    """Spaces, #, &, ?, %, +, ; and non-ASCII arrive as the exact path, both directions."""
    remote = f"/home/user/{name}"
    await box.files.upload(remote, b"payload")
    assert box.get(remote) == b"payload"
    assert await box.files.read_bytes(remote) == b"payload"
    assert [r.query["path"] for r in emulator.journal] == [remote, remote]
    assert [r.route for r in emulator.journal] == ["files.upload", "files.download"]


async def test_username_is_passed_through(emulator: Emulator, box: Box) -> None:
    """`username` goes to the query; the emulator lets only root read /root."""
    box.put("/root/secret.txt", b"s")
    with pytest.raises(sandboxkit.PermissionDeniedError):
        await box.files.read_bytes("/root/secret.txt")
    assert await box.files.read_bytes("/root/secret.txt", username="root") == b"s"
    await box.files.upload("/root/up.txt", b"u", username="root")
    assert [r.query.get("username") for r in emulator.journal] == [None, "root", "root"]


async def test_token_stays_on_its_host_and_out_of_reprs(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Each sandbox's requests carry its own token only; reprs never show a token."""
    first, second = (
        await new_box(emulator, emulator_client),
        await new_box(emulator, emulator_client),
    )
    first.put("/home/user/a", b"1")
    second.put("/home/user/a", b"2")
    assert await first.files.read_bytes("/home/user/a") == b"1"
    assert await second.files.read_bytes("/home/user/a") == b"2"
    for record, sbx in zip(emulator.journal, (first, second), strict=True):
        assert record.sandbox_key == sbx.key
        assert record.headers["X-Access-Token"] == sbx.handle._host.token
        assert "Authorization" not in record.headers
    for shown in (repr(first.handle), repr(first.files), str(first.handle)):
        assert first.handle._host.token not in shown


async def test_transfers_over_tls(tls_emulator: Emulator, tmp_path: Path) -> None:
    """Download with a resume and upload both work over TLS; an untrusting client refuses."""
    async with tls_emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as tls_client:
        sbx = await new_box(tls_emulator, tls_client)
        data = payload(512 * 1024)
        await sbx.files.upload("/home/user/t.bin", data)
        tls_emulator.faults.script("files.download", Fault.cut(after_bytes=100_000))
        result = await sbx.files.download("/home/user/t.bin", tmp_path / "t.bin")
        assert (result.sha256, result.resumes) == (sha(data), 1)
        assert tls_emulator.data_plane_scheme == "https"
    async with tls_emulator.client(ssl=True, retry=sandboxkit.RetryPolicy.none()) as untrusting:
        body = await tls_emulator.create_sandbox()
        with pytest.raises(sandboxkit.APIConnectionError, match="certificate"):
            await untrusting.sandbox_from_response(body).files.read_bytes("/home/user/t.bin")
