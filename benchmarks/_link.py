"""Case 8: a large download over an emulated long link, one stream against parallel ranges.

The link: two network namespaces this case creates (``skbench-PID-c`` for the client,
``skbench-PID-s`` for the server) joined by two TUN devices whose packets cross through
`_delayline.py`, a process that holds each one for RTT/2 (and optionally drops some, or caps
the bandwidth). The minimal server (`_server.py`, sendfile, ``Range``, ``Accept-Ranges:
bytes``) listens in the server namespace; every contender run is a fresh client process in
the client namespace (`_linkclient.py`). Nothing else is contacted: the addresses live only
inside the two namespaces.

What the model keeps: the round-trip time; the machine's TCP settings as they are (new
namespaces inherit ``net.ipv4.tcp_wmem``/``tcp_rmem`` and the congestion control, all
reported), so a single stream is bounded by the server's send buffer over the RTT as on a
real path. What it leaves out: loss (unless ``--loss``), a bandwidth limit (unless
``--rate-mbit``), and small packets: the devices have a 65,000-byte MTU and no offloads, so
the Python delay line handles one packet per TCP segment at a few thousand packets a
second.

The namespaces and their cleanup are `_netns.py`'s. The case is skipped, with one line
saying why, where it cannot run: not Linux, not root, no /dev/net/tun, no `ip`, or a
namespace that cannot be made.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _measure import MiB, Sample, median, paired_ratio
from _netns import (
    DEFAULT_LINK,
    HERE,
    MTU,
    SERVER_ADDRESS,
    Link,
    LinkOptions,
    remove_leftovers,
    why_not,
)
from _report import CaseResult, Column, target
from _server import ServerProcess, token_for
from _transfer import make_file

import sandboxkit

# run.py reaches the options through this module, the one its case lives in.
__all__ = ["DEFAULT_LINK", "LinkOptions", "run"]

KEY = "sbx-bench"
BIG = "/home/user/big.bin"


async def run_client(link: Link, config: dict[str, Any]) -> dict[str, Any]:
    """One contender run in a fresh process in the client namespace; its JSON answer."""
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", link.client_ns,
        sys.executable, str(HERE / "_linkclient.py"), json.dumps(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"client {config['kind']} failed: {err.decode()[-2000:]}")
    answer: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    if "unavailable" in answer:
        raise RuntimeError(answer["unavailable"])
    return answer


@dataclass(frozen=True)
class LinkContender:
    """One way of downloading the file: its row name and its client config."""

    name: str
    config: dict[str, Any]


SDK_ONE = "sandboxkit, 1 stream (sha256)"
RAW_ONE = "raw aiohttp, 1 stream (sha256)"
ISSUE_SINGLE_MB_S = 70.0


def contenders(parallel: bool, options: LinkOptions) -> tuple[list[LinkContender], list[str]]:
    """The contenders to run, and the names of those this tree cannot run."""
    runs = [LinkContender(RAW_ONE, {"kind": "raw"})]
    runs += [
        LinkContender(f"raw aiohttp, Range x{n}, pwrite", {"kind": "ranged", "parts": n})
        for n in options.parts
    ]
    runs.append(LinkContender(SDK_ONE, {"kind": "sdk", "parts": 1}))
    sdk_parallel = [
        LinkContender(f"sandboxkit parts={n} (sha256)", {"kind": "sdk", "parts": n})
        for n in options.parts
    ]
    if options.defaults_row:
        sdk_parallel.append(
            LinkContender("sandboxkit defaults (sha256)", {"kind": "sdk", "parts": None})
        )
    if parallel:
        return runs + sdk_parallel, []
    return runs, [c.name for c in sdk_parallel]


COLUMNS = [
    Column("mb_per_s", "MB/s", "{:.1f}"),
    Column("x_sdk_one", "x sk 1 stream", "{:.2f}"),
    Column("x_raw_one", "x raw 1 stream", "{:.2f}"),
    Column("cpu_s_per_gib", "CPU s/GiB"),
    Column("rss_growth_mib", "peak RSS +MiB", "{:.1f}"),
    Column("sha256", "sha256"),
]


def skipped(why: str, options: LinkOptions) -> CaseResult:
    """The case's result where it cannot run: one row and one note saying why."""
    print(f"link: skipped: {why}", file=sys.stderr, flush=True)
    return CaseResult(
        name="link",
        title=f"8. download over an emulated {options.rtt_ms:g} ms RTT link",
        server="none: " + why,
        columns=[Column("why", "why")],
        rows=[{"contender": "skipped", "why": why}],
        notes=[f"skipped: {why}"],
        config={"skipped": why},
    )


async def run(size: int, rounds: int, work: Path, options: LinkOptions) -> CaseResult:
    """Case 8: download `size` bytes over the emulated link, single stream and parallel."""
    why = why_not()
    if why is not None:
        return skipped(why, options)
    try:
        leftovers = remove_leftovers()
    except RuntimeError as error:
        return skipped(str(error), options)
    parallel = hasattr(sandboxkit, "ParallelDownloads")
    runs, unavailable = contenders(parallel, options)
    try:
        link = Link(options)
        await link.__aenter__()
    except RuntimeError as error:
        return skipped(f"the link could not be built: {error}", options)
    try:
        data = work / "data"
        (data / "home/user").mkdir(parents=True, exist_ok=True)
        expected = make_file(data / BIG.lstrip("/"), size)
        out = work / "out"
        out.mkdir()
        server_config = {
            "data_dir": str(data),
            "host": SERVER_ADDRESS,
            "die_with_parent": True,
            "congestion_control": options.congestion_control,
        }
        prefix = ("ip", "netns", "exec", link.server_ns)
        async with ServerProcess(
            "minimal", server_config, prefix=prefix, new_session=True
        ) as server:
            info = server.info
            port = int(info["domain"].rsplit(":", 1)[1])
            common = {
                "address": SERVER_ADDRESS,
                "domain": info["domain"],
                "token": token_for(info["secret"], KEY),
                "base_url": info["base_url"],
                "api_key": info["api_key"],
                "remote": BIG,
            }
            probe = await run_client(
                link, {"kind": "probe", "address": SERVER_ADDRESS, "port": port, "count": 10}
            )
            samples: dict[str, list[Sample]] = {c.name: [] for c in runs}
            right: dict[str, list[bool]] = {c.name: [] for c in runs}
            failed: dict[str, str] = {}
            for index in range(rounds):
                order = runs if index % 2 == 0 else runs[::-1]
                for contender in order:
                    if contender.name in failed:
                        continue
                    dest = out / "file.bin"
                    config = {**common, **contender.config, "dest": str(dest)}
                    try:
                        answer = await run_client(link, config)
                    except RuntimeError as error:
                        # One contender's failure is a finding, not the end of the case.
                        failed[contender.name] = str(error).strip().splitlines()[-1]
                        continue
                    finally:
                        # Partial files of a failed run too: the next run must not resume.
                        for path in out.iterdir():
                            path.unlink()
                    samples[contender.name].append(
                        Sample(
                            wall=answer["wall"],
                            cpu=answer["cpu"],
                            rss_growth=answer["rss_growth"],
                            minflt=answer["minflt"],
                        )
                    )
                    right[contender.name].append(
                        answer.get("sha256") == expected and answer["size"] == size
                    )
            for name in failed:  # partial samples would misalign the paired rounds
                del samples[name], right[name]
            line_stats = await link.stats()
            settings = link.tcp_settings()
            if options.congestion_control:
                settings["server tcp_congestion_control"] = (
                    f"{options.congestion_control} (on the server's listening socket)"
                )
    finally:
        await link.__aexit__()
    return _result(
        size,
        rounds,
        options,
        samples,
        right,
        unavailable=unavailable,
        failed=failed,
        probe=probe,
        line_stats=line_stats,
        settings=settings,
        leftovers=leftovers,
    )


def _result(
    size: int,
    rounds: int,
    options: LinkOptions,
    samples: dict[str, list[Sample]],
    right: dict[str, list[bool]],
    *,
    unavailable: list[str],
    failed: dict[str, str],
    probe: dict[str, Any],
    line_stats: dict[str, Any],
    settings: dict[str, str],
    leftovers: list[str],
) -> CaseResult:
    gib = size / (1 << 30)
    rows: list[dict[str, Any]] = []
    nothing: list[Sample] = []

    def ratio(runs: list[Sample], reference: str) -> float:
        against = samples.get(reference, nothing)
        return paired_ratio(runs, against, lambda s: 1 / s.wall) if against else float("nan")

    for name, runs in samples.items():
        rows.append(
            {
                "contender": name,
                "mb_per_s": median([size / 1e6 / s.wall for s in runs]),
                "x_sdk_one": ratio(runs, SDK_ONE),
                "x_raw_one": ratio(runs, RAW_ONE),
                "cpu_s_per_gib": median([s.cpu / gib for s in runs]),
                "rss_growth_mib": max(s.rss_growth for s in runs) / MiB,
                "sha256": "ok" if all(right[name]) else "WRONG",
                "right": sum(right[name]) / len(right[name]),
            }
        )
    rows += [{"contender": name, "sha256": "failed"} for name in failed]
    rows += [{"contender": name, "sha256": "not available"} for name in unavailable]
    by_name = {row["contender"]: row for row in rows}
    connect = probe["connect_ms"]
    wmem_max = int(settings["server tcp_wmem"].split()[-1])
    single = by_name[RAW_ONE].get("mb_per_s", float("nan"))
    bound = (
        f"{wmem_max / (options.rtt_ms / 1e3) / 1e6:.0f} MB/s" if options.rtt_ms else "none at 0 ms"
    )
    notes = [
        f"link: RTT set {options.rtt_ms:g} ms; TCP connect across it took "
        f"{median(connect):.1f} ms (median of {len(connect)}, min {min(connect):.1f})",
        f"single stream: raw aiohttp {single:.1f} MB/s (the issue measured ~{ISSUE_SINGLE_MB_S:g} "
        f"MB/s at 40 ms); the server's send-buffer bound, tcp_wmem max / RTT = " + bound,
        "TCP as the machine has it: "
        + "; ".join(f"{k} = {v}" for k, v in settings.items() if k.startswith("server"))
        + "; client tcp_rmem = "
        + settings["client tcp_rmem"],
        f"delay line: {line_stats['cpu_s']} CPU s in all; "
        + "; ".join(
            f"{way} {s['packets']} packets, {s['lost']} lost, {s['overflow']} overflowed, "
            f"released late by p50 {s['late_ms_p50']} / p99 {s['late_ms_p99']} / max "
            f"{s['late_ms_max']} ms"
            for way, s in line_stats["ways"].items()
        ),
        "each run is a fresh client process in the client namespace (RSS growth is its own "
        "peak over its start, sampled from a thread); Range rows hash the file after the "
        "clock stops, the others while downloading",
    ]
    if unavailable:
        notes.append(
            "sandboxkit.ParallelDownloads does not exist in this tree: the parallel "
            "sandboxkit rows were not run"
        )
    notes += [f"{name} failed: {why}" for name, why in failed.items()]
    if leftovers:
        notes.append(f"removed namespaces left by a killed earlier run: {', '.join(leftovers)}")
    targets = []
    sdk_parallel = [
        row
        for name, row in by_name.items()
        if name.startswith("sandboxkit parts=") and "right" in row
    ]
    if any(name.startswith("sandboxkit parts=") for name in failed):
        targets.append(target("sandboxkit parallel: every run finished", 0.0, "== 1"))
    if sdk_parallel:
        best = max(sdk_parallel, key=lambda row: row["x_sdk_one"])
        targets += [
            target(f"{best['contender']}: throughput vs {SDK_ONE}", best["x_sdk_one"], ">= 2.5"),
            target(
                "sandboxkit parallel: sha256 right (fraction of runs)",
                min(row["right"] for row in sdk_parallel),
                "== 1",
            ),
            target(
                "sandboxkit parallel: peak RSS growth, MiB (worst run)",
                max(row["rss_growth_mib"] for row in sdk_parallel),
                "< 64",
            ),
        ]
    return CaseResult(
        name="link",
        title=f"8. download {size / MiB:.0f} MiB over an emulated {options.rtt_ms:g} ms RTT link",
        server="minimal aiohttp.web (sendfile, Range) in a network namespace, behind a "
        "TUN delay line (benchmarks/_delayline.py)",
        columns=COLUMNS,
        rows=rows,
        targets=targets,
        notes=notes,
        config={
            "size_mib": size / MiB,
            "rounds": rounds,
            "rtt_ms": options.rtt_ms,
            "loss_percent": options.loss_percent,
            "rate_mbit": options.rate_mbit,
            "mtu": MTU,
        },
    )
