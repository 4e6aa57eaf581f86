"""The link case's network: two namespaces joined by a TUN delay line, made and removed.

`Link` creates ``skbench-PID-c`` (the client, 10.77.0.1) and ``skbench-PID-s`` (the
server, 10.77.0.2), starts `_delayline.py` (which makes two TUN devices in the root
namespace), moves one device into each namespace and gives it its address and a
65,000-byte MTU. Nothing else is contacted: the addresses live only inside the two
namespaces.

Everything created is removed at the end, also on error or Ctrl-C (the children run in their
own sessions, so the terminal's Ctrl-C reaches only the orchestrator); after a SIGKILL the
children die with it (they ask for ``PR_SET_PDEATHSIG``), the TUN devices vanish with the
delay line, and `remove_leftovers` deletes, at the next start, namespaces whose PID is gone.
`why_not` says why a machine cannot run the case: not Linux, not root, no /dev/net/tun, no
`ip`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _server import ServerProcess

HERE = Path(__file__).resolve().parent
CLIENT_ADDRESS = "10.77.0.1"
SERVER_ADDRESS = "10.77.0.2"
MTU = 65000
PREFIX = "skbench"


@dataclass(frozen=True)
class LinkOptions:
    """The emulated path: `--rtt-ms`, `--loss` (percent), `--rate-mbit`, `--cc`."""

    rtt_ms: float = 40.0
    loss_percent: float = 0.0
    rate_mbit: float = 0.0
    congestion_control: str | None = None  # the server's; None: as the machine has it
    parts: tuple[int, ...] = (4, 8)  # the parallel contenders' slice counts
    defaults_row: bool = True  # also sandboxkit with the client's defaults (no parts=)


DEFAULT_LINK = LinkOptions()


def why_not() -> str | None:
    """Why this machine cannot run the case, or None if it can (as far as can be told)."""
    if sys.platform != "linux":
        return "needs Linux (network namespaces and TUN devices)"
    if os.geteuid() != 0:
        return "needs root to create network namespaces and TUN devices"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun on this machine"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> list[str]:
    """Delete namespaces of earlier runs whose process is gone; returns their names."""
    removed = []
    for line in _ip("netns", "list").splitlines():
        name = line.split(" ", 1)[0]
        match = re.fullmatch(rf"{PREFIX}-(\d+)-[cs]", name)
        if match is None or _alive(int(match.group(1))):
            continue
        # Processes still inside are an earlier run's own children: end them by id.
        for pid in _ip("netns", "pids", name).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "delete", name)
        removed.append(name)
    return removed


class Link:
    """The two namespaces and the delay line between them, for one `async with`."""

    def __init__(self, options: LinkOptions) -> None:
        pid = os.getpid()
        self.client_ns = f"{PREFIX}-{pid}-c"
        self.server_ns = f"{PREFIX}-{pid}-s"
        self._devices = (f"skl{pid}c", f"skl{pid}s")
        self._options = options
        self._made: list[str] = []
        self._line: ServerProcess | None = None

    async def __aenter__(self) -> Link:
        try:
            await self._setup()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _setup(self) -> None:
        for name in (self.client_ns, self.server_ns):
            _ip("netns", "add", name)
            self._made.append(name)
        opts = self._options
        config = {
            "devices": list(self._devices),
            "delay_s": opts.rtt_ms / 2e3,
            "loss": opts.loss_percent / 100,
            "rate_bytes_per_s": opts.rate_mbit * 1e6 / 8,
        }
        self._line = ServerProcess(
            "delayline", config, script=HERE / "_delayline.py", new_session=True
        )
        await self._line.__aenter__()
        ends = ((self.client_ns, CLIENT_ADDRESS, SERVER_ADDRESS),)
        ends += ((self.server_ns, SERVER_ADDRESS, CLIENT_ADDRESS),)
        for device, (ns, mine, peer) in zip(self._devices, ends, strict=True):
            _ip("link", "set", device, "netns", ns)
            _ip("-n", ns, "addr", "add", mine, "peer", peer, "dev", device)
            _ip("-n", ns, "link", "set", device, "mtu", str(MTU), "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def run_in(self, ns: str, *argv: str) -> str:
        """Run a command inside one of the namespaces; returns its output."""
        done = subprocess.run(
            ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {ns} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def tcp_settings(self) -> dict[str, str]:
        """The TCP settings each side's namespace runs with."""
        names = ("tcp_wmem", "tcp_rmem", "tcp_congestion_control")
        settings = {}
        for side, ns in (("server", self.server_ns), ("client", self.client_ns)):
            for name in names:
                value = self.run_in(ns, "sysctl", "-n", f"net.ipv4.{name}")
                settings[f"{side} {name}"] = " ".join(value.split())
        return settings

    async def stats(self) -> dict[str, Any]:
        """The delay line's counts: packets, drops, how late packets left (ms)."""
        assert self._line is not None
        return await self._line.command("stats")

    async def __aexit__(self, *_: object) -> None:
        line, self._line = self._line, None
        try:
            if line is not None:
                await line.__aexit__()
        finally:
            self._remove_namespaces()

    def _remove_namespaces(self) -> None:
        while self._made:
            name = self._made.pop()
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
