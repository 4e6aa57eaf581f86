"""The link case's delay line: two TUN devices, each packet held for RTT/2 before it crosses.

Run as ``python _delayline.py delayline CONFIG_JSON`` by `benchmarks/_link.py`, which moves the two
devices into network namespaces of its own once this process has made them. Every IP packet
the kernel routes into one device is read here, stamped with its due time (now + delay, or
later behind a bandwidth cap), and written into the other device when due: a FIFO per
direction is enough because the delay is constant. Optionally a packet is dropped at random
(`loss`), and a full queue (`limit` packets) drops the newest, as netem's tail drop does.

The devices are plain ``IFF_TUN | IFF_NO_PI`` (no offloads), so the kernel hands over one
TCP segment per packet; with a 65,000-byte MTU that is ~1,600 packets a second per 100 MB/s,
a light load for a selector loop. They are not persistent: they vanish when this process
ends, however it ends.

Protocol (as `_server.py`'s): one JSON line when the devices exist, then one JSON answer per
command line on stdin (``{"cmd": "stats"}``); ``stop`` or the end of stdin ends it.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import random
import resource
import selectors
import struct
import sys
import time
from typing import Any

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
# Bigger than any packet a 65,000-byte MTU lets through.
READ_SIZE = 1 << 17
# Packets read from one device per wake-up before the other gets its turn.
READ_BURST = 64
# Lateness histogram: 0.1 ms buckets up to 100 ms; the last bucket holds the rest.
LATE_BUCKET = 1e-4
LATE_BUCKETS = 1000


def open_tun(name: str) -> int:
    """Create TUN device `name` (IFF_NO_PI: the bare IP packet) and return its fd."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


class Direction:
    """One way across the line: packets read from `source`, written to `sink` when due."""

    def __init__(self, name: str, source: int, sink: int, config: dict[str, Any]) -> None:
        self.name = name
        self.source = source
        self.sink = sink
        self.delay = float(config["delay_s"])
        self.loss = float(config.get("loss", 0.0))
        rate = float(config.get("rate_bytes_per_s", 0.0))
        self.seconds_per_byte = 1.0 / rate if rate > 0 else 0.0
        self.limit = int(config.get("limit", 10_000))
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.link_free = 0.0  # when the capped link has sent what it holds
        self.packets = 0
        self.bytes = 0
        self.lost = 0
        self.overflow = 0
        self.write_errors = 0
        self.late = [0] * (LATE_BUCKETS + 1)

    def take(self, now: float) -> None:
        """Read what the kernel has queued on the source device and stamp it."""
        for _ in range(READ_BURST):
            try:
                packet = os.read(self.source, READ_SIZE)
            except BlockingIOError:
                return
            if self.loss and random.random() < self.loss:
                self.lost += 1
                continue
            if len(self.queue) >= self.limit:
                self.overflow += 1
                continue
            sent = now
            if self.seconds_per_byte:
                sent = max(now, self.link_free) + len(packet) * self.seconds_per_byte
                self.link_free = sent
            self.queue.append((sent + self.delay, packet))

    def release(self, now: float) -> None:
        """Write every packet whose time has come, recording how late it left."""
        queue = self.queue
        while queue and queue[0][0] <= now:
            due, packet = queue.popleft()
            try:
                os.write(self.sink, packet)
            except OSError:  # the stack refused it (a full backlog): it is lost
                self.write_errors += 1
                continue
            self.packets += 1
            self.bytes += len(packet)
            self.late[min(int((now - due) / LATE_BUCKET), LATE_BUCKETS)] += 1

    def stats(self) -> dict[str, Any]:
        """What crossed so far, and how late it was released (ms)."""
        return {
            "packets": self.packets,
            "bytes": self.bytes,
            "lost": self.lost,
            "overflow": self.overflow,
            "write_errors": self.write_errors,
            "late_ms_p50": _percentile(self.late, 0.50),
            "late_ms_p99": _percentile(self.late, 0.99),
            "late_ms_max": _percentile(self.late, 1.0),
        }


def _percentile(histogram: list[int], fraction: float) -> float:
    """The bucket's upper edge in ms; 100.1 means 100 ms or more (the last bucket)."""
    total = sum(histogram)
    if not total:
        return 0.0
    wanted = max(1, round(total * fraction))
    seen = 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= wanted:
            return round((index + 1) * LATE_BUCKET * 1e3, 1)
    return float("nan")


def serve(config: dict[str, Any]) -> None:
    """Make the two devices, announce them, forward until told to stop."""
    a_name, b_name = config["devices"]
    # The line stands for a wire: when other work crowds the machine, it should not be the
    # process that waits, or the crowding shows up as jitter on the link.
    with contextlib.suppress(OSError):
        os.nice(-10)
    a = open_tun(a_name)
    b = open_tun(b_name)
    ways = [Direction("a->b", a, b, config), Direction("b->a", b, a, config)]
    by_fd = {a: ways[0], b: ways[1]}
    selector = selectors.DefaultSelector()
    selector.register(a, selectors.EVENT_READ)
    selector.register(b, selectors.EVENT_READ)
    stdin = sys.stdin.fileno()
    os.set_blocking(stdin, False)
    selector.register(stdin, selectors.EVENT_READ)
    _announce({"devices": [a_name, b_name]})
    pending = b""
    clock = time.monotonic
    while True:
        now = clock()
        for way in ways:
            way.release(now)
        dues = [way.queue[0][0] for way in ways if way.queue]
        timeout = max(0.0, min(dues) - clock()) if dues else None
        for key, _ in selector.select(timeout):
            fd = key.fd
            if fd == stdin:
                data = os.read(stdin, 4096)
                if not data:
                    return
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    command = json.loads(line)
                    if command.get("cmd") == "stop":
                        return
                    if command.get("cmd") == "stats":
                        usage = resource.getrusage(resource.RUSAGE_SELF)
                        cpu = usage.ru_utime + usage.ru_stime
                        ways_stats = {way.name: way.stats() for way in ways}
                        _announce({"cpu_s": round(cpu, 2), "ways": ways_stats})
                    else:
                        _announce({"error": f"unknown command {command.get('cmd')!r}"})
            else:
                by_fd[fd].take(clock())


def _announce(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Run the delay line with the JSON config, the last argument."""
    serve(json.loads(argv[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
