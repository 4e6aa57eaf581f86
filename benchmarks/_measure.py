"""Measuring one run of a contender, and running contenders in paired, alternating rounds.

A run is measured from inside the client process: wall time, CPU time of the whole process
(`getrusage`, worker threads included; the server is another process), minor page faults,
and the peak resident set (sampled from a thread, because `ru_maxrss` only ever grows and so
says nothing about the second run of a process). Optionally the peak number of open sockets,
counted in ``/proc/self/fd``.

Other work on the machine comes and goes, so contenders alternate within each round (A B C,
then C B A) and every comparison is the median of per-round ratios: two runs of the same
round saw about the same machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

MiB = 1 << 20
GiB = 1 << 30
S = TypeVar("S")

# On a VM with free page reporting (virtio-balloon), memory freed for a moment is handed
# back to the host, and the next write into fresh page cache faults it in again: 512 MiB
# written to a file took 1.0-1.3 s of system time instead of 0.12 s, on whichever contender
# ran after a pause (download figures swung 4x between rounds). Holding freed pages for a
# minute before they are reported removes that, for the run only.
PAGE_REPORTING = Path("/sys/module/page_reporting/parameters/min_free_ms")
HOLD_FREE_MS = "60000"


@contextlib.contextmanager
def free_pages_held(hold: bool) -> Iterator[str | None]:
    """Within: freed pages held `HOLD_FREE_MS` before the host gets them, when `hold` and
    this machine has the knob (root only); yields a line for the report, or None where
    there is nothing to say. The knob's value is put back on the way out."""
    try:
        before = PAGE_REPORTING.read_text().strip()
    except OSError:  # no page reporting here: nothing to hold
        yield None
        return
    if not hold:
        yield (
            f"free page reporting is on ({PAGE_REPORTING.name}={before}): transfer figures "
            "swing with it; --hold-free-pages (root) holds freed pages during the run"
        )
        return
    try:
        PAGE_REPORTING.write_text(HOLD_FREE_MS)
    except OSError as exc:
        yield f"--hold-free-pages: could not write {PAGE_REPORTING}: {exc.strerror or exc}"
        return
    try:
        yield f"free pages held {HOLD_FREE_MS} ms before the host gets them (was {before})"
    finally:
        PAGE_REPORTING.write_text(before)


def resident_bytes() -> int:
    """This process's resident set now (Linux), else the peak so far."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def open_sockets() -> int:
    """How many of this process's file descriptors are sockets (Linux; 0 elsewhere)."""
    count = 0
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    for name in names:
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
        except OSError:
            continue  # closed between the listing and the look
    return count


class Sampler:
    """Samples the resident set (and optionally open sockets) from a thread during a run."""

    def __init__(self, *, sockets: bool = False, interval: float = 0.005) -> None:
        self._sockets = sockets
        # Listing hundreds of descriptors costs more than reading statm: sample less often.
        self._interval = max(interval, 0.01) if sockets else interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.start_rss = 0
        self.peak_rss = 0
        self.start_sockets = 0
        self.peak_sockets = 0

    def _sample(self) -> None:
        self.peak_rss = max(self.peak_rss, resident_bytes())
        if self._sockets:
            self.peak_sockets = max(self.peak_sockets, open_sockets())

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> Sampler:
        self.start_rss = self.peak_rss = resident_bytes()
        if self._sockets:
            self.start_sockets = self.peak_sockets = open_sockets()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


@dataclass
class Sample:
    """One measured run."""

    wall: float
    cpu: float
    rss_growth: int
    minflt: int
    sockets: int = 0
    extra: dict[str, float] = field(default_factory=dict)


Run = Callable[[], Awaitable[dict[str, float] | None]]


async def measure(run: Run, *, sockets: bool = False) -> Sample:
    """Run once and measure it; `run` may return extra figures (errors, bytes...)."""
    gc.collect()
    with Sampler(sockets=sockets) as sampler:
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        extra = await run()
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(
        wall=wall,
        cpu=cpu,
        rss_growth=sampler.peak_rss - sampler.start_rss,
        minflt=after.ru_minflt - before.ru_minflt,
        sockets=sampler.peak_sockets - sampler.start_sockets,
        extra=extra or {},
    )


@dataclass
class Contender:
    """One way of doing the case's work."""

    name: str
    run: Run
    note: str = ""


async def paired_rounds(
    contenders: Sequence[Contender],
    rounds: int,
    *,
    warmup: bool = True,
    sockets: bool = False,
    between: Callable[[Contender], Awaitable[None]] | None = None,
) -> dict[str, list[Sample]]:
    """Run every contender once per round, alternating the order; returns samples by name.

    A warm-up run of each (not recorded) first makes sessions, threads and caches exist.
    `between` runs before each run (outside the measurement), e.g. to reset the server.
    """
    if warmup:
        for contender in contenders:
            if between is not None:
                await between(contender)
            await contender.run()
    samples: dict[str, list[Sample]] = {c.name: [] for c in contenders}
    for index in range(rounds):
        order = list(contenders) if index % 2 == 0 else list(reversed(contenders))
        for contender in order:
            if between is not None:
                await between(contender)
            samples[contender.name].append(await measure(contender.run, sockets=sockets))
    return samples


def median(values: Sequence[float]) -> float:
    """The median, NaN for no values."""
    return statistics.median(values) if values else float("nan")


def paired_ratio(
    samples: Sequence[S], reference: Sequence[S], value: Callable[[S], float]
) -> float:
    """Median over rounds of value(contender) / value(reference) in the same round."""
    ratios = [value(a) / value(b) for a, b in zip(samples, reference, strict=True) if value(b) != 0]
    return median(ratios)


def describe_machine() -> dict[str, Any]:
    """CPU count, Python and library versions, for the report."""
    import platform

    import aiohttp

    import sandboxkit

    try:
        import httpx

        httpx_version: str | None = httpx.__version__
    except ImportError:
        httpx_version = None
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
        "httpx": httpx_version,
        "sandboxkit": getattr(sandboxkit, "__version__", "?"),
    }


async def fan_out(
    order: Sequence[int],
    concurrency: int,
    fetch: Callable[[int], Awaitable[bytes]],
    content: bytes,
    failures: tuple[type[BaseException], ...] = (Exception,),
) -> int:
    """Read `fetch(host)` for each host in `order`, `concurrency` at a time (workers taking
    the next host as they free up); returns how many reads failed or came back wrong."""
    errors = 0
    position = 0

    async def worker() -> None:
        nonlocal errors, position
        while position < len(order):
            host = order[position]
            position += 1
            try:
                if await fetch(host) != content:
                    errors += 1
            except failures:
                errors += 1

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return errors
