"""Helpers shared by the CLI tests: an emulator on a loop thread, and running the CLI on it.

The CLI runs its own event loop (`asyncio.run`), so the emulator runs in a background thread
with a loop of its own; click's `CliRunner` then drives the CLI in-process, and
`cli_process` runs it as a child whose output `Lines` reads as it comes. `screen` is what a
terminal shows of what the CLI wrote to it.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import IO, Any, TypeVar

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
    """The failure is exactly one line on stderr (no blank line before or after it), with no
    traceback."""
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, repr(result.stderr)
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


# What rich writes to a terminal: text, CR, LF and CSI sequences (SGR colours, cursor show
# and hide, erase in line, cursor up/down, column).
_CONTROL = re.compile(r"\x1b\[(\??)([0-9;]*)([A-Za-z])|\r|\n")


def screen(text: str) -> list[str]:
    """The lines a terminal shows after receiving `text` (trailing spaces and the empty
    line the cursor ends on dropped): what a person sees, with the cursor moves applied."""
    lines = [""]
    row = col = 0

    def put(chunk: str) -> None:
        line = lines[row].ljust(col)
        lines[row] = line[:col] + chunk + line[col + len(chunk) :]

    position = 0
    for match in _CONTROL.finditer(text):
        put(text[position : match.start()])
        col += match.start() - position
        position = match.end()
        control = match.group(0)
        if control == "\r":
            col = 0
        elif control == "\n":  # a tty's output processing turns LF into CR LF
            row, col = row + 1, 0
        else:
            private, number, final = match.groups()
            if final == "m" or (private and final in "hl"):
                continue  # colours, cursor shown or hidden
            count = int(number or "1") if final in "ABG" else int(number or "0")
            if final == "K":
                line = lines[row]
                kept = {0: line[:col], 1: " " * (col + 1) + line[col + 1 :]}
                lines[row] = kept.get(count, "")
            elif final == "A":
                row = max(0, row - count)
            elif final == "B":
                row += count
            elif final == "G":
                col = count - 1
            else:
                raise AssertionError(f"a control the test's terminal does not know: {control!r}")
        while len(lines) <= row:
            lines.append("")
    put(text[position:])
    shown = [line.rstrip() for line in lines]
    while shown and not shown[-1]:
        shown.pop()
    return shown


def cli_process(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """The CLI as a child process (`python -m sandboxkit.cli`), its output on pipes."""
    return subprocess.Popen(
        [sys.executable, "-m", "sandboxkit.cli", *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll `condition` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Lines:
    """The lines a child writes to one pipe, read by a thread so that waits can time out."""

    def __init__(self, pipe: IO[str] | None) -> None:
        assert pipe is not None
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, wanted: str, timeout: float = 20.0, *, prefix: bool = False) -> None:
        """Read up to the line `wanted` (with `prefix`, a line starting with it)."""
        deadline = time.monotonic() + timeout

        def seen() -> bool:
            last = self.seen[-1].strip() if self.seen else None
            return last is not None and (last.startswith(wanted) if prefix else last == wanted)

        while not seen():
            line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"the pipe ended before {wanted!r}: {self.seen}")
            self.seen.append(line)

    def all(self, timeout: float = 20.0) -> list[str]:
        """Every line (blank ones too), once the pipe has ended."""
        deadline = time.monotonic() + timeout
        while (line := self._queue.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            self.seen.append(line)
        return "".join(self.seen).splitlines()


# A number and the word after it (`3.0 MiB`, `0.5/1.0 MiB`, `12.1 MB/s`, `5 bytes`).
_NUMBER_WORD = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)? ?([A-Za-z]+(?:/s)?)")
_SIZE_UNITS = {"B", "bytes", "kB", "KB", "KiB", "MB", "MiB", "GB", "GiB", "TB", "TiB"}


def size_units(text: str) -> set[str]:
    """Every unit of size or speed (`MiB`, `MB/s`...) printed after a number in `text`."""
    words = {match.group(1) for match in _NUMBER_WORD.finditer(text)}
    return {word for word in words if word.removesuffix("/s") in _SIZE_UNITS}
