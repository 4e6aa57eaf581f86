"""sandboxkit against raw aiohttp and httpx, on the same loopback server, in one run.

Cases (issue 7), each against a server in a child process so that only the client's CPU
and memory are counted:

1. ``download``: a large file to disk, with and without SHA-256 (minimal server).
2. ``upload``: a large multipart upload (minimal server).
3. ``control``: listing builds page by page, and single-page list calls at concurrency 1
   and 64 (minimal server replaying pages the emulator rendered).
4. ``hosts``: many small downloads over many sandbox hosts at concurrency 256 (minimal
   server, virtual hosts).
5. ``faults``: downloads under 429s, 502s and cut connections (the real emulator).
6. ``rerun``: a batch killed (SIGKILL) at half its bytes and run again: bytes fetched twice.
7. ``outage``: a batch through a few seconds of the server being down: jobs done, wall time.
8. ``link``: a large download over an emulated long link (network namespaces joined by a
   TUN delay line, `_link.py`), one stream against parallel ``Range`` slices; needs root,
   skipped with one line saying why elsewhere.
9. ``smallfiles``: many 16 KiB reads over many hosts (issue 32): sandboxkit, raw aiohttp with
   a session per host, and a hand-written asyncio floor, each a fresh process (fast server).
10. ``page``: one 64 KiB ``files.read_range`` at the middle of a 1 GiB (virtual) file, on a
    server with ranges and on one without (issue 31): the bytes the server sent, and the
    time (`_page.py`).
11. ``budgets``: a bandwidth limit held over 10 s by 1 and by 64 transfers, up and down, and
    a live change's delay in 250 ms windows (issue 41, `_budgets.py`; the emulator).
12. ``pacing``: concurrency found, not configured (issue 41, `_pacing.py`): a sweep of fixed
    concurrencies against the found one over the 40 ms link, a server that degrades past N
    at once (loopback), and a probe's round trip while a batch runs with and without
    background mode (the link with its bandwidth capped); the link parts need root.

Contenders alternate within each round and every ratio is the median of per-round ratios.
Benchmarks are not tests: nothing here asserts a timing; a target missed is reported.

Usage::

    python benchmarks/run.py                     # everything, 5 rounds, 1 GiB transfers
    python benchmarks/run.py --quick             # small sizes, 1 round: proves the code runs
    python benchmarks/run.py --case download --rounds 7 --size-mib 512
    sudo .venv/bin/python benchmarks/run.py --case link --rtt-ms 40 --size-mib 1024
    python benchmarks/run.py --json > figures.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# This directory holds the helper modules; running the file as a script puts it on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _budgets
import _control
import _faults
import _hosts
import _link
import _pacing
import _page
import _smallfiles
import _survive
import _transfer
from _measure import MiB, describe_machine, free_pages_held
from _report import CaseResult, print_case


@dataclass(frozen=True)
class Sizes:
    """How big each case is; `--quick` shrinks all of them."""

    transfer_mib: int
    builds: int
    list_calls: int
    host_downloads: int
    hosts: int
    host_concurrency: int
    fault_downloads: int
    fault_file_kib: int
    rerun: tuple[int, int, int]  # sandboxes, files in each, KiB per file
    outage: tuple[int, int, int]
    outage_seconds: float
    link_mib: int
    small: tuple[int, int, int]  # requests, hosts, concurrency
    link: _link.LinkOptions = _link.DEFAULT_LINK
    page_mib: int = 1024  # the file case 10 reads a page of
    # case 11: the limit (bytes/s), how long it is held (s), and the live change's high and
    # low limits and the seconds before each change
    budgets: tuple[int, float, tuple[int, int, float]] = (16 * MiB, 10.0, (32 * MiB, 8 * MiB, 3.0))
    # case 12: files of 1 MiB in the sweep, the sweep, jobs on the degrading server, files
    # in the background part
    pacing: tuple[int, tuple[int, ...], int, int] = (1000, (4, 8, 16, 32, 64, 128, 256), 3000, 150)


FULL = Sizes(
    transfer_mib=1024,
    builds=10_000,
    list_calls=2_000,
    host_downloads=10_000,
    hosts=1_000,
    host_concurrency=256,
    fault_downloads=1_000,
    fault_file_kib=1024,
    rerun=(10, 10, 4096),
    outage=(10, 30, 1024),
    outage_seconds=5.0,
    link_mib=1024,
    small=(10_000, 1_000, 256),
)
QUICK = Sizes(
    transfer_mib=16,
    builds=300,
    list_calls=64,
    host_downloads=400,
    hosts=100,
    host_concurrency=64,
    fault_downloads=48,
    fault_file_kib=64,
    rerun=(4, 4, 256),
    outage=(4, 15, 512),
    outage_seconds=1.0,
    link_mib=8,
    small=(400, 50, 32),
    page_mib=64,
    budgets=(8 * MiB, 0.5, (16 * MiB, 4 * MiB, 0.75)),
    pacing=(16, (4, 16), 200, 8),
)

Case = Callable[[Sizes, int, Path], Awaitable[CaseResult]]
CASES: dict[str, Case] = {
    "download": lambda s, r, w: _transfer.run_download(s.transfer_mib * MiB, r, w),
    "upload": lambda s, r, w: _transfer.run_upload(s.transfer_mib * MiB, r, w),
    "control": lambda s, r, w: _control.run(s.builds, s.list_calls, r),
    "hosts": lambda s, r, w: _hosts.run(s.host_downloads, s.hosts, s.host_concurrency, r, w),
    "faults": lambda s, r, w: _faults.run(s.fault_downloads, s.fault_file_kib * 1024, r, w),
    "rerun": lambda s, r, w: _survive.run_rerun(s.rerun[0], s.rerun[1], s.rerun[2] * 1024, r, w),
    "outage": lambda s, r, w: _survive.run_outage(
        s.outage[0], s.outage[1], s.outage[2] * 1024, s.outage_seconds, r, w
    ),
    "link": lambda s, r, w: _link.run(s.link_mib * MiB, r, w, s.link),
    "smallfiles": lambda s, r, w: _smallfiles.run(*s.small, r),
    "page": lambda s, r, w: _page.run(s.page_mib * MiB, r, w),
    "budgets": lambda s, r, w: _budgets.run(*s.budgets, w),
    "pacing": lambda s, r, w: _pacing.run(
        s.pacing[0], r, w, sweep=s.pacing[1], degrade_jobs=s.pacing[2], background_count=s.pacing[3]
    ),
}


async def run_all(names: list[str], sizes: Sizes, rounds: int, log: Any) -> dict[str, Any]:
    """Run the chosen cases one after another; returns the whole report."""
    report: dict[str, Any] = {"machine": describe_machine(), "rounds": rounds, "cases": []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sandboxkit-bench-") as tmp:
        for name in names:
            work = Path(tmp) / name
            work.mkdir()
            case_started = time.perf_counter()
            print(f"running {name}...", file=sys.stderr, flush=True)
            result = await CASES[name](sizes, rounds, work)
            result.config["seconds"] = round(time.perf_counter() - case_started, 1)
            if log is not None:
                print_case(result, log)
                log.flush()
            report["cases"].append(result.to_json())
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run, print; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python benchmarks/run.py",
        description="sandboxkit against raw aiohttp and httpx on the same loopback server.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 round (smoke run)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--case", action="append", choices=list(CASES), help="run only this case (repeatable)"
    )
    parser.add_argument("--rounds", type=int, help="paired rounds (default 5; --quick: 1)")
    parser.add_argument("--size-mib", type=int, help="transfer size of cases 1, 2 and 8")
    parser.add_argument(
        "--hold-free-pages",
        action="store_true",
        help="root, on a VM with free page reporting: hold freed pages during the run",
    )
    link = parser.add_argument_group("case 8 (link)")
    link.add_argument("--rtt-ms", type=float, default=40.0, help="round-trip time (40)")
    link.add_argument("--loss", type=float, default=0.0, help="packets dropped, percent (0)")
    link.add_argument("--rate-mbit", type=float, default=0.0, help="bandwidth cap (0: none)")
    link.add_argument("--cc", help="TCP congestion control of the server's sockets")
    link.add_argument("--parts", help="parallel slice counts, e.g. 2,4,8 (4,8; --quick: 4)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.size_mib is not None:
        sizes = Sizes(
            **{**sizes.__dict__, "transfer_mib": args.size_mib, "link_mib": args.size_mib}
        )
    if args.rtt_ms < 0 or not 0 <= args.loss < 100 or args.rate_mbit < 0:
        parser.error("--rtt-ms and --rate-mbit must be >= 0, --loss within [0, 100)")
    try:
        parts = tuple(int(n) for n in (args.parts or ("4" if args.quick else "4,8")).split(","))
    except ValueError:
        parser.error("--parts takes whole numbers separated by commas")
    if any(n < 2 for n in parts):
        parser.error("--parts: each count must be at least 2")
    # The smoke run keeps case 8 short: one parallel count and no defaults row.
    options = _link.LinkOptions(
        args.rtt_ms, args.loss, args.rate_mbit, args.cc, parts, defaults_row=not args.quick
    )
    sizes = Sizes(**{**sizes.__dict__, "link": options})
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    names = args.case or list(CASES)
    # Tables go to stdout as each case ends; with --json they go to stderr instead.
    log = sys.stderr if args.json else sys.stdout
    machine = describe_machine()
    print(
        "machine: " + ", ".join(f"{k}={v}" for k, v in machine.items() if k != "platform"),
        file=log,
    )
    with free_pages_held(args.hold_free_pages) as held:
        if held is not None:
            print(f"memory: {held}", file=log)
        report = asyncio.run(run_all(names, sizes, rounds, log))
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        missed = [t["what"] for case in report["cases"] for t in case["targets"] if not t["met"]]
        print(f"\n{len(missed)} target(s) missed; total {report['seconds']} s", file=log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
