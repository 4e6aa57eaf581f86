"""Every shared fixture of the test suite, each name with one meaning.

- the scriptable aiohttp.web server on 127.0.0.1: script_server, script_client,
  fake_sleep, hostile;
- the emulator: emulator, emulator_client, box, tls_emulator;
- the emulator on a manual clock, spoken to in raw HTTP by its own tests: manual_clock,
  clocked_emulator, raw_http, wire_box, bearer;
- the emulator on a loop thread of its own, for the CLI: emulator_thread;
- loop_reports, for modules that mark themselves with it;
- requested_loop: which event loop the run was asked for.

Cases marked `slow` are skipped unless SANDBOXKIT_RUN_SLOW=1 (the one switch; the marker's
help in pyproject.toml says the same). `--event-loop=uvloop` (or SANDBOXKIT_TEST_LOOP=uvloop)
makes every event loop of the run a uvloop one.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import attrs
import pytest
import trustme
from aiohttp import web

import sandboxkit
from sandboxkit.emulator import Emulator, EmulatorResolver, Idc, ManualClock

from .cli_support import EmulatorThread
from .emulator.support import Box as WireBox
from .emulator.support import idcs as emulator_idcs
from .emulator.support import new_box as new_wire_box
from .files_support import RESUME, Box, idcs, new_box
from .ports_support import take_fixed_binds, watch_binds
from .reliability_support import settle

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C works in the suite however it was started; binds to fixed ports are seen; the
    event loop asked for is set.

    A shell without job control starts a background job (`make test &` in a script, nohup,
    some CI runners) with SIGINT ignored, and children inherit that: the tests that press
    Ctrl-C on a child process would wait for an exit that never comes. A handler, unlike
    an ignored signal, is reset to the default in every child this process starts.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    watch_binds()  # for no_fixed_port, below
    loop = requested(config)
    config.stash[LOOP_KEY] = loop
    config.stash[PREVIOUS_POLICY_KEY] = asyncio.get_event_loop_policy()
    policy = loop_policy(loop)
    if policy is not None:
        asyncio.set_event_loop_policy(policy)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The policy goes back to what it was (for a pytest run inside another program)."""
    if PREVIOUS_POLICY_KEY in config.stash:
        asyncio.set_event_loop_policy(config.stash[PREVIOUS_POLICY_KEY])


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak", action="store_true", help="run the 5-minute soak (a 20 s one always runs)"
    )
    parser.addoption(
        "--event-loop",
        choices=LOOPS,
        default=None,
        help=f"the event loop of every test: asyncio (the default) or uvloop; ${TEST_LOOP} "
        "says the same when the option is not given",
    )


# Which event loop the run uses. A global policy covers every loop made in this process:
# pytest-asyncio's (its `event_loop_policy` fixture returns the global one), asyncio.run,
# anyio.run and start_blocking_portal, the sync client's loop thread, new_event_loop().
# Subprocesses the tests start use their own default. (Policies are deprecated from Python
# 3.14, which the project does not support yet.)
TEST_LOOP = "SANDBOXKIT_TEST_LOOP"
LOOPS = ("asyncio", "uvloop")
LOOP_KEY = pytest.StashKey[str]()
PREVIOUS_POLICY_KEY = pytest.StashKey[asyncio.AbstractEventLoopPolicy]()


def requested(config: pytest.Config) -> str:
    """The loop asked for: `--event-loop`, else $SANDBOXKIT_TEST_LOOP, else asyncio."""
    loop = config.getoption("--event-loop") or os.environ.get(TEST_LOOP, "") or "asyncio"
    if loop not in LOOPS:
        raise pytest.UsageError(f"{TEST_LOOP}={loop!r}: expected one of {', '.join(LOOPS)}")
    return str(loop)


def loop_policy(loop: str) -> asyncio.AbstractEventLoopPolicy | None:
    """The policy that makes `loop`'s loops (None: leave asyncio's own).

    uvloop asked for but missing stops the run: it must never quietly test the standard
    loop instead.
    """
    if loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as exc:
        raise pytest.UsageError(
            f"the event loop asked for is uvloop, which is not installed: {exc}"
        ) from exc
    return uvloop.EventLoopPolicy()


@pytest.fixture
def requested_loop(request: pytest.FixtureRequest) -> str:
    """The event loop this run was asked for: "asyncio" or "uvloop"."""
    return request.config.stash[LOOP_KEY]


RUN_SLOW = "SANDBOXKIT_RUN_SLOW"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the cases marked `slow` unless SANDBOXKIT_RUN_SLOW=1."""
    if os.environ.get(RUN_SLOW, "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason=f"slow: set {RUN_SLOW}=1 to run it")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


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
def collected_after_the_emulator() -> Iterator[None]:
    """Requested before `emulator`, so it tears down after it: what the emulator's servers
    leave unclosed is collected in this test's own teardown, not in a later test's."""
    yield
    gc.collect()


@pytest.fixture
async def emulator_client(emulator: Emulator) -> AsyncIterator[sandboxkit.Client]:
    """A client wired to the emulator, retrying without delay."""
    async with emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as c:
        yield c


@pytest.fixture
async def box(emulator: Emulator, emulator_client: sandboxkit.Client) -> Box:
    """One sandbox on the resume IDC, seen through emulator_client."""
    return await new_box(emulator, emulator_client)


@pytest.fixture
async def tls_emulator() -> AsyncIterator[Emulator]:
    """The emulator's three IDCs over TLS, with a certificate from a CA trusted by nobody."""
    async with Emulator(idcs=idcs(), default_idc=RESUME, ca=trustme.CA()) as running:
        yield running


@pytest.fixture
def manual_clock() -> ManualClock:
    """The clock clocked_emulator reads, moved only when a test advances it."""
    return ManualClock()


@pytest.fixture
async def clocked_emulator(manual_clock: ManualClock) -> AsyncIterator[Emulator]:
    """A plain-HTTP emulator on manual_clock with the emulator tests' three IDCs."""
    async with Emulator(
        idcs=emulator_idcs(), default_idc="us-denver-1", clock=manual_clock
    ) as running:
        yield running


@pytest.fixture
async def raw_http(clocked_emulator: Emulator) -> AsyncIterator[aiohttp.ClientSession]:
    """A bare aiohttp session that resolves clocked_emulator's sandbox host names."""
    connector = aiohttp.TCPConnector(resolver=clocked_emulator.resolver)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


@pytest.fixture
async def wire_box(clocked_emulator: Emulator) -> WireBox:
    """One sandbox on clocked_emulator as the wire sees it: key, token and domain."""
    return await new_wire_box(clocked_emulator)


@pytest.fixture
def bearer(clocked_emulator: Emulator) -> dict[str, str]:
    """The console's Authorization header for clocked_emulator."""
    return {"Authorization": f"Bearer {clocked_emulator.api_key}"}


@pytest.fixture(scope="module")
def emulator_thread() -> Iterator[EmulatorThread]:
    """One emulator per module on a loop thread, with a no-split IDC and 0.4 s builds."""
    cli_idcs = [Idc("cli-1"), Idc("cli-nosplit", supports_split_flow=False)]
    with EmulatorThread(idcs=cli_idcs, build_seconds=0.4) as running:
        yield running


@pytest.fixture
async def loop_reports() -> AsyncIterator[list[dict[str, Any]]]:
    """Fail the test if the event loop reports anything: a never-retrieved task exception,
    an unclosed session or connector, an exception in a callback."""
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reports.append(context))
    yield reports
    for _ in range(3):  # finalizers that gc schedules run on the next loop iterations
        gc.collect()
        await settle(lambda: False, rounds=5)
    loop.set_exception_handler(previous)
    assert not reports, [str(r.get("message")) + repr(r.get("exception")) for r in reports]


@pytest.fixture(autouse=True)
def no_fixed_port() -> Iterator[None]:
    """Fail the test that bound a fixed port (or whose module's fixture did): another
    program may hold it, and the test then fails on that machine only. Bind port 0."""
    yield
    fixed = take_fixed_binds()
    assert not fixed, f"bound fixed ports {fixed}: another program may hold them; bind port 0"


@pytest.fixture(autouse=True)
def log_level_restored() -> Iterator[None]:
    """Each test starts with the `sandboxkit` loggers as the suite found them: the CLI, run
    in-process by CliRunner, sets the level to DEBUG (`--debug`) or adds a handler."""
    logger = logging.getLogger("sandboxkit")
    hosts = logging.getLogger("sandboxkit.hosts")
    level, handlers = logger.level, list(hosts.handlers)
    yield
    logger.setLevel(level)
    hosts.handlers[:] = handlers  # the CLI's screen line for host warnings, added by CliRunner
