"""OpenTelemetry: one span per operation, one per request under it, trace context on the wire.

Each test hands its Client a TracerProvider of its own (`Client(tracer_provider=...)`) whose
in-memory exporter collects the spans: no global provider is set, so no test leaks tracing
into another. Over loopback against the emulator, for both planes, with a retry and a resume;
the `traceparent` each request carried is read back from the emulator's journal.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import sandboxkit
from sandboxkit._http.telemetry import watching
from sandboxkit.emulator import Emulator, Fault, RecordedRequest

from ..files_support import new_box, payload
from ..reliability_support import refused_port

LIMIT = 10
FAST = sandboxkit.RetryPolicy.no_delay()
RESOURCES = sandboxkit.CustomResources(2, 2048, 10240)


@attrs.frozen
class Traced:
    """A tracer provider of one test's own, and what it exported."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """The finished spans, in the order they ended (optionally only those named `name`)."""
        found = self.exporter.get_finished_spans()
        return [s for s in found if name is None or s.name == name]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """The spans whose parent is `parent`, in the order they ended."""
        own = parent.context.span_id
        return [s for s in self.spans() if s.parent is not None and s.parent.span_id == own]


@pytest.fixture
def traced() -> Iterator[Traced]:
    """A TracerProvider exporting to memory, for `Client(tracer_provider=...)` only."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Traced(provider, exporter)
    provider.shutdown()


def traceparent(span: ReadableSpan) -> str:
    """The W3C `traceparent` value that names `span`."""
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def carried(entries: list[RecordedRequest]) -> list[str | None]:
    """Each request's traceparent header."""
    return [e.headers.get("traceparent") for e in entries]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_retried_control_plane_call_is_one_span_over_a_span_per_request(
    emulator: Emulator, traced: Traced
) -> None:
    """A builds.list answered 502 then 200: one CLIENT span named for the operation, below
    the caller's span, with a retry event; under it one span per request with the HTTP
    client conventions; each request carried its own span's traceparent."""
    async with emulator.client(retry=FAST, tracer_provider=traced.provider) as client:
        created = await client.templates.create(name="t", resources=RESOURCES)
        emulator.faults.script("builds.list", Fault.status(502))
        outer = traced.provider.get_tracer("the caller")
        with outer.start_as_current_span("job") as job, anyio.fail_after(LIMIT):
            await client.templates.builds_page(created.id)
    [operation] = traced.spans("builds.list")
    port = int(emulator.base_url.rsplit(":", 1)[1])
    assert operation.kind is SpanKind.CLIENT
    assert operation.parent is not None
    assert operation.parent.span_id == job.get_span_context().span_id
    assert attributes(operation) == {
        "sandboxkit.operation": "builds.list",
        "server.address": "127.0.0.1",
        "server.port": port,
        "sandboxkit.attempts": 2,
    }
    [retry] = operation.events
    assert retry.name == "sandboxkit.retry"
    assert dict(retry.attributes or {}) == {
        "sandboxkit.attempt": 1,
        "sandboxkit.retry.delay": 0.0,
        "sandboxkit.retry.reason": "502",
    }
    assert operation.status.status_code is StatusCode.UNSET
    first, second = traced.children(operation)
    common = {
        "http.request.method": "GET",
        "server.address": "127.0.0.1",
        "server.port": port,
        "url.scheme": "http",
        "sandboxkit.operation": "builds.list",
    }
    assert (first.name, first.kind, second.name) == ("GET", SpanKind.CLIENT, "GET")
    assert attributes(first) == {
        **common,
        "sandboxkit.attempt": 1,
        "http.response.status_code": 502,
        "error.type": "502",
    }
    assert first.status.status_code is StatusCode.ERROR
    assert attributes(second) == {
        **common,
        "sandboxkit.attempt": 2,
        "http.request.resend_count": 1,
        "http.response.status_code": 200,
    }
    assert second.status.status_code is StatusCode.UNSET
    assert carried(emulator.journal_for("builds.list")) == [traceparent(first), traceparent(second)]


async def test_a_resumed_download_tells_its_bytes_and_resumes(
    emulator: Emulator, traced: Traced, tmp_path: Path
) -> None:
    """A download cut after 1000 bytes and resumed: the operation span tells the bytes that
    came and the one resume; each request's span its status, its body's bytes and, for the
    cut one, the error; each GET carried its own span's traceparent."""
    data = payload(300_000)
    async with emulator.client(retry=FAST, tracer_provider=traced.provider) as client:
        box = await new_box(emulator, client)
        box.put("/home/user/f.bin", data)
        emulator.faults.script("files.download", Fault.cut(after_bytes=1000))
        with anyio.fail_after(LIMIT):
            result = await box.files.download("/home/user/f.bin", tmp_path / "f.bin")
    assert (result.attempts, result.resumes) == (2, 1)
    [operation] = traced.spans("files.download")
    host, _, port = box.handle.origin.removeprefix("http://").partition(":")
    assert attributes(operation) == {
        "sandboxkit.operation": "files.download",
        "server.address": host,
        "server.port": int(port),
        "sandboxkit.attempts": 2,
        "sandboxkit.transfer.bytes": len(data),
        "sandboxkit.transfer.resumes": 1,
    }
    assert [dict(e.attributes or {})["sandboxkit.retry.reason"] for e in operation.events] == [
        "APIConnectionError"
    ]
    cut, rest = traced.children(operation)
    assert attributes(cut)["http.response.status_code"] == 200
    assert attributes(cut)["http.response.body.size"] == 1000
    assert attributes(cut)["error.type"] == "sandboxkit.errors.APIConnectionError"
    assert attributes(rest)["http.response.status_code"] == 206
    assert attributes(rest)["http.response.body.size"] == len(data) - 1000
    assert attributes(rest)["http.request.resend_count"] == 1
    assert "error.type" not in attributes(rest)
    journal = emulator.journal_for("files.download")
    assert carried(journal) == [traceparent(cut), traceparent(rest)]
    assert journal[1].headers["Range"] == "bytes=1000-"


async def test_an_upload_span_tells_the_bytes_sent(emulator: Emulator, traced: Traced) -> None:
    """An upload's operation span counts the bytes handed to the connection; its POST
    carried the trace context."""
    data = payload(70_000)
    async with emulator.client(retry=FAST, tracer_provider=traced.provider) as client:
        box = await new_box(emulator, client)
        with anyio.fail_after(LIMIT):
            await box.files.upload("/home/user/up.bin", data)
    [operation] = traced.spans("files.upload")
    assert attributes(operation)["sandboxkit.transfer.bytes"] == len(data)
    assert "sandboxkit.transfer.resumes" not in attributes(operation)
    [post] = traced.children(operation)
    assert (post.name, attributes(post)["http.response.status_code"]) == ("POST", 200)
    assert carried(emulator.journal_for("files.upload")) == [traceparent(post)]
    assert box.get("/home/user/up.bin") == data


async def test_a_transfer_span_tells_the_bandwidth_limit_in_effect(
    emulator: Emulator, traced: Traced, tmp_path: Path
) -> None:
    """Under `Budgets`, each transfer's span says its direction's limit (bytes/s); other
    operations' spans and unlimited directions say nothing of it."""
    budgets = sandboxkit.Budgets.from_bwlimit("64M:off")
    async with emulator.client(
        retry=FAST, tracer_provider=traced.provider, budgets=budgets
    ) as client:
        box = await new_box(emulator, client)
        with anyio.fail_after(LIMIT):
            await box.files.upload("/home/user/up.bin", b"x" * 1000)
            client.set_budgets(sandboxkit.Budgets.from_bwlimit("off:32M"))
            await box.files.download("/home/user/up.bin", tmp_path / "up.bin")
            client.set_budgets(sandboxkit.Budgets())
            await box.files.download("/home/user/up.bin", tmp_path / "again.bin")
    key = "sandboxkit.transfer.bandwidth_limit"
    [upload] = traced.spans("files.upload")
    first, second = traced.spans("files.download")
    assert attributes(upload)[key] == 64 << 20
    assert attributes(first)[key] == 32 << 20
    assert key not in attributes(second)


async def test_a_failed_operation_span_says_which_error(emulator: Emulator, traced: Traced) -> None:
    """A 404 ends the operation span in ERROR with the exception's type and its request span
    with the status; a refused connection leaves the request span without a status code."""
    async with emulator.client(retry=FAST, tracer_provider=traced.provider) as client:
        body = await emulator.create_sandbox()
        key = body["data"]["sandbox_key"]
        refused = client.sandbox(
            sandbox_key=key,
            domain=f"sandbox.test:{refused_port()}",
            access_token=body["data"]["sandbox_access_token"],
        )
        with anyio.fail_after(LIMIT):
            with pytest.raises(sandboxkit.NotFoundError):
                await client.templates.builds_page("tpl-missing")
            with pytest.raises(sandboxkit.APIConnectionError):
                await refused.files.read_bytes("/home/user/f.bin")
    [missing] = traced.spans("builds.list")
    assert missing.status.status_code is StatusCode.ERROR
    assert missing.status.description == "NotFoundError"
    assert attributes(missing)["error.type"] == "sandboxkit.errors.NotFoundError"
    [request] = traced.children(missing)
    assert attributes(request)["error.type"] == "404"
    [download] = traced.spans("files.download")
    assert attributes(download)["error.type"] == "sandboxkit.errors.APIConnectionError"
    tries = traced.children(download)
    assert len(tries) == FAST.max_attempts
    for attempt in tries:
        assert "http.response.status_code" not in attributes(attempt)
        assert attributes(attempt)["error.type"] == "sandboxkit.errors.APIConnectionError"


def everything_said(span: ReadableSpan) -> str:
    """A span's name, attribute values, events and status, as text."""
    parts = [span.name, repr(attributes(span)), repr(span.status.description)]
    for event in span.events:
        parts += [event.name, repr(dict(event.attributes or {}))]
    return "\n".join(parts)


async def test_no_span_says_a_secret_a_path_or_a_username(
    emulator: Emulator, traced: Traced, tmp_path: Path
) -> None:
    """Over retried, resumed, failing calls with a username on both planes, no span name,
    attribute, event or status holds the API key, a token, the file path or the username
    (they travel in the query, which no span shows)."""
    user, remote = "agent-user-7f3a", "/home/user/report-9c1e.bin"
    async with emulator.client(retry=FAST, tracer_provider=traced.provider) as client:
        box = await new_box(emulator, client)
        box.put(remote, payload(50_000))
        emulator.faults.script("files.download", Fault.status(503), Fault.cut(after_bytes=10))
        emulator.faults.script("files.upload", Fault.status(502))
        emulator.faults.script("templates.create", Fault.cut_before_headers())
        with anyio.fail_after(LIMIT):
            await box.files.download(remote, tmp_path / "r.bin", username=user)
            await box.files.upload(remote, b"again", username=user)
            await client.templates.create(name="t", resources=RESOURCES)
            with pytest.raises(sandboxkit.NotFoundError):
                await box.files.read_bytes(remote + ".missing", username=user)
            with pytest.raises(sandboxkit.APIError):
                await client.sandbox(
                    sandbox_key=box.key, domain=emulator.domain, access_token="wrong-token-0"
                ).files.read_bytes(remote, username=user)
        tokens = [s.token for s in emulator._core.sandboxes.live.values()]
    spans = traced.spans()
    assert {"files.download", "files.upload", "templates.create"} <= {s.name for s in spans}
    assert any(s.events for s in spans)
    said = "\n".join(everything_said(s) for s in spans)
    for secret in [emulator.api_key, *tokens, "wrong-token-0", user, remote, "username", "?"]:
        assert secret not in said, secret


async def test_without_a_provider_nothing_is_carried(emulator: Emulator, tmp_path: Path) -> None:
    """With opentelemetry installed but no provider set anywhere, requests on both planes go
    without a traceparent (the global proxy tracer records nothing)."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    async with emulator.client(retry=FAST) as client:
        box = await new_box(emulator, client)
        box.put("/home/user/f.bin", b"x" * 100)
        emulator.faults.script("files.download", Fault.status(502))
        with anyio.fail_after(LIMIT):
            await box.files.download("/home/user/f.bin", tmp_path / "f.bin")
            await client.templates.create(name="t", resources=RESOURCES)
    assert len(emulator.journal) == 3
    assert [e.headers.get("traceparent") for e in emulator.journal] == [None] * 3


async def test_a_remote_parent_is_carried_on_without_recording(
    emulator: Emulator, tmp_path: Path
) -> None:
    """With a no-op provider, a trace the application received (a remote parent in the
    current context) still reaches both planes' requests in their traceparent."""
    parent = trace.SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    async with emulator.client(retry=FAST, tracer_provider=trace.NoOpTracerProvider()) as client:
        box = await new_box(emulator, client)
        box.put("/home/user/f.bin", b"x" * 100)
        with trace.use_span(trace.NonRecordingSpan(parent)), anyio.fail_after(LIMIT):
            await box.files.download("/home/user/f.bin", tmp_path / "f.bin")
            await client.templates.create(name="t", resources=RESOURCES)
        await client.templates.create(name="u", resources=RESOURCES)  # outside: no trace
    expected = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert [e.headers.get("traceparent") for e in emulator.journal] == [expected] * 2 + [None]


ABSENT = """
import asyncio, sys

class NoOpenTelemetry:  # as if opentelemetry-api were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError(f"no module named {name!r}")
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
import sandboxkit
from sandboxkit.emulator import Emulator, Fault

async def main():
    async with Emulator() as emu:
        retries = []
        async with emu.client(
            retry=sandboxkit.RetryPolicy.no_delay(), on_retry=retries.append
        ) as client:
            emu.faults.script("v1.organizations.get", Fault.status(502))
            await client.v1.get_organization(emu.org_id)
        try:
            sandboxkit.Client(api_key="k", base_url=emu.base_url, tracer_provider=object())
        except sandboxkit.ValidationError as exc:
            print("refused:", exc)
        print([e.status for e in emu.journal], [e.reason for e in retries])
        print("traceparent" in emu.journal[-1].headers)
    print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

asyncio.run(main())
"""


def test_without_opentelemetry_calls_work_and_nothing_is_imported() -> None:
    """Where opentelemetry cannot be imported, a retried call works as before, sends no
    traceparent, a tracer_provider is refused, and no opentelemetry module is loaded."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", ABSENT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    refused, statuses, sent, modules = done.stdout.splitlines()
    assert refused == "refused: tracer_provider must be an OpenTelemetry TracerProvider"
    assert (statuses, sent, modules) == ("[502, 200] ['502']", "False", "[]")


@pytest.mark.parametrize("under", ["pytest", "an application"])
def test_opentelemetry_is_imported_with_the_client_never_by_a_client(under: str) -> None:
    """opentelemetry is installed here: it is imported with sandboxkit's client (in an
    application, by `import sandboxkit`; where pytest loads the plugin, by first use), never
    by making a Client, which is often done inside a running loop the import would block."""
    code = textwrap.dedent(
        f"""
        import sys
        {"import pytest" if under == "pytest" else ""}
        import sandboxkit
        print(any(m.startswith("opentelemetry") for m in sys.modules))
        sandboxkit.Client
        before = set(sys.modules)
        sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:1")
        print("opentelemetry.trace" in before, set(sys.modules) - before)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    loaded = "False" if under == "pytest" else "True"
    assert (done.returncode, done.stdout.split()) == (0, [loaded, "True", "set()"]), done.stderr


CANCELLED = "asyncio.exceptions.CancelledError"


async def test_a_cancelled_call_ends_its_spans(
    emulator: Emulator, traced: Traced, caplog: pytest.LogCaptureFixture
) -> None:
    """A call cancelled while its request waits for an answer, and a stream closed early
    while its body flows (its download runs in a task of its own): every span ends, with the
    cancellation as its error, and no context is left attached or detached out of turn."""
    caplog.set_level(logging.DEBUG)
    scopes: list[anyio.CancelScope] = []

    def cancel_now(event: sandboxkit.RequestEvent) -> None:
        if event.operation == "v1.organizations.get":
            scopes[-1].cancel()  # delivered while the request is in flight

    async with emulator.client(
        retry=FAST, tracer_provider=traced.provider, on_request=cancel_now
    ) as client:
        box = await new_box(emulator, client)
        box.put("/home/user/big.bin", payload(4 << 20))
        emulator.faults.script("v1.organizations.get", Fault.delay(30))
        with anyio.fail_after(LIMIT):
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                await client.v1.get_organization(emulator.org_id)
            assert scope.cancelled_caught
            async with box.files.iter_bytes("/home/user/big.bin", chunk_size=1024) as stream:
                async for _ in stream:
                    break
            # The context is as it was: a new call's span is a root again.
            await client.templates.create(name="t", resources=RESOURCES)
    for name in ("v1.organizations.get", "files.download"):
        [operation] = traced.spans(name)
        assert attributes(operation)["error.type"] == CANCELLED, name
        [request] = traced.children(operation)
        assert attributes(request)["error.type"] == CANCELLED, name
    [created] = traced.spans("templates.create")
    assert created.parent is None
    assert [r for r in caplog.records if r.name.startswith("opentelemetry")] == []
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_hooks_run_inside_the_spans(emulator: Emulator, traced: Traced) -> None:
    """While a request is sent its span is the current one (code it calls, an instrumented
    library's spans, log records with trace ids hang below it); once it ended, the
    operation's span is current again: the retry hook sees that one."""
    seen: list[tuple[str, int]] = []

    def current(kind: str) -> None:
        seen.append((kind, trace.get_current_span().get_span_context().span_id))

    async with emulator.client(
        retry=FAST,
        tracer_provider=traced.provider,
        on_request=lambda _: current("request"),
        on_retry=lambda _: current("retry"),
    ) as client:
        emulator.faults.script("v1.organizations.get", Fault.status(503))
        with anyio.fail_after(LIMIT):
            await client.v1.get_organization(emulator.org_id)
    assert watching.get() is None  # the call's watch is not left behind for later code
    [operation] = traced.spans("v1.organizations.get")
    first, second = traced.children(operation)
    assert seen == [
        ("request", first.context.span_id),
        ("retry", operation.context.span_id),
        ("request", second.context.span_id),
    ]
