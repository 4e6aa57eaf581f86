"""The servers the benchmarks talk to, each in its own process so client CPU is measurable.

Two kinds, started by `ServerProcess` (parent side) as `python _server.py KIND CONFIG_JSON`:

* ``minimal``: a small aiohttp.web server with the data-plane and control-plane routes, for
  the cases where the emulator's own per-request cost would dominate what is measured.
  ``GET /files`` answers with ``web.FileResponse`` (sendfile, Range support) or, for files
  under 1 MiB, from memory; ``POST /files`` counts the body and drops it (and so does the
  lean receiver of `_sink.py`, on its own port, ``sink_domain``, for case 2). Any host
  ``{key}.sandbox.test:PORT`` is a sandbox whose token is `token_for(secret, key)`.
  ``GET /api/v2/templates/{id}/builds`` serves pages the real emulator rendered (it runs in
  the same process and fills a cache at start-up), so the bytes on the wire are the
  emulator's while the serving cost is a dictionary lookup. The ``connections`` command
  tells how many data-plane connections were accepted, and the most open at once (counted
  as the server's protocol sees them made and lost), since the previous one.
* ``emulator``: the real `sandboxkit.emulator.Emulator`, used where its behaviour is the
  point (the fault plan of case 5).

Protocol: the child prints one JSON line when it is ready, then answers one JSON line per
JSON command read from stdin (``{"cmd": ...}``); ``stop`` or the end of stdin ends it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import socket
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from _sink import start_sink, upload_answer

MiB = 1 << 20
SMALL_FILE_LIMIT = MiB
PAGE_SIZE_LARGE = 100
PAGE_SIZE_SMALL = 20
DATA_PLANE_SUFFIX = "sandbox.test"


def token_for(secret: str, key: str) -> str:
    """The access token the minimal server accepts for sandbox `key`."""
    return "sat-" + hmac.new(secret.encode(), key.encode(), hashlib.sha256).hexdigest()[:32]


# --- parent side ----------------------------------------------------------------------------


class ServerProcess:
    """A server child process: start it, send it commands, stop it."""

    def __init__(
        self,
        kind: str,
        config: dict[str, Any],
        *,
        prefix: Sequence[str] = (),
        script: Path | None = None,
        new_session: bool = False,
    ) -> None:
        # `prefix` runs the child through another command (`ip netns exec NS` for the link);
        # `script` is another child speaking the same protocol (the link's delay line).
        self._kind = kind
        child = str(script or Path(__file__))
        self._argv = [*prefix, sys.executable, "-u", child, kind, json.dumps(config)]
        # In a session of its own a child does not get the terminal's Ctrl-C: this process
        # gets it, and ends the child through its stdin after cleaning up what it needs.
        self._new_session = new_session
        self._proc: asyncio.subprocess.Process | None = None
        self.info: dict[str, Any] = {}

    async def __aenter__(self) -> ServerProcess:
        self._proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # A big first line (many sandboxes) must fit the reader's line limit.
            limit=16 * MiB,
            start_new_session=self._new_session,
        )
        self.info = await self._read()
        return self

    async def __aexit__(self, *_: object) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.returncode is None and proc.stdin is not None:
            proc.stdin.write(b'{"cmd": "stop"}\n')
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    @property
    def pid(self) -> int:
        """The child's process id."""
        assert self._proc is not None
        return self._proc.pid

    def cpu_seconds(self) -> float:
        """CPU time the child has used so far (user + system); NaN where /proc is missing."""
        try:
            with open(f"/proc/{self.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def _read(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        line = await self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self._kind} server exited before answering")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def command(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Send one command and return the child's answer."""
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
        await self._proc.stdin.drain()
        return await self._read()


# --- child side: the minimal server ---------------------------------------------------------


def _sandbox_key(host: str) -> str | None:
    name = host.rsplit(":", 1)[0].lower()
    suffix = "." + DATA_PLANE_SUFFIX
    return name[: -len(suffix)] if name.endswith(suffix) else None


async def _minimal(config: dict[str, Any]) -> None:
    from aiohttp import web

    secret = os.urandom(16).hex()
    root = Path(config["data_dir"])
    # The link case listens on its network namespace's address; the rest on loopback.
    host = str(config.get("host", "127.0.0.1"))
    small: dict[Path, bytes] = {}

    def authorized(request: web.Request) -> bool:
        key = _sandbox_key(request.headers.get("Host", ""))
        token = request.headers.get("X-Access-Token", "")
        return key is not None and hmac.compare_digest(token_for(secret, key), token)

    def local(request: web.Request) -> Path | None:
        remote = request.query.get("path", "")
        parts = [p for p in remote.split("/") if p]
        if not remote.startswith("/") or any(p in (".", "..") for p in parts):
            return None
        return root.joinpath(*parts)

    # The pacing case's server that degrades past N requests at once: each download takes
    # `service` seconds, stretched by (in flight / N) squared past N, so more than N at once
    # serve fewer a second; past `fail_over` x N it answers 503 at once.
    # With `host`, only that sandbox key's requests count and degrade; the others take
    # `service` seconds whatever the load.
    degrade = config.get("degrade")
    in_flight = 0

    async def download(request: web.Request) -> web.StreamResponse:
        nonlocal in_flight
        if degrade is None:
            return await serve(request)
        if degrade.get("host") and not request.host.startswith(f"{degrade['host']}."):
            await asyncio.sleep(degrade["service"])
            return await serve(request)
        in_flight += 1
        try:
            capacity = degrade["capacity"]
            if in_flight > degrade["fail_over"] * capacity:
                return web.json_response({"message": "overloaded"}, status=503)
            await asyncio.sleep(degrade["service"] * max(1.0, in_flight / capacity) ** 2)
            return await serve(request)
        finally:
            in_flight -= 1

    async def serve(request: web.Request) -> web.StreamResponse:
        # stat() on the loop is fine here: it costs microseconds and every contender pays it.
        if not authorized(request):
            return web.json_response({"message": "missing or invalid access token"}, status=401)
        path = local(request)
        if path is None or not path.is_file():
            return web.json_response({"message": "file not found"}, status=404)
        if path.stat().st_size <= SMALL_FILE_LIMIT:
            if path not in small:
                small[path] = path.read_bytes()
            return web.Response(
                body=small[path],
                content_type="application/octet-stream",
                headers={"Accept-Ranges": "bytes"},
            )
        return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})

    async def upload(request: web.Request) -> web.Response:
        if not authorized(request):
            return web.json_response({"message": "missing or invalid access token"}, status=401)
        remote = request.query.get("path", "")
        received = 0
        while chunk := await request.content.readany():
            received += len(chunk)
        answer = upload_answer(remote)
        return web.json_response(answer, headers={"X-Bench-Received": str(received)})

    pages: dict[tuple[str, str, str], tuple[bytes, str]] = {}
    api_key = "sk-bench-" + secret[:16]

    async def builds(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {api_key}":
            return web.json_response({"code": "Auth.Unauthorized"}, status=401)
        key = (
            request.match_info["template_id"],
            request.query.get("page", "1"),
            request.query.get("page_size", "20"),
        )
        cached = pages.get(key)
        if cached is None:
            return web.json_response({"code": "Resource.NotFound"}, status=404)
        body, request_id = cached
        return web.Response(
            body=body, content_type="application/json", headers={"X-Request-ID": request_id}
        )

    data_app = web.Application()
    data_app.router.add_get("/files", download)
    data_app.router.add_post("/files", upload)
    console_app = web.Application()
    console_app.router.add_get("/api/v2/templates/{template_id}/builds", builds)
    runners = []
    ports = []
    for app in (console_app, data_app):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site: web.BaseSite = web.TCPSite(runner, host, 0, backlog=4096)
        if app is data_app and config.get("congestion_control"):
            # The sender's congestion control is what counts; accepted sockets inherit the
            # listener's. Per socket, because a namespace's default is limited to
            # net.ipv4.tcp_allowed_congestion_control, which belongs to the whole machine.
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(
                socket.IPPROTO_TCP, socket.TCP_CONGESTION, config["congestion_control"].encode()
            )
            listener.bind((host, 0))
            site = web.SockSite(runner, listener, backlog=4096)
        await site.start()
        runners.append(runner)
        ports.append(int(runner.addresses[-1][1]))
    connections = _count_connections(runners[1].server)
    sink = await start_sink(host)
    try:
        templates = await _render_pages(config, pages)
        _announce(
            {
                "base_url": f"http://{host}:{ports[0]}",
                "api_key": api_key,
                "domain": f"{DATA_PLANE_SUFFIX}:{ports[1]}",
                "sink_domain": f"{DATA_PLANE_SUFFIX}:{sink.sockets[0].getsockname()[1]}",
                "secret": secret,
                **templates,
            }
        )

        def handle(command: dict[str, Any]) -> dict[str, Any]:
            if command["cmd"] == "connections":  # since the last time asked
                answer = dict(connections)
                connections.update(accepted=0, peak=connections["open"])
                return answer
            return {"error": f"unknown command {command['cmd']!r}"}

        await _command_loop(handle)
    finally:
        sink.close()
        for runner in runners:
            await runner.cleanup()


def _count_connections(server: Any) -> dict[str, int]:
    """Count the connections `server` (an aiohttp.web Server) accepts and has open.

    Its own table keeps a connection until the handler's task ends; these counts follow
    the protocol's `connection_made` and `connection_lost`, when the socket comes and goes.
    """
    counts = {"accepted": 0, "open": 0, "peak": 0}
    made, lost = server.connection_made, server.connection_lost

    def on_made(handler: Any, transport: Any) -> None:
        counts["accepted"] += 1
        counts["open"] += 1
        counts["peak"] = max(counts["peak"], counts["open"])
        made(handler, transport)

    def on_lost(handler: Any, exc: BaseException | None = None) -> None:
        counts["open"] -= 1
        lost(handler, exc)

    server.connection_made = on_made
    server.connection_lost = on_lost
    return counts


async def _render_pages(
    config: dict[str, Any], pages: dict[tuple[str, str, str], tuple[bytes, str]]
) -> dict[str, str]:
    """Let the real emulator render every page the benchmark will ask for, and keep them."""
    import aiohttp

    import sandboxkit
    from sandboxkit.emulator import Emulator

    builds, small_builds = int(config.get("builds", 0)), int(config.get("small_builds", 0))
    if not builds:
        return {}
    ids: dict[str, str] = {}
    async with Emulator() as emu, emu.client() as client:
        for name, count in (("template_id", builds), ("small_template_id", small_builds)):
            created = await client.templates.create(
                name=f"bench-{name.replace('_', '-')}",
                resources=sandboxkit.CustomResources(
                    cpu_count=2, memory_mb=2048, disk_size_mb=10240
                ),
                build={"source": {"image": "python:3.12-slim"}, "commands": ["pip install x"]},
            )
            emu.add_builds(created.id, count - 1)
            ids[name] = created.id
        headers = {"Authorization": f"Bearer {emu.api_key}"}
        async with aiohttp.ClientSession(base_url=emu.base_url, headers=headers) as session:
            last = -(-builds // PAGE_SIZE_LARGE)
            wanted = [(ids["template_id"], p, PAGE_SIZE_LARGE) for p in range(1, last + 1)]
            wanted.append((ids["small_template_id"], 1, PAGE_SIZE_SMALL))
            for template_id, page, size in wanted:
                async with session.get(
                    f"/api/v2/templates/{template_id}/builds",
                    params={"page": str(page), "page_size": str(size)},
                ) as response:
                    response.raise_for_status()
                    pages[(template_id, str(page), str(size))] = (
                        await response.read(),
                        response.headers.get("X-Request-ID", ""),
                    )
    return ids


# --- child side: the real emulator ----------------------------------------------------------


async def _emulator(config: dict[str, Any]) -> None:
    from sandboxkit.emulator import Emulator

    file_size = int(config["file_size"])
    outages: list[asyncio.Task[int]] = []
    async with Emulator() as emu:
        sandboxes = [await emu.create_sandbox() for _ in range(int(config["sandboxes"]))]
        files = []
        for index in range(int(config["files"])):
            content = os.urandom(file_size)
            remote = f"/home/user/file-{index}.bin"
            for body in sandboxes:
                root = emu.sandbox_root(body["data"]["sandbox_key"])
                (root / remote.lstrip("/")).write_bytes(content)
            files.append({"path": remote, "sha256": hashlib.sha256(content).hexdigest()})
        _announce(
            {
                "base_url": emu.base_url,
                "api_key": emu.api_key,
                "scheme": emu.data_plane_scheme,
                "sandboxes": sandboxes,
                "files": files,
            }
        )

        def handle(command: dict[str, Any]) -> dict[str, Any]:
            if command["cmd"] == "faults":
                emu.faults.random(
                    seed=int(command["seed"]), rates=command["rates"], routes=("files.download",)
                )
                return {"ok": True}
            if command["cmd"] == "clear":
                injected = dict(emu.faults.injected)
                emu.faults.clear()
                emu.journal.clear()  # it grows by one record per request
                return {"injected": injected}
            if command["cmd"] == "downloads":  # what was asked for since the last clear
                return {
                    "requests": [
                        [r.host, r.query.get("path"), r.headers.get("Range")]
                        for r in emu.journal_for("files.download")
                    ]
                }
            if command["cmd"] == "outage":  # down now, back after `seconds`
                shape = str(command.get("shape", "reset"))  # how each connection ends
                outages.append(asyncio.create_task(_outage(emu, float(command["seconds"]), shape)))
                return {"ok": True}
            if command["cmd"] == "outage_report":  # the last outage, once it has ended
                if not outages:
                    return {"error": "no outage"}
                if not outages[-1].done():
                    return {"active": True}
                return {"active": False, "requests": outages[-1].result()}
            return {"error": f"unknown command {command['cmd']!r}"}

        await _command_loop(handle)


async def _outage(emu: Any, seconds: float, shape: str) -> int:
    async with emu.outage(shape=shape) as down:
        await asyncio.sleep(seconds)
    return len(down.requests)


# --- child side: plumbing -------------------------------------------------------------------


def die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies, even by SIGKILL (Linux).

    The link case's children would otherwise wait on connections its delay line no longer
    carries, for as long as their timeouts allow.
    """
    if sys.platform != "linux":
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the request was made
        os._exit(1)


def _announce(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _command_loop(handle: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        if command.get("cmd") == "stop":
            return
        _announce(handle(command) if handle is not None else {"error": "no commands"})


def main(argv: list[str]) -> int:
    """Run the server of kind `argv[0]` with the JSON config `argv[1]`."""
    kind, config = argv[0], json.loads(argv[1])
    if config.get("die_with_parent"):
        die_with_parent()
    runners: dict[str, Callable[[dict[str, Any]], Coroutine[Any, Any, None]]] = {
        "minimal": _minimal,
        "emulator": _emulator,
    }
    asyncio.run(runners[kind](config))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
