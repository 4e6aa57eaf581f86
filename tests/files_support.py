"""Helpers shared by the file-transfer tests: IDCs, a sandbox with its directory, payloads."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import attrs

import sandboxkit
from sandboxkit.emulator import Emulator, Idc
from sandboxkit.resources.files import Files

RESUME = "us-denver-1"
NO_RESUME = "eu-lite"
CHUNKED = "ap-chunked"
UPLOAD_LIMIT = 10 * 2**20


def idcs() -> list[Idc]:
    """A resume IDC (default), a no-resume IDC with an upload limit, a chunked IDC."""
    return [
        Idc(RESUME),
        Idc(NO_RESUME, supports_resume=False, max_upload_bytes=UPLOAD_LIMIT),
        Idc(CHUNKED, chunked_downloads=True),
    ]


@attrs.frozen
class Box:
    """A sandbox handle with the emulator-side directory behind its `/`."""

    handle: sandboxkit.Sandbox
    key: str
    root: Path

    @property
    def files(self) -> Files:
        """The handle's file operations."""
        return self.handle.files

    def put(self, remote: str, data: bytes) -> None:
        """Place a file in the sandbox directly, without the SDK."""
        target = self.root / remote.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def get(self, remote: str) -> bytes:
        """Read a sandbox file directly, without the SDK."""
        return (self.root / remote.lstrip("/")).read_bytes()


async def new_box(emu: Emulator, client: sandboxkit.Client, idc: str | None = None) -> Box:
    """Create a sandbox in the emulator and a handle on it."""
    body = await emu.create_sandbox(idc)
    key = body["data"]["sandbox_key"]
    return Box(client.sandbox_from_response(body), key, emu.sandbox_root(key))


def payload(size: int, seed: int = 0) -> bytes:
    """`size` reproducible pseudo-random bytes."""
    return random.Random(seed).randbytes(size)


def sha(data: bytes) -> str:
    """Hex SHA-256."""
    return hashlib.sha256(data).hexdigest()


def dir_listing(path: Path) -> list[str]:
    """Sorted names in a directory (temporary files included)."""
    return sorted(os.listdir(path))
