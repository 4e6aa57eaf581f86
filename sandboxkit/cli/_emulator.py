"""`sandboxkit emulator`: the emulator's own foreground server, plus a TLS variant."""

from __future__ import annotations

import asyncio
import importlib
import tempfile
from pathlib import Path
from typing import Any

import click

from sandboxkit.emulator import STANDALONE_IDCS, Emulator, serve_forever

__all__ = ["serve"]


def _hint(emu: Emulator, ca_file: Path | None = None) -> None:
    """Print the environment that points the other commands at this emulator."""
    lines = [
        "use it from another shell:",
        f"  export SANDBOXKIT_BASE_URL={emu.base_url} SANDBOXKIT_API_KEY={emu.api_key}",
        f"  export SANDBOXKIT_DATA_PLANE_SCHEME={emu.data_plane_scheme}",
    ]
    if ca_file is not None:
        lines.append(f"  export SANDBOXKIT_CA_FILE={ca_file}")
    click.echo("\n".join(lines))


async def serve(*, host: str, port: int, data_port: int, tls: bool) -> None:
    """Serve until cancelled; with `tls`, a throwaway CA whose certificate is printed."""
    if not tls:
        await serve_forever(host=host, port=port, data_port=data_port, ready=_hint)
        return
    try:
        trustme: Any = importlib.import_module("trustme")
    except ImportError:
        raise click.ClickException("--tls needs trustme: pip install trustme") from None
    ca = trustme.CA()
    with tempfile.TemporaryDirectory(prefix="sandboxkit-ca-") as tmp:
        ca_file = Path(tmp) / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        # The same data centers as the plain `serve_forever`, which takes no CA.
        async with Emulator(
            idcs=list(STANDALONE_IDCS), ca=ca, host=host, port=port, data_port=data_port
        ) as emu:
            body = await emu.create_sandbox()
            data = body["data"]
            click.echo(
                "sandboxkit emulator running with TLS (Ctrl-C to stop)\n"
                f"  base URL:          {emu.base_url}\n"
                f"  API key:           {emu.api_key}\n"
                f"  CA certificate:    {ca_file}\n"
                f"  data-plane domain: {emu.domain}\n"
                f"  sandbox_key:       {data['sandbox_key']}\n"
                f"  sandbox token:     {data['sandbox_access_token']}"
            )
            _hint(emu, ca_file)
            await asyncio.Event().wait()
