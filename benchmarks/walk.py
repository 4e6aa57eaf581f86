"""The modules one default download walks: how many of sandboxkit's files its code runs in.

A profile hook (`sys.setprofile`, and `threading.setprofile` for the worker threads that
write and hash the file) is installed before anything runs, and records the `co_filename`
of every Python frame entered, on any thread, while one call is in flight:
`files.download(remote, dest)` with the client's defaults (`files` taken from the sandbox
handle before), of a 16 KiB file from
the in-process emulator. Only files of the sandboxkit package count, the emulator's own
(`sandboxkit/emulator/`) excluded; code run before the call (the client, the sandbox
handle, the emulator) is not recorded.

Two walks are reported: the first download of a fresh client ("cold": its sessions, the
host's pool and lean route are made on the way), and the next one ("warm", the steady
state every later download pays). Issue 39 counts the warm walk.

Usage::

    python benchmarks/walk.py            # both walks, each module listed
    python benchmarks/walk.py --json     # {"cold": [...], "warm": [...]}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import sandboxkit
from sandboxkit.emulator import Emulator

PACKAGE = Path(sandboxkit.__file__).resolve().parent
EMULATOR = PACKAGE / "emulator"
SIZE = 16 * 1024


class Walk:
    """The sandboxkit files whose frames were entered while `recording` was on."""

    def __init__(self) -> None:
        self.recording = False
        self.files: set[str] = set()

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.recording and event == "call":
            self.files.add(frame.f_code.co_filename)

    def modules(self) -> list[str]:
        found = []
        for name in self.files:
            path = Path(name).resolve()
            if path.is_relative_to(PACKAGE) and not path.is_relative_to(EMULATOR):
                found.append(path.relative_to(PACKAGE).as_posix())
        return sorted(found)


async def walks(work: Path) -> dict[str, list[str]]:
    """Download the same small file twice; each call's walk."""
    walk = Walk()
    sys.setprofile(walk.hook)
    threading.setprofile(walk.hook)
    try:
        async with Emulator() as emu:
            body = await emu.create_sandbox()
            key = body["data"]["sandbox_key"]
            target = emu.sandbox_root(key) / "home" / "user" / "small.bin"
            target.write_bytes(bytes(range(256)) * (SIZE // 256))
            async with emu.client() as client:
                files = client.sandbox_from_response(body).files  # the handle is not the call
                found: dict[str, list[str]] = {}
                for name in ("cold", "warm"):
                    walk.files.clear()
                    walk.recording = True
                    result = await files.download("/home/user/small.bin", work / name)
                    walk.recording = False
                    assert result.size == SIZE, result
                    found[name] = walk.modules()
                return found
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/walk.py", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sandboxkit-walk-") as tmp:
        found = asyncio.run(walks(Path(tmp)))
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for name, modules in found.items():
        print(f"{name}: {len(modules)} modules")
        for module in modules:
            print(f"  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
