"""The CLI's options take the SDK's names (`--cpu-count`, `--disk-size-mb`, `--idc-name`,
`--access-token`); the names before them still work, hidden: no help text or error message
shows them. Every such option is found by walking the command tree, so a new one is checked
too."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from sandboxkit.cli import cli
from sandboxkit.cli._app import Renamed

from ..cli_support import EmulatorThread, invoke

# The old spellings issue 39 renamed: each must still be taken (the walk below finds them).
RENAMED = {
    ("templates", "create"): {"--cpu": "--cpu-count", "--disk-mb": "--disk-size-mb"}
    | {"--idc": "--idc-name"},
    ("files", "download"): {"--token": "--access-token"},
    ("files", "upload"): {"--token": "--access-token"},
    ("emulator", "new-sandbox"): {"--idc": "--idc-name"},
}


def commands(
    group: click.Group = cli, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command under `group`, with its path of names."""
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def renamed() -> list[tuple[tuple[str, ...], click.Command, Renamed]]:
    return [
        (path, command, param)
        for path, command in commands()
        for param in command.params
        if isinstance(param, Renamed)
    ]


def help_of(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_renamed_options_are_the_ones_the_walk_finds() -> None:
    """Every `Renamed` option is listed above, each old spelling mapping to its new name,
    which is the option's first (shown) one."""
    merged: dict[tuple[str, ...], dict[str, str]] = {}
    for path, _, param in renamed():
        merged.setdefault(path, {}).update({old: param.opts[0] for old in param.old})
    assert merged == RENAMED


@pytest.mark.parametrize(
    ("path", "old", "new"), [(p, o, n) for p, m in RENAMED.items() for o, n in m.items()]
)
def test_an_old_spelling_parses_as_the_new_name_and_is_not_shown(
    path: tuple[str, ...], old: str, new: str
) -> None:
    """Typed with its old spelling, an option gets the value the new name would; `--help`
    shows the new name and never the old one."""
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    [param] = [p for p in command.params if new in p.opts]
    # Every other required option, by its shown name; arguments as placeholders.
    rest: list[str] = []
    for other in command.params:
        if other is not param and other.required and isinstance(other, click.Option):
            rest += [other.opts[0], "x"]
    args = ["/a/b" for p in command.params if isinstance(p, click.Argument)]
    values = {}
    for spelling in (old, new):
        ctx = command.make_context(path[-1], [*args, *rest, spelling, "7"], resilient_parsing=True)
        values[spelling] = ctx.params[param.name or ""]
    assert values[old] == values[new] and values[new] in ("7", 7)
    shown = help_of(path)
    assert re.search(rf"{re.escape(new)}\b", shown)
    assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", shown), shown


def test_a_missing_option_is_named_by_its_new_name_only(emulator_thread: EmulatorThread) -> None:
    """The error for a missing required option names it as `--help` does."""
    env = emulator_thread.sandbox_env()
    del env["SANDBOXKIT_SANDBOX_TOKEN"]
    result = invoke(emulator_thread, "files", "download", "/a.bin", "a.bin", env=env)
    assert result.exit_code == 2
    assert "'--access-token'" in result.stderr and "--token" not in result.stderr


def test_a_template_created_by_the_old_names_is_the_one_the_new_names_create(
    emulator_thread: EmulatorThread,
) -> None:
    """`templates create` with `--cpu --disk-mb --idc` sends the body `--cpu-count
    --disk-size-mb --idc-name` sends: under one idempotency key the second is a replay (a
    different body would be an IdempotencyMismatchError)."""
    replayed = []
    for cpu, disk, idc in (
        ("--cpu", "--disk-mb", "--idc"),
        ("--cpu-count", "--disk-size-mb", "--idc-name"),
    ):
        result = invoke(
            emulator_thread, "templates", "create", "renamed", cpu, "2", "--memory-mb", "1024",
            disk, "4096", idc, "cli-1", "--idempotency-key", "k-renamed", "--json",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        replayed.append(json.loads(result.stdout)["replayed"])
    assert replayed == [False, True]
    different = invoke(
        emulator_thread, "templates", "create", "renamed", "--cpu-count", "2", "--memory-mb",
        "1024", "--disk-size-mb", "8192", "--idc-name", "cli-1", "--idempotency-key", "k-renamed",
    )  # fmt: skip
    assert "IdempotencyMismatchError" in different.output  # the check can tell bodies apart
