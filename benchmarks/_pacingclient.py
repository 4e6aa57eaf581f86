"""The pacing case's client side, in a fresh process (in the link's client namespace, or on
loopback), printing one JSON line. Kinds:

* ``batch``: `batch.download_many` of ``count`` files over ``keys`` sandbox hosts, at a fixed
  ``concurrency`` or (null) the found one, optionally in ``background`` mode: wall time,
  bytes, the summary's concurrency and throttle events, and every answer's status (counted
  by an `on_response` hook), with the wall-clock times it began and ended;
* ``probe``: for ``seconds`` (or until stdin closes, with ``until_stdin_closes``), a small
  GET every ``interval`` on one keep-alive connection (raw aiohttp, another process than
  the batch's): each one's wall-clock start and time.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
from _linkclient import LinkResolver
from _server import die_with_parent, token_for

import sandboxkit
from sandboxkit import ResponseEvent, batch


def fresh(dest: Path) -> None:
    """An empty directory at `dest`."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)


async def run_batch(config: dict[str, Any]) -> dict[str, Any]:
    """One batch; its figures."""
    keys = [f"sbx-{index:03d}" for index in range(config["keys"])]
    refs = [
        batch.SandboxRef(key, config["domain"], token_for(config["secret"], key)) for key in keys
    ]
    dest = Path(config["dest"])
    fresh(dest)
    jobs = [
        batch.DownloadJob(refs[i % len(refs)], config["remote"].format(i=i), dest / f"{i}.bin")
        for i in range(config["count"])
    ]
    statuses: Counter[int] = Counter()

    def heard(event: ResponseEvent) -> None:
        statuses[event.status or 0] += 1

    async with sandboxkit.Client(
        api_key="sk-unused",
        base_url="http://127.0.0.1:9",
        data_plane_scheme="http",
        resolver=LinkResolver(config["address"]),
        on_response=heard,
        limits=sandboxkit.Limits(found_host_concurrency=config.get("found_host")),
    ) as client:
        began = time.time()
        started = time.perf_counter()
        result = await batch.download_many(
            client,
            jobs,
            concurrency=config["concurrency"],
            background=config.get("background", False),
        )
        wall = time.perf_counter() - started
    shutil.rmtree(dest, ignore_errors=True)
    summary = result.summary
    return {
        "wall": wall,
        "began": began,
        "ended": began + wall,
        "bytes": summary.bytes,
        "done": summary.done,
        "failed": summary.failed,
        "concurrency": summary.concurrency,
        # The batch's own changes and every pause; a host's own changes (`found_host`) counted.
        "events": [
            [round(e.at - summary.pace_events[0].at, 3), e.kind, e.concurrency, e.reason]
            for e in summary.pace_events
            if e.kind == "pause" or not e.host
        ],
        "host_changes": sum(e.kind != "pause" and bool(e.host) for e in summary.pace_events),
        "statuses": {str(k): v for k, v in statuses.items()},
    }


async def run_probe(config: dict[str, Any]) -> dict[str, Any]:
    """Small GETs on one keep-alive connection; each one's start (wall clock) and time."""
    key = "sbx-probe"
    url = f"http://{key}.{config['domain']}/files"
    headers = {"X-Access-Token": token_for(config["secret"], key)}
    samples = []
    connector = aiohttp.TCPConnector(resolver=LinkResolver(config["address"]), limit=1)
    stopped = asyncio.Event()
    if config.get("until_stdin_closes"):
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

        async def watch() -> None:
            await reader.read()
            stopped.set()

        watcher = asyncio.ensure_future(watch())
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        end = time.perf_counter() + config["seconds"]
        while time.perf_counter() < end and not stopped.is_set():
            began = time.time()
            started = time.perf_counter()
            async with session.get(url, params={"path": config["remote"]}) as response:
                await response.read()
                response.raise_for_status()
            samples.append([began, time.perf_counter() - started])
            await asyncio.sleep(config["interval"])
    if config.get("until_stdin_closes"):
        watcher.cancel()
    return {"samples": samples}


def main(argv: list[str]) -> int:
    """Run the kind the JSON config (the last argument) names; print its answer."""
    die_with_parent()
    config = json.loads(argv[-1])
    kind = {"batch": run_batch, "probe": run_probe}[config["kind"]]
    print(json.dumps(asyncio.run(kind(config))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
