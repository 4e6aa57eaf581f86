"""The one scene each framework adapter's end-to-end test plays against the emulator.

A model writes a file, reads it back, and asks for two hostile paths; the test collects
every tool output the framework gave its model (and everything else it showed it) and
`check_scene` judges them: the bytes on the emulator's side, the text the model read, the
errors as results with their codes, no request sent for a refused path, and no secret
anywhere the model could see.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs

import sandboxkit
from sandboxkit.agents import Toolkit
from sandboxkit.emulator import Emulator

CONTENT = "héllo from the model\nline two\n"

# What the scripted model asks for, in order, in every framework's test.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"sandbox": "dev", "remote": "notes.txt", "content": CONTENT}),
    ("read_file", {"sandbox": "dev", "remote": "notes.txt"}),
    ("read_file", {"sandbox": "dev", "remote": "../../etc/passwd"}),
    ("write_file", {"sandbox": "dev", "remote": "evil\x00.txt", "content": "x"}),
]
FINAL = "done"


@attrs.frozen
class Stage:
    """A toolkit over one emulator sandbox named "dev", and what the model must never see."""

    emulator: Emulator
    kit: Toolkit
    root: Path  # the sandbox's `/`, on the emulator's side
    secrets: tuple[str, ...]


async def stage(emulator: Emulator, client: sandboxkit.Client) -> Stage:
    """A new sandbox and a toolkit with it as "dev" (no workspace)."""
    body = await emulator.create_sandbox()
    data = body["data"]
    kit = Toolkit(client, {"dev": client.sandbox_from_response(body)})
    secrets = (data["sandbox_access_token"], emulator.api_key)
    return Stage(emulator, kit, emulator.sandbox_root(data["sandbox_key"]), secrets)


def check_scene(stage: Stage, outputs: list[Any], seen: str) -> None:
    """Judge a played scene.

    Args:
        stage: what it was played on.
        outputs: each tool output the model was given, in order, as parsed JSON.
        seen: everything the framework showed its model (messages, tool outputs, tool
            definitions), as text.
    """
    data = CONTENT.encode()
    assert (stage.root / "home/user/notes.txt").read_bytes() == data
    written, read, escaped, nul = outputs
    assert written == {
        "sandbox": "dev",
        "remote": "/home/user/notes.txt",
        "bytes_written": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert read["content"] == CONTENT and read["eof"] is True, read
    assert read["sha256"] == written["sha256"], read  # the whole file: its hash to edit by
    for refused in (escaped, nul):
        assert set(refused) == {"error"}, refused
        assert refused["error"]["code"] == "invalid_path", refused
        assert refused["error"]["retryable"] is False, refused
        assert refused["error"]["message"], refused
    # The refused paths sent nothing: one upload (the write), one download (the read).
    assert len(stage.emulator.journal_for("files.upload")) == 1
    assert len(stage.emulator.journal_for("files.download")) == 1
    assert not (stage.root / "etc/passwd").exists()
    for secret in stage.secrets:
        assert secret not in seen
        assert json.dumps(secret)[1:-1] not in seen  # nor in an escaped JSON string
