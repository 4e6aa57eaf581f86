"""Helpers shared by the CLI tests: an emulator on a loop thread, and running the CLI on it.

The CLI runs its own event loop (`asyncio.run`), so the emulator runs in a background thread
with a loop of its own; click's `CliRunner` then drives the CLI in-process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from click.testing import CliRunner, Result

from sandboxkit.cli import cli
from sandboxkit.emulator import Emulator

T = TypeVar("T")


class EmulatorThread:
    """An `Emulator` served by an event loop in a daemon thread."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.emu: Emulator

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the emulator's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)

    def __enter__(self) -> EmulatorThread:
        self._thread.start()

        async def start() -> Emulator:
            emu = Emulator(**self._options)
            await emu.start()
            return emu

        self.emu = self.call(start())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.call(self.emu.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()

    def env(self) -> dict[str, str]:
        """Environment pointing the CLI's control-plane commands at this emulator."""
        return {"SANDBOXKIT_API_KEY": self.emu.api_key, "SANDBOXKIT_BASE_URL": self.emu.base_url}

    def sandbox_env(self) -> dict[str, str]:
        """Environment naming a fresh sandbox for the `files` commands."""
        data = self.call(self.emu.create_sandbox())["data"]
        return {
            "SANDBOXKIT_SANDBOX_KEY": data["sandbox_key"],
            "SANDBOXKIT_SANDBOX_DOMAIN": data["domain"],
            "SANDBOXKIT_SANDBOX_TOKEN": data["sandbox_access_token"],
            "SANDBOXKIT_DATA_PLANE_SCHEME": "http",
        }


def invoke(emu: EmulatorThread, *args: str, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process with the emulator's settings in the environment."""
    return CliRunner().invoke(cli, list(args), env={**emu.env(), **(env or {})})


def assert_one_line_error(result: Result, code: int, *fragments: str) -> None:
    """The failure is exactly one line on stderr, with no traceback."""
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]
