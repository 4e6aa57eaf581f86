"""Case 11 (issue 41): bandwidth budgets hold, and a live change takes effect.

Server: the real emulator in its own process (`_server.py emulator`), on loopback: the link
is not the point, the client's pacing is. Downloads are `files.iter_bytes` (the bytes counted
as the client hands them on, no disk in the way); uploads are `files.upload` of bytes from
memory (counted by their progress callback, called per grain as the connection takes it).

- Hold: for each direction, 1 and 64 transfers run back to back for `seconds` under one
  client-wide limit; the bytes moved in that time over the limit's bytes (target: within 5%).
- Live change: 8 downloads under `high`, lowered to `low` after `before` seconds, then raised
  back; throughput in 250 ms windows after each change, and how long until every later window
  is within 10% of the new limit (target: 1 s or less).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _report import CaseResult, Column, target
from _server import ServerProcess

import sandboxkit
from sandboxkit.emulator import EmulatorResolver

MiB = 1 << 20
SERVER = "sandboxkit.emulator (python benchmarks/_server.py emulator), in its own process"
WINDOW = 0.25
SETTLED = 0.10  # a window within 10% of the new limit counts as the change in effect


class Meter:
    """Bytes moved, stamped: (monotonic time, bytes) per piece."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, int]] = []

    def add(self, count: int) -> None:
        self.marks.append((time.monotonic(), count))

    def between(self, start: float, end: float) -> int:
        return sum(n for t, n in self.marks if start <= t < end)

    def windows(self, start: float, end: float) -> list[float]:
        """Bytes per second in each WINDOW from `start` to `end`."""
        count = int((end - start) / WINDOW)
        return [
            self.between(start + i * WINDOW, start + (i + 1) * WINDOW) / WINDOW
            for i in range(count)
        ]


def effect_delay(rates: list[float], limit: float) -> float:
    """Seconds from the change until every later window is within SETTLED of `limit`."""
    settled = len(rates)
    for index in range(len(rates) - 1, -1, -1):
        if abs(rates[index] / limit - 1) > SETTLED:
            break
        settled = index
    return settled * WINDOW if settled < len(rates) else float("inf")


async def _transfers(
    client: sandboxkit.Client,
    info: dict[str, Any],
    direction: str,
    count: int,
    meter: Meter,
    payload: bytes,
) -> list[asyncio.Task[None]]:
    handles = [client.sandbox_from_response(body) for body in info["sandboxes"]]
    remote = info["files"][0]["path"]

    async def download(slot: int) -> None:
        files = handles[slot % len(handles)].files
        while True:
            async with files.iter_bytes(remote) as chunks:
                async for chunk in chunks:
                    meter.add(len(chunk))

    async def upload(slot: int) -> None:
        files = handles[slot % len(handles)].files
        sent = 0

        def progress(done: int, _: int | None) -> None:
            nonlocal sent
            meter.add(done - sent)
            sent = done

        while True:
            sent = 0
            await files.upload(f"/home/user/up-{slot}.bin", payload, progress=progress)

    run: Callable[[int], Any] = download if direction == "download" else upload
    return [asyncio.create_task(run(slot)) for slot in range(count)]


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _client(info: dict[str, Any], budgets: sandboxkit.Budgets) -> sandboxkit.Client:
    return sandboxkit.Client(
        api_key=info["api_key"],
        base_url=info["base_url"],
        data_plane_scheme=info["scheme"],
        resolver=EmulatorResolver(),
        # 64 transfers of one host: the host's pool must let them all run at once.
        limits=sandboxkit.Limits(per_host_connections=64),
        budgets=budgets,
    )


async def run(limit: int, seconds: float, change: tuple[int, int, float], work: Path) -> CaseResult:
    """Run case 11: the hold at `limit` bytes/s for `seconds`, then the live change
    (`change`: the high and low limits, seconds before each change)."""
    high, low, before = change
    result = CaseResult(
        name="budgets",
        title=f"Budgets: a bandwidth limit held for {seconds:g} s, and changed live",
        server=SERVER,
        columns=[
            Column("transfers", "transfers", "{:d}"),
            Column("limit_mib_s", "limit MiB/s", "{:.2f}"),
            Column("mib_s", "measured MiB/s", "{:.3f}"),
            Column("ratio", "measured/limit", "{:.4f}"),
            Column("effect_s", "in effect after s", "{:.2f}"),
        ],
        config={
            "limit": limit,
            "hold_seconds": seconds,
            "high": high,
            "low": low,
            "window": WINDOW,
        },
    )
    payload = bytes(8 * MiB)
    async with ServerProcess(
        "emulator", {"sandboxes": 4, "files": 1, "file_size": 8 * MiB}
    ) as server:
        info = server.info
        for direction in ("download", "upload"):
            for count in (1, 64):
                meter = Meter()
                budgets = (
                    sandboxkit.Budgets(download_bytes_per_second=limit)
                    if direction == "download"
                    else sandboxkit.Budgets(upload_bytes_per_second=limit)
                )
                async with _client(info, budgets) as client:
                    started = time.monotonic()
                    tasks = await _transfers(client, info, direction, count, meter, payload)
                    await asyncio.sleep(seconds)
                    moved = meter.between(started, started + seconds)
                    await _stop(tasks)
                ratio = moved / seconds / limit
                result.rows.append(
                    {
                        "contender": f"{direction}, {count} at once",
                        "transfers": count,
                        "limit_mib_s": limit / MiB,
                        "mib_s": moved / seconds / MiB,
                        "ratio": ratio,
                    }
                )
                result.targets.append(
                    target(f"{direction} x{count}: |measured/limit - 1|", abs(ratio - 1), "<= 0.05")
                )
        # Live: lowered, then raised, while 8 downloads run.
        meter = Meter()
        async with _client(info, sandboxkit.Budgets(download_bytes_per_second=high)) as client:
            tasks = await _transfers(client, info, "download", 8, meter, payload)
            await asyncio.sleep(before)
            lowered = time.monotonic()
            client.set_budgets(sandboxkit.Budgets(download_bytes_per_second=low))
            await asyncio.sleep(before)
            raised = time.monotonic()
            client.set_budgets(sandboxkit.Budgets(download_bytes_per_second=high))
            await asyncio.sleep(before)
            await _stop(tasks)
        for name, at, rate in (("lowered", lowered, low), ("raised", raised, high)):
            windows = meter.windows(at, at + before)
            delay = effect_delay(windows, rate)
            later = windows[min(4, len(windows) // 2) :]  # from 1 s after the change
            result.rows.append(
                {
                    "contender": f"live: {name} to {rate / MiB:g} MiB/s, 8 downloads",
                    "transfers": 8,
                    "limit_mib_s": rate / MiB,
                    "mib_s": sum(later) / len(later) / MiB,
                    "ratio": sum(later) / len(later) / rate,
                    "effect_s": delay,
                }
            )
            result.config[f"{name}_windows_mib_s"] = [round(w / MiB, 2) for w in windows]
            result.targets.append(
                target(f"live change ({name}) in effect within, s", delay, "<= 1")
            )
    result.notes.append(
        "measured/limit: bytes moved in the whole period over the limit's bytes; the live "
        "rows' figures are of the windows from 1 s after the change on"
    )
    return result
