"""The real servers of tests/http/test_framing_matrix.py, each in a process of its own (no tests).

The SDK reads a sandbox's file as `GET /files?path=/abs/path`. No third-party server speaks
that, so each stands behind the smallest shim that maps the query to a file and lets the
server itself answer, with its own framing, Range handling and errors:

* `python -m http.server`, the stock module, unmodified: it ignores the query string, so a
  directory whose file named `files` is the file answers `/files?path=...` with it;
* aiohttp (`python -m tests.framing_support aiohttp PORT ROOT`): `/files` answers
  `path=/file/NAME` with `web.FileResponse`, `path=/stream/NAME` with a `web.StreamResponse`
  written in pieces and no length;
* uvicorn (its httptools protocol) and hypercorn (h11), each serving `starlette_app`: the
  same two paths with Starlette's `FileResponse` and `StreamingResponse`;
* nginx, with `nginx_config`: `/files` rewritten to the URI in `path=`, served from
  `/static/` by its static module, from `/ssi/` through its SSI filter (which drops the
  length: chunked), from `/close/` through the same with `chunked_transfer_encoding off`
  (no length, no chunks: the body ends at the close).

`Served` starts one on a free loopback port and waits until it accepts a connection.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
START_SECONDS = 20.0  # a loaded 2-core machine starts Python slowly; only a bound
PIECE = 64 * 1024  # what the streaming handlers write at once
# Debian's package puts it in /usr/sbin, which a user's PATH may lack.
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/local/sbin:/usr/sbin:/sbin")


class Served:
    """A server process listening on 127.0.0.1:`port`, its output in `log`.

    Args:
        command: the command line, given the free port it is to listen on.
        log: where its stdout and stderr go.
    """

    def __init__(self, command: Callable[[int], Sequence[str]], log: Path) -> None:
        self._command = command
        self._log = log
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def __enter__(self) -> Served:
        # The port is free when looked at; another program may take it before the server
        # binds it, and the server then exits: a new port, up to three times.
        for _ in range(3):
            self.port = free_port()
            with self._log.open("ab") as log:
                self._process = subprocess.Popen(
                    list(self._command(self.port)),
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if self._listening(self._process):
                return self
            self._stop()
        raise AssertionError(f"{self._command(0)[:3]} did not start: {self.log()[-3000:]}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _listening(self, process: subprocess.Popen[bytes]) -> bool:
        """Poll a connect to the port until one is accepted (True) or the process exits."""
        deadline = time.monotonic() + START_SECONDS
        while process.poll() is None and time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return True
            except OSError:
                time.sleep(0.02)
        return False

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=START_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def module(kind: str, root: Path) -> Callable[[int], list[str]]:
    """This module run as a server of `kind` serving `root`."""
    return lambda port: [sys.executable, "-m", "tests.framing_support", kind, str(port), str(root)]


def http_server(directory: Path) -> Callable[[int], list[str]]:
    """The stock `python -m http.server` serving `directory`."""
    return lambda port: [
        *(sys.executable, "-m", "http.server", "--bind", "127.0.0.1"),
        *("--directory", str(directory), str(port)),
    ]


def nginx(folder: Path, root: Path) -> Callable[[int], list[str]]:
    """nginx serving `root` (above), its configuration, logs and temporary files in `folder`."""

    def command(port: int) -> list[str]:
        config = folder / "nginx.conf"
        config.write_text(nginx_config(folder, root, port))
        assert NGINX is not None
        return [NGINX, "-p", str(folder), "-c", str(config), "-e", "stderr"]

    return command


def nginx_config(folder: Path, root: Path, port: int) -> str:
    """nginx in the foreground, everything it writes in `folder`."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # the workers read the test's files
    temps = "".join(
        f"    {kind}_temp_path {folder / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}daemon off;
worker_processes 1;
pid {folder / "nginx.pid"};
error_log stderr warn;
events {{ worker_connections 64; }}
http {{
    access_log {folder / "access.log"};
{temps}    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        location = /files {{ rewrite ^ $arg_path? last; }}
        location /static/ {{ alias {root}/; }}
        location /ssi/ {{ alias {root}/; ssi on; ssi_types *; }}
        location /close/ {{ alias {root}/; ssi on; ssi_types *; chunked_transfer_encoding off; }}
    }}
}}
"""


# -- the servers run by `python -m tests.framing_support KIND PORT ROOT` ----------------------


def _split(remote: str, root: Path) -> tuple[str, Path]:
    """`/KIND/NAME` as (KIND, the file NAME under root)."""
    kind, _, name = remote.strip("/").partition("/")
    return kind, root / Path(name).name


def starlette_app(folder: Path) -> Any:
    """Starlette's `FileResponse` at `path=/file/NAME`, `StreamingResponse` at `/stream/NAME`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def pieces(path: Path) -> AsyncIterator[bytes]:
        with path.open("rb") as file:
            while piece := file.read(PIECE):
                yield piece

    async def files(request: Request) -> Response:
        kind, path = _split(request.query_params["path"], folder)
        if kind == "file":
            return FileResponse(path)
        return StreamingResponse(pieces(path), media_type="application/octet-stream")

    return Starlette(routes=[Route("/files", files)])


def _aiohttp(port: int, root: Path) -> None:
    from aiohttp import web

    async def files(request: web.Request) -> web.StreamResponse:
        kind, path = _split(request.query["path"], root)
        if kind == "file":
            return web.FileResponse(path)
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await response.prepare(request)
        with path.open("rb") as file:
            while piece := file.read(PIECE):
                await response.write(piece)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/files", files)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _uvicorn(port: int, root: Path) -> None:
    import uvicorn

    app = starlette_app(root)
    uvicorn.run(app, host="127.0.0.1", port=port, http="httptools", log_level="warning")


def _hypercorn(port: int, root: Path) -> None:
    import asyncio

    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    asyncio.run(serve(starlette_app(root), config))


if __name__ == "__main__":
    kind, port, folder = sys.argv[1:4]
    {"aiohttp": _aiohttp, "uvicorn": _uvicorn, "hypercorn": _hypercorn}[kind](
        int(port), Path(folder)
    )
