"""A `sandboxkit emulator` (or `python -m sandboxkit.emulator`) child process, read as a user
reads it: its banner and exports."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from typing import IO

from sandboxkit.emulator import BANNER_END

BANNER_SECONDS = 60.0
EXPORTED = {
    "SANDBOXKIT_BASE_URL",
    "SANDBOXKIT_API_KEY",
    "SANDBOXKIT_DATA_PLANE_SCHEME",
    "SANDBOXKIT_SANDBOX_KEY",
    "SANDBOXKIT_SANDBOX_DOMAIN",
    "SANDBOXKIT_SANDBOX_TOKEN",
}


# The two ways to start the emulator as a process.
CLI_COMMAND = ("sandboxkit.cli", "emulator")
MODULE_COMMAND = ("sandboxkit.emulator",)


class Standalone:
    """A `sandboxkit emulator` child process and the banner it printed.

    `command` is the module to run and its first arguments (`MODULE_COMMAND` for `python -m
    sandboxkit.emulator`); `tmpdir` becomes the child's TMPDIR, where it makes its files.
    """

    def __init__(
        self, *args: str, command: tuple[str, ...] = CLI_COMMAND, tmpdir: str | None = None
    ) -> None:
        # Nothing of ours from the test's own environment leaks into the child.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXKIT_")}
        if tmpdir is not None:
            env["TMPDIR"] = tmpdir
        self.process = subprocess.Popen(
            [sys.executable, "-m", *command, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        assert self.process.stdout is not None and self.process.stderr is not None
        self._pumps = [
            threading.Thread(target=self._pump, args=(self.process.stdout, True), daemon=True),
            threading.Thread(target=self._pump, args=(self.process.stderr, False), daemon=True),
        ]
        for pump in self._pumps:
            pump.start()
        self.lines = self._banner()

    def _pump(self, stream: IO[str], out: bool) -> None:
        for line in stream:
            if out:
                self._lines.put(line.rstrip("\n"))
            else:
                self._stderr.append(line)
        if out:
            self._lines.put(None)

    def _banner(self) -> list[str]:
        """The printed lines up to the banner's last one, waiting at most BANNER_SECONDS."""
        lines: list[str] = []
        while not lines or lines[-1] != BANNER_END:
            try:
                line = self._lines.get(timeout=BANNER_SECONDS)
            except queue.Empty:
                self.process.kill()
                raise AssertionError(f"no complete banner in {BANNER_SECONDS} s: {lines}") from None
            assert line is not None, f"the emulator exited early: {lines} {self._stderr}"
            lines.append(line)
        return lines

    @property
    def exports(self) -> dict[str, str]:
        """Every variable of the printed `export` lines."""
        pairs = [
            item.split("=", 1)
            for line in self.lines
            if line.strip().startswith("export ")
            for item in line.split()[1:]
        ]
        return dict(pairs)

    def commands(self, prefix: str) -> list[str]:
        """The printed shell lines starting with `prefix` (indentation removed)."""
        return [line.strip() for line in self.lines if line.strip().startswith(prefix)]

    def stop(self, signum: int = signal.SIGINT) -> tuple[int, str]:
        """Ctrl-C the child (or send it `signum`); its exit status and stderr."""
        self.process.send_signal(signum)
        try:
            self.process.wait(timeout=30)
        finally:
            self.process.kill()
            self.process.wait()
        for pump in self._pumps:  # both pipes are at their end once the child is gone
            pump.join(timeout=30)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
        return self.process.returncode, "".join(self._stderr)
