"""Cases 6 and 7: batch jobs that survive their own crash and an outage (issue 15).

Server: the real emulator in its own process (``python benchmarks/_server.py emulator``).

6. ``rerun``: a child process runs ``batch.download_many`` and is killed with SIGKILL once
   about half the bytes are on disk; the same batch then runs again here. Reported: the bytes
   the rerun fetched (from the server's journal: a GET without ``Range`` fetches the whole
   file, one with ``bytes=N-`` the rest after N) over the total, and over what was missing at
   the kill. The old behaviour (every file fetched again) is the ``resume=False`` row.
7. ``outage``: ``download_many`` over several sandboxes; when a third of the jobs are done the
   emulator goes down (connections cut, then closed unanswered) and comes back on the same
   ports. Reported: the share of jobs done, the wall time over the fault-free run, and the
   requests sent while the server was down; ``max_stall=0`` turns the circuits off.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _measure import Contender, Sample, median, paired_ratio, paired_rounds
from _report import CaseResult, Column, target
from _server import ServerProcess

import sandboxkit
from sandboxkit import batch
from sandboxkit.emulator import EmulatorResolver

SERVER = "sandboxkit.emulator (python benchmarks/_server.py emulator)"
KILL_AT = 0.5  # of the batch's bytes on disk
CONCURRENCY = 100


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep the retry and circuit warnings (hundreds in an outage) off the report."""
    logger = logging.getLogger("sandboxkit")
    propagate, logger.propagate = logger.propagate, False
    handler = logging.NullHandler()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _client(info: dict[str, Any], **options: Any) -> sandboxkit.Client:
    return sandboxkit.Client(
        api_key=info["api_key"],
        base_url=info["base_url"],
        data_plane_scheme=info["scheme"],
        resolver=EmulatorResolver(),
        **options,
    )


def _jobs(info: dict[str, Any], out: Path) -> list[batch.DownloadJob]:
    jobs = []
    for s, body in enumerate(info["sandboxes"]):
        data = body["data"]
        ref = batch.SandboxRef(data["sandbox_key"], data["domain"], data["sandbox_access_token"])
        for f, wanted in enumerate(info["files"]):
            jobs.append(batch.DownloadJob(ref, wanted["path"], out / f"{s}-{f}.bin"))
    return jobs


def _held(out: Path) -> int:
    """Bytes on disk under `out`: finished files and partial ones."""
    total = 0
    for entry in os.scandir(out):
        if ".json" in entry.name:  # sidecars, and their replacements being written
            continue
        try:
            total += entry.stat().st_size
        except FileNotFoundError:  # renamed into place meanwhile: counted under its new name
            continue
    return total


def _right(info: dict[str, Any], jobs: list[batch.DownloadJob]) -> float:
    digests = {f["path"]: f["sha256"] for f in info["files"]}
    right = 0
    for job in jobs:
        if job.dest.exists():
            right += hashlib.sha256(job.dest.read_bytes()).hexdigest() == digests[job.remote]
    return right / len(jobs)


def _fetched(requests: list[list[Any]], size: int) -> int:
    fetched = 0
    for _, _, wanted in requests:
        start = int(wanted.removeprefix("bytes=").split("-")[0]) if wanted else 0
        fetched += size - start
    return fetched


# --- 6. crash and rerun ------------------------------------------------------------------


async def run_rerun(
    sandboxes: int, files: int, file_size: int, rounds: int, work: Path
) -> CaseResult:
    """Kill a batch at about half its bytes, rerun it, and count what the rerun fetched."""
    config = {"sandboxes": sandboxes, "files": files, "file_size": file_size}
    total = sandboxes * files * file_size
    async with ServerProcess("emulator", config) as server:
        info = server.info
        counter = iter(range(1_000_000))

        async def killed_and_rerun(resume: bool) -> dict[str, float]:
            out = work / f"run-{next(counter)}"
            out.mkdir()
            jobs = _jobs(info, out)
            held = await _kill_child_at(info, out, KILL_AT * total)
            await server.command("clear")
            async with _client(info) as client:
                result = await batch.download_many(
                    client, jobs, concurrency=CONCURRENCY, skip_existing=resume, resume=resume
                )
            requests = (await server.command("downloads"))["requests"]
            fetched = _fetched(requests, file_size)
            leftovers = [n for n in os.listdir(out) if n.startswith(".")]
            right = _right(info, jobs)
            for entry in out.iterdir():
                entry.unlink()
            return {
                "held": held,
                "fetched": fetched,
                "failed": result.summary.failed,
                "right": right,
                "leftovers": len(leftovers),
            }

        async def with_resume() -> dict[str, float]:
            return await killed_and_rerun(True)

        async def without_resume() -> dict[str, float]:
            return await killed_and_rerun(False)

        resumed = "rerun with skip_existing=True (resume on, the default)"
        samples = await paired_rounds(
            [
                Contender(resumed, with_resume),
                Contender("rerun with resume=False (every file again, as before)", without_resume),
            ],
            rounds,
            warmup=False,
        )
    rows = []
    for name, runs in samples.items():
        rows.append(
            {
                "contender": name,
                "held": median([s.extra["held"] / total for s in runs]),
                "fetched": median([s.extra["fetched"] / total for s in runs]),
                "over_missing": median(
                    [s.extra["fetched"] / max(1, total - s.extra["held"]) for s in runs]
                ),
                "right": min(s.extra["right"] for s in runs),
                "leftovers": max(s.extra["leftovers"] for s in runs),
                "wall_s": median([s.wall for s in runs]),
            }
        )
    best = rows[0]
    return CaseResult(
        name="rerun",
        title=f"6. crash and rerun: {sandboxes * files} files of {file_size // 1024} KiB, "
        f"SIGKILL at ~{KILL_AT:.0%} of the bytes, concurrency {CONCURRENCY}",
        server=SERVER,
        columns=[
            Column("held", "on disk at the kill", "{:.1%}"),
            Column("fetched", "rerun fetched / total", "{:.1%}"),
            Column("over_missing", "rerun fetched / missing", "{:.3f}"),
            Column("right", "files right", "{:.0%}"),
            Column("leftovers", "leftover files", "{:.0f}"),
            Column("wall_s", "rerun wall s (incl. the killed run)"),
        ],
        rows=rows,
        targets=[
            target(
                "rerun fetches only what was missing (fetched / missing)",
                best["over_missing"],
                "<= 1.05",
            ),
            target("every file right after the rerun", best["right"], ">= 1"),
            target("nothing left behind", best["leftovers"], "<= 0"),
        ],
        notes=[
            "'on disk' counts finished files and partial ones; a partial file's last bytes "
            "can be lost with the process (written but not yet flushed), so the rerun may "
            "fetch slightly more than was missing",
        ],
        config={**config, "rounds": rounds, "kill_at": KILL_AT},
    )


async def _kill_child_at(info: dict[str, Any], out: Path, at_bytes: float) -> int:
    """Run the batch in a child process and SIGKILL it once `at_bytes` are on disk."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__)), "child", json.dumps({"info": info, "out": str(out)})
    )
    try:
        # A file system gives no event for "this many bytes written": poll it.
        while _held(out) < at_bytes and child.returncode is None:  # noqa: ASYNC110
            await asyncio.sleep(0.002)
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGKILL)
        await child.wait()
    return _held(out)


async def _child(spec: dict[str, Any]) -> None:
    info, out = spec["info"], Path(spec["out"])
    async with _client(info) as client:
        await batch.download_many(client, _jobs(info, out), concurrency=CONCURRENCY)


# --- 7. outage ------------------------------------------------------------------------------

FAULT_FREE = "fault-free"


async def run_outage(
    sandboxes: int, files: int, file_size: int, seconds: float, rounds: int, work: Path
) -> CaseResult:
    """The batch fault-free, and through an outage of `seconds` with and without circuits."""
    config = {"sandboxes": sandboxes, "files": files, "file_size": file_size}
    jobs_count = sandboxes * files
    with _quiet():
        samples = await _outage_rounds(config, seconds, rounds, work)
    reference = samples[FAULT_FREE]
    rows = [_outage_row(name, runs, reference, jobs_count) for name, runs in samples.items()]
    return CaseResult(
        name="outage",
        title=f"7. outage: {jobs_count} downloads of {file_size // 1024} KiB over {sandboxes} "
        f"sandboxes, concurrency {CONCURRENCY}, server down {seconds:g} s after a third",
        server=SERVER,
        columns=[
            Column("wall_s", "wall s"),
            Column("x_wall", "x wall vs fault-free", "{:.2f}"),
            Column("completion", "done, right (worst round)", "{:.1%}"),
            Column("requests", "requests while down", "{:.0f}"),
        ],
        rows=rows,
        targets=[
            target(f"{row['contender']}: every job done and right", row["completion"], ">= 1")
            for row in rows[:4]
        ],
        notes=[
            "requests while down: what the emulator's outage gate recorded (each request "
            "is read, then its connection reset; (close): closed unanswered; (head): closed "
            "after an answer's head); with circuits it is about 5 per host to open the "
            "circuit plus one probe per cooldown (0.25 s doubling to 2 s)",
        ],
        config={**config, "outage_s": seconds, "concurrency": CONCURRENCY, "rounds": rounds},
    )


async def _outage_rounds(
    config: dict[str, Any], seconds: float, rounds: int, work: Path
) -> dict[str, list[Sample]]:
    async with ServerProcess("emulator", config) as server:
        info = server.info
        out = work / "out"
        out.mkdir()
        jobs = _jobs(info, out)

        async def one(outage: str | None, retry: sandboxkit.RetryPolicy) -> dict[str, float]:
            starting: list[asyncio.Task[Any]] = []

            def progress(done: int, total: int, outcome: object) -> None:
                if outage and done == total // 3:
                    starting.append(
                        asyncio.create_task(server.command("outage", seconds=seconds, shape=outage))
                    )

            started = time.perf_counter()
            async with _client(info, retry=retry) as client:
                result = await batch.download_many(
                    client, jobs, concurrency=CONCURRENCY, progress=progress
                )
            wall = time.perf_counter() - started
            right = _right(info, jobs)
            for entry in out.iterdir():
                entry.unlink()
            requests = 0
            if starting:
                await starting[0]
                # The outage may outlive the batch (jobs failed fast): the next run needs the
                # server back. The child answers commands only by polling, so poll it.
                while (report := await server.command("outage_report"))["active"]:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                requests = report["requests"]
            return {"done": result.summary.done, "right": right, "requests": requests, "wall": wall}

        def contender(name: str, outage: str | None, retry: sandboxkit.RetryPolicy) -> Contender:
            async def run() -> dict[str, float]:
                return await one(outage, retry)

            return Contender(name, run)

        seconds_text = f"{seconds:g} s outage"
        return await paired_rounds(
            [
                contender(FAULT_FREE, None, sandboxkit.RetryPolicy()),
                contender(
                    f"{seconds_text}, default RetryPolicy", "reset", sandboxkit.RetryPolicy()
                ),
                # A rolling restart's shapes: closed after the request, or after a head.
                *(
                    contender(
                        f"{seconds_text} ({shape}), default RetryPolicy",
                        shape,
                        sandboxkit.RetryPolicy(),
                    )
                    for shape in ("close", "head")
                ),
                contender(
                    f"{seconds_text}, max_stall=0 (no circuits)",
                    "reset",
                    sandboxkit.RetryPolicy(max_stall=0),
                ),
            ],
            rounds,
            warmup=False,
        )


def _outage_row(
    name: str, runs: list[Sample], reference: list[Sample], jobs: int
) -> dict[str, Any]:
    return {
        "contender": name,
        "wall_s": median([s.extra["wall"] for s in runs]),
        "x_wall": paired_ratio(runs, reference, lambda s: s.extra["wall"]),
        "completion": min(min(s.extra["done"] / jobs, s.extra["right"]) for s in runs),
        "requests": median([s.extra["requests"] for s in runs]),
    }


if __name__ == "__main__":
    # The killed child of case 6: `python _survive.py child <json>`.
    asyncio.run(_child(json.loads(sys.argv[2])))
