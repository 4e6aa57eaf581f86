"""`api_key` as a function: asked per console request, asked again after a 401, never shown.

Keys rotate for real: the emulator mints keys with an expiry (`v1.create_api_key`), and its
manual clock moves past it, so the old key is refused with a 401 as the service would.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pickle
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sandboxkit
from sandboxkit import sync
from sandboxkit.emulator import Emulator, Fault, ManualClock, RecordedRequest

from ..cli_support import EmulatorThread
from ..files_support import RESUME, idcs, new_box

NO_DELAY = sandboxkit.RetryPolicy.no_delay()
LIFETIME = 60  # seconds a minted key lives on the emulator's clock
RESOURCES = sandboxkit.CustomResources(cpu_count=2, memory_mb=2048, disk_size_mb=10240)


class Vault:
    """A key source that hands out `keys` in turn (the last one for good), counting calls."""

    def __init__(self, *keys: str) -> None:
        self.keys = list(keys)
        self.calls = 0

    def __repr__(self) -> str:
        # As a token source holding its keys might: its bound methods' reprs show them.
        return f"Vault({self.keys!r})"

    def get(self) -> str:
        """The sync key function."""
        self.calls += 1
        return self.keys.pop(0) if len(self.keys) > 1 else self.keys[0]

    async def aget(self) -> str:
        """The async key function (it yields to the loop, as a real refresh would)."""
        await asyncio.sleep(0)
        return self.get()


@attrs.frozen
class Keys:
    """A clocked emulator, its clock, and an admin client that mints keys on it."""

    emu: Emulator
    clock: ManualClock
    admin: sandboxkit.Client

    async def mint(self, name: str) -> str:
        """A new key that the emulator refuses once the clock moves LIFETIME seconds on."""
        expires = int(self.clock()) + LIFETIME
        return (await self.admin.v1.create_api_key(self.emu.org_id, name, expires_at=expires)).key

    def expire(self) -> None:
        """Move the clock past every key minted so far."""
        self.clock.advance(LIFETIME + 1)

    def console_since(self, start: int) -> list[RecordedRequest]:
        """The console requests received after the first `start` journal entries."""
        return [e for e in self.emu.journal[start:] if e.server == "console"]


@pytest.fixture
async def keys() -> AsyncIterator[Keys]:
    """An emulator on a manual clock at the real time (expiries are checked against it)."""
    clock = ManualClock(start=time.time())
    async with (
        Emulator(idcs=idcs(), default_idc=RESUME, clock=clock) as emu,
        emu.client(retry=NO_DELAY) as admin,
    ):
        yield Keys(emu, clock, admin)


def bearers(entries: list[RecordedRequest]) -> list[str]:
    """The key each request carried."""
    return [e.headers["Authorization"].removeprefix("Bearer ") for e in entries]


def shown_by(error: BaseException) -> str:
    """What a report of `error` may show: its traceback and chain, and the repr of every
    local of sandboxkit's frames in them (as a traceback with locals, Sentry's, does)."""
    shown = ["".join(traceback.format_exception(error))]
    seen: BaseException | None = error
    while seen is not None:
        shown += [str(seen), repr(seen)]
        tb = seen.__traceback__
        while tb is not None:
            if tb.tb_frame.f_globals["__name__"].startswith("sandboxkit"):
                shown += [repr(value) for value in tb.tb_frame.f_locals.values()]
            tb = tb.tb_next
        seen = seen.__cause__ or seen.__context__
    return "\n".join(shown)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_the_function_is_asked_once_per_console_request(
    emulator: Emulator, kind: str
) -> None:
    """A sync or async key function is called exactly once per console request sent (v1 and
    v2, retries and concurrent calls included), and each request carries what it returned."""
    vault = Vault(emulator.api_key)
    function = vault.get if kind == "sync" else vault.aget
    emulator.faults.script("v1.organizations.get", Fault.status(503))
    async with emulator.client(api_key=function, retry=NO_DELAY) as client:
        await client.v1.get_organization(emulator.org_id)  # one 503, then one success
        await asyncio.gather(*(client.v1.list_images() for _ in range(5)))
        await client.request("GET", f"/api/v1/organizations/{emulator.org_id}")
        await client.templates.create(name="t", resources=RESOURCES)
    console = [e for e in emulator.journal if e.server == "console"]
    assert len(console) == 9 and console[-1].path.startswith("/api/v2/")
    assert vault.calls == 9
    assert bearers(console) == [emulator.api_key] * 9


async def test_a_401_asks_again_and_sends_once_more_with_the_new_key(
    keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    """After a 401 the function is asked again and the request (a POST never retried, under
    `RetryPolicy.none()`) is sent once more with the new key: no retry is logged or told."""
    old = await keys.mint("old")
    vault = Vault(old)
    retries: list[object] = []
    async with keys.emu.client(
        api_key=vault.get, retry=sandboxkit.RetryPolicy.none(), on_retry=retries.append
    ) as client:
        await client.v1.get_organization(keys.emu.org_id)
        keys.expire()
        new = await keys.mint("new")
        vault.keys = [old, new]  # a stale cache: the old key once more, then the new one
        start = len(keys.emu.journal)
        created = await client.v1.create_api_key(keys.emu.org_id, "minted-after-rotation")
        await client.v1.get_organization(keys.emu.org_id)
    assert created.key
    console = keys.console_since(start)
    assert [(e.route, e.status) for e in console] == [
        ("v1.api_keys.create", 401),
        ("v1.api_keys.create", 201),
        ("v1.organizations.get", 200),
    ]
    assert bearers(console) == [old, new, new]
    assert vault.calls == 4
    assert retries == []
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


async def test_the_same_key_after_a_401_is_not_sent_again(keys: Keys) -> None:
    """When the function answers the refused key again, the 401 is the answer: one request."""
    old = await keys.mint("old")
    keys.expire()
    vault = Vault(old)
    start = len(keys.emu.journal)
    async with keys.emu.client(api_key=vault.aget, retry=NO_DELAY) as client:
        with pytest.raises(sandboxkit.AuthenticationError):
            await client.v1.get_organization(keys.emu.org_id)
    assert [e.status for e in keys.console_since(start)] == [401]
    assert vault.calls == 2


async def test_a_second_401_raises_after_exactly_two_requests(keys: Keys) -> None:
    """A new key refused too ends the call with AuthenticationError after two requests,
    whatever the retry policy allows."""
    first, second = await keys.mint("first"), await keys.mint("second")
    keys.expire()
    vault = Vault(first, second)
    start = len(keys.emu.journal)
    async with keys.emu.client(api_key=vault.get, retry=NO_DELAY) as client:
        with pytest.raises(sandboxkit.AuthenticationError) as caught:
            await client.templates.create(name="t", resources=RESOURCES)
    console = keys.console_since(start)
    assert [(e.route, e.status) for e in console] == [("templates.create", 401)] * 2
    assert bearers(console) == [first, second]
    assert caught.value.status == 401 and vault.calls == 2


SECRET = "sk-vault-SECRET-4d1e"


def _raising() -> str:
    raise RuntimeError(f"the vault is sealed ({SECRET})")


async def _raising_async() -> str:
    raise ConnectionError("the token endpoint is down")


@pytest.mark.parametrize(
    ("function", "cause", "match"),
    [
        (_raising, RuntimeError, "api_key function raised RuntimeError"),
        (_raising_async, ConnectionError, "api_key function raised ConnectionError"),
        (lambda: 42, None, "is of type int, not str"),
        (lambda: None, None, "is of type NoneType, not str"),
        (lambda: "  ", None, "is empty"),
        (lambda: f"{SECRET}\r\nX-Injected: 1", None, "line breaks or NUL"),
        (lambda: f"{SECRET}\x00", None, "line breaks or NUL"),
    ],
)
async def test_a_failing_function_sends_nothing_and_shows_no_key(
    emulator: Emulator,
    function: Callable[[], Any],
    cause: type[BaseException] | None,
    match: str,
) -> None:
    """A function that raises or returns no usable key fails the call with ValidationError
    naming the problem (its own exception chained), shows no key, and sends nothing."""
    async with emulator.client(api_key=function, retry=NO_DELAY) as client:
        with pytest.raises(sandboxkit.ValidationError, match=match) as caught:
            await client.v1.get_organization(emulator.org_id)
    error = caught.value
    assert error.operation == "v1.organizations.get"
    assert SECRET not in str(error) + repr(error)
    if cause is None:
        assert error.__cause__ is None
        assert SECRET not in shown_by(error)  # nor in a frame's locals: the value is gone
    else:
        assert isinstance(error.__cause__, cause)  # the function's own: its message is its own
    assert emulator.journal == []


@pytest.mark.parametrize(
    ("api_key", "match"),
    [
        (lambda org: org, "must take no arguments"),
        (42, "returning one, not int"),
        (b"sk-bytes", "returning one, not bytes"),
    ],
)
def test_what_is_neither_a_key_nor_a_function_of_nothing_is_refused(
    api_key: object, match: str
) -> None:
    """The client and its config refuse an api_key that is no str and no function callable
    without arguments, when they are made."""
    with pytest.raises(sandboxkit.ValidationError, match=match):
        sandboxkit.Client(api_key=api_key, base_url="http://127.0.0.1:1")  # type: ignore[arg-type]
    with pytest.raises(sandboxkit.ValidationError, match=f"ClientConfig.api_key.*{match}"):
        sandboxkit.ClientConfig(api_key=api_key, base_url="http://127.0.0.1:1")  # type: ignore[arg-type]


async def test_the_data_plane_never_asks(emulator: Emulator) -> None:
    """Uploads and reads use the sandbox token only: the function is never called."""
    vault = Vault(emulator.api_key)
    async with emulator.client(api_key=vault.get, retry=NO_DELAY) as client:
        box = await new_box(emulator, client)
        box.put("/home/user/in.bin", b"payload")
        assert await box.files.read_bytes("/home/user/in.bin") == b"payload"
        await box.files.upload("/home/user/out.bin", b"uploaded")
        assert await box.files.read_bytes("/home/user/out.bin") == b"uploaded"
    data = [e for e in emulator.journal if e.server == "data"]
    assert len(data) == 3 and all("Authorization" not in e.headers for e in data)
    assert vault.calls == 0


def _key_from(secret: str) -> str:
    """A module-level key function: a partial of it holds the key in its arguments."""
    return secret


async def test_no_key_shows_in_logs_hooks_spans_or_reprs(
    keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    """At DEBUG, with hooks and a tracer, over a run with a rotation, a refused key and a
    failing function, no log record, hook event, span or repr carries a key."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="sandboxkit")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    events: list[object] = []
    old = await keys.mint("old")
    vault = Vault(old)
    secrets = [old, keys.emu.api_key]
    async with keys.emu.client(
        api_key=vault.aget,
        retry=NO_DELAY,
        tracer_provider=provider,
        on_request=events.append,
        on_response=events.append,
        on_retry=events.append,
    ) as client:
        keys.emu.faults.script("v1.images.list", Fault.status(503))
        await client.v1.list_images()
        keys.expire()
        new = await keys.mint("new")
        secrets.append(new)
        vault.keys = [old, new]
        await client.v1.get_organization(keys.emu.org_id)
        box = await new_box(keys.emu, client)
        box.put("/home/user/f.bin", b"x" * 1000)
        await box.files.read_bytes("/home/user/f.bin")
        await box.files.upload("/home/user/g.bin", b"y" * 1000)
        vault.keys = [old]
        with pytest.raises(sandboxkit.AuthenticationError) as refused:
            await client.v1.list_images()
        vault.keys = [f"{new}\n"]
        with pytest.raises(sandboxkit.ValidationError) as garbage:
            await client.v1.list_images()
        shown = [repr(client), repr(client._calls), repr(client._transport)]
    provider.shutdown()
    config = sandboxkit.ClientConfig(api_key=functools.partial(_key_from, new))
    shown += [repr(config), str(config), repr(pickle.loads(pickle.dumps(config)))]
    records = caplog.get_records("call")
    lines = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert any(line.startswith("v1.organizations.get: answer ") for line in lines)
    assert len(events) > 10 and len(exporter.get_finished_spans()) > 5
    for record in records:
        text = record.getMessage()
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
        shown.append(text)
    shown += [repr(event) for event in events]
    for span in exporter.get_finished_spans():
        shown.append(span.to_json())
    shown += [shown_by(refused.value), shown_by(garbage.value)]
    assert [s for s in secrets if any(s in text for text in shown)] == []


def test_sync_client_with_a_key_function(emulator_thread: EmulatorThread) -> None:
    """sync.Client takes a sync or an async key function, asked on its loop per request."""
    emu = emulator_thread.emu
    for kind in ("sync", "async"):
        vault = Vault(emu.api_key)
        function: Callable[[], str] | Callable[[], Awaitable[str]]
        function = vault.get if kind == "sync" else vault.aget
        start = len(emu.journal)
        with sync.Client(
            api_key=function, base_url=emu.base_url, retry=NO_DELAY, trust_env=False
        ) as client:
            assert client.v1.get_organization(emu.org_id).name
            assert client.v1.list_images() is not None
        console = [e for e in emu.journal[start:] if e.server == "console"]
        assert bearers(console) == [emu.api_key] * 2
        assert vault.calls == 2, kind


CURRENT: dict[str, str] = {}  # where the module-level key function finds the key


def current_key() -> str:
    """A module-level key function: it pickles by reference."""
    return CURRENT["key"]


async def test_a_config_with_a_module_level_function_pickles_and_works(
    emulator: Emulator,
) -> None:
    """ClientConfig with a module-level key function round-trips through pickle, and the
    client built from the copy asks it per request."""
    CURRENT["key"] = emulator.api_key
    config = sandboxkit.ClientConfig(
        api_key=current_key, base_url=emulator.base_url, retry=NO_DELAY, trust_env=False
    )
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config and copy.api_key is current_key
    async with sandboxkit.Client.from_config(copy) as client:
        assert (await client.v1.get_organization(emulator.org_id)).name
    assert bearers(emulator.journal) == [emulator.api_key]


def test_a_config_with_a_lambda_or_a_nested_function_says_what_to_do() -> None:
    """A key function that cannot reach a worker is refused when the config is made, with a
    message that names it and says what pickles, and shows no key."""

    def nested() -> str:
        return SECRET

    for function, name in ((lambda: SECRET, "<lambda>"), (nested, "nested")):
        with pytest.raises(sandboxkit.ValidationError) as caught:
            sandboxkit.ClientConfig(api_key=function, base_url="http://127.0.0.1:1")
        message = str(caught.value)
        assert message.startswith("ClientConfig.api_key: the function ")
        assert name in message and "pass a module-level function" in message
        assert SECRET not in message and caught.value.__cause__ is None
