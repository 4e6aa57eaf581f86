"""Helpers of the Dask tests (this module holds no tests): shards of emulator files, a
client that keeps the shards' futures, and killing the worker process running one."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.from_thread

from sandboxkit import batch
from sandboxkit.emulator import Emulator

Portal = anyio.from_thread.BlockingPortal


def eventually(condition: Callable[[], object], what: str, timeout: float = 20.0) -> Any:
    """Poll `condition` until it returns something true; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


class RecordingClient:
    """The real Dask client, keeping the futures `map` returned (one per shard, in order)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.futures: list[Any] = []

    def map(self, *args: Any, **kwargs: Any) -> Any:
        self.futures = list(self.client.map(*args, **kwargs))
        return self.futures

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def shard_files(
    emu: Emulator, portal: Portal, tmp_path: Path, shards: int, per_shard: int
) -> tuple[list[batch.DownloadJob], list[str], list[int]]:
    """`per_shard` files of one sandbox per shard, each shard into its own directory."""
    rng = random.Random(5)
    jobs, digests, sizes = [], [], []
    for s in range(shards):
        data = portal.call(emu.create_sandbox)["data"]
        ref = batch.SandboxRef(data["sandbox_key"], data["domain"], data["sandbox_access_token"])
        (tmp_path / f"s{s}").mkdir()
        for n in range(per_shard):
            body = rng.randbytes(rng.randint(1 << 10, 8 << 10))
            name = f"s{s}f{n}.bin"
            (emu.sandbox_root(ref.sandbox_key) / "home" / "user" / name).write_bytes(body)
            digests.append(hashlib.sha256(body).hexdigest())
            sizes.append(len(body))
            jobs.append(batch.DownloadJob(ref, f"/home/user/{name}", tmp_path / f"s{s}" / name))
    return jobs, digests, sizes


def finished_in(directory: Path) -> set[str]:
    """The files that landed (partial files are hidden `.{name}.part`)."""
    return {p.name for p in directory.iterdir() if not p.name.startswith(".")}


def kill_worker_of(dask_client: Any, future: Any, ready: Callable[[], bool]) -> int:
    """SIGKILL the worker process running `future` once `ready()`; returns its pid."""

    def running_on() -> str | None:
        if not ready():
            return None
        on = [a for a, keys in dask_client.processing().items() if future.key in keys]
        return on[0] if on else None

    address = eventually(running_on, "the shard to be running and far enough")
    others = [k for k in dask_client.processing()[address] if k != future.key]
    assert not others, f"another task shares the worker: {others}"
    pid: int = dask_client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    return pid


def wait_for_replacement(dask_client: Any, killed: int) -> None:
    """Until the nanny has replaced the killed process: later tests want both workers."""

    def replaced() -> bool:
        workers = dask_client.scheduler_info()["workers"].values()
        return len(workers) == 2 and killed not in {w.get("pid") for w in workers}

    eventually(replaced, "the killed worker to be replaced", timeout=30.0)
