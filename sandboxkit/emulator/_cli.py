"""``python -m sandboxkit.emulator``: run the emulator in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from ._server import Emulator
from ._values import STANDALONE_IDCS

__all__ = ["main", "serve_forever"]


def _describe(emu: Emulator, sandbox: dict[str, object], out: TextIO) -> None:
    data = sandbox["data"]
    assert isinstance(data, dict)
    lines = [
        "sandboxkit emulator running (Ctrl-C to stop)",
        f"  base URL:          {emu.base_url}",
        f"  API key:           {emu.api_key}",
        f"  organization id:   {emu.org_id}",
        f"  OAuth code:        {emu.oauth_code}",
        f"  data-plane domain: {emu.domain}",
        "  sandbox:",
        f"    sandbox_key:          {data['sandbox_key']}",
        f"    domain:               {data['domain']}",
        f"    sandbox_access_token: {data['sandbox_access_token']}",
        f"    data plane:           {emu.data_plane_scheme}://{data['sandbox_key']}.{emu.domain}",
        "  (the data-plane host resolves only through the emulator's resolver,"
        " or send 'Host: <key>.sandbox.test:<port>' to 127.0.0.1)",
    ]
    print("\n".join(lines), file=out, flush=True)


async def serve_forever(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    data_port: int = 0,
    out: TextIO | None = None,
    ready: Callable[[Emulator], None] | None = None,
) -> None:
    """Run an emulator and one ready-made sandbox until cancelled, printing how to use them.

    Args:
        host: the listening address (loopback unless told otherwise).
        port, data_port: the console and data-plane ports; 0 picks free ones.
        out: where to print the details (default stdout).
        ready: called with the running emulator once it serves (for embedding and tests).
    """
    async with Emulator(
        idcs=list(STANDALONE_IDCS), host=host, port=port, data_port=data_port
    ) as emu:
        sandbox = await emu.create_sandbox()
        _describe(emu, sandbox, out or sys.stdout)
        if ready is not None:
            ready(emu)
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m sandboxkit.emulator", description="Run the sandboxkit emulator."
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="console port (default: any free)")
    parser.add_argument("--data-port", type=int, default=0, help="data-plane port (default: any)")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve_forever(host=args.host, port=args.port, data_port=args.data_port))
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    return 0
