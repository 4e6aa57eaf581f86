"""`sandboxkit files download|upload`: one sandbox's data plane, with a progress bar."""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path
from typing import Any

import anyio
import click
from click.core import ParameterSource
from rich.console import Console

import sandboxkit
from sandboxkit._core import environment as env
from sandboxkit.emulator import EmulatorResolver

from ._app import Settings, renamed_option
from ._progress import TransferBar, format_size, format_throughput, transfer_progress

__all__ = [
    "budgets_of",
    "download_left",
    "download_line",
    "download_stopped",
    "files",
    "remote_place",
    "resume_command",
    "sha256_of",
    "upload_line",
]

# Typed on the command line, these are left out of a command printed for the user to run
# again (they stay in the shell's history, not in a log): their value shows as `...`.
_SECRETS = frozenset({"access_token"})
# The group's options a printed download command repeats (the others, an API key and a
# console URL, are never used by a data-plane command).
_GROUP_OPTIONS = ("ca_file", "debug")


def data_plane_resolver() -> EmulatorResolver:
    """The emulator's names (`*.sandbox.test`, `*.localhost`) to loopback, the rest as usual.

    `.test` never resolves on real DNS (RFC 6761), so an embedded emulator's sandbox is
    unreachable by name unless someone maps it; this is that mapping, and nothing else
    changes.
    """
    return EmulatorResolver(others_refused=False)


def _sandbox_options(command: click.decorators.FC) -> click.decorators.FC:
    """The options naming one sandbox, shared by download and upload."""
    options = [
        click.option(
            "--sandbox-key",
            envvar=env.SANDBOX_KEY,
            show_envvar=True,
            required=True,
            help="The sandbox's key (`data.sandbox_key`).",
        ),
        click.option(
            "--domain",
            envvar=env.SANDBOX_DOMAIN,
            show_envvar=True,
            required=True,
            help="The sandbox's domain, used verbatim (`data.domain`).",
        ),
        renamed_option(
            "--access-token",
            "--token",
            envvar=env.SANDBOX_TOKEN,
            show_envvar=True,
            required=True,
            help="The sandbox access token (`sandbox_access_token`).",
        ),
        click.option(
            "--data-plane-scheme",
            envvar=env.DATA_PLANE_SCHEME,
            show_envvar=True,
            type=click.Choice(["https", "http"]),
            default="https",
            show_default=True,
            help="http for the emulator without --tls.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def budgets_of(bwlimit: str | None) -> sandboxkit.Budgets:
    """The client's budgets for a `--bwlimit` value (None: no limit).

    Raises:
        click.BadParameter: a value rclone would refuse, or a timetable; nothing was sent.
    """
    if bwlimit is None:
        return sandboxkit.Budgets()
    try:
        return sandboxkit.Budgets.from_bwlimit(bwlimit)
    except sandboxkit.ValidationError as exc:
        message = str(exc).removeprefix("--bwlimit: ")
        raise click.BadParameter(message, param_hint="'--bwlimit'") from None


def _check_bwlimit(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    budgets_of(value)  # refused before anything is sent; kept as typed for a resume command
    return value


bwlimit_option = click.option(
    "--bwlimit",
    metavar="RATE|UP:DOWN",
    callback=_check_bwlimit,
    help="Limit the bandwidth as rclone's --bwlimit does: 10M for both directions, UP:DOWN "
    "(10M:100M), off; B, K, M, G, T, P are binary multiples (M is MiB/s), a bare number is "
    "KiB/s.",
)


def _open_sandbox(
    settings: Settings,
    sandbox_key: str,
    domain: str,
    access_token: str,
    scheme: str,
    **options: Any,
) -> tuple[sandboxkit.Client, sandboxkit.Sandbox]:
    """A data-plane-only client (with `options`) and its handle on the sandbox."""
    client = settings.client(
        control_plane=False, data_plane_scheme=scheme, resolver=data_plane_resolver(), **options
    )
    return client, client.sandbox(sandbox_key=sandbox_key, domain=domain, access_token=access_token)


def remote_place(remote: str, sandbox_key: str) -> str:
    """What a transfer's error line names: `/home/user/a.bin on sbx-1`."""
    return f"{remote} on {sandbox_key}"


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of a local file, read in 1 MiB pieces (blocking: run it in a thread)."""
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def download_line(result: sandboxkit.DownloadResult) -> str:
    """The final line of a download: size, elapsed, rate, attempts, resumes and sha256."""
    return (
        f"downloaded {format_size(result.size)} to {result.path} in {result.elapsed:.2f} s "
        f"({format_throughput(result.size, result.elapsed)}), attempts={result.attempts} "
        f"resumes={result.resumes} sha256={result.sha256 or '-'}"
    )


def upload_line(result: sandboxkit.UploadResult, sha256: str) -> str:
    """The final line of an upload: size, elapsed, rate, attempts and the local file's
    sha256."""
    size, elapsed = result.size, result.elapsed
    return (
        f"uploaded {format_size(size)} to {result.path} in {elapsed:.2f} s "
        f"({format_throughput(size, elapsed)}), attempts={result.attempts} "
        f"resumes=0 (uploads restart whole) sha256={sha256}"
    )


@click.group()
def files() -> None:
    """Download and upload files on one sandbox's data plane."""


def _words(ctx: click.Context, names: tuple[str, ...] | None = None) -> list[str]:
    """The options of `ctx`'s command (those in `names`, if given) that were typed on the
    command line, as words to type again; a secret's value is `...`."""
    words: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if (
            not isinstance(param, click.Option)
            or name is None
            or (names is not None and name not in names)
            or ctx.get_parameter_source(name) is not ParameterSource.COMMANDLINE
        ):
            continue
        value = ctx.params[name]
        if param.is_flag:
            words.append(
                param.opts[0] if value or not param.secondary_opts else param.secondary_opts[0]
            )
        else:
            words += [param.opts[0], "..." if name in _SECRETS else str(value)]
    return words


def resume_command(ctx: click.Context, remote: str, dest: Path) -> str:
    """The command line that runs this download again (and so continues its partial file):
    the same command, REMOTE and DEST as given, and the options typed on the command line
    (those from the environment are still there), a token's value left out (`--access-token ...`).
    """
    typed = str(dest)
    if typed.startswith("-"):  # not an option: say it as a path
        typed = os.path.join(os.curdir, typed)
    root = ctx.find_root()
    options = [*_words(root, _GROUP_OPTIONS), *_words(ctx)]
    return shlex.join([*ctx.command_path.split(), remote, typed, *options])


def _kept(dest: Path) -> str | None:
    """`kept the partial file ... (held of total)`, for a part kept beside `dest` that a
    rerun can continue; None for none."""
    part = sandboxkit.find_partial(dest)
    if part is None or not part.held or part.total is None:
        return None
    held, total = format_size(part.held), format_size(part.total)
    return f"kept the partial file {str(part.path)!r} ({held} of {total})"


def download_left(dest: Path, command: str, error: Exception) -> str | None:
    """What a download that failed with `error` says at the end of its error line: the
    partial file kept beside `dest` (where, what it holds) and the command that continues it;
    None when none was kept, and for an error raised before the part was opened (bad input,
    where this command would not run; the part another download is writing now)."""
    if isinstance(error, sandboxkit.ValidationError | sandboxkit.DestinationLockedError):
        return None
    kept = _kept(dest)
    return None if kept is None else f"{kept}; to resume, run: {command}"


def download_stopped(dest: Path, command: str) -> str:
    """What an interrupted download says after `interrupted: `: the partial file kept beside
    `dest`, what it holds and the command that continues it; or that it was removed."""
    as_was = f"{str(dest)!r} is as it was"
    kept = _kept(dest)
    if kept is not None:
        return f"{kept}; {as_was}; to resume, run: {command}"
    part = sandboxkit.find_partial(dest)  # rare: one no data center vouched for
    if part is None:
        return f"the partial file was removed; {as_was}"
    return f"the partial file {str(part.path)!r} holds nothing to resume; {as_was}"


@files.command("download")
@click.argument("remote")
@click.argument("dest", type=click.Path(dir_okay=True, path_type=Path))
@_sandbox_options
@click.option(
    "--checksum/--no-checksum",
    default=True,
    show_default=True,
    help="Compute the SHA-256 of what was written (--no-checksum: a little faster).",
)
@click.option(
    "--keep-partial/--no-keep-partial",
    default=True,
    show_default=True,
    help="Interrupted or failed, keep the partial file (where the data center resumes) for "
    "the same command to continue. --no-keep-partial removes it, except after a failure a "
    "later try may not meet (an outage, a timeout).",
)
@bwlimit_option
@click.pass_context
def files_download(
    ctx: click.Context,
    remote: str,
    dest: Path,
    sandbox_key: str,
    domain: str,
    access_token: str,
    data_plane_scheme: str,
    checksum: bool,
    keep_partial: bool,
    bwlimit: str | None,
) -> None:
    """Download REMOTE (an absolute path in the sandbox) to DEST, resuming after failures.

    DEST may be a directory: the file keeps its remote base name. DEST appears only once
    whole. Interrupted (Ctrl-C, SIGTERM) or failed, the bytes so far stay beside it in
    `.NAME.part` (with its sidecar `.NAME.part.json`) where the data center resumes, and
    the same command continues from there (the last line says where and gives it).
    --no-keep-partial removes them, but after a failure a later try may not meet.
    """
    settings: Settings = ctx.obj
    command = resume_command(ctx, remote, dest)
    if dest.is_dir():
        dest = dest / (remote.rstrip("/").rsplit("/", 1)[-1] or "download")
    console = Console(stderr=True)

    async def work() -> sandboxkit.DownloadResult:
        # The bar exists before the client, so that a client option can feed it (a retry
        # hook calling `bar.waiting`).
        with transfer_progress(console) as progress:
            bar = TransferBar(progress, f"download {remote}")
            client, sandbox = _open_sandbox(
                settings,
                sandbox_key,
                domain,
                access_token,
                data_plane_scheme,
                on_retry=bar.on_retry,
                budgets=budgets_of(bwlimit),
            )
            async with client:
                result = await sandbox.files.download(
                    remote,
                    dest,
                    progress=bar,
                    checksum=checksum,
                    keep_partial=keep_partial,
                )
            bar.finish(result.size)
        return result

    # Looked at once the cancelled download has ended: the partial file it kept (where the
    # data center resumes) and the command that continues it, or that it was removed.
    result = settings.run(
        work,
        where=remote_place(remote, sandbox_key),
        stopped=lambda: download_stopped(dest, command),
        left=lambda error: download_left(dest, command, error),
    )
    click.echo(download_line(result))


@files.command("upload")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("remote")
@_sandbox_options
@bwlimit_option
@click.pass_obj
def files_upload(
    settings: Settings,
    source: Path,
    remote: str,
    sandbox_key: str,
    domain: str,
    access_token: str,
    data_plane_scheme: str,
    bwlimit: str | None,
) -> None:
    """Upload the local file SOURCE to REMOTE (an absolute path; its directory must exist)."""
    console = Console(stderr=True)

    async def work() -> tuple[sandboxkit.UploadResult, str]:
        with transfer_progress(console) as progress:  # before the client: see download
            bar = TransferBar(progress, f"upload {source.name}")
            client, sandbox = _open_sandbox(
                settings,
                sandbox_key,
                domain,
                access_token,
                data_plane_scheme,
                on_retry=bar.on_retry,
                budgets=budgets_of(bwlimit),
            )
            async with client:
                result = await sandbox.files.upload(remote, source, progress=bar)
            bar.finish(result.size)
        return result, await anyio.to_thread.run_sync(sha256_of, source)

    stopped = f"the upload of {remote} did not finish; run it again (an upload is safe to repeat)"
    result, digest = settings.run(work, where=remote_place(remote, sandbox_key), stopped=stopped)
    click.echo(upload_line(result, digest))
