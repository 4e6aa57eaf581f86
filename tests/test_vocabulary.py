"""One vocabulary (issue 39): every surface names an operation's parameters as the SDK does.

`sandboxkit._core.vocabulary.OPERATIONS` is checked against the real surfaces: the SDK's
signatures (`inspect`), the blocking facade's, the click commands' parameters and the agent
tools' JSON schemas. An option is `--` and the SDK's name with `_` as `-` (or a positional
argument of that name), a tool argument is the SDK's name, unless the row records why not;
every command and tool is in some row. The README's table is rendered from the same rows.
Then each kind of drift is made on purpose (a renamed option, argument, parameter, a new
command) and the check must report it.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import click
import pytest
from click.testing import CliRunner

import sandboxkit
import sandboxkit.agents
import sandboxkit.emulator
from sandboxkit import rules, sync
from sandboxkit._core import operations as ops
from sandboxkit._core import validation
from sandboxkit._core.vocabulary import CLI_ONLY, OPERATIONS, TOOL_ONLY, Operation
from sandboxkit.agents import CopyHandles, Toolkit, _toolkit
from sandboxkit.agents._copy_tools import DOWNLOAD_FILE
from sandboxkit.cli import cli
from sandboxkit.resources.files import Files
from sandboxkit.resources.templates import Templates

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
SDK: dict[str, Any] = {
    "Client": sandboxkit.Client,
    "Files": Files,
    "Templates": Templates,
    "resources_from": sandboxkit.resources_from,
    "emulator": sandboxkit.emulator,
}
SYNC: dict[str, Any] = {"Client": sync.Client, "Files": sync.Files, "Templates": sync.Templates}

Tools = Mapping[str, Sequence[str]]  # a tool's name: its arguments, in schema order


def resolve(name: str, table: Mapping[str, Any] = SDK) -> Any:
    head, _, attr = name.partition(".")
    return getattr(table[head], attr) if attr else table[head]


def params(function: Any) -> list[str]:
    """A callable's parameter names, in order, without `self` and `*args`/`**kwargs`."""
    return [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def vocabulary(row: Operation) -> set[str]:
    """Every name a surface may use for `row`: the method's parameters, those given as parts
    by their parts' names, and those of other callables the row names."""
    names = set(params(resolve(row.sdk))) - set(row.spelled)
    for parts in row.spelled.values():
        names |= set(params(resolve(parts)) if isinstance(parts, str) else parts)
    return names | set(row.also)


def command_at(root: click.Group, path: str) -> click.Command | None:
    command: click.Command = root
    for word in path.split():
        if not isinstance(command, click.Group) or word not in command.commands:
            return None
        command = command.commands[word]
    return command


def leaf_commands(group: click.Group, path: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command that does something itself: a group only when it has options."""
    if path == "" or group.params:
        yield path, group
    for name, command in group.commands.items():
        inner = f"{path} {name}".strip()
        if isinstance(command, click.Group):
            yield from leaf_commands(command, inner)
        else:
            yield inner, command


def shown(param: click.Parameter) -> str:
    """How `--help` names a parameter: an argument by its name, an option by its first
    spelling (a `Renamed` option's old spellings come after it, hidden)."""
    return param.name or "" if isinstance(param, click.Argument) else param.opts[0]


def cli_problems(row: Operation, root: click.Group) -> list[str]:
    assert row.cli is not None
    command = command_at(root, row.cli)
    if command is None:
        return [f"{row.sdk}: no command `{row.cli}`"]
    names, out, seen = vocabulary(row), [], set()
    for param in command.params:
        spelling, name = shown(param), param.name or ""
        expected = name if isinstance(param, click.Argument) else "--" + name.replace("_", "-")
        if spelling in row.cli_differs:
            seen.add(spelling)
        elif name not in names:
            out.append(f"`{row.cli}` {spelling}: no parameter of {row.sdk} is named {name!r}")
        elif spelling != expected:
            out.append(f"`{row.cli}` {spelling}: {row.sdk}'s {name!r} is spelled {expected}")
    out += [f"`{row.cli}`: {stale} is recorded but absent" for stale in set(row.cli_differs) - seen]
    return out


def tool_problems(row: Operation, tools: Tools) -> list[str]:
    names, out, seen = vocabulary(row), [], set()
    for tool in row.tools:
        if tool not in tools:
            out.append(f"{row.sdk}: no tool {tool}")
            continue
        for argument in tools[tool]:
            if argument in row.tool_differs:
                seen.add(argument)
            elif argument not in names:
                out.append(f"{tool}({argument}): no parameter of {row.sdk} is named so")
    out += [
        f"{row.tools}: {stale} is recorded but absent" for stale in set(row.tool_differs) - seen
    ]
    return out


def sdk_problems(row: Operation) -> list[str]:
    out = []
    if row.operation is not None and row.operation not in ops.OPERATIONS:
        out.append(f"{row.sdk}: {row.operation!r} is no operation's name")
    own = params(resolve(row.sdk))
    for name, owner in row.also.items():
        if name not in params(resolve(owner)):
            out.append(f"{row.sdk}: {owner} has no parameter {name!r}")
    for name, parts in row.spelled.items():
        if name not in own:
            out.append(f"{row.sdk}: no parameter {name!r} to spell")
        if isinstance(parts, str) and not params(resolve(parts)):
            out.append(f"{row.sdk}: {parts} takes nothing")
    if row.sync:
        twin = resolve(row.sdk, SYNC)
        if params(twin) != own:
            out.append(f"{row.sdk}: sync has {params(twin)}, the SDK {own}")
    return out


def problems(rows: Sequence[Operation], root: click.Group, tools: Tools) -> list[str]:
    """Every way the surfaces disagree with the table, or the table with them."""
    out: list[str] = []
    for row in rows:
        out += sdk_problems(row)
        if row.cli is not None:
            out += cli_problems(row, root)
        out += tool_problems(row, tools)
    commands = {row.cli for row in rows} | set(CLI_ONLY)
    out += [f"command `{p}` is in no row" for p, _ in leaf_commands(root) if p not in commands]
    named = {tool for row in rows for tool in row.tools} | set(TOOL_ONLY)
    out += [f"tool {tool} is in no row" for tool in tools if tool not in named]
    return out


def toolkit_tools(kit: Toolkit) -> dict[str, list[str]]:
    return {tool.name: list(tool.input_schema["properties"]) for tool in kit.tools}


@pytest.fixture
async def every_tool(tmp_path: Path) -> AsyncIterator[Toolkit]:
    """Every tool (a sandbox, a workspace, templates); nothing is sent to build them."""
    async with sandboxkit.Client(api_key="k", base_url="http://console.invalid") as client:
        sandbox = client.sandbox(sandbox_key="k1", domain="sandbox.invalid", access_token="t")
        async with Toolkit(
            client, {"dev": sandbox}, workspace=tmp_path, copy_handles=CopyHandles()
        ) as kit:
            yield kit


# -- the table against the surfaces ----------------------------------------------------------


def test_the_table_matches_every_surface(every_tool: Toolkit) -> None:
    """Every row holds for the SDK, `sync`, the CLI and the tools; every command and tool
    is in a row (or named as having no SDK operation)."""
    assert problems(OPERATIONS, cli, toolkit_tools(every_tool)) == []
    assert {row.sdk for row in OPERATIONS} >= {"Files.download", "Files.upload", "Client"}


def test_the_readme_shows_the_table(every_tool: Toolkit) -> None:
    """README's vocabulary table is the one these rows render (paste it from the failure)."""
    table = render(OPERATIONS, cli, toolkit_tools(every_tool))
    found = re.search(r"<!-- vocabulary -->\n(.*?)<!-- /vocabulary -->", README, re.DOTALL)
    assert found is not None, "README.md lacks <!-- vocabulary --> ... <!-- /vocabulary -->"
    assert found[1] == table, "\n" + table


# -- the check fails when a surface names a parameter differently --------------------------


def option(path: str, spelling: str) -> click.Parameter:
    command = command_at(cli, path)
    assert command is not None
    [found] = [p for p in command.params if spelling in getattr(p, "opts", ())]
    return found


def test_an_option_spelled_apart_from_its_parameter_is_caught(
    every_tool: Toolkit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--access-token` shown as `--token` (the parameter's name unchanged) is reported."""
    monkeypatch.setattr(option("files download", "--access-token"), "opts", ["--token"])
    assert problems(OPERATIONS, cli, toolkit_tools(every_tool)) == [
        "`files download` --token: Files.download's 'access_token' is spelled --access-token"
    ]


def test_an_option_named_apart_from_the_sdk_is_caught(
    every_tool: Toolkit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--cpu` for `cpu_count`, as the CLI had it, is reported."""
    cpu = option("templates create", "--cpu-count")
    monkeypatch.setattr(cpu, "opts", ["--cpu"])
    monkeypatch.setattr(cpu, "name", "cpu")
    assert problems(OPERATIONS, cli, toolkit_tools(every_tool)) == [
        "`templates create` --cpu: no parameter of Templates.create is named 'cpu'"
    ]


async def test_a_tool_argument_named_apart_from_the_sdk_is_caught(
    every_tool: Toolkit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """download_file taking `local_path` again (as it did) instead of `dest` is reported."""

    def old_schema(setup: Any) -> dict[str, Any]:
        schema = DOWNLOAD_FILE.schema(setup)
        schema["properties"]["local_path"] = schema["properties"].pop("dest")
        schema["required"] = ["sandbox", "remote", "local_path"]
        return schema

    renamed = attrs.evolve(DOWNLOAD_FILE, schema=old_schema)
    definitions = tuple(renamed if d is DOWNLOAD_FILE else d for d in _toolkit.DEFINITIONS)
    monkeypatch.setattr(_toolkit, "DEFINITIONS", definitions)
    async with sandboxkit.Client(api_key="k", base_url="http://console.invalid") as client:
        sandbox = client.sandbox(sandbox_key="k1", domain="sandbox.invalid", access_token="t")
        old = Toolkit(client, {"dev": sandbox}, workspace=tmp_path)
        assert problems(OPERATIONS, cli, toolkit_tools(old)) == [
            "download_file(local_path): no parameter of Files.download is named so"
        ]


def test_an_sdk_parameter_renamed_under_the_surfaces_is_caught(
    every_tool: Toolkit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's `upload` renaming `source` leaves the CLI's SOURCE, upload_file's `source`
    and the blocking twin (which wraps the method it was made with) apart: all reported."""

    async def upload(self: Files, remote: str, local: Any, **_: Any) -> None: ...

    monkeypatch.setattr(Files, "upload", upload)
    found = problems(OPERATIONS, cli, toolkit_tools(every_tool))
    assert found == [
        "Files.upload: sync has ['remote', 'source', 'username', 'progress', 'timeout', "
        "'retry'], the SDK ['remote', 'local']",
        "`files upload` source: no parameter of Files.upload is named 'source'",
        "upload_file(source): no parameter of Files.upload is named so",
    ]


def test_a_command_or_tool_in_no_row_and_a_stale_exception_are_caught(
    every_tool: Toolkit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new command, a new tool and an exception for a name no surface has are reported:
    the table cannot fall behind."""
    files = command_at(cli, "files")
    assert isinstance(files, click.Group)
    monkeypatch.setitem(files.commands, "stat", click.Command("stat"))
    tools = {**toolkit_tools(every_tool), "stat_file": ["sandbox", "remote"]}
    rows = [
        attrs.evolve(row, cli_differs={**row.cli_differs, "--gone": "a stale reason"})
        if row.sdk == "Templates.builds"
        else row
        for row in OPERATIONS
    ]
    assert problems(rows, cli, tools) == [
        "`builds list`: --gone is recorded but absent",
        "command `files stat` is in no row",
        "tool stat_file is in no row",
    ]


# -- the shared pieces: one Progress, one address, rules in the schemas ---------------------


def test_every_progress_parameter_is_the_one_progress_type() -> None:
    """`files.download`, `files.upload` and `Toolkit.call` take `sandboxkit.Progress`."""
    for function in (Files.download, Files.upload, Toolkit.call):
        hints = typing.get_type_hints(function)
        assert hints["progress"] == sandboxkit.Progress | None, function


def test_tool_schemas_take_their_bounds_from_the_rules(every_tool: Toolkit) -> None:
    """Each bound create_template and list_builds show a model is the SDK's own rule: the
    bound passes the SDK's check, one past it fails it."""
    schema = {t.name: t.input_schema["properties"] for t in every_tool.tools}
    create, builds = schema["create_template"], schema["list_builds"]
    name = create["name"]["maxLength"]
    assert name == rules.MAX_TEMPLATE_NAME
    validation.check_template_name("n" * name)
    with pytest.raises(sandboxkit.ValidationError):
        validation.check_template_name("n" * (name + 1))
    key = create["idempotency_key"]["maxLength"]
    validation.check_idempotency_key("k" * key)
    with pytest.raises(sandboxkit.ValidationError):
        validation.check_idempotency_key("k" * (key + 1))
    text = create["description"]["maxLength"]
    validation.check_description("d" * text)
    with pytest.raises(sandboxkit.ValidationError):
        validation.check_description("d" * (text + 1))
    sizes = {part: create[part]["maximum"] for part in ("cpu_count", "memory_mb", "disk_size_mb")}
    validation.check_resources(sandboxkit.resources_from(**sizes))
    for part in sizes:
        over = {**sizes, part: sizes[part] + 1}
        with pytest.raises(sandboxkit.ValidationError, match=part):
            validation.check_resources(sandboxkit.resources_from(**over))
    assert builds["page_size"]["maximum"] <= rules.MAX_PAGE_SIZE


# -- the README's table ----------------------------------------------------------------------


def render(rows: Sequence[Operation], root: click.Group, tools: Tools) -> str:
    """The table README shows: what each surface calls each operation, read off them."""
    lines = [
        "| operation | SDK | sync | CLI | agent tool | named apart, on purpose |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        sdk = f"`{_sdk_name(row.sdk)}({', '.join(params(resolve(row.sdk)))})`"
        command = None if row.cli is None else command_at(root, row.cli)
        cli_cell = "" if command is None else f"`{_command_line(row.cli or '', command)}`"
        tool_cell = "; ".join(f"`{t}({', '.join(tools[t])})`" for t in row.tools)
        apart = ", ".join(f"`{name}`" for name in [*row.cli_differs, *row.tool_differs])
        lines.append(
            f"| {row.operation or '—'} | {sdk} | {'yes' if row.sync else ''} | {cli_cell} | "
            f"{tool_cell} | {apart} |"
        )
    return "\n".join(lines) + "\n"


def _sdk_name(name: str) -> str:
    head, _, attr = name.partition(".")
    where = {"Files": "files", "Templates": "templates", "emulator": "sandboxkit.emulator"}
    return f"{where.get(head, head)}.{attr}" if attr else head


def _command_line(path: str, command: click.Command) -> str:
    words = ["sandboxkit", *path.split()]
    for param in command.params:
        if isinstance(param, click.Argument):
            words.append((param.name or "").upper())
        elif not getattr(param, "hidden", False):
            words.append(shown(param))
    return " ".join(words)


async def test_one_resources_helper_for_the_cli_and_the_tools(every_tool: Toolkit) -> None:
    """`resources_from` maps the parts to a template's resources; the tool and the CLI go
    through it, so both name the same missing parts (the CLI as options), before anything
    is sent."""
    assert sandboxkit.resources_from(product="sku-1") == sandboxkit.PresetResources("sku-1")
    custom = sandboxkit.resources_from(cpu_count=1, memory_mb=2, disk_size_mb=3)
    assert custom == sandboxkit.CustomResources(cpu_count=1, memory_mb=2, disk_size_mb=3)
    with pytest.raises(sandboxkit.ValidationError, match="not both"):
        sandboxkit.resources_from(product="sku-1", disk_size_mb=3)
    with pytest.raises(sandboxkit.ValidationError, match=r"missing: memory_mb, disk_size_mb\)$"):
        sandboxkit.resources_from(cpu_count=1)
    with pytest.raises(sandboxkit.agents.ToolError, match=r"missing: memory_mb, disk_size_mb"):
        await every_tool.call("create_template", {"name": "t", "cpu_count": 1})
    result = CliRunner().invoke(
        cli,
        ["templates", "create", "t", "--cpu-count", "1", "--api-key", "k"],
        env={"SANDBOXKIT_BASE_URL": "http://console.invalid"},
    )
    assert result.exit_code == 2
    assert "(missing: --memory-mb, --disk-size-mb)" in result.stderr
