"""The CLI's data-plane, emulator and demo commands, end to end against real servers."""

from __future__ import annotations

import asyncio
import hashlib
import shlex
import signal
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner

from sandboxkit._transfer.sinks import WRITE_BATCH, PartOf, open_part
from sandboxkit.cli import _app, cli
from sandboxkit.cli._progress import TransferBar, format_size
from sandboxkit.emulator import Fault
from tests.cli_support import (
    EmulatorThread,
    Lines,
    assert_one_line_error,
    cli_process,
    invoke,
    size_units,
    wait_for,
)
from tests.http.test_cancel_twice import TOTAL, HoldingServer

MiB = 1 << 20
T = TypeVar("T")
SECRET = "tok-never-shown"


def write_pattern(path: Path, size: int) -> str:
    """Write `size` bytes a MiB at a time and return their sha256."""
    digest = hashlib.sha256()
    block = bytes(range(256)) * (MiB // 256)
    with path.open("wb") as sink:
        for start in range(0, size, MiB):
            piece = block[: min(MiB, size - start)]
            digest.update(piece)
            sink.write(piece)
    return digest.hexdigest()


def test_upload_then_download_round_trip(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    """Upload and download print a final line with size, attempts, resumes and a matching
    sha256."""
    env = emulator_thread.sandbox_env()
    source = tmp_path / "in.bin"
    digest = write_pattern(source, 3 * MiB + 5)
    up = invoke(emulator_thread, "files", "upload", str(source), "/home/user/in.bin", env=env)
    assert up.exit_code == 0, up.output
    assert f"sha256={digest}" in up.stdout and "uploaded 3.0 MiB" in up.stdout
    assert "attempts=1 resumes=0" in up.stdout  # the UploadResult's count
    emulator_thread.emu.faults.script("files.download", Fault.cut(after_bytes=MiB))
    down = invoke(emulator_thread, "files", "download", "/home/user/in.bin", str(tmp_path), env=env)
    assert down.exit_code == 0, down.output
    line = down.stdout.strip()
    assert f"sha256={digest}" in line and "attempts=2 resumes=1" in line
    assert (tmp_path / "in.bin").read_bytes() == source.read_bytes()
    assert "download /home/user/in.bin" in down.stderr  # the bar's label


@pytest.mark.parametrize("command", ["download", "upload"])
def test_relative_remote_path_sends_nothing(
    emulator_thread: EmulatorThread, tmp_path: Path, command: str
) -> None:
    """A relative remote path exits 2 with one ValidationError line and no request."""
    env = emulator_thread.sandbox_env()
    local = tmp_path / "local.bin"
    local.write_bytes(b"x")
    args = ["home/user/x", str(local)] if command == "download" else [str(local), "home/user/x"]
    before = len(emulator_thread.emu.journal)
    result = invoke(emulator_thread, "files", command, *args, env=env)
    assert_one_line_error(result, 2, "ValidationError", "must be absolute")
    assert len(emulator_thread.emu.journal) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.bin"]


def test_sandbox_options_are_required(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    """Without --sandbox-key (or its env var) the usage error is one line, exit 2."""
    result = invoke(emulator_thread, "files", "download", "/home/user/x", str(tmp_path))
    assert_one_line_error(result, 2, "--sandbox-key")


def test_missing_remote_file_is_a_not_found_line(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    """A 404 from the data plane is one NotFoundError line; no partial file is left."""
    result = invoke(
        emulator_thread,
        "files",
        "download",
        "/home/user/none.bin",
        str(tmp_path),
        env=emulator_thread.sandbox_env(),
    )
    assert_one_line_error(result, 1, "NotFoundError", "status=404")
    assert list(tmp_path.iterdir()) == []


def test_download_256_mib_progress_advances_to_the_total(
    emulator_thread: EmulatorThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bar's callback sees byte counts that only grow and end at the 256 MiB total."""
    env = emulator_thread.sandbox_env()
    size = 256 * MiB
    remote_file = (
        emulator_thread.emu.sandbox_root(env["SANDBOXKIT_SANDBOX_KEY"]) / "home/user/big.bin"
    )
    digest = write_pattern(remote_file, size)
    seen: list[tuple[int, int | None]] = []
    original = TransferBar.__call__

    def recording(self: TransferBar, done: int, total: int | None) -> None:
        seen.append((done, total))
        original(self, done, total)

    monkeypatch.setattr(TransferBar, "__call__", recording)
    dest = tmp_path / "big.bin"
    try:
        result = invoke(
            emulator_thread, "files", "download", "/home/user/big.bin", str(dest), env=env
        )
        assert result.exit_code == 0, result.output
        assert f"downloaded 256.0 MiB to {dest}" in result.stdout
        assert f"sha256={digest}" in result.stdout
        assert len(seen) >= 16, "the bar should move many times, not jump once"
        done = [d for d, _ in seen]
        assert done == sorted(done) and done[0] < size
        assert seen[-1] == (size, size)
        assert {t for _, t in seen} == {size}
    finally:
        remote_file.unlink()
        dest.unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_signal_during_download_with_no_keep_partial_leaves_nothing(
    emulator_thread: EmulatorThread, tmp_path: Path, signum: signal.Signals, code: int, line: str
) -> None:
    """Ctrl-C (130) or SIGTERM (143) mid-download with --no-keep-partial: one line, no
    temporary file beside DEST."""
    env = {**emulator_thread.env(), **emulator_thread.sandbox_env()}
    remote = emulator_thread.emu.sandbox_root(env["SANDBOXKIT_SANDBOX_KEY"]) / "home/user/slow.bin"
    write_pattern(remote, 4 * MiB)
    # The first answer is cut after 1 MiB (now on disk in the temporary file); the resume
    # then hangs, and the signal arrives while it waits.
    emulator_thread.emu.faults.script("files.download", Fault.cut(after_bytes=MiB), Fault.delay(30))
    before = len(emulator_thread.emu.journal_for("files.download"))
    process = cli_process(
        "files", "download", "/home/user/slow.bin", str(tmp_path), "--no-keep-partial", env=env
    )
    try:
        wait_for(
            lambda: len(emulator_thread.emu.journal_for("files.download")) >= before + 2, "a resume"
        )
        # Partly written: the part and its sidecar.
        assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".part"]
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
        emulator_thread.emu.faults.clear()
    assert process.returncode == code, stderr
    dest = tmp_path / "slow.bin"
    said = f"{line}: the partial file was removed; {str(dest)!r} is as it was"
    assert stderr.splitlines() == [said]  # no blank line before it either
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_signal_during_download_keeps_the_part_and_the_command_it_prints_resumes(
    emulator_thread: EmulatorThread, tmp_path: Path, signum: signal.Signals, code: int, line: str
) -> None:
    """Ctrl-C (130) or SIGTERM (143) mid-download, by default: the partial file and its
    sidecar stay, and the one line names the part, what it holds and the command to run
    again (the options typed on the line included); run, that command asks only for the
    rest with Range, and DEST is the whole file."""
    sandbox = emulator_thread.sandbox_env()
    key, domain = sandbox.pop("SANDBOXKIT_SANDBOX_KEY"), sandbox.pop("SANDBOXKIT_SANDBOX_DOMAIN")
    env = {**emulator_thread.env(), **sandbox}  # the sandbox's key and domain come as flags
    remote = emulator_thread.emu.sandbox_root(key) / "home/user/slow.bin"
    digest = write_pattern(remote, 4 * MiB)
    # The first answer is cut after 1 MiB (then on disk in the partial file); the resume
    # hangs, and the signal arrives while it waits: the download is a quarter done.
    emulator_thread.emu.faults.script("files.download", Fault.cut(after_bytes=MiB), Fault.delay(30))
    journal = emulator_thread.emu.journal_for
    before = len(journal("files.download"))
    flags = ["--sandbox-key", key, "--domain", domain]
    args = ["files", "download", "/home/user/slow.bin", str(tmp_path), *flags]
    process = cli_process(*args, env=env)
    try:
        wait_for(lambda: len(journal("files.download")) >= before + 2, "a resume")
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
        emulator_thread.emu.faults.clear()
    assert process.returncode == code, stderr
    dest, part = tmp_path / "slow.bin", tmp_path / ".slow.bin.part"
    command = shlex.join(["sandboxkit", *args])
    said = (
        f"{line}: kept the partial file {str(part)!r} (1.0 MiB of 4.0 MiB); {str(dest)!r} is "
        f"as it was; to resume, run: {command}"
    )
    assert stderr.splitlines() == [said]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".slow.bin.part", ".slow.bin.part.json"]
    assert part.stat().st_size == MiB
    # The command as printed, run by this Python.
    program, *words = shlex.split(said.rsplit("to resume, run: ", 1)[1])
    assert program == "sandboxkit"
    asked = len(journal("files.download"))
    rerun = cli_process(*words, env=env)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, err
    assert [r.headers.get("Range") for r in journal("files.download")[asked:]] == [f"bytes={MiB}-"]
    assert "resumes=1" in out and f"sha256={digest}" in out
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest
    assert [p.name for p in tmp_path.iterdir()] == ["slow.bin"]


@pytest.mark.parametrize("keep", [True, False], ids=["keep-partial", "no-keep-partial"])
def test_a_failed_download_says_what_it_kept(
    emulator_thread: EmulatorThread, tmp_path: Path, keep: bool
) -> None:
    """A 500 after a cut (never retried) keeps the bytes before the cut by default, and the
    error line ends with where they are and the command that continues them; with
    --no-keep-partial nothing is left and the line is the error alone."""
    env = emulator_thread.sandbox_env()
    remote = emulator_thread.emu.sandbox_root(env["SANDBOXKIT_SANDBOX_KEY"]) / "home/user/f.bin"
    write_pattern(remote, 2 * MiB)
    emulator_thread.emu.faults.script(
        "files.download", Fault.cut(after_bytes=MiB), Fault.status(500)
    )
    args = ["files", "download", "/home/user/f.bin", str(tmp_path)]
    result = invoke(emulator_thread, *args, *([] if keep else ["--no-keep-partial"]), env=env)
    assert_one_line_error(result, 1, "InternalServerError", "status=500")
    line = result.stderr.strip()
    if keep:
        part = tmp_path / ".f.bin.part"
        kept = f"; kept the partial file {str(part)!r} (1.0 MiB of 2.0 MiB); to resume, run: "
        assert kept + shlex.join(["cli", *args]) == line[line.index("; kept") :]
        assert sorted(p.name for p in tmp_path.iterdir()) == [".f.bin.part", ".f.bin.part.json"]
    else:
        assert "kept" not in line and list(tmp_path.iterdir()) == []


def test_bad_input_says_nothing_of_a_part_it_never_opened(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    """A part an earlier run kept is no business of a command refused before it started (its
    line would offer itself, typo included, as the way to resume)."""
    dest = tmp_path / "f.bin"
    part = open_part(dest, PartOf("http://h", "/home/user/f.bin", None), resume=True)
    part.handle.write(b"x")
    part.record(2, True)
    part.handle.close()
    env = emulator_thread.sandbox_env()
    result = invoke(emulator_thread, "files", "download", "home/user/f.bin", str(dest), env=env)
    assert_one_line_error(result, 2, "ValidationError")
    assert "kept" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".f.bin.part", ".f.bin.part.json"]


def test_the_command_to_resume_repeats_what_was_typed_but_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command an interrupted download prints is this one as typed: REMOTE, DEST (one
    that looks like an option as a path), and the options given on the line, the group's
    anywhere on it included, in a fixed order; those from the environment stay there, and
    the token's value is never shown."""

    def interrupted(work: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_app, "run_cancellable", interrupted)
    monkeypatch.chdir(tmp_path)
    part = open_part(Path("-out.bin"), PartOf("http://h", "/home/user/a b.bin", None), resume=True)
    part.handle.write(b"x" * MiB)
    part.handle.flush()
    part.record(2 * MiB, True)
    part.handle.close()
    ca = tmp_path / "ca.pem"
    ca.write_text("unused: nothing is sent")
    typed = ["--debug", "files", "download", "/home/user/a b.bin", "./-out.bin"]
    typed += ["--token", SECRET, "--no-checksum", "--ca-file", str(ca), "--domain", "d"]
    env = {"SANDBOXKIT_SANDBOX_KEY": "k", "SANDBOXKIT_DATA_PLANE_SCHEME": "http"}
    result = CliRunner().invoke(cli, typed, env=env)
    assert result.exit_code == 130, result.output
    command = ["cli", "files", "download", "/home/user/a b.bin", "./-out.bin"]
    # Typed by their old names (hidden aliases), said by the SDK's.
    command += ["--ca-file", str(ca), "--debug", "--domain", "d", "--access-token", "..."]
    command += ["--no-checksum"]
    assert result.stderr.splitlines() == [
        "interrupted: kept the partial file '.-out.bin.part' (1.0 MiB of 2.0 MiB); '-out.bin' "
        f"is as it was; to resume, run: {shlex.join(command)}"
    ]


class _HoldingThread:
    """A `HoldingServer` (a download stops midway) on an event loop in a daemon thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.server: HoldingServer

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the server's loop and wait (at most 20 s) for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=20)

    async def _start(self) -> HoldingServer:
        server = HoldingServer()
        await server.start()
        return server

    def __enter__(self) -> _HoldingThread:
        self._thread.start()
        self.server = self.call(self._start())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.call(self.server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def env(self) -> dict[str, str]:
        """Environment naming a sandbox on this server for the `files` commands."""
        return {
            "SANDBOXKIT_SANDBOX_KEY": "s",
            "SANDBOXKIT_SANDBOX_DOMAIN": self.server.domain(),
            "SANDBOXKIT_SANDBOX_TOKEN": "t",
            "SANDBOXKIT_DATA_PLANE_SCHEME": "http",
        }


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
@pytest.mark.parametrize("keep", [True, False], ids=["keep-partial", "no-keep-partial"])
def test_a_second_signal_while_exiting_changes_nothing(
    tmp_path: Path, signum: signal.Signals, code: int, line: str, keep: bool
) -> None:
    """A second Ctrl-C or SIGTERM, sent once the download interrupted mid-body has let go
    of its partial file and said so, leaves the status, the one line of output and the
    directory unchanged: the part and its sidecar kept (by default; the token, typed on the
    line, is not in the command shown) or nothing left (--no-keep-partial)."""
    with _HoldingThread() as held:
        env = held.env()
        if keep:
            del env["SANDBOXKIT_SANDBOX_TOKEN"]
            extra = ["--access-token", SECRET]
        else:
            extra = ["--no-keep-partial"]
        args = ["files", "download", "/f.bin", str(tmp_path), *extra]
        with cli_process(*args, env=env) as process:
            stderr = Lines(process.stderr)
            try:
                held.call(held.server.holding.wait())
                # A first write batch is on disk: the cleanup has a writer thread to wait for.
                wait_for(lambda: _part_size(tmp_path) >= WRITE_BATCH, "a batch on disk")
                process.send_signal(signum)
                stderr.wait_for(f"{line}: ", prefix=True)  # the process is on its way out
                process.send_signal(signum)
                process.wait(timeout=20)
            finally:
                process.kill()
                process.wait()
            lines = stderr.all()
    assert process.returncode == code, lines
    dest = str(tmp_path / "f.bin")
    if keep:
        part = tmp_path / ".f.bin.part"
        kept = part.stat().st_size  # the first batch: the rest was never written
        assert WRITE_BATCH <= kept < TOTAL
        command = shlex.join(["sandboxkit", "files", "download", "/f.bin", str(tmp_path)])
        said = (
            f"{line}: kept the partial file {str(part)!r} ({format_size(kept)} of "
            f"{format_size(TOTAL)}); {dest!r} is as it was; to resume, run: {command} "
            "--access-token ..."
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == [".f.bin.part", ".f.bin.part.json"]
        assert part.read_bytes() == held.server.data[:kept]
    else:
        said = f"{line}: the partial file was removed; {dest!r} is as it was"
        assert list(tmp_path.iterdir()) == []
    assert lines == [said]
    assert SECRET not in "".join(lines)


def _part_size(directory: Path) -> int:
    parts = [p for p in directory.iterdir() if p.suffix == ".part"]
    return parts[0].stat().st_size if parts else 0


def test_emulator_command_serves_until_ctrl_c() -> None:
    """`sandboxkit emulator` prints its address, answers requests, and stops on Ctrl-C."""
    process = cli_process("emulator", env={})
    try:
        assert process.stdout is not None
        lines: list[str] = []
        while not any(line.startswith("  export SANDBOXKIT_DATA_PLANE_SCHEME") for line in lines):
            line = process.stdout.readline()
            assert line, "the emulator exited early"
            lines.append(line)
        exports = [line.split()[1:] for line in lines if line.strip().startswith("export")]
        env = dict(item.split("=", 1) for item in exports[0])
        result = CliRunner().invoke(
            cli, ["builds", "list", "tpl-nothing"], env=env
        )  # a real answer from the served emulator: 404
        assert_one_line_error(result, 1, "NotFoundError", "status=404")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    assert "emulator stopped" in stderr and "Traceback" not in stderr


def test_emulator_bad_port_is_one_line() -> None:
    """An out-of-range --port is a one-line usage error, exit 2."""
    result = CliRunner().invoke(cli, ["emulator", "--port", "70000"])
    assert_one_line_error(result, 2, "--port")


def test_demo_runs_end_to_end(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`sandboxkit demo` exits 0, shows each step's evidence, and cleans its temp files."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["demo"], env={"COLUMNS": "200"})
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, result.output
    out = result.stdout
    for fragment in (
        "Step 1. Start the emulator",
        "Upload and download 64.0 MiB through faults",
        "replayed=False",
        "replayed=True",
        "same template and build ids: yes",
        "page 3: 2 of total 8",
        "finished: ready",
        "(the ERROR line is the emulated builder's: a step that failed without failing the "
        "build, which went on and is ready)",
        "Split flow",
        "status=waiting",
        "attempts=5 resumes=2",
        "faults injected (emu.faults.injected): 429x2, 502x2, cutx2",
        "sha256 matches: yes",
        "ValidationError",
        "none sent",
        "demo finished",
    ):
        assert fragment in out, fragment
    assert size_units(out) <= {"MiB", "KiB/s", "MiB/s", "GiB/s"}  # binary units only, bars included
    assert elapsed < 30
    assert list(tmp_path.iterdir()) == []


def test_demo_bad_size_is_one_line() -> None:
    """An invalid --size-mib is a one-line usage error, exit 2."""
    result = CliRunner().invoke(cli, ["demo", "--size-mib", "0"])
    assert_one_line_error(result, 2, "--size-mib")


def test_a_retry_shows_on_the_bar_as_the_wait_and_its_reason(
    emulator_thread: EmulatorThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 502 mid-download reaches the bar through the client's `on_retry` hook as
    "retrying in N s after 502" (the delay the retry loop is about to wait)."""
    env = emulator_thread.sandbox_env()
    remote_file = (
        emulator_thread.emu.sandbox_root(env["SANDBOXKIT_SANDBOX_KEY"]) / "home/user/r.bin"
    )
    remote_file.write_bytes(b"r" * 1000)
    waits: list[tuple[float, str]] = []
    original = TransferBar.waiting

    def recording(self: TransferBar, seconds: float, reason: str) -> None:
        waits.append((seconds, reason))
        original(self, seconds, reason)

    monkeypatch.setattr(TransferBar, "waiting", recording)
    emulator_thread.emu.faults.script("files.download", Fault.status(502))
    result = invoke(
        emulator_thread, "files", "download", "/home/user/r.bin", str(tmp_path / "r"), env=env
    )
    assert result.exit_code == 0, result.output
    assert [reason for _, reason in waits] == ["502"]
    assert 0.0 <= waits[0][0] <= 0.5  # the default policy's first backoff bound
    assert (tmp_path / "r").read_bytes() == b"r" * 1000


def test_options_are_taken_wherever_a_user_types_them(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    """The console's options after the command, the sandbox's before it: both work, with no
    SANDBOXKIT_* variable to fall back on."""
    unset: dict[str, str | None] = {
        name: None for name in [*emulator_thread.env(), *emulator_thread.sandbox_env()]
    }
    sandbox = emulator_thread.sandbox_env()
    flags = [
        "--sandbox-key",
        sandbox["SANDBOXKIT_SANDBOX_KEY"],
        f"--domain={sandbox['SANDBOXKIT_SANDBOX_DOMAIN']}",
        "--access-token",
        sandbox["SANDBOXKIT_SANDBOX_TOKEN"],
        "--data-plane-scheme",
        "http",
    ]
    source = tmp_path / "in.txt"
    source.write_bytes(b"typed anywhere\n")
    runner = CliRunner()
    up = runner.invoke(
        cli, [*flags, "files", "upload", str(source), "/home/user/in.txt"], env=unset
    )
    assert up.exit_code == 0, up.output
    console = ["--api-key", emulator_thread.emu.api_key, "--base-url", emulator_thread.emu.base_url]
    sizes = ["--cpu-count", "1", "--memory-mb", "512", "--disk-size-mb", "1024"]
    created = runner.invoke(cli, ["templates", "create", "anywhere", *sizes, *console], env=unset)
    assert created.exit_code == 0, created.output
    assert emulator_thread.emu.journal[-1].route == "templates.create"
    down = runner.invoke(
        cli,
        ["files", "download", "/home/user/in.txt", str(tmp_path / "out.txt"), "--debug", *flags],
    )
    assert down.exit_code == 0, down.output
    assert (tmp_path / "out.txt").read_bytes() == b"typed anywhere\n"
    # Any option of the command, typed before it (its old hidden spelling and a flag's
    # negative form too), goes to the command: the options are read from the command itself.
    token = sandbox["SANDBOXKIT_SANDBOX_TOKEN"]
    old_names = ["--token", token, "--no-checksum", "--no-keep-partial", *flags[:3], *flags[5:]]
    again = runner.invoke(
        cli, [*old_names, "files", "download", "/home/user/in.txt", str(tmp_path / "again.txt")]
    )
    assert again.exit_code == 0, again.output
    assert (tmp_path / "again.txt").read_bytes() == b"typed anywhere\n"
    assert "sha256=-" in again.output  # --no-checksum reached the command: no hash


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("fast", "is not a bandwidth"),
        ("1:2:3", "more than two parts"),
        ("08:00,512k", "timetables are not supported"),
    ],
)
@pytest.mark.parametrize("command", ["download", "upload"])
def test_a_bad_bwlimit_sends_nothing(
    emulator_thread: EmulatorThread, tmp_path: Path, command: str, value: str, says: str
) -> None:
    """`--bwlimit` is read as rclone reads it; a value it would refuse is a one-line usage
    error, exit 2, before any request."""
    env = emulator_thread.sandbox_env()
    local = tmp_path / "local.bin"
    local.write_bytes(b"x")
    args = ["/home/user/x", str(local)] if command == "download" else [str(local), "/home/user/x"]
    before = len(emulator_thread.emu.journal)
    result = invoke(emulator_thread, "files", command, *args, "--bwlimit", value, env=env)
    assert_one_line_error(result, 2, "--bwlimit", says)
    assert len(emulator_thread.emu.journal) == before


def test_bwlimit_paces_both_commands(
    emulator_thread: EmulatorThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`--bwlimit UP:DOWN` limits each direction: a DEBUG line names the limits in effect,
    and 1 MiB each way takes at least the time its limit implies."""
    env = emulator_thread.sandbox_env()
    source = tmp_path / "in.bin"
    write_pattern(source, MiB)
    caplog.set_level("DEBUG", logger="sandboxkit")
    started = time.monotonic()
    up = invoke(emulator_thread, "files", "upload", str(source), "/home/user/in.bin",
                "--bwlimit", "4M:8M", env=env)  # fmt: skip
    assert up.exit_code == 0, up.output
    assert time.monotonic() - started >= (MiB - (256 << 10)) / (4 * MiB)
    started = time.monotonic()
    down = invoke(emulator_thread, "files", "download", "/home/user/in.bin", str(tmp_path / "o"),
                  "--bwlimit", "4M:8M", env=env)  # fmt: skip
    assert down.exit_code == 0, down.output
    assert time.monotonic() - started >= (MiB - (256 << 10)) / (8 * MiB)
    assert (tmp_path / "o").read_bytes() == source.read_bytes()
    assert "budgets in effect: download 8 MiB/s, upload 4 MiB/s, requests off" in caplog.text
