"""Pacing over real loopback sockets: a 429 pauses its whole host, a batch's found
concurrency shrinks on 503s and (background mode) on round trips inflating, and all of it
shows in the summary, the `on_pace` callback, the log and OpenTelemetry."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sandboxkit
from sandboxkit import batch
from sandboxkit._core.pacing import GROW, PAUSE, SHRINK, ConcurrencyController, PaceEvent
from sandboxkit.batch import BatchSummary
from sandboxkit.emulator import Emulator, Fault

from ..files_support import Box, new_box, payload

# Retries as soon as Retry-After allows (the default policy would add backoff).
HONOURS_RETRY_AFTER = sandboxkit.RetryPolicy(initial_backoff=0.0, max_backoff=0.0)
FILE = "/home/user/f.bin"


def ref(box: Box) -> batch.SandboxRef:
    handle = box.handle
    return batch.SandboxRef(handle.sandbox_key, handle.domain, handle._host.token)


async def test_a_429_pauses_every_call_to_its_host_only(emulator: Emulator) -> None:
    """After one call to A gets 429 Retry-After: 0.5, calls to A started meanwhile are not
    sent until the pause ends, while calls to B go at once: the journal shows every B
    request before any further A request."""
    async with emulator.client(retry=HONOURS_RETRY_AFTER) as client:
        a, b = await new_box(emulator, client), await new_box(emulator, client)
        for box in (a, b):
            box.put(FILE, payload(1024))
        paused = anyio.Event()
        events: list[PaceEvent | None] = []

        def heard(origin: str, status: int, seconds: float, event: PaceEvent | None) -> None:
            events.append(event)
            if event is not None:
                paused.set()

        client._transport.hosts.listeners.append(heard)
        emulator.faults.script("files.download", Fault.status(429, retry_after="0.5"))
        results: list[bytes] = []

        async def read(box: Box) -> None:
            results.append(await box.files.read_bytes(FILE))

        async with anyio.create_task_group() as group:
            group.start_soon(read, a)
            await paused.wait()  # A's first answer, the 429, has paused A
            for box in (a, a, a, b, b, b):
                group.start_soon(read, box)
        assert results == [payload(1024)] * 7
    journal = [(r.sandbox_key, r.status) for r in emulator.journal_for("files.download")]
    assert journal[0] == (a.key, 429)
    after = [key for key, _ in journal[1:]]
    assert sorted(after) == sorted([a.key] * 4 + [b.key] * 3)
    assert after == [b.key] * 3 + [a.key] * 4  # A waited; B did not
    pauses = [e for e in events if e is not None]
    assert [(e.kind, e.host, e.seconds, e.reason) for e in pauses] == [
        (PAUSE, a.handle._host.origin, 0.5, "429")
    ]


async def test_a_pause_shows_in_the_batch_summary_log_and_trace(
    emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch whose host got a 429 counts the pause per host and its length, says it once
    at WARNING however many calls waited, and adds it to the batch's span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with emulator.client(retry=HONOURS_RETRY_AFTER, tracer_provider=provider) as client:
        box = await new_box(emulator, client)
        for index in range(8):
            box.put(f"/home/user/{index}.bin", payload(1024, index))
        emulator.faults.script("files.download", Fault.status(429, retry_after="0.2"))
        jobs = [
            batch.DownloadJob(ref(box), f"/home/user/{i}.bin", tmp_path / f"{i}.bin")
            for i in range(8)
        ]
        told: list[PaceEvent] = []
        with caplog.at_level(logging.WARNING, logger="sandboxkit.hosts"):
            result = await batch.download_many(client, jobs, concurrency=8, on_pace=told.append)
    provider.shutdown()
    assert result.ok
    assert [(tmp_path / f"{i}.bin").read_bytes() for i in range(8)] == [
        payload(1024, i) for i in range(8)
    ]
    origin = box.handle._host.origin
    assert result.summary.pauses == {origin: 1}
    assert result.summary.paused_seconds == 0.2
    assert result.summary.concurrency == 8
    assert told == list(result.summary.pace_events)
    said = [r.getMessage() for r in caplog.records if "every call to it waits" in r.getMessage()]
    assert said == [f"{origin} answered 429 (Retry-After: 0.2): every call to it waits 0.20s"]
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "sandboxkit.batch"]
    assert [dict(e.attributes or {})["sandboxkit.throttle.kind"] for e in span.events] == [PAUSE]
    assert dict(span.attributes or {})["sandboxkit.concurrency"] == 8
    downloads = [s for s in exporter.get_finished_spans() if s.name == "files.download"]
    assert sum(e.name == "sandboxkit.throttle" for s in downloads for e in s.events) == 1


def clear(directory: Path) -> None:
    """Remove the files a batch downloaded, so the next one downloads them again."""
    for path in directory.iterdir():
        path.unlink()


def quick(monkeypatch: pytest.MonkeyPatch, **changes: object) -> None:
    """Make the batch's found concurrency decide at every completion (no interval)."""

    def controller(ceiling: int, background: bool, start: int) -> ConcurrencyController:
        return ConcurrencyController(
            maximum=ceiling,
            limit=start,
            background=background,
            min_interval=0.0,
            evidence=4,
            **changes,  # type: ignore[arg-type]
        )

    monkeypatch.setattr(batch, "_controller", controller)


async def test_found_concurrency_grows_then_shrinks_on_503s(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch with no concurrency given starts at 4 a host and grows while downloads finish
    fast; 503s shrink it, and each change is in the summary."""
    quick(monkeypatch)
    async with emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        boxes = [await new_box(emulator, client) for _ in range(4)]
        jobs = []
        for n, box in enumerate(boxes):
            for index in range(30):
                box.put(f"/home/user/{index}.bin", b"x")
                jobs.append(
                    batch.DownloadJob(
                        ref(box), f"/home/user/{index}.bin", tmp_path / f"{n}-{index}"
                    )
                )
        first = await batch.download_many(client, jobs[:60])
        assert first.ok
        assert [e.kind for e in first.summary.pace_events][:1] == [GROW]
        emulator.faults.script("files.download", *[Fault.status(503)] * 6)
        clear(tmp_path)
        second = await batch.download_many(client, jobs)
    assert second.ok
    shrinks = [e for e in second.summary.pace_events if e.kind == SHRINK and not e.host]
    assert shrinks and shrinks[0].reason == "503"
    assert second.summary.shrinks == len(shrinks)
    assert all(1 <= e.concurrency <= 4 * 8 for e in second.summary.pace_events)


async def test_background_mode_backs_off_when_round_trips_inflate(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In background mode, answers whose heads come 200 ms later than the fastest shrink the
    found concurrency (reason "latency") with no 429 or failure; the same batch without the
    mode does not shrink for them."""
    quick(monkeypatch)
    async with emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        box = await new_box(emulator, client)
        jobs = []
        for index in range(40):
            box.put(f"/home/user/{index}.bin", b"x")
            jobs.append(
                batch.DownloadJob(ref(box), f"/home/user/{index}.bin", tmp_path / str(index))
            )
        summaries = []
        for background in (True, False):
            # The server's latency: 8 quick answers, then 16 that take 200 ms.
            emulator.faults.script("files.download", *[Fault.delay(0.0)] * 8)
            emulator.faults.script("files.download", *[Fault.delay(0.2)] * 16)
            clear(tmp_path)
            result = await batch.download_many(client, jobs, background=background)
            assert result.ok
            summaries.append(result.summary)
    reasons = [[e.reason for e in s.pace_events if e.kind == SHRINK] for s in summaries]
    assert "latency" in reasons[0]
    assert "latency" not in reasons[1]


async def test_bad_pacing_options_fail_before_any_request(emulator: Emulator) -> None:
    """background with a fixed concurrency, or a non-bool background, is refused up front."""
    async with emulator.client() as client:
        job = batch.DownloadJob(batch.SandboxRef("k", "example.com", "t"), "/f", "f")
        with pytest.raises(sandboxkit.ValidationError, match="leave concurrency=None"):
            await batch.download_many(client, [job], concurrency=4, background=True)
        with pytest.raises(sandboxkit.ValidationError, match="background must be a bool"):
            await batch.upload_many(client, [], background=1)  # type: ignore[arg-type]
    assert emulator.journal == []


async def test_a_batch_shows_only_its_own_hosts_pauses_and_changes(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Two batches at once on one client: B downloads from its host (its first answers held
    300 ms, so it is running) while A uploads to another, whose first answer is a 429 that
    pauses it. The pause shows in A's summary only; B's summary and found concurrency never
    hear of it (they did: a batch heard every answer its client got)."""
    async with emulator.client(retry=HONOURS_RETRY_AFTER) as client:
        a, b = await new_box(emulator, client), await new_box(emulator, client)
        for index in range(12):
            b.put(f"/home/user/{index}.bin", payload(1024, index))
        downloads = [
            batch.DownloadJob(ref(b), f"/home/user/{i}.bin", tmp_path / f"{i}.bin")
            for i in range(12)
        ]
        uploads = [
            batch.UploadJob(ref(a), f"/home/user/{i}.bin", payload(512, i)) for i in range(12)
        ]
        emulator.faults.script("files.download", *[Fault.delay(0.3)] * 4)
        emulator.faults.script("files.upload", Fault.status(429, retry_after="0.1"))
        got: dict[str, BatchSummary] = {}

        async def download_b() -> None:
            got["b"] = (await batch.download_many(client, downloads)).summary

        async def upload_a() -> None:
            got["a"] = (await batch.upload_many(client, uploads)).summary

        async with anyio.create_task_group() as group:
            group.start_soon(download_b)
            group.start_soon(upload_a)
    a_origin, b_origin = a.handle._host.origin, b.handle._host.origin
    assert (got["a"].done, got["b"].done) == (12, 12)
    assert [e.status for e in emulator.journal_for("files.upload")][:1] == [429]
    assert got["a"].pauses == {a_origin: 1}
    assert got["b"].pauses == {}
    assert {e.host for e in got["a"].pace_events} <= {"", a_origin}
    assert {e.host for e in got["b"].pace_events} <= {"", b_origin}
    assert all(e.reason != "429" for e in got["b"].pace_events)
