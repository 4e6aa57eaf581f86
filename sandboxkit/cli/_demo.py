"""`sandboxkit demo`: the whole mission, end to end, against an in-process emulator.

Every number it prints comes from real requests: the SDK's results and the emulator's
journal and fault counters. Any step that does not behave raises `DemoCheckError` (exit 1),
so the demo doubles as a smoke test.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.text import Text

import sandboxkit
from sandboxkit.emulator import Emulator, Fault, Idc

from ._app import HostWarnings, Settings, describe
from ._commands import log_line
from ._demo_transfer import transfer_step

__all__ = ["Demo", "DemoCheckError", "demo"]

# Short backoff so the injected faults cost milliseconds, not the default half-seconds.
DEMO_RETRY = sandboxkit.RetryPolicy(max_attempts=6, initial_backoff=0.02, max_backoff=0.1)
BUILD_SECONDS = 1.5
RESOURCES = sandboxkit.CustomResources(cpu_count=2, memory_mb=2048, disk_size_mb=10240)


class DemoCheckError(Exception):
    """A demo step did not behave as the SDK promises."""


def check(condition: bool, message: str) -> None:
    """Stop the demo with `DemoCheckError(message)` unless `condition` holds."""
    if not condition:
        raise DemoCheckError(message)


class _RetryEcho(logging.Handler):
    """Shows the SDK's retry warnings as dim lines, so the faults are visible as they hit."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.WARNING)
        self._console = console

    def emit(self, record: logging.LogRecord) -> None:
        self._console.print(
            f"    [dim yellow]↻ {escape(record.getMessage())}[/]", highlight=False, soft_wrap=True
        )


@contextmanager
def _echo_retries(console: Console) -> Iterator[None]:
    logger = logging.getLogger("sandboxkit")
    handler = _RetryEcho(console)
    # The echo shows host warnings too (they propagate to it): the CLI's own screen line
    # for them steps aside meanwhile, or each would show twice.
    hosts = logging.getLogger("sandboxkit.hosts")
    shown = [h for h in hosts.handlers if isinstance(h, HostWarnings)]
    for each in shown:
        hosts.removeHandler(each)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        for each in shown:
            hosts.addHandler(each)


class Demo:
    """The demo's steps; each prints what happened and checks it."""

    def __init__(self, console: Console, size: int, workdir: Path) -> None:
        self.console = console
        self.size = size
        self.workdir = workdir
        self._number = 0

    def step(self, title: str) -> None:
        """Print the next numbered step heading."""
        self._number += 1
        self.console.print()
        self.console.rule(f"[bold]Step {self._number}. {title}", align="left")

    def say(self, text: str) -> None:
        """One indented line of output."""
        self.console.print(f"  {text}", highlight=False, soft_wrap=True)

    async def run(self) -> None:
        """Start the emulator with a fault plan, then walk every step."""
        started = time.monotonic()
        idcs = [Idc("demo-east-1")]
        async with Emulator(idcs=idcs, build_seconds=BUILD_SECONDS) as emu:
            self.step("Start the emulator (in-process, fault plan on)")
            self.say(f"console  {emu.base_url}")
            self.say(f"sandboxes  {emu.data_plane_scheme}://<key>.{emu.domain}")
            self.say(
                "retry policy: up to 6 attempts, backoff 20-100 ms (the default starts at 0.5 s)"
            )
            async with emu.client(retry=DEMO_RETRY) as client:
                with _echo_retries(self.console):
                    template = await self.idempotent_create(emu, client)
                    await self.paging(emu, client, template)
                    await self.follow(client, template.id, template.build_id)
                    await self.split_flow(emu, client)
                    source_sha, result = await transfer_step(self, emu, client)
                    check(result.sha256 == source_sha, "the downloaded file differs")
                    check(result.resumes >= 1, f"expected a resumed download: {result}")
                    await self.bad_input(emu, client)
        self.console.print()
        self.console.print(
            f"[bold green]demo finished[/] in {time.monotonic() - started:.1f} s: "
            "every step behaved as promised",
            highlight=False,
        )

    async def idempotent_create(
        self, emu: Emulator, client: sandboxkit.Client
    ) -> sandboxkit.TemplateCreated:
        """Create one template twice under one key; the second answer is a replay."""
        self.step("Create a template twice under one idempotency key")
        key = f"demo-{uuid.uuid4()}"
        emu.faults.script("templates.create", Fault.status(502))
        self.say(f"Idempotency-Key {key}; the fault plan answers the first request 502")
        build = {"commands": ["pip install -r requirements.txt", "pytest -q"]}
        results = []
        for attempt in ("first ", "second"):
            created = await client.templates.create(
                name="demo-agent",
                resources=RESOURCES,
                labels={"team": "demo"},
                build=build,
                idempotency_key=key,
            )
            results.append(created)
            self.say(
                f"{attempt} create: template={created.id} build={created.build_id} "
                f"status={created.status} replayed={created.replayed}"
            )
        first, second = results
        check(not first.replayed and second.replayed, "the second create was not a replay")
        check(
            (first.id, first.build_id) == (second.id, second.build_id),
            "the replay returned different ids",
        )
        sent = emu.journal_for("templates.create")
        statuses = ", ".join(str(r.status) for r in sent)
        self.say(f"same template and build ids: yes; requests sent: {len(sent)} ({statuses})")
        return first

    async def paging(
        self, emu: Emulator, client: sandboxkit.Client, template: sandboxkit.TemplateCreated
    ) -> None:
        """Page through the builds of a template that has a few."""
        self.step("Page through builds, newest first")
        emu.add_builds(template.id, 7)
        self.say(f"added 7 rebuilds to {template.id}; listing with page_size=3")
        seen = 0
        pages = client.templates.builds(template.id, page_size=3).pages()
        async for page in pages:
            seen += len(page.items)
            names = " ".join(f"{b.id}({b.trigger})" for b in page.items)
            self.say(f"page {page.page}: {len(page.items)} of total {page.total}: {names}")
        check(seen == 8, f"expected 8 builds over the pages, saw {seen}")
        self.say(f"{seen} builds in {-(-seen // 3)} pages; the initial build comes last")

    async def follow(self, client: sandboxkit.Client, template_id: str, build_id: str) -> None:
        """Follow one build's logs until it finishes, coloured by level."""
        self.step(f"Follow the initial build's logs to the end ({build_id})")
        await self._follow_logs(client, template_id, build_id)

    async def _follow_logs(
        self, client: sandboxkit.Client, template_id: str, build_id: str
    ) -> None:
        lines = errors = 0
        stream = client.templates.build_logs(
            template_id, build_id, follow=True, poll_interval=0.2, max_poll_interval=0.5
        )
        async with stream:
            async for entry in stream:
                lines += 1
                errors += entry.level == sandboxkit.LogLevel.ERROR
                self.console.print(Text("  ") + log_line(entry), soft_wrap=True)
        build = await client.templates.get_build(template_id, build_id)
        check(build is not None and build.is_finished, "the followed build did not finish")
        assert build is not None
        self.say(
            f"{lines} log lines; build {build.id} finished: status={build.status} "
            f"artifact_state={build.artifact_state}"
        )
        if errors and build.failure is None:
            # Emulated logs are realistic, so a build that ends ready may have logged an
            # error it got past: a demo must not leave one unexplained.
            self.say(
                "(the ERROR line is the emulated builder's: a step that failed without "
                "failing the build, which went on and is ready)"
            )

    async def split_flow(self, emu: Emulator, client: sandboxkit.Client) -> None:
        """Create without a build definition, see it wait, start it, follow it."""
        self.step("Split flow: create now, start the build later")
        created = await client.templates.create(name="demo-split", resources=RESOURCES)
        self.say(
            f"created template={created.id} build={created.build_id} status={created.status} "
            "(no build definition sent)"
        )
        waiting = await client.templates.get_build(created.id, created.build_id)
        status = waiting.status if waiting else None
        check(status == "waiting", f"a split-flow build should wait, it is {status}")
        self.say(f"build list says status={status}: nothing runs until it is started")
        await client.templates.start_build(created.id, created.build_id)
        self.say("start_build sent (never retried: a retry could start it twice)")
        await self._follow_logs(client, created.id, created.build_id)

    async def bad_input(self, emu: Emulator, client: sandboxkit.Client) -> None:
        """Bad input is rejected by the client; the journal proves nothing was sent."""
        self.step("Reject bad input before sending anything")
        before = len(emu.journal)
        sandbox = client.sandbox(sandbox_key="sbx-demo", domain=emu.domain, access_token="t")
        cases: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            (
                "template name with a space",
                lambda: client.templates.create(name="my template", resources=RESOURCES),
            ),
            (
                "relative remote path",
                lambda: sandbox.files.read_bytes("home/user/data.bin"),
            ),
        ]
        for label, call in cases:
            try:
                await call()
            except sandboxkit.ValidationError as exc:
                self.say(f"{label}: [red]{escape(describe(exc))}[/]")
            else:
                raise DemoCheckError(f"{label} was accepted")
        after = len(emu.journal)
        check(after == before, "a request was sent for bad input")
        self.say(f"emulator journal: {before} requests before, {after} after: none sent")


@click.command()
@click.option(
    "--size-mib",
    type=click.IntRange(1, 1024),
    default=64,
    show_default=True,
    help="Size of the generated file to upload and download.",
)
@click.pass_obj
def demo(settings: Settings, size_mib: int) -> None:
    """Walk the whole SDK against the built-in emulator, with faults injected (~5 s)."""
    console = Console(highlight=False)
    with tempfile.TemporaryDirectory(prefix="sandboxkit-demo-") as tmp:
        runner = Demo(console, size_mib << 20, Path(tmp))
        settings.run(runner.run)
