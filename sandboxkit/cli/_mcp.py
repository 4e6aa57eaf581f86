"""`sandboxkit mcp`: the agent toolkit as an MCP server, on stdio (the default) or HTTP.

The `mcp` package is imported only when the command runs, so the rest of the CLI works
without the extra. On stdio nothing but the protocol reaches stdout: every note, warning and
log line goes to stderr.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
import logging
import operator
import os
import re
import sys
from collections.abc import Mapping
from typing import NoReturn

import click

from sandboxkit._core import environment as env

from ._app import EXIT_INPUT, Settings

__all__ = ["is_loopback", "mcp", "mcp_unusable", "meets", "start_line"]

_INSTALL = "sandboxkit mcp needs the mcp extra: pip install 'sandboxkit-sdk[mcp]'"
# Where another package holds `mcp` back, the server runs from an environment of its own.
_OWN_ENVIRONMENT = "uvx --from 'sandboxkit-sdk[mcp]' sandboxkit mcp"
_COMPARE = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}


def _release(version: str) -> tuple[int, ...]:
    """A version's release numbers, trailing zeros dropped: "2.3.0rc1" is (2, 3)."""
    found = re.match(r"\d+(?:\.\d+)*", version.strip())
    numbers = [int(n) for n in found.group().split(".")] if found else []
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def meets(version: str, requirement: str) -> bool:
    """Whether `version` meets `requirement`'s comparisons ("mcp<3,>=2.3"), by release
    numbers (a pre-release counts as its release); a form not understood counts as met."""
    clauses = re.sub(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?", "", requirement.strip()).split(",")
    for clause in clauses:
        found = re.fullmatch(r"\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9A-Za-z.+]*)\s*", clause)
        if found and not _COMPARE[found[1]](_release(version), _release(found[2])):
            return False
    return True


def _mcp_requirement() -> str | None:
    """The mcp extra's requirement on `mcp` ("mcp>=2.3"), from this distribution's metadata
    (pyproject.toml, the one place it is written); None when that is not installed."""
    try:
        requires = importlib.metadata.requires("sandboxkit-sdk") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requires:
        spec, _, marker = line.partition(";")
        in_extra = re.fullmatch(r"""\s*extra\s*==\s*["']mcp["']\s*""", marker)
        if in_extra and re.match(r"mcp\s*[\[<>=!~]", spec.strip()):
            return spec.strip()
    return None


def mcp_unusable(exc: ImportError) -> str:
    """The line for `mcp` failing to import: not installed (the extra), too old or new for
    the extra (both versions and the two ways out), or broken (the import's error)."""
    try:
        installed = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return _INSTALL
    required = _mcp_requirement()
    if required is None or meets(installed, required):
        return f"{_INSTALL} ({exc})"
    return (
        f"sandboxkit mcp needs {required} (installed: {installed}): pip install -U "
        f"'{required}', or run it from an environment of its own: {_OWN_ENVIRONMENT}"
    )


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback name or address (`localhost`, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Notes(logging.Handler):
    """`sandboxkit mcp: ...` lines on stderr for the server's own log (its start, a tool's
    unexpected failure): the `sandboxkit` logger has only a NullHandler."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"sandboxkit mcp: {self.format(record)}", file=sys.stderr, flush=True)
        except Exception:  # pragma: no cover - a closed stderr must not fail a call
            self.handleError(record)


def _log_to_stderr(debug: bool) -> None:
    log = logging.getLogger("sandboxkit.agents")
    for handler in [h for h in log.handlers if isinstance(h, _Notes)]:
        log.removeHandler(handler)  # CliRunner runs many commands in one process
    if debug:  # --debug's handler on the root logger shows every line already
        log.setLevel(logging.DEBUG)
        return
    log.addHandler(_Notes(logging.INFO))
    log.setLevel(logging.INFO)


def start_line(served: list[str], absent: Mapping[str, str], where: str, sandboxes: str) -> str:
    """The operator's first line: what is served where, and which tools are off and why."""
    line = f"serving {len(served)} tools on {where} for sandboxes {sandboxes}: {', '.join(served)}"
    reasons: dict[str, list[str]] = {}
    for name, why in absent.items():
        reasons.setdefault(why, []).append(name)
    if reasons:
        off = "; ".join(f"{', '.join(names)} ({why})" for why, names in reasons.items())
        line += f"; off: {off}"
    return line


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_INPUT)


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"The TOML file naming the sandboxes [env: {env.MCP_CONFIG}].",
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio for a client that starts this command; http for streamable HTTP on /mcp.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP listen address.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="HTTP port."
)
@click.pass_obj
def mcp(settings: Settings, config_path: str | None, transport: str, host: str, port: int) -> None:
    """Serve the sandbox tools to a model over the Model Context Protocol.

    The configuration (sandboxes, workspace, limits) comes from the file and the
    environment, never from the model. Over HTTP every request must carry the bearer token
    in $SANDBOXKIT_MCP_TOKEN (or the variable the file's http_token_env names); without
    one the server starts on a loopback host only, with a warning.
    """
    try:
        from sandboxkit.agents._mcp import build_server, serve_http, serve_stdio
    except ImportError as exc:  # the import decides; the metadata only explains why
        _fail(mcp_unusable(exc))
    from sandboxkit.agents._mcp_config import ConfigError, load_config, toolkit_from_config

    try:
        config = load_config(
            config_path, os.environ, api_key=settings.api_key, base_url=settings.base_url
        )
        client, toolkit = toolkit_from_config(config, ssl=settings.ssl_option())
    except ConfigError as exc:
        _fail(str(exc))
    token = config.http_token
    if transport == "http" and token is None and not is_loopback(host):
        # Anyone who reaches the port could use the sandboxes: never without a token.
        _fail(
            f"--host {host} is not loopback: set {env.MCP_TOKEN} (or http_token_env in the "
            "file) to the bearer token clients must send"
        )
    for note in config.warnings:
        click.echo(f"warning: {note}", err=True)
    if transport == "http" and token is None:
        click.echo(
            f"warning: no bearer token ({env.MCP_TOKEN}): every local process can use these "
            "sandboxes through the HTTP endpoint",
            err=True,
        )
    elif transport == "http" and not is_loopback(host):
        click.echo(
            f"warning: --host {host} serves plain HTTP: the bearer token crosses the network "
            "in clear unless a TLS proxy is in front",
            err=True,
        )
    _log_to_stderr(settings.debug)
    names = ", ".join(config.sandboxes)
    # With --port 0 the port is known once bound: uvicorn's own line tells it.
    where = "stdio"
    if transport == "http":
        guard = "bearer token required" if token is not None else "no token"
        where = f"streamable HTTP at {host}:{port or '<any>'} ({guard})"
    served = [tool.name for tool in toolkit.tools]
    logging.getLogger("sandboxkit.agents.mcp").info(
        "%s", start_line(served, toolkit.absent, where, names)
    )

    async def serve() -> None:
        server = build_server(toolkit)
        async with client, toolkit:
            if transport == "stdio":
                await serve_stdio(server)
            else:
                await serve_http(server, host=host, port=port, token=token)

    # Ctrl-C and SIGTERM cancel the serving task (a copy under way cleans up), then exit 130
    # and 143 as every command does; an error (a port in use) is one line and exit 1.
    settings.run(serve)
