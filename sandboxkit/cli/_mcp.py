"""`sandboxkit mcp`: the agent toolkit as an MCP server, on stdio (the default) or HTTP.

The `mcp` package is imported only when the command runs, so the rest of the CLI works
without the extra. On stdio nothing but the protocol reaches stdout: every note, warning and
log line goes to stderr.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from typing import NoReturn

import click

from ._app import EXIT_INPUT, Settings

__all__ = ["is_loopback", "mcp"]

_INSTALL = "sandboxkit mcp needs the mcp extra: pip install 'sandboxkit-sdk[mcp]'"


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


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_INPUT)


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The TOML file naming the sandboxes [env: SANDBOXKIT_MCP_CONFIG].",
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
    environment, never from the model. Over HTTP the endpoint has no authentication: it
    listens on 127.0.0.1 unless --host says otherwise.
    """
    try:
        from sandboxkit.agents._mcp import build_server, serve_http, serve_stdio
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0] in ("mcp", "mcp_types")
        _fail(_INSTALL if missing else f"{_INSTALL} ({exc})")  # absent, or broken / too old
    from sandboxkit.agents._mcp_config import ConfigError, load_config, toolkit_from_config

    try:
        config = load_config(
            config_path, os.environ, api_key=settings.api_key, base_url=settings.base_url
        )
        client, toolkit = toolkit_from_config(config, ssl=settings.ssl_option())
    except ConfigError as exc:
        _fail(str(exc))
    for note in config.warnings:
        click.echo(f"warning: {note}", err=True)
    if transport == "http" and not is_loopback(host):
        click.echo(
            f"warning: --host {host} is not loopback: anyone who can reach it can use these "
            "sandboxes (the MCP endpoint has no authentication)",
            err=True,
        )
    _log_to_stderr(settings.debug)
    names = ", ".join(s.name for s in config.sandboxes)
    # With --port 0 the port is known once bound: uvicorn's own line tells it.
    where = "stdio" if transport == "stdio" else f"streamable HTTP at {host}:{port or '<any>'}"
    logging.getLogger("sandboxkit.agents.mcp").info(
        "serving %d tools on %s for sandboxes %s", len(toolkit.tools), where, names
    )

    async def serve() -> None:
        server = build_server(toolkit)
        async with client:
            if transport == "stdio":
                await serve_stdio(server)
            else:
                await serve_http(server, host=host, port=port)

    # Ctrl-C and SIGTERM cancel the serving task (a copy under way cleans up), then exit 130
    # and 143 as every command does; an error (a port in use) is one line and exit 1.
    settings.run(serve)
