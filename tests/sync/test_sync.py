"""sandboxkit.sync against the emulator, driven from plain synchronous code and threads."""

from __future__ import annotations

import gc
import hashlib
import inspect
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio.from_thread
import attrs
import pytest

import sandboxkit
from sandboxkit import sync
from sandboxkit.emulator import Emulator, Fault, ManualClock
from sandboxkit.resources.templates import Templates as AsyncTemplates
from sandboxkit.sync._loop import Loop

from ..reliability_support import emulator_env, run_on_emulator

FAST_RETRY = sandboxkit.RetryPolicy.no_delay(max_attempts=8)
BUILD = {"source": {"image": "ubuntu:22.04"}, "commands": ["make", "make test"]}
RESOURCES = sandboxkit.CustomResources(cpu_count=1, memory_mb=512, disk_size_mb=1024)


@attrs.frozen
class Running:
    """An emulator served by its own loop thread, with a way to call it from the test."""

    emu: Emulator
    portal: anyio.from_thread.BlockingPortal
    clock: ManualClock

    def new_sandbox(self) -> dict[str, Any]:
        return self.portal.call(self.emu.create_sandbox)

    def options(self) -> sync.ClientOptions:
        return {
            "api_key": self.emu.api_key,
            "base_url": self.emu.base_url,
            "data_plane_scheme": self.emu.data_plane_scheme,
            "resolver": self.emu.resolver,
            "retry": FAST_RETRY,
        }


@pytest.fixture
def running() -> Iterator[Running]:
    """An emulator on a manual clock (60 s builds), served from a portal's loop thread."""
    clock = ManualClock()
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Emulator(clock=clock, build_seconds=60)) as emu,
    ):
        yield Running(emu, portal, clock)


@pytest.fixture
def sync_client(running: Running) -> Iterator[sync.Client]:
    """A sandboxkit.sync Client on that emulator, retrying without delay."""
    with sync.Client(**running.options()) as c:
        yield c


def exercise(running: Running, client: sync.Client, tmp_path: Path, tag: str) -> None:
    """Upload, download, read and stream a file, then page builds and read their logs."""
    sbx = client.sandbox_from_response(running.new_sandbox())
    data = hashlib.sha256(tag.encode()).digest() * 1000
    entry = sbx.files.upload(f"/home/user/{tag}.bin", data)
    assert entry.path == f"/home/user/{tag}.bin"
    result = sbx.files.download(f"/home/user/{tag}.bin", tmp_path / f"{tag}.bin")
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert (tmp_path / f"{tag}.bin").read_bytes() == data
    assert sbx.files.read_bytes(f"/home/user/{tag}.bin") == data
    with sbx.files.iter_bytes(f"/home/user/{tag}.bin", chunk_size=4096) as chunks:
        assert b"".join(chunks) == data

    created = client.templates.create(name=f"tpl-{tag}", resources=RESOURCES, build=BUILD)
    running.portal.call(running.emu.add_builds, created.id, 4)
    pages = list(client.templates.builds(created.id, page_size=2).pages())
    assert [len(p.items) for p in pages] == [2, 2, 1]
    assert {b.id for b in client.templates.builds(created.id)} == {
        b.id for p in pages for b in p.items
    }
    logs = list(client.templates.build_logs(created.id, created.build_id))
    assert logs and "queued" in logs[0].message


def test_sync_client_does_every_kind_of_operation(
    running: Running, sync_client: sync.Client, tmp_path: Path
) -> None:
    """Plain sync code uploads, downloads, streams, pages builds and follows logs to the end."""
    exercise(running, sync_client, tmp_path, "solo")

    created = sync_client.templates.create(name="followed", resources=RESOURCES, build=BUILD)
    messages = []
    for entry in sync_client.templates.build_logs(created.id, created.build_id, follow=True):
        if not messages:
            # The build finishes by the emulator's clock; the follower then drains and stops.
            running.clock.advance(120)
        messages.append(entry.message)
    assert messages[-1].endswith("finished: ready")
    assert len(messages) > 5


def test_sync_wait_for_build_blocks_until_final_on_the_injected_clock(
    running: Running, sync_client: sync.Client
) -> None:
    """The blocking twin of wait_for_build returns the ready Build, its polls spaced by the
    client's injected sleep (which moves the emulator's clock), and times out the same way."""
    delays: list[float] = []

    async def clocked_sleep(delay: float) -> None:
        delays.append(delay)
        running.clock.advance(delay)

    calls = sync_client._target._calls
    calls.sleep, calls.clock = clocked_sleep, running.clock
    created = sync_client.templates.create(name="waited", resources=RESOURCES, build=BUILD)
    build = sync_client.templates.wait_for_build(created.id, created.build_id, timeout=120)
    assert build.status is sandboxkit.BuildStatus.READY
    assert sum(delays) == 62.5  # 60 s builds, polled at 0.5, 1, 2, 4 then every 5 s
    again = sync_client.templates.create(name="cut", resources=RESOURCES, build=BUILD)
    with pytest.raises(sandboxkit.BuildWaitTimeoutError):
        sync_client.templates.wait_for_build(again.id, again.build_id, timeout=1)


def test_one_sync_client_shared_by_eight_threads(
    running: Running, sync_client: sync.Client, tmp_path: Path
) -> None:
    """Eight threads at once share one sync Client for transfers, paging and logs."""
    together = threading.Barrier(8, timeout=30)

    def worker(n: int) -> int:
        together.wait()  # all eight are in flight at the same time
        exercise(running, sync_client, tmp_path, f"t{n}")
        return n

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(worker, range(8))) == list(range(8))


def test_errors_surface_and_closing_is_final(running: Running, tmp_path: Path) -> None:
    """Service errors come through as sandboxkit exceptions; a closed client refuses calls."""
    client = sync.Client(**running.options())
    sbx = client.sandbox_from_response(running.new_sandbox())
    with pytest.raises(sandboxkit.NotFoundError):
        sbx.files.read_bytes("/home/user/missing")
    with pytest.raises(sandboxkit.ValidationError):
        sbx.files.read_bytes("relative/path")
    sbx.close()
    assert not client.closed

    client.close()
    client.close()
    assert client.closed
    with pytest.raises(sandboxkit.ClientStateError):
        sbx.files.read_bytes("/home/user/x")
    assert not any(t.name == "sandboxkit-sync" for t in threading.enumerate())


def test_bad_options_leave_no_loop_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Client that cannot be built raises ValidationError and stops its loop thread."""
    monkeypatch.delenv("SANDBOXKIT_API_KEY", raising=False)
    with pytest.raises(sandboxkit.ValidationError, match="API key"):
        sync.Client(base_url="http://127.0.0.1:1")
    assert not any(t.name == "sandboxkit-sync" for t in threading.enumerate())


def test_from_config_builds_a_working_client(running: Running) -> None:
    """sync.Client.from_config wires the emulator from a picklable config."""
    config = sandboxkit.ClientConfig(
        api_key=running.emu.api_key,
        base_url=running.emu.base_url,
        data_plane_scheme="http",
        resolver=type(running.emu.resolver),
    )
    with sync.Client.from_config(config) as client:
        sbx = client.sandbox_from_response(running.new_sandbox())
        sbx.files.upload("/home/user/x", b"xyz")
        assert sbx.files.read_bytes("/home/user/x") == b"xyz"


def test_undeclared_async_methods_still_work_untyped(
    sync_client: sync.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coroutine method the facade does not name is still reached, as a blocking call."""

    async def ping(self: AsyncTemplates, word: str) -> str:
        return word * 2

    monkeypatch.setattr(AsyncTemplates, "ping", ping, raising=False)
    assert sync_client.templates.ping("ab") == "abab"  # type: ignore[attr-defined]


def public_callables(cls: type) -> set[str]:
    return {
        name
        for name, value in inspect.getmembers(cls)
        if not name.startswith("_") and (inspect.isfunction(value) or inspect.ismethod(value))
    }


def sync_name(name: str) -> str:
    return "close" if name == "aclose" else name


def test_every_public_async_method_has_a_typed_sync_counterpart() -> None:
    """Every public method and resource of the async client has a declared sync counterpart."""
    async_client = sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:1")
    roots: list[object] = [
        async_client,
        async_client.sandbox(sandbox_key="k", domain="d", access_token="t"),
        async_client.templates.builds("t"),
    ]
    pairs = {type(async_client): sync.Client}
    checked = []
    while roots:
        target = roots.pop()
        facade = pairs.get(type(target)) or sync._FACADES[type(target)]
        declared = {n for klass in facade.__mro__ for n in vars(klass)}
        for name in public_callables(type(target)) - {"from_config"}:
            assert sync_name(name) in declared, f"{facade.__name__} lacks {sync_name(name)}"
            checked.append(f"{type(target).__name__}.{name}")
        properties = [n for n, v in inspect.getmembers(type(target)) if isinstance(v, property)]
        members = {**vars(target), **{name: getattr(target, name) for name in properties}}
        for name, value in members.items():
            if not name.startswith("_") and type(value) in sync._FACADES:
                assert isinstance(vars(facade).get(name), sync._Child), (facade, name)
                roots.append(value)
    # The walk reached every resource family, including v1's, and saw their methods.
    for name in (
        "Client.request",
        "Templates.create",
        "V1.create_api_key",
        "Containers.shell",
        "Sandbox.aclose",
        "Files.iter_bytes",
        "BuildPager.pages",
    ):
        assert name in checked
    assert "iter_bytes" in vars(sync.Files) and "__iter__" in vars(sync.BuildPager)


def test_option_types_match_the_async_client() -> None:
    """sync.ClientOptions names exactly the async Client's keyword options."""
    options = inspect.signature(sandboxkit.Client).parameters
    assert set(sync.ClientOptions.__annotations__) == set(options)


def test_keep_partial_reaches_the_async_download(
    running: Running, sync_client: sync.Client, tmp_path: Path
) -> None:
    """The blocking download takes keep_partial (its signature is the async one's): a 500
    after a cut keeps the partial file, and the next download continues it with Range."""
    assert "keep_partial" in inspect.signature(sync.Files.download).parameters
    sbx = sync_client.sandbox_from_response(running.new_sandbox())
    data = os.urandom(300_000)
    sbx.files.upload("/home/user/f.bin", data)
    running.emu.faults.script("files.download", Fault.cut(after_bytes=100_000), Fault.status(500))
    dest = tmp_path / "f.bin"
    with pytest.raises(sandboxkit.InternalServerError):
        sbx.files.download("/home/user/f.bin", dest, keep_partial=True)
    kept = sandboxkit.find_partial(dest)
    assert kept is not None and (kept.held, kept.total) == (100_000, len(data))
    result = sbx.files.download("/home/user/f.bin", dest)
    assert running.emu.journal_for("files.download")[-1].headers["Range"] == "bytes=100000-"
    assert (dest.read_bytes(), result.resumes) == (data, 1)
    assert os.listdir(tmp_path) == ["f.bin"]


def test_sync_call_from_a_callback_raises_instead_of_waiting_forever(
    running: Running, sync_client: sync.Client, tmp_path: Path
) -> None:
    """A sync call made from a progress callback, on the loop's own thread, raises at once."""
    sbx = sync_client.sandbox_from_response(running.new_sandbox())
    sbx.files.upload("/home/user/f", b"data")
    errors: list[BaseException] = []

    def progress(done: int, total: int | None) -> None:
        sbx.files.read_bytes("/home/user/f")  # would wait for the very thread it runs on

    def download() -> None:
        try:
            sbx.files.download("/home/user/f", tmp_path / "f", progress=progress)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=download, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    assert [type(e) for e in errors] == [sandboxkit.ClientStateError]
    assert not (tmp_path / "f").exists()


# A child that uses a sync Client made at module level and ends without closing it.
FORGOTTEN = """
from sandboxkit import sync
from sandboxkit.sync._loop import Loop
from sandboxkit.emulator import EmulatorResolver

client = sync.Client(resolver=EmulatorResolver())
client.request("GET", "/api/v2/products")  # pools are open: the exit has to close them
print("used", flush=True)
"""


def test_forgotten_client_costs_a_warning_not_a_hang(running: Running, tmp_path: Path) -> None:
    """A script whose module-level sync Client is never closed exits at once with a warning."""
    done = run_on_emulator(FORGOTTEN, tmp_path / "forgotten.py", running.emu, timeout=30)
    assert (done.returncode, done.stdout) == (0, "used\n"), done.stderr
    assert "ResourceWarning: sandboxkit.sync.Client was never closed" in done.stderr
    assert "Unclosed" not in done.stderr and "Traceback" not in done.stderr


# The same with a file read first: a data-plane connection (the lean GET's) is kept alive too.
FORGOTTEN_READ = """
import json
from sandboxkit import sync
from sandboxkit.emulator import EmulatorResolver

client = sync.Client(resolver=EmulatorResolver(), data_plane_scheme="http")
sbx = client.sandbox_from_response(json.loads(BODY))
assert sbx.files.read_bytes("/home/user/f.bin") == b"x" * 100_000
print("used", flush=True)
"""


def test_forgotten_client_after_a_file_read_costs_a_warning_not_a_hang(
    running: Running, tmp_path: Path
) -> None:
    """No "Unclosed connection" from a pooled data-plane connection at exit either."""
    body = running.new_sandbox()
    remote = running.emu.sandbox_root(body["data"]["sandbox_key"]) / "home/user/f.bin"
    remote.parent.mkdir(parents=True, exist_ok=True)
    remote.write_bytes(b"x" * 100_000)
    source = FORGOTTEN_READ.replace("BODY", repr(json.dumps(body)))
    done = run_on_emulator(source, tmp_path / "forgotten_read.py", running.emu, timeout=30)
    assert (done.returncode, done.stdout) == (0, "used\n"), done.stderr
    assert "ResourceWarning: sandboxkit.sync.Client was never closed" in done.stderr
    assert "Unclosed" not in done.stderr and "Traceback" not in done.stderr


def test_dropped_client_warns_and_stops_its_loop(running: Running) -> None:
    """A sync Client garbage-collected without close() warns and its loop thread ends."""
    client = sync.Client(**running.options())
    client.request("GET", "/api/v2/products")
    with pytest.warns(ResourceWarning, match="never closed"):
        del client
        gc.collect()
    assert not any(t.name == "sandboxkit-sync" for t in threading.enumerate())


# A child that downloads with a sync Client, says so once bytes arrive, and reports Ctrl-C.
INTERRUPTED = """
import json
import signal
import sys
import threading

import sandboxkit
from sandboxkit import sync
from sandboxkit.sync._loop import Loop
from sandboxkit.emulator import EmulatorResolver

# An application thread of its own, which signals sent to the process may land on.
bystander = threading.Thread(target=threading.Event().wait, daemon=True)
bystander.start()
retry = sandboxkit.RetryPolicy.no_delay(max_attempts=8)
with sync.Client(data_plane_scheme="http", resolver=EmulatorResolver(), retry=retry) as client:
    sbx = client.sandbox_from_response(json.loads(sys.argv[1]))
    told = []

    def progress(done, total):
        if not told:
            told.append(done)
            print("in flight", flush=True)
            if sys.argv[3] == "bystander":  # Ctrl-C taken by a thread that is not waiting
                signal.pthread_kill(bystander.ident, signal.SIGINT)

    try:
        sbx.files.download("/home/user/slow.bin", sys.argv[2], progress=progress)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
"""


@pytest.mark.parametrize("taken_by", ["any thread", "bystander"])
def test_ctrl_c_cancels_the_download_before_it_reaches_the_caller(
    running: Running, tmp_path: Path, taken_by: str
) -> None:
    """Ctrl-C mid-download reaches the caller only once the temporary file is gone.

    Whichever thread the kernel hands the signal to: the process's (any thread that does not
    block it), or an application thread that is not the one waiting.
    """
    body = running.new_sandbox()
    remote = running.emu.sandbox_root(body["data"]["sandbox_key"]) / "home/user/slow.bin"
    remote.write_bytes(os.urandom(4 << 20))
    # The first answer is cut after 1 MiB (by then in the temporary file); the resume then
    # hangs, so the download is still in flight whenever the signal lands.
    running.emu.faults.script("files.download", Fault.cut(after_bytes=1 << 20), Fault.delay(30))
    script, dest = tmp_path / "interrupted.py", tmp_path / "out" / "slow.bin"
    script.write_text(INTERRUPTED)
    dest.parent.mkdir()
    with subprocess.Popen(
        [sys.executable, str(script), json.dumps(body), str(dest), taken_by],
        env=emulator_env(running.emu),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        watchdog = threading.Timer(20, process.kill)  # a hung child ends the reads below
        watchdog.start()
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == "in flight\n"
            if taken_by == "any thread":
                process.send_signal(signal.SIGINT)
            assert process.stdout.readline() == "interrupted\n"
            # Checked the moment the caller saw KeyboardInterrupt: nothing left, nothing renamed.
            assert list(dest.parent.iterdir()) == []
            asked = len(running.emu.journal_for("files.download"))
            _, stderr = process.communicate(timeout=30)
        finally:
            watchdog.cancel()
            process.kill()
    assert (process.returncode, stderr) == (0, "")
    assert list(dest.parent.iterdir()) == []
    assert len(running.emu.journal_for("files.download")) == asked  # no GET after Ctrl-C


def test_the_loop_thread_leaves_signals_to_the_application() -> None:
    """Signals from outside are blocked on the loop's thread, so they go to a waiting one."""
    loop = Loop()
    try:
        blocked = loop.call(lambda: signal.pthread_sigmask(signal.SIG_BLOCK, []))
    finally:
        loop.stop()
    assert {signal.SIGINT, signal.SIGTERM} <= blocked
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


class SetOnLog(logging.Handler):
    """Sets an event when a record's message contains a given text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


@pytest.mark.parametrize("kind", ["call", "stream"])
def test_close_from_another_thread_ends_calls_in_backoff(running: Running, kind: str) -> None:
    """close() ends a call or stream waiting out Retry-After: 30 at once, with ClientStateError."""
    options = running.options()
    options["retry"] = sandboxkit.RetryPolicy(max_attempts=3)
    client = sync.Client(**options)
    sbx = client.sandbox_from_response(running.new_sandbox())
    sbx.files.upload("/home/user/f", b"data")
    running.emu.faults.script("files.download", Fault.status(429, retry_after="30"))
    errors: list[BaseException] = []

    def read() -> None:
        try:
            if kind == "call":
                sbx.files.read_bytes("/home/user/f")
            else:
                next(sbx.files.iter_bytes("/home/user/f"))
        except BaseException as exc:
            errors.append(exc)

    backing_off = SetOnLog("retrying files.download after 429")
    logger = logging.getLogger("sandboxkit")
    logger.addHandler(backing_off)
    reader = threading.Thread(target=read)
    try:
        reader.start()
        assert backing_off.seen.wait(10)
        started = time.monotonic()
        client.close()
        assert time.monotonic() - started < 10  # not the 30 s the server asked for
        reader.join(10)
    finally:
        logger.removeHandler(backing_off)
        client.close()
    assert not reader.is_alive()
    assert [type(e) for e in errors] == [sandboxkit.ClientStateError]
    assert not any(t.name == "sandboxkit-sync" for t in threading.enumerate())


# A process that uses the sync client's loop every way a user does, where anyio either finds
# sniffio (which openai, anthropic, trio and langsmith bring) or, with `no sniffio`, cannot.
BESIDE_SNIFFIO = """
import contextvars
import sys

if sys.argv[1] == "no sniffio":
    sys.modules["sniffio"] = None  # its import fails, as where it is not installed
else:
    import sniffio  # noqa: F401  (fails the test where it is missing, rather than skip it)

import anyio
import sandboxkit
from sandboxkit import sync
from sandboxkit.pytest_plugin import EmulatorThread

span = contextvars.ContextVar("span", default="none")

running = EmulatorThread()
body = running.create_sandbox()
with sync.Client(resolver=running.emulator.resolver, data_plane_scheme="http") as client:
    sbx = client.sandbox_from_response(body)
    sbx.files.upload("/home/user/f", b"beside")
    assert sbx.files.read_bytes("/home/user/f") == b"beside"

    async def seen() -> str:
        await anyio.sleep(0)
        return span.get()

    span.set("caller's span")
    print(client._loop.call(seen), flush=True)
try:
    with sync.Client(resolver=running.emulator.resolver) as client:
        client.request("GET", "/api/v2/products")
        raise LookupError("the user's own error")
except LookupError:
    print("left the block", flush=True)
forgotten = EmulatorThread()  # never closed: its loop thread dies with the process
running.close()
"""


@pytest.mark.parametrize("sniffio", ["sniffio", "no sniffio"])
def test_the_loop_runs_calls_whether_or_not_sniffio_is_installed(
    running: Running, tmp_path: Path, sniffio: str
) -> None:
    """Calls reach the loop with the caller's context variables; exits print nothing.

    Handed over as `TaskGroup.start_soon` in a bare callback, every call hung beside sniffio:
    anyio asked it which library ran the callback, sniffio could not tell outside a task,
    and the call never started.
    """
    script = tmp_path / "beside.py"
    script.write_text(BESIDE_SNIFFIO)
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script), sniffio],
        env=emulator_env(running.emu),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "caller's span\nleft the block\n"


# An async Client used on both planes and never closed, in a script run by `asyncio.run`.
FORGOTTEN_ASYNC = """
import asyncio
import json
import sys

import sandboxkit
from sandboxkit.emulator import EmulatorResolver


async def main() -> None:
    client = sandboxkit.Client(resolver=EmulatorResolver(), data_plane_scheme="http")
    await client.request("GET", "/api/v2/products")
    sbx = client.sandbox_from_response(json.loads(sys.argv[1]))
    await sbx.files.upload("/home/user/f", b"abc")
    assert await sbx.files.read_bytes("/home/user/f") == b"abc"


asyncio.run(main())
print("used", flush=True)
"""


def test_a_forgotten_async_client_costs_one_warning_naming_where_it_was_made(
    running: Running, tmp_path: Path
) -> None:
    """Its pools are closed as its loop ends, with one ResourceWarning of ours pointing at
    the line that made it: none of aiohttp's (connector, transports, sockets), no traceback."""
    script = tmp_path / "forgotten_async.py"
    script.write_text(FORGOTTEN_ASYNC)
    done = subprocess.run(
        [sys.executable, "-X", "dev", str(script), json.dumps(running.new_sandbox())],
        env=emulator_env(running.emu),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, "used\n"), done.stderr
    made_at = FORGOTTEN_ASYNC.splitlines().index(
        '    client = sandboxkit.Client(resolver=EmulatorResolver(), data_plane_scheme="http")'
    )
    assert done.stderr.splitlines() == [
        f"{script}:{made_at + 1}: ResourceWarning: sandboxkit.Client was never closed; use "
        "`async with` or `await client.aclose()`",
        '  client = sandboxkit.Client(resolver=EmulatorResolver(), data_plane_scheme="http")',
    ]
