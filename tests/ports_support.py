"""No test binds a fixed port: one that another program (an open Dask dashboard on 8787)
may hold, so that the suite fails on that machine only.

An audit hook sees every `socket.bind` of the test process, in every thread (a LocalCluster's
scheduler serves from one). A port that is neither 0 nor in the system's ephemeral range is
a fixed one; a port in the range is one the system handed out before, bound again (a test
server listening again where it was), which is sound. The range is known on Linux only
(/proc): elsewhere nothing is flagged. Child processes are not watched.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

__all__ = ["ephemeral_ports", "take_fixed_binds", "watch_binds"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")  # IPv6 uses it too
_fixed: list[tuple[str, int]] = []
_watching = False


def ephemeral_ports() -> range | None:
    """The ports the system hands out for port 0, when it says (Linux)."""
    try:
        low, high = map(int, _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return None
    return range(low, high + 1)


def watch_binds() -> None:
    """Record, from now on, every bind of this process to a fixed port (once per process:
    an audit hook cannot be removed)."""
    global _watching
    ports = ephemeral_ports()
    if ports is None or _watching:
        return
    _watching = True

    def hook(event: str, args: tuple[object, ...]) -> None:
        # Called for every audited event (each open, import, exec): the test comes first.
        if event != "socket.bind":
            return
        sock, address = args
        if (
            isinstance(sock, socket.socket)
            and sock.family in (socket.AF_INET, socket.AF_INET6)
            and isinstance(address, tuple)
            and len(address) >= 2
            and isinstance(address[1], int)
            and address[1] != 0
            and address[1] not in ports
        ):
            _fixed.append((str(address[0]), address[1]))

    sys.addaudithook(hook)


def take_fixed_binds() -> list[tuple[str, int]]:
    """The fixed-port binds recorded since the last call, as (host, port)."""
    taken = _fixed[:]
    del _fixed[: len(taken)]  # another thread may append meanwhile: keep what came after
    return taken
