"""`templates` and `builds` commands (files are in `_files.py`, the emulator's in `_emulator.py`,
demo in `_demo.py`); `emulator` is re-exported from here."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs
import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

import sandboxkit
from sandboxkit.rules import MAX_CPU, MAX_DESCRIPTION, MAX_DISK_MB, MAX_MEMORY_MB

from ._app import Settings, renamed_option
from ._emulator import emulator

__all__ = [
    "LEVEL_STYLES",
    "builds",
    "builds_table",
    "emulator",
    "log_line",
    "not_started_note",
    "templates",
    "to_json",
]

LEVEL_STYLES = {"debug": "dim", "info": "cyan", "warn": "yellow", "error": "bold red"}


def to_json(value: Any) -> str:
    """One attrs record as a single JSON line (timestamps in ISO 8601)."""

    def plain(_: Any, __: Any, item: Any) -> Any:
        if isinstance(item, datetime):
            return item.isoformat()
        if isinstance(item, Mapping):
            return dict(item)
        return item

    return json.dumps(attrs.asdict(value, value_serializer=plain), sort_keys=True)


def log_line(entry: sandboxkit.LogEntry) -> Text:
    """A log entry as one line coloured by its level."""
    stamp = entry.timestamp.strftime("%H:%M:%S") if entry.timestamp else "--:--:--"
    style = LEVEL_STYLES.get(entry.level, "")
    line = Text(f"{stamp} ", style="dim")
    line.append(f"{entry.level.upper():<5} ", style=style)
    line.append(entry.message, style=style if entry.level in ("warn", "error") else "")
    return line


def _labels(_: click.Context, __: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
        labels[key] = value
    return labels


_RESOURCE_PARTS = re.compile(r"\b(cpu_count|memory_mb|disk_size_mb|product)\b")


def _resources(**parts: Any) -> sandboxkit.CustomResources | sandboxkit.PresetResources:
    """`sandboxkit.resources_from(**parts)`; its complaint names the options (the same
    names, as options: `cpu_count` is `--cpu-count`)."""
    try:
        return sandboxkit.resources_from(**parts)
    except sandboxkit.ValidationError as exc:
        as_options = _RESOURCE_PARTS.sub(lambda m: "--" + m[0].replace("_", "-"), str(exc))
        raise click.UsageError(as_options) from None


@click.group()
def templates() -> None:
    """Create templates (each comes with its initial build)."""


@templates.command("create")
@click.argument("name")
@renamed_option("--cpu-count", "--cpu", type=int, help=f"vCPUs (custom resources, max {MAX_CPU}).")
@click.option("--memory-mb", type=int, help=f"Memory in MiB (custom, max {MAX_MEMORY_MB}).")
@renamed_option(
    "--disk-size-mb", "--disk-mb", type=int, help=f"Boot disk in MiB (custom, max {MAX_DISK_MB})."
)
@click.option("--product", help="A catalog SKU instead of custom resources.")
@renamed_option("--idc-name", "--idc", help="Owning data center (default: the organization's).")
@click.option(
    "--label",
    "labels",
    multiple=True,
    callback=_labels,
    metavar="KEY=VALUE",
    help="A label (repeatable).",
)
@click.option("--description", help=f"Up to {MAX_DESCRIPTION} characters.")
@click.option("--idempotency-key", help="Reuse to make a repeated create answer the same.")
@click.option("--command", "commands", multiple=True, help="A build step (repeatable).")
@click.option("--start-cmd", help="The template's start command.")
@click.option(
    "--build",
    "run_build",
    is_flag=True,
    help="Run the initial build now, with no steps (--command or --start-cmd imply it).",
)
# The default now, as in the SDK; kept so that scripts written for the old default run.
@click.option("--split", is_flag=True, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_obj
def templates_create(
    settings: Settings,
    name: str,
    cpu_count: int | None,
    memory_mb: int | None,
    disk_size_mb: int | None,
    product: str | None,
    idc_name: str | None,
    labels: dict[str, str],
    description: str | None,
    idempotency_key: str | None,
    commands: tuple[str, ...],
    start_cmd: str | None,
    run_build: bool,
    split: bool,
    as_json: bool,
) -> None:
    """Create template NAME and its initial build.

    As `templates.create` in the SDK: without a build definition (--command, --start-cmd or
    --build) the build waits for `sandboxkit builds start` (the split flow); with one it runs
    at once.
    """
    resources = _resources(
        cpu_count=cpu_count, memory_mb=memory_mb, disk_size_mb=disk_size_mb, product=product
    )
    build: dict[str, Any] | None = None
    if commands or start_cmd or run_build:
        if split:
            raise click.UsageError("--split is for a build that waits: drop --command/--build")
        build = {"commands": list(commands)}
        if start_cmd is not None:
            build["start_cmd"] = start_cmd

    async def work() -> sandboxkit.TemplateCreated:
        async with settings.client() as client:
            return await client.templates.create(
                name=name,
                resources=resources,
                description=description,
                idc_name=idc_name,
                labels=labels or None,
                build=build,
                idempotency_key=idempotency_key,
            )

    created = settings.run(work)
    if as_json:
        click.echo(to_json(created))
    else:
        click.echo(
            f"template {created.id}  build {created.build_id}  status={created.status}  "
            f"replayed={created.replayed}  idempotency_key={created.idempotency_key}"
        )
    if build is None:  # the split flow: say what runs the build (on stderr: not the result)
        click.echo(
            f"the build waits: start it with `sandboxkit builds start {created.id} "
            f"{created.build_id}`",
            err=True,
        )


@click.group()
def builds() -> None:
    """List builds, start a waiting one, read or follow their logs."""


@builds.command("list")
@click.argument("template_id")
@click.option("--page-size", type=int, default=20, show_default=True, help="Builds per page.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def builds_list(settings: Settings, template_id: str, page_size: int, as_json: bool) -> None:
    """List the builds of TEMPLATE_ID, newest first, fetching every page."""

    async def work() -> tuple[list[sandboxkit.Build], int]:
        found: list[sandboxkit.Build] = []
        pages = 0
        async with settings.client() as client:
            async for page in client.templates.builds(template_id, page_size=page_size).pages():
                pages += 1
                found.extend(page.items)
                if as_json:  # stream: a script sees each page as soon as it arrives
                    for build in page.items:
                        click.echo(to_json(build))
        return found, pages

    found, pages = settings.run(work)
    if not as_json:
        table = builds_table(found)
        table.caption = f"{len(found)} builds, {pages} page(s) of up to {page_size}"
        Console().print(table)


def builds_table(found: list[sandboxkit.Build]) -> Table:
    """A table of builds that fits 80 columns (`--json` has every field in full)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    # Ids and statuses are what people copy: never wrap them.
    for name in ("id", "status", "trigger", "artifact", "created", "finished"):
        table.add_column(name, no_wrap=True)
    failures = any(build.failure for build in found)
    if failures:
        table.add_column("failure", overflow="fold")

    def when(value: datetime | None) -> str:
        return value.strftime("%H:%M:%S") if value else ""

    for build in found:
        row = [
            build.id,
            build.status or "",
            build.trigger or "",
            build.artifact_state or "",
            when(build.created_at),
            when(build.finished_at),
        ]
        if failures:
            row.append((build.failure.code or "") if build.failure else "")
        table.add_row(*row)
    return table


@builds.command("start")
@click.argument("template_id")
@click.argument("build_id")
@click.pass_obj
def builds_start(settings: Settings, template_id: str, build_id: str) -> None:
    """Start BUILD_ID, a build waiting in the split flow (never retried)."""

    async def work() -> None:
        async with settings.client() as client:
            await client.templates.start_build(template_id, build_id)

    settings.run(work)
    click.echo(f"started build {build_id}")


@builds.command("logs")
@click.argument("template_id")
@click.argument("build_id")
@click.option(
    "--level",
    # click gives back the choice as listed, so `ERROR` is sent as `error`.
    type=click.Choice(sandboxkit.LogLevel.ALL, case_sensitive=False),
    help="Only this level (any case).",
)
@click.option("--follow", "-f", is_flag=True, help="Keep reading until the build finishes.")
@click.pass_obj
def builds_logs(
    settings: Settings, template_id: str, build_id: str, level: str | None, follow: bool
) -> None:
    """Print the logs of BUILD_ID, coloured by level.

    With --follow, waits for new lines until the build finishes (exit 1 if it failed) or
    Ctrl-C; if the build has not started, says so on stderr with the command that starts it.
    """
    console = Console(highlight=False)

    async def work() -> None:
        async with settings.client() as client:
            # Made first: bad input fails here, before the note's requests.
            stream = client.templates.build_logs(
                template_id, build_id, level=level, follow=follow, raise_on_failure=follow
            )
            if follow and (note := await not_started_note(client, template_id, build_id)):
                click.echo(note, err=True)
            printed = 0
            async with stream:
                async for entry in stream:
                    console.print(log_line(entry))
                    printed += 1
            if not printed and not follow:  # an empty screen and exit 0 read as a hang or a bug
                note = await not_started_note(client, template_id, build_id)
                level_note = f" at level {level}" if level else ""
                click.echo(note or f"build {build_id} has no log entries{level_note} yet", err=True)

    settings.run(work)


async def not_started_note(
    client: sandboxkit.Client, template_id: str, build_id: str
) -> str | None:
    """What to say before following a build that has not started, else None.

    Not started is status `waiting` with no log entry yet: a split-flow build that nobody
    started (`waiting` with entries is a started build queued for a builder). Following it
    would otherwise print nothing, with nothing saying why.
    """
    peek = client.templates.build_logs(template_id, build_id, limit=1)  # every level
    async with peek:
        async for _ in peek:
            return None
    build = await client.templates.get_build(template_id, build_id)
    if build is None or build.status != sandboxkit.BuildStatus.WAITING:
        return None
    return (
        f"build {build_id} is waiting: it has not started; start it with "
        f"`sandboxkit builds start {template_id} {build_id}`"
    )
