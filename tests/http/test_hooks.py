"""Event hooks: `on_request`, `on_response` and `on_retry`, for users without OpenTelemetry.

Over loopback against the emulator on both planes: what each event says, that `on_retry`
comes before the wait with its delay, that a hook that raises never breaks a call, and that
hooks travel in a pickled ClientConfig.
"""

from __future__ import annotations

import functools
import logging
import pickle
import threading
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider

import sandboxkit
import sandboxkit.sync
from sandboxkit import ClientConfig, RequestEvent, ResponseEvent, RetryEvent
from sandboxkit._core.events import Origin, allowed_headers, origin_of, retry_reason
from sandboxkit._core.retry import TryAgain
from sandboxkit._http.telemetry import Telemetry
from sandboxkit.emulator import Emulator, Fault

from ..cli_support import EmulatorThread
from ..files_support import new_box, payload

LIMIT = 10
FAST = sandboxkit.RetryPolicy.no_delay()
RESOURCES = sandboxkit.CustomResources(2, 2048, 10240)

# Module level, so a ClientConfig holding them pickles (by reference).
SEEN: list[Any] = []


def remember(event: Any) -> None:
    """A hook for configs: keeps every event in SEEN."""
    SEEN.append(event)


def tagged(tag: str, event: Any) -> None:
    """A hook for configs through functools.partial."""
    SEEN.append((tag, event))


def recorder() -> tuple[list[Any], dict[str, Any]]:
    """A list of events and the three hooks that fill it."""
    events: list[Any] = []
    hooks = {name: events.append for name in ("on_request", "on_response", "on_retry")}
    return events, hooks


def without_elapsed(events: list[Any]) -> list[Any]:
    """The events with every ResponseEvent's elapsed set to 0 (checked on its own)."""
    out = []
    for event in events:
        if isinstance(event, ResponseEvent):
            assert 0 <= event.elapsed < LIMIT
            event = attrs.evolve(event, elapsed=0.0)
        out.append(event)
    return out


async def test_control_plane_events_tell_each_request_answer_and_retry(
    emulator: Emulator,
) -> None:
    """builds.list answered 502 then 200: request, answer (with its class and request id),
    retry, request, answer; the host is the console's as its Host header names it."""
    events, hooks = recorder()
    async with emulator.client(retry=FAST, **hooks) as client:
        created = await client.templates.create(name="t", resources=RESOURCES)
        emulator.faults.script("builds.list", Fault.status(502))
        events.clear()
        with anyio.fail_after(LIMIT):
            await client.templates.builds_page(created.id)
    bad, good = emulator.journal_for("builds.list")
    host = bad.host
    op = "builds.list"
    assert without_elapsed(events) == [
        RequestEvent(op, "GET", host, 1),
        ResponseEvent(op, "GET", host, 1, 502, 0.0, "BadGatewayError", bad.request_id),
        RetryEvent(op, host, 1, 0.0, "502"),
        RequestEvent(op, "GET", host, 2),
        ResponseEvent(op, "GET", host, 2, 200, 0.0, None, good.request_id),
    ]
    assert bad.request_id and good.request_id


async def test_data_plane_events_tell_a_cut_and_its_resume(
    emulator: Emulator, tmp_path: Path
) -> None:
    """A download cut mid-body: the answer ended in APIConnectionError with its 200, the
    retry says so, the resumed GET is attempt 2; the host is the sandbox's."""
    events, hooks = recorder()
    async with emulator.client(retry=FAST, **hooks) as client:
        box = await new_box(emulator, client)
        box.put("/home/user/f.bin", payload(200_000))
        emulator.faults.script("files.download", Fault.cut(after_bytes=5000))
        with anyio.fail_after(LIMIT):
            await box.files.download("/home/user/f.bin", tmp_path / "f.bin", username="agent")
    host = emulator.journal_for("files.download")[0].host
    assert host.startswith(box.key + ".")
    op = "files.download"
    assert without_elapsed(events) == [
        RequestEvent(op, "GET", host, 1),
        ResponseEvent(op, "GET", host, 1, 200, 0.0, "APIConnectionError", None),
        RetryEvent(op, host, 1, 0.0, "APIConnectionError"),
        RequestEvent(op, "GET", host, 2),
        ResponseEvent(op, "GET", host, 2, 206, 0.0, None, None),
    ]


async def test_a_connection_that_never_answers_has_no_status(emulator: Emulator) -> None:
    """A request cut before its head: its ResponseEvent has no status and names the error."""
    events, hooks = recorder()
    async with emulator.client(retry=FAST, **hooks) as client:
        emulator.faults.script("v1.organizations.get", Fault.cut_before_headers())
        with anyio.fail_after(LIMIT):
            await client.v1.get_organization(emulator.org_id)
    answers = [e for e in events if isinstance(e, ResponseEvent)]
    assert [(a.status, a.error) for a in answers] == [
        (None, "APIConnectionError"),
        (200, None),
    ]
    [retry] = [e for e in events if isinstance(e, RetryEvent)]
    assert (retry.attempt, retry.reason) == (1, "APIConnectionError")


async def test_on_retry_comes_before_the_wait_with_its_delay(emulator: Emulator) -> None:
    """The retry hook is called before the backoff sleep begins, with the delay it is for."""
    order: list[tuple[str, float]] = []
    policy = sandboxkit.RetryPolicy(max_attempts=3, initial_backoff=0.5, max_backoff=0.5)
    client = emulator.client(
        retry=policy, on_retry=lambda event: order.append(("on_retry", event.delay))
    )

    async def sleep(delay: float) -> None:
        order.append(("sleep", delay))

    client._calls.sleep = sleep
    async with client:
        emulator.faults.script("v1.organizations.get", Fault.status(503), Fault.status(502))
        with anyio.fail_after(LIMIT):
            await client.v1.get_organization(emulator.org_id)
    first, second = order[0][1], order[2][1]
    assert first > 0 and second > 0
    assert order == [("on_retry", first), ("sleep", first), ("on_retry", second), ("sleep", second)]


async def test_a_hook_that_raises_never_breaks_the_call(
    emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Hooks that raise on every event: both planes' calls (retries included) succeed; each
    hook's failure is logged at WARNING once, with its traceback, then at DEBUG."""

    def broken(event: Any) -> None:
        raise RuntimeError(f"hook bug on {type(event).__name__}")

    caplog.set_level(logging.DEBUG, logger="sandboxkit")
    hooks = {name: broken for name in ("on_request", "on_response", "on_retry")}
    async with emulator.client(retry=FAST, **hooks) as client:
        box = await new_box(emulator, client)
        box.put("/home/user/f.bin", b"x" * 1000)
        emulator.faults.script("files.download", Fault.status(502))
        emulator.faults.script("v1.organizations.get", Fault.status(503))
        with anyio.fail_after(LIMIT):
            assert await box.files.read_bytes("/home/user/f.bin") == b"x" * 1000
            assert (await client.v1.get_organization(emulator.org_id)).name
    said = [r for r in caplog.records if "hook raised" in r.getMessage()]
    warnings = [r.getMessage() for r in said if r.levelno == logging.WARNING]
    assert sorted(w.split()[1] for w in warnings) == ["on_request", "on_response", "on_retry"]
    assert all(r.exc_info and "hook bug" in str(r.exc_info[1]) for r in said)
    assert len(said) == 4 + 4 + 2  # four requests, their four answers, two retries


@pytest.mark.parametrize("hook", [42, "print"])
def test_a_hook_must_be_a_function(hook: Any) -> None:
    """A hook that is not callable is refused where it is given, naming the option."""
    with pytest.raises(sandboxkit.ValidationError, match="on_retry must be a plain function"):
        sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:1", on_retry=hook)


def test_an_async_hook_is_refused() -> None:
    """Hooks are called synchronously: a coroutine function would never run, so it is refused
    by Client and ClientConfig."""

    async def later(event: Any) -> None:
        pass

    with pytest.raises(sandboxkit.ValidationError, match="on_response must be a plain"):
        sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:1", on_response=later)
    with pytest.raises(sandboxkit.ValidationError, match=r"ClientConfig\.on_request must be"):
        ClientConfig(on_request=later)


EXPORTED = InMemorySpanExporter()


def provider_factory() -> TracerProvider:
    """A module-level tracer provider factory (pickles by reference), exporting to EXPORTED."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTED))
    return provider


async def test_a_config_with_hooks_pickles_and_its_clients_call_them(emulator: Emulator) -> None:
    """Module-level hooks (and a partial of one) and a provider factory pickle with the
    config; a Client built from the unpickled config calls them. A lambda and a live provider
    are refused when the config is made."""
    config = ClientConfig(
        api_key=emulator.api_key,
        base_url=emulator.base_url,
        retry=FAST,
        on_request=remember,
        on_response=functools.partial(tagged, "answer"),
        on_retry=remember,
        tracer_provider=provider_factory,
    )
    copy = pickle.loads(pickle.dumps(config))
    assert (copy.on_request, copy.on_retry, copy.tracer_provider) == (
        remember,
        remember,
        provider_factory,
    )
    with pytest.raises(sandboxkit.ValidationError, match="on_retry does not pickle"):
        ClientConfig(on_retry=lambda event: None)
    with pytest.raises(sandboxkit.ValidationError, match="not a provider"):
        ClientConfig(tracer_provider=provider_factory())
    SEEN.clear()
    EXPORTED.clear()
    async with sandboxkit.Client.from_config(copy) as client:
        emulator.faults.script("v1.organizations.get", Fault.status(502))
        with anyio.fail_after(LIMIT):
            await client.v1.get_organization(emulator.org_id)
    kinds = [type(e[1] if isinstance(e, tuple) else e).__name__ for e in SEEN]
    assert kinds == ["RequestEvent", "ResponseEvent", "RetryEvent", "RequestEvent", "ResponseEvent"]
    assert [e[0] for e in SEEN if isinstance(e, tuple)] == ["answer", "answer"]
    names = [span.name for span in EXPORTED.get_finished_spans()]
    assert names == ["GET", "GET", "v1.organizations.get"]


async def test_events_hold_no_secret_no_path_and_no_username(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Over both planes, retries and a wrong token, no event's repr holds the API key, a
    token, the remote path or the username (the query carries them; events show no query)."""
    user, remote = "agent-user-7f3a", "/home/user/report-9c1e.bin"
    events, hooks = recorder()
    async with emulator.client(retry=FAST, **hooks) as client:
        box = await new_box(emulator, client)
        box.put(remote, payload(20_000))
        emulator.faults.script("files.download", Fault.status(429), Fault.cut(after_bytes=10))
        emulator.faults.script("files.upload", Fault.status(502))
        with anyio.fail_after(LIMIT):
            await box.files.download(remote, tmp_path / "r.bin", username=user)
            await box.files.upload(remote, b"again", username=user)
            with pytest.raises(sandboxkit.APIError):
                await client.sandbox(
                    sandbox_key=box.key, domain=emulator.domain, access_token="wrong-token-0"
                ).files.read_bytes(remote, username=user)
        tokens = [s.token for s in emulator._core.sandboxes.live.values()]
    assert {type(e) for e in events} == {RequestEvent, ResponseEvent, RetryEvent}
    said = "\n".join(repr(e) for e in events)
    for secret in [emulator.api_key, *tokens, "wrong-token-0", user, remote, "username", "?"]:
        assert secret not in said, secret


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://127.0.0.1:8080", ("http", "127.0.0.1:8080", "127.0.0.1", 8080)),
        ("https://api.example.com/prefix", ("https", "api.example.com", "api.example.com", 443)),
        ("http://Box.example:80/x?path=/a", ("http", "Box.example:80", "box.example", 80)),
        ("https://u:pw-SECRET@h.example:8443/", ("https", "h.example:8443", "h.example", 8443)),
        ("http://[::1]:9000", ("http", "[::1]:9000", "::1", 9000)),
        ("http://plain.example", ("http", "plain.example", "plain.example", 80)),
    ],
)
def test_an_origin_shows_no_userinfo_path_or_query(url: str, origin: tuple[Any, ...]) -> None:
    """What a span, line or event may say of a URL: scheme, host[:port], address, port."""
    assert origin_of(url) == Origin(*origin)


def test_only_allowlisted_headers_are_shown() -> None:
    """Request headers are matched without regard to case; anything unlisted stays out."""
    request = {
        "range": "bytes=5-",
        "Authorization": "Bearer SECRET",
        "X-Access-Token": "SECRET",
        "Cookie": "SECRET",
        "Idempotency-Key": "SECRET",
    }
    assert allowed_headers(request, response=False) == {"Range": "bytes=5-"}
    assert allowed_headers(None, response=False) == {}


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (sandboxkit.BadGatewayError("x", status=502, surface="v2"), "502"),
        (sandboxkit.RateLimitError("x", status=429, surface="data"), "429"),
        (sandboxkit.APIConnectionError("x"), "APIConnectionError"),
        (sandboxkit.APITimeoutError("x"), "APITimeoutError"),
        (TryAgain("the body ended at byte 10 of 20"), "incomplete"),
    ],
)
def test_a_retry_reason_is_a_status_a_class_or_incomplete(failure: Any, reason: str) -> None:
    """RetryEvent.reason: the status as text, the exception's class name, or "incomplete"."""
    assert retry_reason(failure) == reason


@pytest.mark.parametrize(
    ("listener", "watched"),
    [
        ("nothing", False),
        ("a no-op provider", False),
        ("DEBUG", True),
        ("a hook", True),
        ("a provider", True),
    ],
)
def test_an_operation_is_watched_only_when_something_listens(
    listener: str, watched: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """With no recording provider, no hook and DEBUG off there is no watch at all: the
    transport does nothing per request but read a context variable."""
    caplog.set_level(logging.DEBUG if listener == "DEBUG" else logging.INFO, logger="sandboxkit")
    provider = {"a no-op provider": NoOpTracerProvider(), "a provider": TracerProvider()}
    telemetry = Telemetry(
        tracer_provider=provider.get(listener, NoOpTracerProvider()),
        on_request=remember if listener == "a hook" else None,
        on_response=None,
        on_retry=None,
        clock=lambda: 0.0,
    )
    watch = telemetry.start("builds.list", "http://127.0.0.1:1")
    assert (watch is not None) == watched
    if watch is not None:
        watch.end(None, None)


async def test_elapsed_covers_the_wait_for_the_answer(emulator: Emulator) -> None:
    """An answer the emulator holds back 0.3 s: its ResponseEvent's elapsed is at least that."""
    answers: list[ResponseEvent] = []
    async with emulator.client(retry=FAST, on_response=answers.append) as client:
        emulator.faults.script("v1.organizations.get", Fault.delay(0.3))
        with anyio.fail_after(LIMIT):
            await client.v1.get_organization(emulator.org_id)
    [answer] = answers
    assert 0.3 <= answer.elapsed < LIMIT


def test_a_sync_client_calls_its_hooks_on_its_loop_thread(
    emulator_thread: EmulatorThread,
) -> None:
    """`sync.Client` takes the same hooks; they run on its loop's thread, not the caller's."""
    emu = emulator_thread.emu
    seen: list[tuple[str, bool]] = []

    def on_retry(event: RetryEvent) -> None:
        seen.append((event.reason, threading.current_thread() is threading.main_thread()))

    with sandboxkit.sync.Client(
        api_key=emu.api_key, base_url=emu.base_url, retry=FAST, on_retry=on_retry
    ) as client:
        emu.faults.script("v1.organizations.get", Fault.status(502))
        assert client.v1.get_organization(emu.org_id).name
    assert seen == [("502", False)]
