"""``python -m sandboxkit.emulator`` and the ``serve_forever`` it runs."""

from __future__ import annotations

import asyncio
import contextlib
import io
import signal
import sys

import aiohttp

from sandboxkit.emulator import Emulator, serve_forever


async def test_serve_forever_prints_and_serves() -> None:
    """serve_forever prints the base URL, key, org id, domain and a sandbox, and serves them."""
    out = io.StringIO()
    running: asyncio.Future[Emulator] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_forever(out=out, ready=running.set_result))
    emu = await running
    text = out.getvalue()
    for value in (emu.base_url, emu.api_key, emu.org_id, emu.domain):
        assert value in text
    key = next(line.split()[-1] for line in text.splitlines() if "sandbox_key:" in line)
    token = next(line.split()[-1] for line in text.splitlines() if "sandbox_access_token:" in line)
    connector = aiohttp.TCPConnector(resolver=emu.resolver)
    async with aiohttp.ClientSession(connector=connector) as http:
        url = f"http://{key}.{emu.domain}/files"
        async with http.get(
            url, params={"path": "/home/user"}, headers={"X-Access-Token": token}
        ) as r:
            assert r.status == 400  # a directory: the sandbox exists and the token works
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_module_runs_until_interrupted() -> None:
    """The module prints its details and exits 0 on Ctrl-C (SIGINT)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sandboxkit.emulator",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    lines = []
    async with asyncio.timeout(30):
        while not any("sandbox_access_token" in line for line in lines):
            line = (await process.stdout.readline()).decode()
            assert line, "the emulator exited early"
            lines.append(line)
    assert any(
        line.strip().startswith("base URL:") and "http://127.0.0.1:" in line for line in lines
    )
    process.send_signal(signal.SIGINT)
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr
