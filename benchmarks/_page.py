"""Case 10 (issue 31): one 64 KiB page at the middle of a large file, `files.read_range`, on a
data center with ranges and on one without: the bytes the server moved and the time.

Server: this file run as a child (`ServerProcess("page", ..., script=this file)`): a raw
asyncio HTTP/1.1 server of one virtual file (a 1 MiB block of random bytes over and over, so
1 GiB needs neither memory nor disk) on two ports. One answers a Range with a 206 of it; the
other ignores Range and sends the whole file (200), as a data center without resume does.
Each answer's body bytes are counted as they leave (written and drained, 256 KiB at a time):
a client that stops reading stops the count within the socket buffers between them. The
`answers` command returns (and forgets) the answers since the last one.

Contenders: sandboxkit on each port, and raw aiohttp's one Range GET on the ranged port (the
floor for the time). Each run reads the page at `size // 2` once and checks its bytes.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

MiB = 1 << 20
PAGE = 64 * 1024
PIECE = 256 * 1024
TOKEN = "sat-PAGE-BENCH"
_RANGE = re.compile(rb"\r\nrange:\s*bytes=(\d+)-(\d*)\r\n", re.IGNORECASE)
SERVER = "raw asyncio HTTP/1.1 (benchmarks/_page.py), one virtual file, a child process"


def block() -> bytes:
    """The 1 MiB the virtual file repeats."""
    return random.Random(9).randbytes(MiB)


def content(data: bytes, start: int, end: int) -> bytes:
    """Bytes [start, end) of the virtual file made of `data` repeated."""
    out = bytearray()
    while start < end:
        at = start % len(data)
        piece = data[at : at + min(end - start, len(data) - at)]
        out += piece
        start += len(piece)
    return bytes(out)


# --- the case (parent side) -----------------------------------------------------------------


async def run(size: int, rounds: int, work: Path) -> Any:
    """Run case 10 on a virtual file of `size` bytes."""
    import aiohttp
    from _measure import Contender, median, paired_rounds
    from _report import CaseResult, Column, target
    from _server import ServerProcess

    import sandboxkit
    from sandboxkit.emulator import EmulatorResolver

    offset = size // 2
    expected = content(block(), offset, offset + PAGE)
    async with ServerProcess("page", {"size": size}, script=Path(__file__)) as server:
        ports = server.info["ports"]
        client = sandboxkit.Client(
            api_key="k",
            base_url="http://127.0.0.1:9",  # no console call is made
            data_plane_scheme="http",
            resolver=EmulatorResolver(),
        )
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=EmulatorResolver()))
        try:

            def sdk(ranges: bool) -> Any:
                files = client.sandbox(
                    sandbox_key="sbx",
                    domain=f"sandbox.test:{ports['ranges' if ranges else 'whole']}",
                    access_token=TOKEN,
                ).files

                async def read() -> dict[str, float]:
                    page = await files.read_range("/big.bin", offset, PAGE)
                    return {"right": float(page.data == expected)}

                return read

            async def raw() -> dict[str, float]:
                async with session.get(
                    f"http://sbx.sandbox.test:{ports['ranges']}/files",
                    params={"path": "/big.bin"},
                    headers={"Range": f"bytes={offset}-{offset + PAGE - 1}"},
                ) as response:
                    body = await response.read()
                return {"right": float(body == expected)}

            contenders = [
                Contender("sandboxkit read_range, ranges (206)", sdk(True)),
                Contender("sandboxkit read_range, no ranges (200)", sdk(False)),
                Contender("raw aiohttp Range GET (206)", raw),
            ]
            moved: dict[str, list[dict[str, Any]]] = {c.name: [] for c in contenders}
            last: list[str] = []

            async def between(contender: Contender) -> None:
                answers = (await server.command("answers"))["answers"]
                if last:
                    moved[last[0]].append({"answers": answers})
                last[:] = [contender.name]

            samples = await paired_rounds(contenders, rounds, between=between)
            answers = (await server.command("answers"))["answers"]
            moved[last[0]].append({"answers": answers})
        finally:
            await session.close()
            await client.aclose()
    rows, targets = [], []
    for name, runs in samples.items():
        # The warm-up runs were recorded first: the measured ones are the last `rounds`.
        served = [entry["answers"] for entry in moved[name][-rounds:]]
        sent = [sum(a["sent"] for a in answers) for answers in served]
        rows.append(
            {
                "contender": name,
                "wall_ms": median([s.wall * 1e3 for s in runs]),
                "cpu_ms": median([s.cpu * 1e3 for s in runs]),
                "server_mib": median(sent) / MiB,
                "x_page": median(sent) / PAGE,
                "requests": median([len(answers) for answers in served]),
                "whole": sum(all(a["whole"] for a in answers) for answers in served),
                "right": min(s.extra["right"] for s in runs),
            }
        )
        if name.startswith("sandboxkit"):
            targets.append(target(f"{name}: page right", rows[-1]["right"], "== 1"))
    ranged, whole = rows[0], rows[1]
    targets.append(target(f"{ranged['contender']}: bytes moved / page", ranged["x_page"], "== 1"))
    stop = (offset + PAGE + 16 * MiB) / PAGE  # the page's end, and the socket buffers' slack
    targets.append(
        target(f"{whole['contender']}: bytes moved / page", whole["x_page"], f"<= {stop:.0f}")
    )
    return CaseResult(
        name="page",
        title=f"10. page: {PAGE // 1024} KiB at the middle of a {size // MiB} MiB file",
        server=SERVER,
        columns=[
            Column("wall_ms", "wall ms", "{:.1f}"),
            Column("cpu_ms", "CPU ms", "{:.1f}"),
            Column("server_mib", "server sent MiB", "{:.3f}"),
            Column("x_page", "x page", "{:.1f}"),
            Column("requests", "requests", "{:.0f}"),
            Column("whole", "answers sent whole", "{:.0f}"),
            Column("right", "right", "{:.0f}"),
        ],
        rows=rows,
        targets=targets,
        notes=[
            "server sent: body bytes the server wrote for the read (median); without ranges "
            f"the page's end is at {(offset + PAGE) / MiB:.2f} MiB and the rest is what the "
            "socket buffers took before the client's close",
            "answers sent whole: runs whose every answer went out to its end (a read that "
            "stopped early closed its connection before)",
        ],
        config={"size_mib": size // MiB, "offset": offset, "page": PAGE, "rounds": rounds},
    )


# --- the server (child side) ----------------------------------------------------------------


async def _serve(config: dict[str, Any]) -> None:
    from _server import _announce, _command_loop

    size = int(config["size"])
    data = block()
    answers: list[dict[str, Any]] = []

    def handler(ranges: bool) -> Any:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    match = _RANGE.search(head)
                    start, end, status = 0, size, 200
                    if ranges and match:
                        start = int(match[1])
                        end = min(int(match[2]) + 1 if match[2] else size, size)
                        status = 206
                    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {end - start}"]
                    lines.append(f"Accept-Ranges: {'bytes' if ranges else 'none'}")
                    if status == 206:
                        lines.append(f"Content-Range: bytes {start}-{end - 1}/{size}")
                    answer = {"status": status, "sent": 0, "whole": False}
                    answers.append(answer)
                    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
                    at = start
                    while at < end:
                        piece = content(data, at, min(end, at + PIECE))
                        writer.write(piece)
                        await writer.drain()
                        at += len(piece)
                        answer["sent"] = at - start
                    answer["whole"] = True
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        return serve

    ranged = await asyncio.start_server(handler(True), "127.0.0.1", 0)
    whole = await asyncio.start_server(handler(False), "127.0.0.1", 0)
    ports = {
        "ranges": ranged.sockets[0].getsockname()[1],
        "whole": whole.sockets[0].getsockname()[1],
    }
    _announce({"ports": ports})

    def handle(command: dict[str, Any]) -> dict[str, Any]:
        taken = list(answers)
        answers.clear()
        return {"answers": taken}

    await _command_loop(handle)
    ranged.close()
    whole.close()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    asyncio.run(_serve(json.loads(sys.argv[2])))
