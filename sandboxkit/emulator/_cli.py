"""``python -m sandboxkit.emulator``: run the emulator in the foreground until Ctrl-C or
SIGTERM, either of which stops it cleanly (exit 0, its temporary sandbox files removed: a
``docker stop`` or a CI teardown sends SIGTERM).

Started this way the emulator serves its sandboxes under ``localhost`` (``{key}.localhost:
PORT``), which curl, browsers and a plain ``sandboxkit.Client()`` send to loopback, and
prints the environment that points a Client, the ``sandboxkit`` command and curl at it.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TextIO

from .._core import environment as env
from ._resolver import STANDALONE_DOMAIN
from ._server import Emulator
from ._tls import CertificateAuthority
from ._values import STANDALONE_IDCS

__all__ = ["BANNER_END", "ListenError", "describe_sandbox", "main", "serve_forever"]

# The banner's last line: a reader of the output has every detail once it sees this.
BANNER_END = "Ctrl-C to stop"
_TOKEN_HEADER = "X-Access-Token"  # the data plane's token header (the interface's name)
EXIT_USAGE = 2  # a port in use, like a bad option: the command line must change
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ListenError(OSError):
    """The emulator cannot listen where it was told (a port in use, an address not ours):
    a usage problem, told in one line. An OSError, as the bind's own failure was."""


def describe_sandbox(
    body: Mapping[str, Any], *, scheme: str, ca_file: str | None = None
) -> list[str]:
    """The shell lines that reach one sandbox: its ``export`` line (the variables the
    ``sandboxkit files`` commands read), then a curl upload and download of one file.

    Args:
        body: a create body (``emu.create_sandbox()``, ``request_sandbox()``).
        scheme: the data plane's scheme, ``http`` or ``https``.
        ca_file: the CA certificate curl must trust, for an emulator serving TLS.
    """
    data = body["data"]
    key, domain, token = data["sandbox_key"], data["domain"], data["sandbox_access_token"]
    url = f"{scheme}://{key}.{domain}/files?path=/home/user/hello.txt"
    curl = ["curl", "-sS"]
    if ca_file is not None:
        curl += ["--cacert", ca_file]
    curl += ["-H", f"{_TOKEN_HEADER}: {token}"]
    return [
        "  "
        + env.export_line(
            {env.SANDBOX_KEY: key, env.SANDBOX_DOMAIN: domain, env.SANDBOX_TOKEN: token}
        ),
        "try its data plane with curl (upload, then download):",
        "  echo hello | " + shlex.join([*curl, "-F", "file=@-", url]),
        "  " + shlex.join([*curl, url]),
    ]


def _banner(
    emu: Emulator, sandboxes: Sequence[Mapping[str, Any]], ca_file: str | None
) -> list[str]:
    tls = " with TLS" if ca_file is not None else ""
    lines = [
        f"sandboxkit emulator running{tls}",
        f"  base URL:          {emu.base_url}",
        f"  API key:           {emu.api_key}",
        f"  organization id:   {emu.org_id}",
        f"  OAuth code:        {emu.oauth_code}",
        f"  data-plane domain: {emu.domain}",
    ]
    if ca_file is not None:
        lines.append(f"  CA certificate:    {ca_file}")
    for number, body in enumerate(sandboxes, 1):
        data = body["data"]
        lines += [
            "  sandbox:" if len(sandboxes) == 1 else f"  sandbox {number}:",
            f"    sandbox_key:          {data['sandbox_key']}",
            f"    domain:               {data['domain']}",
            f"    sandbox_access_token: {data['sandbox_access_token']}",
            f"    data plane:           {emu.data_plane_scheme}://{data['sandbox_key']}."
            f"{data['domain']}",
        ]
    lines += [
        "  more sandboxes: `sandboxkit emulator new-sandbox`, or POST /_emulator/sandboxes"
        " with the API key as bearer",
        "use it from another shell (a plain sandboxkit.Client() reads these):",
        "  " + env.export_line({env.BASE_URL: emu.base_url, env.API_KEY: emu.api_key}),
        "  " + env.export_line({env.DATA_PLANE_SCHEME: emu.data_plane_scheme}),
    ]
    if ca_file is not None:
        lines.append("  " + env.export_line({env.CA_FILE: ca_file}))
    lines += describe_sandbox(sandboxes[0], scheme=emu.data_plane_scheme, ca_file=ca_file)
    lines.append(BANNER_END)
    return lines


async def serve_forever(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    data_port: int = 0,
    out: TextIO | None = None,
    ready: Callable[[Emulator], None] | None = None,
    sandboxes: int = 1,
    ca: CertificateAuthority | None = None,
    ca_file: str | None = None,
) -> None:
    """Run an emulator with ready-made sandboxes until cancelled, printing how to use them.

    Sandbox hosts are ``{key}.localhost:{data_port}``. The printed banner ends with the
    line :data:`BANNER_END`.

    Args:
        host: the listening address (loopback unless told otherwise).
        port, data_port: the console and data-plane ports; 0 picks free ones.
        out: where to print the details (default stdout).
        ready: called with the running emulator once it serves (for embedding and tests).
        sandboxes: how many sandboxes to make at start (at least 1; the banner's exports
            name the first).
        ca: serve TLS with certificates from this CA (``trustme.CA()``).
        ca_file: where that CA's certificate is, for the banner's exports and curl lines.

    Raises:
        ListenError: a port is in use, or the address cannot be listened on.
    """
    if sandboxes < 1:
        raise ValueError("sandboxes must be at least 1")
    emu = Emulator(
        idcs=list(STANDALONE_IDCS),
        ca=ca,
        host=host,
        port=port,
        data_port=data_port,
        domain=STANDALONE_DOMAIN,
    )
    try:
        await emu.start()  # which closes what it made when it fails
    except OSError as exc:  # a port in use, an address not this host's (EADDRNOTAVAIL)
        # The reason names the address and port (asyncio's bind message).
        raise ListenError(f"the emulator cannot listen on {host}: {exc.strerror or exc}") from None
    try:
        bodies = [await emu.create_sandbox() for _ in range(sandboxes)]
        print("\n".join(_banner(emu, bodies, ca_file)), file=out or sys.stdout, flush=True)
        if ready is not None:
            ready(emu)
        await asyncio.Event().wait()
    finally:
        await emu.close()  # removes its temporary directory


def main(argv: Sequence[str] | None = None) -> int:
    """The command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m sandboxkit.emulator", description="Run the sandboxkit emulator."
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="console port (default: any free)")
    parser.add_argument("--data-port", type=int, default=0, help="data-plane port (default: any)")
    parser.add_argument(
        "--sandboxes", type=int, default=1, help="sandboxes to make at start (default 1)"
    )
    args = parser.parse_args(argv)
    if args.sandboxes < 1:
        parser.error("--sandboxes must be at least 1")
    try:
        asyncio.run(
            _until_stopped(
                serve_forever(
                    host=args.host,
                    port=args.port,
                    data_port=args.data_port,
                    sandboxes=args.sandboxes,
                )
            )
        )
    except ListenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C before the loop's handlers were in place
        pass
    print("stopped", file=sys.stderr)
    return 0


async def _until_stopped(work: Awaitable[None]) -> None:
    """Run `work` until SIGINT or SIGTERM cancels it, so its cleanup runs (the emulator's
    temporary directory is removed): SIGTERM's default action would kill the process and
    leave the directory behind."""
    task = asyncio.current_task()
    if task is None or threading.current_thread() is not threading.main_thread():
        await work  # only the main thread gets signals
        return
    loop = asyncio.get_running_loop()
    stopped = False

    def stop() -> None:
        nonlocal stopped
        stopped = True
        for signum in _STOP_SIGNALS:
            loop.remove_signal_handler(signum)
            # A second signal must not cut the cleanup short: ignored until the process ends.
            signal.signal(signum, signal.SIG_IGN)
        task.cancel()

    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, stop)
    try:
        await work
    except asyncio.CancelledError:
        if not stopped:
            raise
    finally:
        if not stopped:
            for signum in _STOP_SIGNALS:
                loop.remove_signal_handler(signum)
