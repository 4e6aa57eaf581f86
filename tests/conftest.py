"""Every shared fixture of the test suite, each name with one meaning.

A scriptable aiohttp.web server on 127.0.0.1 (`script_server`, `script_client`,
`fake_sleep`, `hostile`) and the emulator (`emulator`, `emulator_client`, `box`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import pytest
from aiohttp import web

import sandboxkit
from sandboxkit.emulator import Emulator, EmulatorResolver

from .files_support import RESUME, Box, idcs, new_box

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak", action="store_true", help="run the 5-minute soak (a 20 s one always runs)"
    )


@attrs.frozen
class Seen:
    """One request the test server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


class ScriptServer:
    """A real HTTP server whose answers a test scripts, route by route, in order."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self._scripts: dict[tuple[str, str], list[Handler]] = {}
        self._fallback: dict[tuple[str, str], Handler] = {}
        self.runner: web.AppRunner | None = None
        self.url = ""

    def on(self, method: str, path: str, *handlers: Handler) -> None:
        """Answer the next requests to (method, path) with `handlers` in order."""
        self._scripts.setdefault((method, path), []).extend(handlers)

    def always(self, method: str, path: str, handler: Handler) -> None:
        """Answer every request to (method, path) not covered by a script."""
        self._fallback[(method, path)] = handler

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        """What was received, optionally filtered."""
        return [
            s
            for s in self.seen
            if (method is None or s.method == method) and (path is None or s.path == path)
        ]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(
            Seen(
                request.method,
                request.rel_url.raw_path,
                dict(request.query),
                dict(request.headers),
                body,
            )
        )
        key = (request.method, request.rel_url.raw_path)
        script = self._scripts.get(key)
        if script:
            return await script.pop(0)(request)
        if key in self._fallback:
            return await self._fallback[key](request)
        return json_answer({"code": "Resource.NotFound", "message": "no route"}, status=404)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def json_answer(
    payload: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """A JSON answer."""
    return web.Response(
        body=json.dumps(payload).encode(),
        status=status,
        headers=headers,
        content_type="application/json",
    )


def answer(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Handler:
    """A handler that always gives this JSON answer."""

    async def handler(_: web.Request) -> web.StreamResponse:
        return json_answer(payload, status, headers)

    return handler


def raw(body: bytes, status: int = 200, content_type: str = "application/json") -> Handler:
    """A handler that answers these exact bytes."""

    async def handler(_: web.Request) -> web.StreamResponse:
        return web.Response(body=body, status=status, content_type=content_type)

    return handler


def v2_error(status: int, code: str, message: str = "nope", **extra: Any) -> Handler:
    """A handler answering a v2 error body."""
    return answer({"code": code, "message": message, "request_id": "req-err", **extra}, status)


class FakeSleep:
    """Records requested delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
async def script_server() -> AsyncIterator[ScriptServer]:
    """A started ScriptServer on 127.0.0.1, stopped after the test."""
    srv = ScriptServer()
    await srv.start()
    yield srv
    await srv.stop()


API_KEY = "sk-test-SECRET-0123456789"


@pytest.fixture
async def script_client(script_server: ScriptServer) -> AsyncIterator[sandboxkit.Client]:
    """A Client on the scripted server, with three quick attempts per call."""
    async with sandboxkit.Client(
        api_key=API_KEY,
        base_url=script_server.url,
        retry=sandboxkit.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.01),
    ) as c:
        yield c


@pytest.fixture
def fake_sleep(script_client: sandboxkit.Client) -> FakeSleep:
    """The script client's retry sleep, replaced by one that records delays."""
    sleeper = FakeSleep()
    script_client._calls.sleep = sleeper
    return sleeper


def hostile_client(base_url: str, **options: Any) -> sandboxkit.Client:
    """A client whose console is `base_url` and whose `*.sandbox.test` hosts are loopback."""
    return sandboxkit.Client(
        api_key="sk-hostile-API-KEY",
        base_url=base_url,
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
        retry=options.pop("retry", sandboxkit.RetryPolicy.no_delay()),
        **options,
    )


@pytest.fixture
async def hostile(script_server: ScriptServer) -> AsyncIterator[sandboxkit.Client]:
    """A client whose console and sandbox host are both the scripted server."""
    async with hostile_client(script_server.url) as c:
        yield c


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    """A plain-HTTP emulator with the three file-transfer IDCs, the resume one the default."""
    async with Emulator(idcs=idcs(), default_idc=RESUME) as running:
        yield running


@pytest.fixture
async def emulator_client(emulator: Emulator) -> AsyncIterator[sandboxkit.Client]:
    """A client wired to the emulator, retrying without delay."""
    async with emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as c:
        yield c


@pytest.fixture
async def box(emulator: Emulator, emulator_client: sandboxkit.Client) -> Box:
    """One sandbox on the resume IDC, seen through emulator_client."""
    return await new_box(emulator, emulator_client)
