"""Helpers for tests/http/test_proxies.py (this module holds no tests).

`ProxyServer` runs proxy.py (from PyPI) in a process of its own on 127.0.0.1 with the
`tests.proxy_plugin` recorder, optionally demanding Basic credentials; `WireTap` is a TCP
relay put in front of it that keeps every byte the client sent: exactly what the proxy could
read, whether it parsed it or only tunnelled it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from .proxy_plugin import RECORD_ENV

ROOT = Path(__file__).resolve().parent.parent
START_SECONDS = 20.0  # a loaded 2-core machine starts Python slowly; this is only a bound
PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "REQUEST_METHOD")


class ProxyServer:
    """proxy.py on a free loopback port, recording each request in a file under `folder`.

    Args:
        folder: where its port file, record and log go.
        basic_auth: `user:password` to demand (407 without them), or None.
        certificate: the (certificate, key) PEM files of an https proxy (TLS to the proxy
            itself), or None for an http one.
    """

    def __init__(
        self,
        folder: Path,
        *,
        basic_auth: str | None = None,
        certificate: tuple[Path, Path] | None = None,
    ) -> None:
        self._folder = folder
        self._basic_auth = basic_auth
        self._certificate = certificate
        self._record = folder / "proxy-record.jsonl"
        self._log = folder / "proxy.log"
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT` (https for an https proxy), without credentials."""
        scheme = "https" if self._certificate else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> ProxyServer:
        port_file = self._folder / "proxy.port"
        self._record.touch()
        command = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0"]
        command += ["--port-file", str(port_file), "--num-workers", "1", "--num-acceptors", "1"]
        command += ["--plugins", "tests.proxy_plugin.LoopbackRecorder"]
        command += ["--log-level", "WARNING", "--log-file", str(self._log)]
        if self._basic_auth is not None:
            command += ["--basic-auth", self._basic_auth]
        if self._certificate is not None:
            command += ["--cert-file", str(self._certificate[0])]
            command += ["--key-file", str(self._certificate[1])]
        # The proxy's own environment has no proxy of its own (the test's may, on purpose).
        env = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_VARIABLES}
        env[RECORD_ENV] = str(self._record)
        self._process = subprocess.Popen(command, cwd=ROOT, env=env)
        deadline = time.monotonic() + START_SECONDS
        # proxy.py writes the port file once it listens (connections then wait in the
        # backlog until its acceptor runs): the ready signal, polled up to a deadline.
        while not port_file.exists() or not port_file.read_text().strip():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise AssertionError(f"proxy.py did not start: {self.log()[-2000:]}")
            time.sleep(0.01)
        self.port = int(port_file.read_text().split()[0])
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)  # proxy.py's clean shutdown, its workers included
        try:
            process.wait(timeout=START_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def records(self) -> list[dict[str, Any]]:
        """The requests the proxy read, in order: plain-http requests and CONNECTs."""
        lines = self._record.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line]

    def targets(self) -> set[str]:
        """The `host:port` of each request recorded."""
        return {f"{r['host']}:{r['port']}" for r in self.records()}

    def log(self) -> str:
        """What proxy.py logged (warnings and worse)."""
        return self._log.read_text(errors="replace") if self._log.exists() else ""


class WireTap:
    """A TCP relay to `port` on 127.0.0.1 keeping every byte its clients sent in `sent`."""

    def __init__(self, port: int) -> None:
        self._target = port
        self.sent = bytearray()
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._relays: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`: the proxy's URL as a client should be given it."""
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> WireTap:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):  # each pump then reads its end of file
            writer.close()
        async with asyncio.timeout(START_SECONDS):
            await asyncio.gather(*self._relays)
            await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        await asyncio.gather(
            self._pump(reader, up_writer, keep=True), self._pump(up_reader, writer, keep=False)
        )

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, keep: bool
    ) -> None:
        try:
            while data := await source.read(1 << 16):
                if keep:
                    self.sent += data
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()
