"""The link benchmark's delay line holds, drops and paces packets as it says (no root needed).

`benchmarks/_delayline.py` forwards between two TUN devices; here its `Direction` runs
between two packet-mode pipes (``O_DIRECT``: one read per write, as a TUN device gives one
packet per read) with the clock passed in, so nothing waits and nothing needs privileges.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _delayline import Direction

pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="packet pipes are Linux's")


@contextmanager
def line(**config: Any) -> Iterator[tuple[Direction, int, int]]:
    """A Direction from one packet pipe to another: (direction, write end in, read end out)."""
    source_r, source_w = os.pipe2(os.O_DIRECT | os.O_NONBLOCK)
    sink_r, sink_w = os.pipe2(os.O_DIRECT | os.O_NONBLOCK)
    try:
        yield Direction("a->b", source_r, sink_w, {"delay_s": 0.02, **config}), source_w, sink_r
    finally:
        for fd in (source_r, source_w, sink_r, sink_w):
            os.close(fd)


def arrived(fd: int) -> list[bytes]:
    """The packets waiting at the far end."""
    packets = []
    while True:
        try:
            packets.append(os.read(fd, 65536))
        except BlockingIOError:
            return packets


def test_each_packet_crosses_whole_and_in_order_after_the_delay() -> None:
    """A packet leaves exactly when its delay is over, not before; order and bytes kept."""
    with line() as (way, into, out):
        os.write(into, b"first")
        os.write(into, b"second")
        way.take(now=100.0)
        way.release(now=100.019)
        assert arrived(out) == []
        way.release(now=100.02)
        assert arrived(out) == [b"first", b"second"]
        assert (way.packets, way.bytes) == (2, 11)
        assert way.stats()["late_ms_max"] == 0.1  # released in the first 0.1 ms bucket


def test_lateness_is_measured_from_the_due_time() -> None:
    """A release 5 ms after the due time is recorded as 5 ms late."""
    with line() as (way, into, out):
        os.write(into, b"x")
        way.take(now=0.0)
        way.release(now=0.025)
        assert arrived(out) == [b"x"]
        assert way.stats()["late_ms_p50"] == pytest.approx(5.1, abs=0.15)


def test_loss_drops_packets_at_the_given_rate() -> None:
    """With loss=1 nothing crosses; with loss=0 everything does."""
    with line(loss=1.0) as (way, into, out):
        for _ in range(10):
            os.write(into, b"p")
        way.take(now=0.0)
        way.release(now=1.0)
        assert arrived(out) == [] and way.lost == 10


def test_a_bandwidth_cap_serialises_packets_before_the_delay() -> None:
    """At 1,000 bytes/s two 100-byte packets leave at delay + 0.1 s and delay + 0.2 s."""
    with line(rate_bytes_per_s=1000.0) as (way, into, out):
        os.write(into, b"a" * 100)
        os.write(into, b"b" * 100)
        way.take(now=0.0)
        way.release(now=0.1199)
        assert arrived(out) == []
        way.release(now=0.1201)
        assert arrived(out) == [b"a" * 100]
        way.release(now=0.2199)
        assert arrived(out) == []
        way.release(now=0.2201)
        assert arrived(out) == [b"b" * 100]


def test_a_full_queue_drops_the_newest() -> None:
    """Past `limit` packets held, new ones are dropped (tail drop) and counted."""
    with line(limit=2) as (way, into, out):
        for index in range(4):
            os.write(into, bytes([index]))
        way.take(now=0.0)
        way.release(now=1.0)
        assert arrived(out) == [b"\x00", b"\x01"] and way.overflow == 2
