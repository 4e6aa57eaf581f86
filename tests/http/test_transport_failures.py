"""Failures below HTTP: what no retry can fix surfaces at once, every request is counted, and
no exception keeps a secret reachable (not in its chain, attributes, args or frames).

Servers are real sockets on 127.0.0.1: a raw asyncio server that answers malformed heads, the
test ScriptServer (plain HTTP, for TLS spoken to it), and the emulator. Resolvers are test
doubles, so no name is ever looked up outside this process.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

import sandboxkit
from sandboxkit._core.retry import RetryBudget
from sandboxkit.emulator import Emulator, Fault
from sandboxkit.emulator._resolver import EmulatorResolver

from ..conftest import ScriptServer, answer

API_KEY = "sk-FAILURES-API-KEY-0123456789"
TOKEN = "sat-FAILURES-SANDBOX-TOKEN-42"
SECRETS = (API_KEY, TOKEN)
MALFORMED_HEADS = {
    "header over 8 KiB": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
    "bad status line": b"HTTQ/1.1 2xx what\r\n\r\n",
}

Call = Callable[[sandboxkit.Client, str], Awaitable[Any]]


async def _control(client: sandboxkit.Client, _: str) -> Any:
    return await client.templates.builds_page("tpl")


async def _data(client: sandboxkit.Client, port: str) -> Any:
    sbx = client.sandbox(sandbox_key="sbx", domain=f"sandbox.test:{port}", access_token=TOKEN)
    return await sbx.files.read_bytes("/home/user/f.bin")


PLANES: dict[str, Call] = {"control": _control, "data": _data}


class MalformedServer:
    """A raw TCP server that reads a request head and answers `reply` (not valid HTTP)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.requests = 0
        self.server: asyncio.Server | None = None
        self.port = ""

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            writer.write(self.reply)
            await writer.drain()
        finally:
            writer.close()

    async def __aenter__(self) -> MalformedServer:
        self.server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        self.port = str(self.server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def make_client(base_url: str, **options: Any) -> sandboxkit.Client:
    """A client whose data plane is `sandbox.test:PORT` on loopback, retrying without delay;
    the data plane's scheme is the console's."""
    options.setdefault("resolver", EmulatorResolver())
    options.setdefault("retry", sandboxkit.RetryPolicy.no_delay(max_attempts=5))
    scheme = base_url.split("://", 1)[0]
    return sandboxkit.Client(
        api_key=API_KEY, base_url=base_url, data_plane_scheme=scheme, **options
    )


def reachable_texts(error: BaseException) -> Iterator[str]:
    """The repr of every object an error tracker could reach from `error`.

    It follows `__cause__`, `__context__`, args and attributes (through containers and
    sandboxkit/aiohttp/yarl/multidict objects), and reprs the locals of every sandboxkit or
    aiohttp frame in each traceback, as "tracebacks with locals" record them.
    """
    seen: set[int] = set()
    todo: list[Any] = [error]
    while todo:
        obj = todo.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        yield repr(obj)
        if isinstance(obj, BaseException):
            todo += [obj.__cause__, obj.__context__, *obj.args, *vars(obj).values()]
            tb = obj.__traceback__
            while tb is not None:
                module = tb.tb_frame.f_globals.get("__name__", "")
                if module.startswith(("sandboxkit", "aiohttp")):
                    yield from (repr(value) for value in tb.tb_frame.f_locals.values())
                tb = tb.tb_next
        elif isinstance(obj, list | tuple | set | frozenset):
            todo += list(obj)
        elif isinstance(obj, dict):
            todo += [*obj.keys(), *obj.values()]
        elif type(obj).__module__.startswith(("sandboxkit", "aiohttp", "yarl", "multidict")):
            todo += list(getattr(obj, "__dict__", {}).values())
            todo += [getattr(obj, name, None) for name in getattr(type(obj), "__slots__", ())]


def assert_no_secret(error: BaseException) -> None:
    """Nothing reachable from `error` shows the API key or the sandbox token."""
    leaks = [text[:200] for text in reachable_texts(error) if any(s in text for s in SECRETS)]
    assert leaks == []


# -- malformed answer heads ------------------------------------------------------------------


@pytest.mark.parametrize("plane", PLANES)
@pytest.mark.parametrize("reply", MALFORMED_HEADS.values(), ids=MALFORMED_HEADS.keys())
async def test_a_malformed_head_is_retried_once_and_its_error_holds_no_secret(
    plane: str, reply: bytes
) -> None:
    """A header over 8 KiB or a bad status line raises RemoteProtocolError after one retry
    (on a fresh connection: a reused one may hold a previous answer's stray bytes), not
    five, and no object reachable from it holds the API key or the sandbox token."""
    async with (
        MalformedServer(reply) as server,
        make_client(f"http://127.0.0.1:{server.port}") as c,
    ):
        with pytest.raises(sandboxkit.RemoteProtocolError, match="not valid HTTP") as caught:
            await PLANES[plane](c, server.port)
    assert server.requests == 2
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert_no_secret(caught.value)


# -- failures no retry can fix ---------------------------------------------------------------


class ScriptedResolver(AbstractResolver):
    """Answers 127.0.0.1 for the first `failures` lookups' complement: fails those with
    `gaierror(errno)`, then resolves everything to loopback. Counts lookups."""

    def __init__(self, errno: int, failures: int) -> None:
        self.errno = errno
        self.failures = failures
        self.lookups = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups += 1
        if self.lookups <= self.failures:
            raise socket.gaierror(self.errno, "scripted resolver failure")
        return [
            ResolveResult(
                hostname=host,
                host="127.0.0.1",
                port=port,
                family=socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        pass


@pytest.fixture
async def answering(script_server: ScriptServer) -> ScriptServer:
    """The scripted server answering a Build page and a file on every request."""
    page = {"request_id": "r", "total": 0, "page": 1, "page_size": 20, "items": []}
    script_server.always("GET", "/api/v2/templates/tpl/builds", answer(page))
    script_server.always("GET", "/files", answer("file"))
    return script_server


@pytest.mark.parametrize("plane", PLANES)
async def test_a_name_that_does_not_resolve_surfaces_at_once(
    answering: ScriptServer, plane: str
) -> None:
    """`no such name` raises HostNotFoundError after one lookup and no request, saying what
    to check; the error holds no secret."""
    port = answering.url.rsplit(":", 1)[1]
    resolver = ScriptedResolver(socket.EAI_NONAME, failures=99)
    async with make_client(f"http://console.test:{port}", resolver=resolver) as c:
        with pytest.raises(sandboxkit.HostNotFoundError, match="does not resolve") as caught:
            await PLANES[plane](c, port)
    assert (resolver.lookups, answering.seen) == (1, [])
    assert "resolver=" in str(caught.value)
    assert_no_secret(caught.value)


@pytest.mark.parametrize("plane", PLANES)
async def test_a_temporary_resolver_failure_is_still_retried(
    answering: ScriptServer, plane: str
) -> None:
    """`EAI_AGAIN` (try again) is retried like any connection failure, and then succeeds."""
    port = answering.url.rsplit(":", 1)[1]
    resolver = ScriptedResolver(socket.EAI_AGAIN, failures=2)
    async with make_client(f"http://console.test:{port}", resolver=resolver) as c:
        await PLANES[plane](c, port)
    assert (resolver.lookups, len(answering.seen)) == (3, 1)


@pytest.mark.parametrize("plane", PLANES)
async def test_tls_spoken_to_a_plain_port_surfaces_at_once(
    answering: ScriptServer, plane: str
) -> None:
    """TLS to a plain-HTTP port raises TLSHandshakeError naming the scheme, after one try."""
    port = answering.url.rsplit(":", 1)[1]
    async with make_client(f"https://127.0.0.1:{port}", ssl=ssl.create_default_context()) as c:
        with pytest.raises(sandboxkit.TLSHandshakeError, match="plain HTTP") as caught:
            await PLANES[plane](c, port)
    assert isinstance(caught.value, sandboxkit.APIConnectionError)  # still caught as before
    assert answering.seen == []  # the server saw a ClientHello, never an HTTP request
    assert_no_secret(caught.value)


# -- every request is counted ----------------------------------------------------------------


class CountingBudget(RetryBudget):
    """The client's retry budget, recording each retry it pays for."""

    def __init__(self) -> None:
        super().__init__()
        self.spent: list[bool] = []

    def try_spend(self, *, connection_failure: bool) -> int | None:
        self.spent.append(connection_failure)
        return super().try_spend(connection_failure=connection_failure)


@pytest.fixture
async def known_key_emulator() -> AsyncIterator[Emulator]:
    """An emulator whose API key is this module's known secret."""
    async with Emulator(api_key=API_KEY) as running:
        yield running


async def test_a_keep_alive_connection_dying_before_the_head_is_a_counted_retry(
    known_key_emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """When a reused connection closes before the answer, the resend is one of `attempts`,
    one retry log line, and one request in the journal: aiohttp resends nothing unseen."""
    async with known_key_emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as c:
        body = await known_key_emulator.create_sandbox()
        sbx = c.sandbox_from_response(body)
        (
            known_key_emulator.sandbox_root(body["data"]["sandbox_key"]) / "home/user/f.bin"
        ).write_bytes(b"x" * 10)
        first = await sbx.files.download("/home/user/f.bin", tmp_path / "a.bin")
        known_key_emulator.faults.script("files.download", Fault.cut_before_headers())
        with caplog.at_level(logging.WARNING, logger="sandboxkit"):
            second = await sbx.files.download("/home/user/f.bin", tmp_path / "b.bin")
    assert (first.attempts, second.attempts) == (1, 2)
    assert len(known_key_emulator.journal_for("files.download")) == 3
    assert [r.getMessage().split(" after")[0] for r in caplog.records] == [
        "retrying files.download"
    ]


async def test_the_control_plane_counts_the_resend_too(
    known_key_emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    """A Build page whose reused connection dies before the head is retried by the loop,
    which logs it and spends from the retry budget."""
    async with known_key_emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as c:
        created = await c.templates.create(
            name="t",
            resources=sandboxkit.CustomResources(cpu_count=1, memory_mb=512, disk_size_mb=1024),
        )
        await c.templates.builds_page(created.id)
        known_key_emulator.faults.script("builds.list", Fault.cut_before_headers())
        budget = CountingBudget()
        c._calls.budget = budget
        with caplog.at_level(logging.WARNING, logger="sandboxkit"):
            await c.templates.builds_page(created.id)
    assert budget.spent == [True]
    assert len(caplog.records) == 1 and "retrying" in caplog.records[0].getMessage()
