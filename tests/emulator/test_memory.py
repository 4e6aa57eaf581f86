"""Large transfers stream: the process's RSS stays flat while a big file goes up and down."""

from __future__ import annotations

import gc
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from sandboxkit.emulator import Emulator

from .support import BOUNDARY, MULTIPART_TYPE, Box

MIB = 2**20
STATUS = Path("/proc/self/status")


def rss() -> int:
    """The process's resident set size in bytes (VmRSS)."""
    for line in STATUS.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


class Peak:
    """The highest RSS seen since creation."""

    def __init__(self) -> None:
        gc.collect()
        self.baseline = rss()
        self.peak = self.baseline

    def sample(self) -> None:
        self.peak = max(self.peak, rss())

    @property
    def growth(self) -> int:
        return self.peak - self.baseline


async def stream_file(size: int, peak: Peak, digest: hashlib._Hash) -> AsyncIterator[bytes]:
    """A multipart body of one `file` part of ``size`` bytes, generated block by block."""
    yield (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    for index in range(size // MIB):
        block = index.to_bytes(8, "big") * (MIB // 8)  # varied, so nothing is deduplicated
        digest.update(block)
        peak.sample()
        yield block
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


@pytest.mark.parametrize(
    "size",
    [
        256 * MIB,
        pytest.param(1024 * MIB, marks=pytest.mark.slow),  # SANDBOXKIT_RUN_SLOW=1 runs it
    ],
    ids=["256MiB", "1GiB"],
)
async def test_big_upload_and_download_keep_rss_flat(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box, size: int
) -> None:
    """Uploading then downloading a big file grows RSS by less than 64 MiB (client and server)."""
    peak = Peak()
    sent = hashlib.sha256()
    headers = {**wire_box.auth, "Content-Type": MULTIPART_TYPE}
    body = stream_file(size, peak, sent)
    params = {"path": "/tmp/big.bin"}
    async with raw_http.post(wire_box.files, params=params, data=body, headers=headers) as response:
        assert response.status == 200, await response.text()
    assert (clocked_emulator.sandbox_root(wire_box.key) / "tmp/big.bin").stat().st_size == size
    received = hashlib.sha256()
    count = 0
    async with raw_http.get(wire_box.files, params=params, headers=wire_box.auth) as response:
        assert response.headers["Content-Length"] == str(size)
        async for chunk in response.content.iter_chunked(256 * 1024):
            received.update(chunk)
            count += len(chunk)
            peak.sample()
    assert count == size
    assert received.hexdigest() == sent.hexdigest()
    print(f"RSS growth for {size // MIB} MiB up and down: {peak.growth / MIB:.1f} MiB")
    assert peak.growth < 64 * MIB
