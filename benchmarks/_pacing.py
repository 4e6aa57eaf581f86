"""Case 12: concurrency found, not configured; a server that degrades; background mode.

Three parts, each client run a fresh process (`_pacingclient.py`):

* ``sweep``: `batch.download_many` of `count` files of 1 MiB over 16 sandbox hosts across the
  emulated 40 ms link (`_netns.Link`), at each fixed concurrency of a sweep and with the
  default (found) one, in paired rounds (A B ..., then ... B A). Target: the default reaches
  0.9x the best fixed concurrency's throughput (paired ratio against it).
* ``degrade``: on loopback, the minimal server made to degrade past N downloads at once
  (each takes 20 ms, stretched by (in flight / N)^2 past N; 503 past 1.5 N), 16 KiB files
  over 16 hosts, found against fixed N and fixed 256. Targets: the found concurrency
  settles (its time-weighted median over the second half of the run) within 30% of N;
  under 1% of answers are 503s.
* ``background``: across the link with its bandwidth capped, a probe process sends a small
  GET every 100 ms on its own connection while a batch runs in another process: the probe's
  median time during the batch over its median on the idle link, for the default mode and
  for `background=True`. Target: at most 1.5x in background mode.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import attrs
from _measure import MiB, median
from _netns import HERE, SERVER_ADDRESS, Link, LinkOptions, remove_leftovers, why_not
from _report import CaseResult, Column, target
from _server import ServerProcess

FOUND = "found (default)"
CLIENT = HERE / "_pacingclient.py"


async def client(config: dict[str, Any], ns: str | None) -> dict[str, Any]:
    """One client process (in namespace `ns`, or here); its JSON answer."""
    prefix = ("ip", "netns", "exec", ns) if ns else ()
    proc = await asyncio.create_subprocess_exec(
        *prefix, sys.executable, str(CLIENT), json.dumps(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"pacing client {config['kind']} failed: {err.decode()[-2000:]}")
    answer: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return answer


def make_files(data: Path, count: int, size: int) -> None:
    """`count` files of `size` bytes, /home/user/f{i}.bin, and the probe's tiny one."""
    home = data / "home/user"
    home.mkdir(parents=True, exist_ok=True)
    block = bytes(range(256)) * (size // 256 + 1)
    for index in range(count):
        (home / f"f{index}.bin").write_bytes(block[index % 256 : index % 256 + size])
    (home / "probe.bin").write_bytes(b"p" * 64)


def batch_config(server: ServerProcess, address: str, count: int, dest: Path) -> dict[str, Any]:
    """A `batch` client's config: `count` files over 16 sandbox hosts of `server`."""
    return {
        "kind": "batch",
        "address": address,
        "domain": server.info["domain"],
        "secret": server.info["secret"],
        "keys": 16,
        "count": count,
        "remote": "/home/user/f{i}.bin",
        "dest": str(dest),
    }


def settled(events: list[list[Any]], wall: float, start: int) -> float:
    """The time-weighted median concurrency over the second half of a run."""
    points = [(0.0, start)] + [(at, limit) for at, kind, limit, _ in events if kind != "pause"]
    weights: dict[int, float] = {}
    half = wall / 2
    for (at, limit), (after, _) in zip(points, [*points[1:], (wall, 0)], strict=True):
        span = max(0.0, min(after, wall) - max(at, half))
        weights[limit] = weights.get(limit, 0.0) + span
    total = sum(weights.values())
    seen = 0.0
    for limit in sorted(weights):
        seen += weights[limit]
        if seen >= total / 2:
            return float(limit)
    return float("nan")


# The second degrade part: one host of 16 serves 2 at once (503 past 3); the rest any number.
ONE_HOST_CAPACITY = 2
FOUND_BATCH = "found by the batch only"


@attrs.define
class Part:
    """One part's rows, notes and targets."""

    rows: list[dict[str, Any]] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    targets: list[Any] = attrs.field(factory=list)


async def degrade_part(
    work: Path, small: Path, jobs: int, rounds: int, capacity: int, host: str | None
) -> Part:
    """Found against fixed counts on a server that degrades past `capacity` at once (on
    `host` only, when given), with and without each host finding its own concurrency."""
    part = Part()
    degrade = {"capacity": capacity, "service": 0.02, "fail_over": 1.5, "host": host}
    where = f"N={capacity}" if host is None else f"one host of 16 at N={capacity}"
    # (name, concurrency, `Limits.found_host_concurrency`): the default (the batch and its
    # hosts find theirs), the batch's alone (as before hosts found theirs), the old fixed
    # default 256 (what a count typed without knowing N does), and N itself where N is the
    # whole server's.
    contenders: list[tuple[str, int | None, bool | None]] = [
        (FOUND, None, None),
        (FOUND_BATCH, None, False),
        ("fixed 256", 256, None),
    ]
    if host is None:
        contenders.insert(2, (f"fixed {capacity}", capacity, None))
    async with ServerProcess("minimal", {"data_dir": str(small), "degrade": degrade}) as server:
        common = batch_config(server, "127.0.0.1", jobs, work / "out-degrade")
        runs: dict[str, list[dict[str, Any]]] = {}
        for index in range(rounds):
            order = contenders if index % 2 == 0 else contenders[::-1]
            for name, concurrency, found_host in order:
                config = {**common, "concurrency": concurrency, "found_host": found_host}
                runs.setdefault(name, []).append(await client(config, None))
    for name, answers in runs.items():
        answered = [sum(a["statuses"].values()) for a in answers]
        failed = [a["statuses"].get("503", 0) for a in answers]
        found = name in (FOUND, FOUND_BATCH)
        row = {
            "contender": f"degrade {where}: {name}",
            "jobs_per_s": median([a["done"] / a["wall"] for a in answers]),
            "settled": median([settled(a["events"], a["wall"], 4) for a in answers])
            if found
            else float(name.split()[-1]),
            "failed_pct": 100 * sum(failed) / max(1, sum(answered)),
            "jobs_failed": sum(a["failed"] for a in answers),
        }
        part.rows.append(row)
        if found:
            part.notes.append(
                f"degrade {where}, {name}: the batch's changes (first round, s / kind / value "
                f"/ why): {answers[0]['events'][:40]}; hosts' own changes: "
                f"{[a['host_changes'] for a in answers]}"
            )
        if name == FOUND and host is None:
            part.targets += [
                target(
                    f"degrade: found concurrency settles within 30% of N={capacity} (settled / N)",
                    row["settled"] / capacity,
                    ">= 0.7",
                ),
                target("degrade: settled / N", row["settled"] / capacity, "<= 1.3"),
                target("degrade: answers that were 503, %", row["failed_pct"], "< 1"),
            ]
    return part


async def run(
    count: int,
    rounds: int,
    work: Path,
    sweep: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256),
    capacity: int = 16,
    degrade_jobs: int = 3000,
    rate_mbit: float = 200.0,
    background_count: int = 150,
    loopback_only: bool = False,
) -> CaseResult:
    """Case 12: the three parts (the link ones skipped, with a note, where it cannot run)."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    targets = []
    data = work / "data"
    make_files(data, max(count, background_count), MiB)
    small = work / "small"
    make_files(small, degrade_jobs, 16 * 1024)

    # The degrading server, on loopback: past N at once over all hosts, then past 2 at once
    # on one host of 16 (the others never slow down).
    for host, n in ((None, capacity), ("sbx-000", ONE_HOST_CAPACITY)):
        part = await degrade_part(work, small, degrade_jobs, rounds, n, host)
        rows += part.rows
        notes += part.notes
        targets += part.targets
    if loopback_only:
        return _result(rows, notes, targets, count, rounds)

    why = why_not()
    if why is None:
        try:
            remove_leftovers()
        except RuntimeError as error:
            why = str(error)
    if why is not None:
        notes.append(f"link parts skipped: {why}")
        return _result(rows, notes, targets, count, rounds)

    # The sweep across the 40 ms link.
    async with Link(LinkOptions(rtt_ms=40.0)) as link:
        prefix = ("ip", "netns", "exec", link.server_ns)
        config = {"data_dir": str(data), "host": SERVER_ADDRESS, "die_with_parent": True}
        async with ServerProcess("minimal", config, prefix=prefix, new_session=True) as server:
            common = batch_config(server, SERVER_ADDRESS, count, work / "out-sweep")
            # Fixed counts (None: found, the default), and "batch": found by the batch alone
            # (`found_host_concurrency=False`), as before each host found its own too.
            contenders: list[int | str | None] = [*sweep, "batch", None]
            sweep_runs: dict[int | str | None, list[dict[str, Any]]] = {c: [] for c in contenders}
            for index in range(rounds):
                order = contenders if index % 2 == 0 else contenders[::-1]
                for contender in order:
                    config = {
                        **common,
                        "concurrency": contender if isinstance(contender, int) else None,
                        "found_host": False if contender == "batch" else None,
                    }
                    sweep_runs[contender].append(await client(config, link.client_ns))
    throughput = {
        c: [a["bytes"] / 1e6 / a["wall"] for a in answers] for c, answers in sweep_runs.items()
    }
    best = max(sweep, key=lambda c: median(throughput[c]))
    for concurrency, values in throughput.items():
        name = (
            FOUND
            if concurrency is None
            else FOUND_BATCH
            if concurrency == "batch"
            else f"fixed {concurrency}"
        )
        found_at = [a["concurrency"] for a in sweep_runs[concurrency]]
        ratios = [v / b for v, b in zip(values, throughput[best], strict=True)]
        rows.append(
            {
                "contender": f"sweep {count} x 1 MiB, 40 ms: {name}",
                "mb_per_s": median(values),
                "x_best": median(ratios),
                "settled": median(found_at),
                "jobs_failed": sum(a["failed"] for a in sweep_runs[concurrency]),
            }
        )
    found_ratio = median([v / b for v, b in zip(throughput[None], throughput[best], strict=True)])
    hosts_too = median([v / b for v, b in zip(throughput[None], throughput["batch"], strict=True)])
    notes.append(f"sweep: found (hosts too) over found by the batch only, paired: {hosts_too:.3f}")
    targets.append(
        target(f"sweep: found vs the best fixed (fixed {best}), paired", found_ratio, ">= 0.9")
    )
    notes.append(
        "sweep, found concurrency's changes (first round): "
        + str(sweep_runs[None][0]["events"][:40])
    )

    # Background mode across the link with its bandwidth capped.
    async with Link(LinkOptions(rtt_ms=40.0, rate_mbit=rate_mbit)) as link:
        prefix = ("ip", "netns", "exec", link.server_ns)
        config = {"data_dir": str(data), "host": SERVER_ADDRESS, "die_with_parent": True}
        async with ServerProcess("minimal", config, prefix=prefix, new_session=True) as server:
            base = {
                "address": SERVER_ADDRESS,
                "domain": server.info["domain"],
                "secret": server.info["secret"],
            }
            probe = {**base, "kind": "probe", "remote": "/home/user/probe.bin", "interval": 0.1}
            batched = {
                **batch_config(server, SERVER_ADDRESS, background_count, work / "out-bg"),
                "concurrency": None,
            }
            idle_runs: list[float] = []
            during: dict[str, list[float]] = {"default": [], "background": []}
            walls: dict[str, list[float]] = {"default": [], "background": []}
            for index in range(rounds):
                idle = await client({**probe, "seconds": 3.0}, link.client_ns)
                idle_runs.append(median([t for _, t in idle["samples"][3:]]))
                modes = ["default", "background"] if index % 2 == 0 else ["background", "default"]
                for mode in modes:
                    probing = await start_probe(
                        {**probe, "seconds": 600.0, "until_stdin_closes": True}, link.client_ns
                    )
                    await asyncio.sleep(1.0)  # the probe's connection is up and idle
                    answer = await client(
                        {**batched, "background": mode == "background"}, link.client_ns
                    )
                    samples = await stop_probe(probing)
                    if index == 0:
                        notes.append(f"background part, {mode}'s changes: {answer['events'][:40]}")
                    inside = [
                        t for at, t in samples if answer["began"] + 1 <= at <= answer["ended"]
                    ]
                    during[mode].append(median(inside))
                    walls[mode].append(answer["wall"])
    idle_ms = median(idle_runs) * 1e3
    for mode, values in during.items():
        ratio = median([v / i for v, i in zip(values, idle_runs, strict=True)])
        rows.append(
            {
                "contender": f"probe during {background_count} x 1 MiB at {rate_mbit:g} Mbit/s: "
                f"{mode}",
                "probe_ms": median(values) * 1e3,
                "x_idle": ratio,
                "batch_s": median(walls[mode]),
            }
        )
        if mode == "background":
            targets.append(
                target("background: probe time during the batch / idle", ratio, "<= 1.5")
            )
    notes.append(f"probe idle: {idle_ms:.1f} ms (median; a 64-byte GET on a kept connection)")
    return _result(rows, notes, targets, count, rounds)


async def start_probe(config: dict[str, Any], ns: str) -> asyncio.subprocess.Process:
    """A probe process that runs until its stdin closes (`stop_probe`)."""
    return await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", ns, sys.executable, str(CLIENT), json.dumps(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


async def stop_probe(proc: asyncio.subprocess.Process) -> list[list[float]]:
    """Close the probe's stdin; its samples (wall-clock start, seconds)."""
    assert proc.stdin is not None
    proc.stdin.close()
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"probe failed: {err.decode()[-2000:]}")
    samples: list[list[float]] = json.loads(out.decode().strip().splitlines()[-1])["samples"]
    return samples


def _result(
    rows: list[dict[str, Any]], notes: list[str], targets: list[Any], count: int, rounds: int
) -> CaseResult:
    return CaseResult(
        name="pacing",
        title="12. concurrency found, a degrading server, background mode",
        server="minimal aiohttp.web (benchmarks/_server.py): on loopback with `degrade`, and "
        "behind the TUN delay line (benchmarks/_delayline.py)",
        columns=[
            Column("mb_per_s", "MB/s", "{:.1f}"),
            Column("x_best", "x best fixed", "{:.2f}"),
            Column("jobs_per_s", "jobs/s", "{:.0f}"),
            Column("settled", "concurrency", "{:.0f}"),
            Column("failed_pct", "503 %", "{:.2f}"),
            Column("jobs_failed", "jobs failed"),
            Column("probe_ms", "probe ms", "{:.1f}"),
            Column("x_idle", "x idle", "{:.2f}"),
            Column("batch_s", "batch s", "{:.1f}"),
        ],
        rows=rows,
        targets=targets,
        notes=notes,
        config={"count": count, "rounds": rounds},
    )
