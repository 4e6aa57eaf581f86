"""The click group, its settings, and the one place where errors become exit codes.

Exit codes: 0 success, 1 a service or transport error, 2 bad input (a `ValidationError`
or a usage error; nothing was sent), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import ssl
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

import attrs
import click

import sandboxkit
from sandboxkit._core import environment as env

__all__ = [
    "EXIT_API",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "HostWarnings",
    "Renamed",
    "Settings",
    "cli",
    "describe",
    "fail",
    "main",
    "renamed_option",
    "run_cancellable",
]

T = TypeVar("T")

EXIT_API = 1
EXIT_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
# What `run_cancellable` turns into the task's cancellation: Ctrl-C, and a request to stop.
_SIGNALS = (signal.SIGINT, signal.SIGTERM)

# Placeholders for the control plane when only the data plane is used: `Client` requires an
# API key and a base URL, but `files` commands never send anything to the console.
# `.invalid` is reserved (RFC 2606): this name can never reach a real host.
_UNUSED_BASE_URL = "https://console.invalid"
_UNUSED_API_KEY = "unused-by-data-plane-commands"


class Renamed(click.Option):
    """An option that still answers to its old spellings (`old`), which no help text or
    error message shows: `--help` lists only its current names, the SDK's parameter's."""

    def __init__(self, *args: Any, old: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.old = frozenset(old)

    def _shown(self, show: Callable[[], T]) -> T:
        every = self.opts
        self.opts = [name for name in every if name not in self.old]
        try:
            return show()
        finally:
            self.opts = every

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        """The help line, without the old spellings."""
        return self._shown(lambda: super(Renamed, self).get_help_record(ctx))

    def get_error_hint(self, ctx: Any) -> str:
        """How an error names the option: by its current names only."""
        return self._shown(lambda: super(Renamed, self).get_error_hint(ctx))


def renamed_option(
    name: str, *old: str, **options: Any
) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """`click.option(name, **options)` that also takes the `old` spellings, hidden (see
    `Renamed`): the CLI's options are the SDK's parameter names, and scripts written for
    the names before keep running."""
    return click.option(name, *old, cls=Renamed, old=old, **options)


@attrs.frozen
class Settings:
    """The global options, shared by every command through click's context object."""

    api_key: str | None
    base_url: str | None
    ca_file: str | None
    debug: bool

    def ssl_option(self) -> ssl.SSLContext | bool:
        """An SSL context trusting `--ca-file` (the emulator's CA with `--tls`), else True."""
        if self.ca_file is None:
            return True
        return ssl.create_default_context(cafile=self.ca_file)

    def client(self, *, control_plane: bool = True, **options: Any) -> sandboxkit.Client:
        """A `Client` from the settings; `options` are passed through.

        Raises:
            click.UsageError: no API key or base URL for a command that needs the console.
        """
        api_key, base_url = self.api_key, self.base_url
        if control_plane:
            if not api_key:
                raise click.UsageError(f"no API key: pass --api-key or set {env.API_KEY}")
            if not base_url:
                raise click.UsageError(f"no base URL: pass --base-url or set {env.BASE_URL}")
        return sandboxkit.Client(
            api_key=api_key or _UNUSED_API_KEY,
            base_url=base_url or _UNUSED_BASE_URL,
            ssl=self.ssl_option(),
            **options,
        )

    def run(
        self,
        work: Callable[[], Awaitable[T]],
        *,
        where: str | None = None,
        stopped: str | Callable[[], str] | None = None,
        left: Callable[[Exception], str | None] | None = None,
    ) -> T:
        """Run `work()` in a fresh event loop, turning failures into one line and an exit code.

        `where` names what the work was on (a transfer's remote path and sandbox), for the
        error line; `left`, called with the error once the work has failed, what it left
        behind (a partial file kept to resume), for the end of that line. Ctrl-C and
        SIGTERM cancel the running task (so transfers clean up their temporary files, or
        keep them to resume) and exit 130 and 143, with one line that says so and, after a
        colon, `stopped`: what was cleaned up and what is kept (a function is called once
        the cancelled work has ended, to look).
        """
        try:
            return run_cancellable(work)
        except KeyboardInterrupt:
            click.echo(f"interrupted{_suffix(stopped)}", err=True)
            raise SystemExit(EXIT_INTERRUPTED) from None
        except asyncio.CancelledError:
            click.echo(f"terminated{_suffix(stopped)}", err=True)
            raise SystemExit(EXIT_TERMINATED) from None
        except click.ClickException:
            raise
        except Exception as exc:
            fail(exc, debug=self.debug, where=where, left=left(exc) if left is not None else None)


def _suffix(stopped: str | Callable[[], str] | None) -> str:
    said = stopped() if callable(stopped) else stopped
    return f": {said}" if said else ""


def run_cancellable(work: Callable[[], Awaitable[T]]) -> T:
    """`asyncio.run(work())`, where Ctrl-C and SIGTERM both cancel the task.

    SIGTERM would otherwise kill the process outright, skipping the cleanup that cancellation
    runs (a download's temporary file). The first Ctrl-C or SIGTERM decides the outcome:
    `KeyboardInterrupt` for Ctrl-C, `CancelledError` for SIGTERM; any later one is ignored
    (see `_Interrupts`).
    """
    interrupts = _Interrupts()
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(_call(work, interrupts))  # only the main thread gets signals
    previous = {signum: signal.signal(signum, interrupts) for signum in _SIGNALS}
    try:
        return asyncio.run(_call(work, interrupts))
    except asyncio.CancelledError:
        if interrupts.first == signal.SIGINT:
            raise KeyboardInterrupt from None
        raise
    finally:
        if interrupts.first is None:  # after one the process is on its way out: still ignored
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


class _Interrupts:
    """The signal handler of `run_cancellable`: the first signal cancels the task.

    From then on both signals are ignored until the process ends, so the cleanup under way
    runs to its end and the exit status stays the first one's. asyncio's own handling raised
    `KeyboardInterrupt` on a second Ctrl-C wherever the loop happened to be, cutting the
    cleanup short (a `.part` left behind) or breaking the loop's teardown (`'NoneType' object
    has no attribute 'fileno'`); after the loop, the default handlers killed the process with
    another status.
    """

    def __init__(self) -> None:
        self.first: int | None = None
        self.cancel: Callable[[], object] | None = None  # set while the task runs

    def __call__(self, signum: int, frame: object) -> None:
        for each in _SIGNALS:
            # SIG_IGN, unlike a handler of ours, stays in force through the interpreter's
            # own teardown.
            signal.signal(each, signal.SIG_IGN)
        self.first = signum
        if self.cancel is not None:
            self.cancel()


async def _call(work: Callable[[], Awaitable[T]], interrupts: _Interrupts) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    # The handler runs between any two bytecodes, the loop's own included: it only queues
    # the cancellation (which also wakes the loop from its wait for I/O).
    interrupts.cancel = functools.partial(loop.call_soon_threadsafe, task.cancel)
    try:
        if interrupts.first is not None:  # it came before the handler could cancel
            task.cancel()
        return await work()
    finally:
        interrupts.cancel = None


def describe(exc: BaseException, where: str | None = None) -> str:
    """One line naming the error's class, status, request id, what failed and the message.

    `where` (e.g. ``/home/user/a.bin on sbx-1``, a transfer's remote path and sandbox) goes
    just before the message. Examples: ``NotFoundError: status=404 request_id=req-1f:
    template not found``, ``NotFoundError: status=404: /home/user/a.bin on sbx-1: file not
    found``.
    """
    name = type(exc).__name__
    place = f"{where}: " if where else ""
    if isinstance(exc, sandboxkit.APIError):
        facts = [f"status={exc.status}"]
        if exc.code is not None:
            facts.append(f"code={exc.code}")
        if exc.request_id:
            facts.append(f"request_id={exc.request_id}")
        text = f"{name}: {' '.join(facts)}: {place}{exc.message}"
    elif isinstance(exc, sandboxkit.ValidationError):
        text = f"{name}: {place}{exc} (nothing was sent)"
    else:
        text = f"{name}: {place}{exc}" if str(exc) else f"{name}: {where}" if where else name
    # Multi-line service messages would break "one line"; fold them.
    return " ".join(text.split())


def exit_code(exc: BaseException) -> int:
    """2 for bad input caught before sending, 1 for everything else."""
    return EXIT_INPUT if isinstance(exc, sandboxkit.ValidationError) else EXIT_API


def fail(
    exc: BaseException, *, debug: bool, where: str | None = None, left: str | None = None
) -> NoReturn:
    """Print `exc` as one line on stderr (and its traceback with `--debug`), then exit;
    `left` (what the failed work left behind) ends the line, after a semicolon."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    after = f"; {left}" if left else ""
    click.echo(f"error: {describe(exc, where)}{after}", err=True)
    raise SystemExit(exit_code(exc))


# click >= 8.2 raises this for a group called without a command; 8.1 prints help itself.
_NO_ARGS_IS_HELP: tuple[type[click.UsageError], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)


# Options a user types anywhere on the line: click knows an option only at its own level,
# so `sandboxkit files download ... --api-key K` and `sandboxkit --access-token T files
# download ...` were usage errors. Which options exist, and which take a value, is read from
# the commands themselves (`option_arity`), so no list here can fall behind them.


def option_arity(command: click.Command) -> dict[str, bool]:
    """Every spelling of `command`'s options (hidden old ones too), each with whether it
    takes a value (a flag or a counter does not)."""
    arity: dict[str, bool] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            takes = not (param.is_flag or param.count)
            arity.update(dict.fromkeys([*param.opts, *param.secondary_opts], takes))
    return arity


def place_options(
    args: Sequence[str], leaf: Mapping[str, bool], group: Mapping[str, bool]
) -> list[str]:
    """`args` with the group's options moved before the command, and the command's own
    (`leaf`, the command `args` name) after it; an option both take stays the command's.
    Order is kept within each; nothing after `--` is touched."""
    cut = args.index("--") if "--" in args else len(args)
    head: list[str] = []
    middle: list[str] = []
    tail: list[str] = []
    at = 0
    while at < cut:
        arg = args[at]
        name = arg.split("=", 1)[0]
        if name in leaf:
            into, takes_value = tail, leaf[name]
        elif name in group:
            into, takes_value = head, group[name]
        else:
            middle.append(arg)
            at += 1
            continue
        width = 2 if takes_value and "=" not in arg and at + 1 < cut else 1
        into.extend(args[at : at + width])
        at += width
    return [*head, *middle, *tail, *args[cut:]]


def _leaf_options(group: click.Group, args: Sequence[str]) -> dict[str, bool]:
    """The options of the command `args` name (none when they name only the group)."""
    command: click.Command = group
    for arg in args:
        if arg == "--":
            break
        if isinstance(command, click.Group) and arg in command.commands:
            command = command.commands[arg]
    return {} if command is group else option_arity(command)


class _Group(click.Group):
    """A group whose usage errors are one line too, whose Ctrl-C exits 130, and whose
    options (and the sandbox's) may be typed anywhere on the line (`place_options`)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Parse and run like click, but print usage errors as one line."""
        given = sys.argv[1:] if args is None else list(args)
        args = place_options(given, _leaf_options(self, given), option_arity(self))
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:  # a bare group: its help is the answer, not an error
            click.echo(exc.format_message(), err=True)
            code = exc.exit_code
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {exc.format_message()}{hint}", err=True)
            code = exc.exit_code
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            code = exc.exit_code
        except click.Abort:  # click's translation of Ctrl-C while parsing or prompting
            click.echo("interrupted", err=True)
            code = EXIT_INTERRUPTED
        else:
            code = result if isinstance(result, int) else 0
        if not standalone_mode:
            return code
        sys.exit(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--api-key",
    envvar=env.API_KEY,
    show_envvar=True,
    help="API key or OAuth access token for the console.",
)
@click.option(
    "--base-url",
    envvar=env.BASE_URL,
    show_envvar=True,
    help="Console address hosting /api/v1 and /api/v2.",
)
@click.option(
    "--ca-file",
    envvar=env.CA_FILE,
    show_envvar=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Extra CA certificate to trust (e.g. the one `sandboxkit emulator --tls` prints).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and the SDK's retry log.")
@click.version_option(sandboxkit.__version__, prog_name="sandboxkit")
@click.pass_context
def cli(
    ctx: click.Context, api_key: str | None, base_url: str | None, ca_file: str | None, debug: bool
) -> None:
    """sandboxkit: templates, builds and file transfer on the sandbox service.

    Run `sandboxkit demo` to see everything work against the built-in emulator.
    """
    _configure_logging(debug)
    ctx.obj = Settings(api_key=api_key, base_url=base_url, ca_file=ca_file, debug=debug)


class HostWarnings(logging.Handler):
    """Shows `sandboxkit.hosts` warnings (a host down, a call waiting for it, the host back)
    as `warning: ...` lines on stderr: without them a wait for a host that went down looks
    like a hang. Retries are not shown: a transfer's bar already counts down its retry."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            # sys.stderr at the time of the record: rich swaps it while a bar is drawn, so the
            # line lands above the bar instead of through it.
            print(f"warning: {record.getMessage()}", file=sys.stderr, flush=True)
        except Exception:  # pragma: no cover - a closed stderr must not fail the call
            self.handleError(record)


def _configure_logging(debug: bool) -> None:
    # The `sandboxkit` logger has a NullHandler, so retries stay off stderr unless asked:
    # --debug shows them and the DEBUG line of every request and answer (allowlisted
    # headers only, never a token). A host's state is shown either way (HostWarnings).
    hosts = logging.getLogger("sandboxkit.hosts")
    for handler in [h for h in hosts.handlers if isinstance(h, HostWarnings)]:
        hosts.removeHandler(handler)  # CliRunner runs many commands in one process
    if debug:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
        logging.getLogger("sandboxkit").setLevel(logging.DEBUG)
    else:
        hosts.addHandler(HostWarnings())


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="sandboxkit")
