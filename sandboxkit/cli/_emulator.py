"""`sandboxkit emulator`: the emulator's own foreground server (TLS optional), and
`sandboxkit emulator new-sandbox`, which asks a running one for another sandbox."""

from __future__ import annotations

import asyncio
import importlib
import json
import tempfile
from pathlib import Path
from typing import Any

import click

from sandboxkit._core import environment as env
from sandboxkit.emulator import ListenError, describe_sandbox, request_sandbox, serve_forever

from ._app import Settings, fail, renamed_option, run_cancellable

__all__ = ["emulator", "serve"]


async def serve(*, host: str, port: int, data_port: int, tls: bool, sandboxes: int = 1) -> None:
    """Serve until cancelled; with `tls`, a throwaway CA whose certificate is printed."""
    if not tls:
        await serve_forever(host=host, port=port, data_port=data_port, sandboxes=sandboxes)
        return
    try:
        trustme: Any = importlib.import_module("trustme")
    except ImportError:
        raise click.ClickException("--tls needs trustme: pip install trustme") from None
    ca = trustme.CA()
    with tempfile.TemporaryDirectory(prefix="sandboxkit-ca-") as tmp:
        ca_file = Path(tmp) / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        await serve_forever(
            host=host,
            port=port,
            data_port=data_port,
            sandboxes=sandboxes,
            ca=ca,
            ca_file=str(ca_file),
        )


@click.group(invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen address.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Console port (0: any).")
@click.option("--data-port", type=click.IntRange(0, 65535), default=0, help="Data-plane port.")
@click.option("--tls", is_flag=True, help="Serve HTTPS with a throwaway CA (needs trustme).")
@click.option(
    "--sandboxes",
    type=click.IntRange(1, 1000),
    default=1,
    show_default=True,
    help="Sandboxes to make at start (the printed exports name the first).",
)
@click.pass_context
def emulator(
    ctx: click.Context, host: str, port: int, data_port: int, tls: bool, sandboxes: int
) -> None:
    """Run the service emulator in the foreground until Ctrl-C or SIGTERM (exit 0).

    Sandbox hosts are {key}.localhost:PORT, loopback for curl and sandboxkit alike; the
    printed export lines point `sandboxkit.Client()`, these commands and curl at it.
    """
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = ctx.obj
    try:
        run_cancellable(
            lambda: serve(host=host, port=port, data_port=data_port, tls=tls, sandboxes=sandboxes)
        )
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C or SIGTERM: a normal stop
        click.echo("emulator stopped", err=True)
    except ListenError as exc:  # a port in use: the command line must change (exit 2)
        raise click.UsageError(str(exc), ctx) from None
    except click.ClickException:
        raise
    except Exception as exc:  # one line, no traceback
        fail(exc, debug=settings.debug)


@emulator.command("new-sandbox")
@click.option(
    "--base-url",
    envvar=env.BASE_URL,
    show_envvar=True,
    help="The running emulator's console (its printed base URL).",
)
@click.option("--api-key", envvar=env.API_KEY, show_envvar=True, help="The emulator's API key.")
@renamed_option("--idc-name", "--idc", help="Data center (default: the emulator's default).")
@click.option("--json", "as_json", is_flag=True, help="Print the create body as one JSON line.")
@click.pass_obj
def new_sandbox(
    settings: Settings,
    base_url: str | None,
    api_key: str | None,
    idc_name: str | None,
    as_json: bool,
) -> None:
    """Make a sandbox on a running emulator and print the lines that reach it.

    Calls the emulator-only route POST /_emulator/sandboxes (not part of the service).
    """
    base_url = base_url or settings.base_url
    api_key = api_key or settings.api_key
    if not base_url:
        raise click.UsageError(f"no base URL: pass --base-url or set {env.BASE_URL}")
    if not api_key:
        raise click.UsageError(f"no API key: pass --api-key or set {env.API_KEY}")

    async def work() -> dict[str, Any]:
        return await request_sandbox(
            base_url, api_key, idc_name=idc_name, ssl=settings.ssl_option()
        )

    body = settings.run(work)
    if as_json:
        click.echo(json.dumps(body, sort_keys=True))
        return
    # The emulator serves both planes with one scheme: its console's.
    scheme = "https" if base_url.startswith("https:") else "http"
    click.echo("\n".join(describe_sandbox(body, scheme=scheme, ca_file=settings.ca_file)))
