"""The demo's transfer step: a generated file up and back down through injected faults."""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from pathlib import Path
from typing import Protocol

import anyio
from rich.console import Console

import sandboxkit
from sandboxkit.emulator import Emulator, Fault

from ._progress import TransferBar, format_size, format_throughput, transfer_progress

__all__ = ["Narrator", "generate_file", "transfer_step"]

CHUNK = 1 << 20
REMOTE = "/home/user/demo.bin"


class Narrator(Protocol):
    """What a demo step needs of the demo: where to work, how big, and how to speak."""

    console: Console
    size: int
    workdir: Path

    def step(self, title: str) -> None: ...

    def say(self, text: str) -> None: ...


def generate_file(path: Path, size: int, seed: int = 2024) -> str:
    """Write `size` pseudo-random bytes to `path` a MiB at a time; return their sha256.

    Blocking (run it in a thread). The file is never held whole in memory.
    """
    rng = random.Random(seed)
    digest = hashlib.sha256()
    with path.open("wb") as sink:
        left = size
        while left:
            piece = rng.randbytes(min(CHUNK, left))
            digest.update(piece)
            sink.write(piece)
            left -= len(piece)
    return digest.hexdigest()


def _faults_text(counts: Counter[str]) -> str:
    return ", ".join(f"{label}x{n}" for label, n in sorted(counts.items())) or "none"


async def transfer_step(
    demo: Narrator, emu: Emulator, client: sandboxkit.Client
) -> tuple[str, sandboxkit.DownloadResult]:
    """Upload a generated file, download it back through 429, 502 and cut connections.

    Returns:
        The source's sha256 and the download's result, for the demo to check.
    """
    size = demo.size
    demo.step(f"Upload and download {format_size(size)} through faults")
    source = demo.workdir / "source.bin"
    dest = demo.workdir / "roundtrip.bin"
    started = time.monotonic()
    source_sha = await anyio.to_thread.run_sync(generate_file, source, size)
    demo.say(
        f"generated {format_size(size)} at {source} in {time.monotonic() - started:.2f} s, "
        f"sha256={source_sha[:16]}..."
    )
    sandbox = client.sandbox_from_response(await emu.create_sandbox())
    demo.say(f"sandbox {sandbox.sandbox_key} created")

    emu.faults.injected.clear()
    emu.faults.script("files.upload", Fault.status(429, retry_after="0"), Fault.status(502))
    # Cut offsets are relative to each answer's body: the second cut hits the resumed range.
    emu.faults.script(
        "files.download",
        Fault.status(429, retry_after="0"),
        Fault.status(502),
        Fault.cut(after_bytes=size // 3),
        Fault.cut(after_bytes=size // 4),
    )
    demo.say("fault plan: upload 429, 502; download 429, 502, cut at 1/3, cut at 1/4 of the rest")

    with transfer_progress(demo.console) as progress:
        up_bar = TransferBar(progress, "upload  ")
        up_started = time.monotonic()
        await sandbox.files.upload(REMOTE, source, progress=up_bar)
        up_bar.finish(size)
        up_elapsed = time.monotonic() - up_started
        down_bar = TransferBar(progress, "download")
        # One stream: the demo shows resumes after cuts; over loopback slices would not pay
        # (and a loaded machine's slow answer could make the download split).
        result = await sandbox.files.download(REMOTE, dest, progress=down_bar, parts=1)
        down_bar.finish(result.size)

    uploads = emu.journal_for("files.upload")
    downloads = emu.journal_for("files.download")
    up_faults = Counter(r.fault for r in uploads if r.fault)
    down_faults = Counter(r.fault for r in downloads if r.fault)
    demo.say(
        f"upload:   {format_size(size)} in {up_elapsed:.2f} s "
        f"({format_throughput(size, up_elapsed)}), {len(uploads)} requests, "
        f"{len(uploads) - 1} retries (faults: {_faults_text(up_faults)})"
    )
    demo.say(
        f"download: {format_size(result.size)} in {result.elapsed:.2f} s "
        f"({format_throughput(result.size, result.elapsed)}), "
        f"attempts={result.attempts} resumes={result.resumes} "
        f"(faults: {_faults_text(down_faults)})"
    )
    ranged = [r.headers.get("Range") for r in downloads if r.headers.get("Range")]
    demo.say(f"resumed with: {', '.join(str(r) for r in ranged) or 'no Range requests'}")
    demo.say(f"faults injected (emu.faults.injected): {_faults_text(emu.faults.injected)}")
    demo.say(f"sha256 source   {source_sha}")
    demo.say(f"sha256 download {result.sha256}")
    matches = result.sha256 == source_sha and result.size == size
    demo.say("sha256 matches: [bold green]yes[/]" if matches else "sha256 matches: [red]NO[/]")
    await sandbox.aclose()
    return source_sha, result
