"""What the kernel knows of a connection's link: its smoothed round-trip time, and whether
the peer is this machine. No await; one `getsockopt` or `getpeername` a question.

A parallel download splits a file only when the link is long (`ParallelDownloads`). The
time an answer's head took is a poor measure of that: it includes the server's own time to
start answering, so a loopback server slow to answer looked like a far data center and had
its downloads cut into slices that only cost CPU (issue 32). The kernel's smoothed RTT
(Linux `TCP_INFO`, `tcpi_rtt`) measures the path alone.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Any

import attrs

__all__ = ["UNKNOWN", "LinkInfo", "link_info"]

# struct tcp_info (linux/tcp.h): eight u8 fields, then u32s; tcpi_rtt, in microseconds, is
# the sixteenth u32, at byte 68. Stable since Linux 2.6 (fields are only ever appended).
_RTT_OFFSET = 68
_TCP_INFO_SIZE = 104
_TCP_INFO = getattr(socket, "TCP_INFO", None)


@attrs.frozen
class LinkInfo:
    """`rtt`: the smoothed round-trip time in seconds, or None where the platform does not
    tell it; `loopback`: the peer's address is this machine's."""

    rtt: float | None
    loopback: bool


UNKNOWN = LinkInfo(None, False)


def link_info(sock: Any) -> LinkInfo:
    """What the kernel says of `sock`'s link (a connected TCP socket, or asyncio's wrapper of
    one); `UNKNOWN` for anything else, never an exception."""
    if sock is None:
        return UNKNOWN
    try:
        peer = sock.getpeername()
        loopback = ipaddress.ip_address(peer[0].split("%", 1)[0]).is_loopback
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return UNKNOWN  # a Unix socket, a closed one, a test double
    return LinkInfo(_smoothed_rtt(sock), loopback)


def _smoothed_rtt(sock: Any) -> float | None:
    if _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_SIZE)
    except (OSError, AttributeError):
        return None
    if len(info) < _RTT_OFFSET + 4:
        return None
    microseconds: int = struct.unpack_from("I", info, _RTT_OFFSET)[0]
    return microseconds / 1e6
