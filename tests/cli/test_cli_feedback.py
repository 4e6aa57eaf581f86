"""What the CLI says while it waits and when it fails (issue 17, item 5).

A followed build that has not started says so and how to start it; a transfer's error line
names the remote path and the sandbox; sizes and speeds are in the unit that suits them (B,
KiB, MiB), the bar's two numbers in its total's; a bar cut
short by an error leaves no line, blank or not, before the error; and a retry's wait
replaces the bar's speed. End to end against the emulator on loopback, except the last,
whose hook is not wired yet: its test calls the bar directly.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

import sandboxkit
from sandboxkit.cli._app import describe
from sandboxkit.cli._progress import TransferBar, format_rate, format_size, new_progress
from sandboxkit.emulator import Fault, Idc, ManualClock
from tests.cli_support import (
    EmulatorThread,
    Lines,
    assert_one_line_error,
    cli_process,
    invoke,
    screen,
    size_units,
    wait_for,
)

MiB = 1 << 20
BUILD_SECONDS = 10.0
LOGS = "builds.logs"


@pytest.fixture
def clocked() -> Iterator[tuple[EmulatorThread, ManualClock]]:
    """An emulator thread whose builds move only when the test advances its clock."""
    clock = ManualClock()
    with EmulatorThread(idcs=[Idc("cli-1")], build_seconds=BUILD_SECONDS, clock=clock) as emu:
        yield emu, clock


def _create(emu: EmulatorThread, name: str, *extra: str) -> tuple[str, str]:
    result = invoke(emu, "templates", "create", name, "--product", "sku-small", "--json", *extra)
    assert result.exit_code == 0, result.output
    created = json.loads(result.stdout)
    return created["id"], created["build_id"]


# --- a followed build that has not started -------------------------------------------------


def test_follow_says_once_that_a_build_waits_to_be_started(
    clocked: tuple[EmulatorThread, ManualClock],
) -> None:
    """A split-flow build nobody started: one line on stderr naming the command that starts
    it, the follow goes on, and once started its logs flow to the end (exit 0)."""
    emu, clock = clocked
    template_id, build_id = _create(emu, "unstarted", "--split")
    note = (
        f"build {build_id} is waiting: it has not started; start it with "
        f"`sandboxkit builds start {template_id} {build_id}`"
    )
    args = ["builds", "logs", template_id, build_id, "--follow"]
    with cli_process(*args, env=emu.env()) as process:
        stdout, stderr = Lines(process.stdout), Lines(process.stderr)
        try:
            stderr.wait_for(note)
            # Still following: two polls of the logs since the look that found none.
            wait_for(lambda: len(emu.emu.journal_for(LOGS)) >= 3, "two polls of the logs")
            assert process.poll() is None
            started = invoke(emu, "builds", "start", template_id, build_id)
            assert started.exit_code == 0, started.output
            clock.advance(BUILD_SECONDS)  # the build runs to its end at once
            process.wait(timeout=30)
        finally:
            process.kill()
            process.wait()
        out, err = stdout.all(), stderr.all()
    assert process.returncode == 0, (out, err)
    assert f"build {build_id} queued" in out[0] and "finished: ready" in out[-1]
    assert err == [note]


def test_logs_of_a_build_with_no_entries_say_so_instead_of_nothing(
    clocked: tuple[EmulatorThread, ManualClock],
) -> None:
    """Without --follow, an empty answer printed nothing and exited 0: a build nobody
    started says how to start it, one with no entries at a level says that."""
    emu, _clock = clocked
    template_id, build_id = _create(emu, "unread", "--split")
    empty = invoke(emu, "builds", "logs", template_id, build_id)
    assert (empty.exit_code, empty.stdout) == (0, "")
    assert empty.stderr.splitlines() == [
        f"build {build_id} is waiting: it has not started; start it with "
        f"`sandboxkit builds start {template_id} {build_id}`"
    ]
    started = invoke(emu, "builds", "start", template_id, build_id)
    assert started.exit_code == 0, started.output
    quiet = invoke(emu, "builds", "logs", template_id, build_id, "--level", "error")
    assert quiet.exit_code == 0 and quiet.stdout == ""
    assert quiet.stderr.splitlines() == [f"build {build_id} has no log entries at level error yet"]


def test_follow_of_a_started_build_still_queued_says_nothing(
    clocked: tuple[EmulatorThread, ManualClock],
) -> None:
    """A started build queued for a builder is `waiting` too, but it has logged: no note,
    even when --level hides every line it has logged so far."""
    emu, clock = clocked
    template_id, build_id = _create(emu, "queued", "--command", "make")
    assert emu.emu.build_status(build_id) == "waiting"
    args = ["builds", "logs", template_id, build_id, "--follow", "--level", "error"]
    with cli_process(*args, env=emu.env()) as process:
        stdout, stderr = Lines(process.stdout), Lines(process.stderr)
        try:
            wait_for(lambda: len(emu.emu.journal_for(LOGS)) >= 3, "two polls of the logs")
            clock.advance(BUILD_SECONDS)
            process.wait(timeout=30)
        finally:
            process.kill()
            process.wait()
        out, err = stdout.all(), stderr.all()
    assert process.returncode == 0, (out, err)
    assert err == []
    assert out and {line.split()[1] for line in out} == {"ERROR"}


# --- a transfer's error names the remote path and the sandbox ---------------------------------


@pytest.mark.parametrize("command", ["download", "upload"])
def test_transfer_error_names_the_remote_path_and_sandbox(
    emulator_thread: EmulatorThread, tmp_path: Path, command: str
) -> None:
    """A 404 from the data plane is one line with the remote path and the sandbox key."""
    env = emulator_thread.sandbox_env()
    local = tmp_path / "local.bin"
    local.write_bytes(b"x")
    if command == "download":
        remote = "/home/user/missing.bin"
        args = [remote, str(tmp_path / "out.bin")]
    else:
        remote = "/home/user/no-such-dir/x.bin"
        args = [str(local), remote]
    result = invoke(emulator_thread, "files", command, *args, env=env)
    place = f"{remote} on {env['SANDBOXKIT_SANDBOX_KEY']}"
    assert_one_line_error(result, 1, f"error: NotFoundError: status=404: {place}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.bin"]


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            sandboxkit.NotFoundError("gone", status=404, surface="v2", request_id="r-1"),
            "NotFoundError: status=404 request_id=r-1: /a.bin on sbx-1: gone",
        ),
        (sandboxkit.APIConnectionError("reset"), "APIConnectionError: /a.bin on sbx-1: reset"),
        (sandboxkit.APITimeoutError(""), "APITimeoutError: /a.bin on sbx-1"),
        (
            sandboxkit.ValidationError("bad"),
            "ValidationError: /a.bin on sbx-1: bad (nothing was sent)",
        ),
    ],
)
def test_describe_names_where_before_the_message(error: BaseException, line: str) -> None:
    """`where` goes after the class and status facts, before the message, for every kind."""
    assert describe(error, "/a.bin on sbx-1") == line


# --- one unit system ------------------------------------------------------------------------


def test_size_units_sees_every_unit() -> None:
    """The checker itself: it finds the units rich and the old lines printed."""
    text = "4.9 KiB 5.0/5.0 kB 3.1 MB/s 2 GiB 5 bytes 12 B 0.28 s 3.0/3.0 MiB 1.5 MiB/s"
    assert size_units(text) == {"KiB", "kB", "MB/s", "GiB", "bytes", "B", "MiB", "MiB/s"}


@pytest.mark.parametrize(
    ("size", "shown", "units"),
    [
        (100, "100 B", {"B", "B/s", "KiB/s", "MiB/s"}),
        (5000, "4.9 KiB", {"KiB", "KiB/s", "MiB/s"}),
        (3 * MiB + 5, "3.0 MiB", {"MiB", "MiB/s", "GiB/s"}),
    ],
)
def test_sizes_and_speeds_are_in_the_unit_that_suits_them(
    emulator_thread: EmulatorThread, tmp_path: Path, size: int, shown: str, units: set[str]
) -> None:
    """Upload and download print a size in the largest binary unit it reaches (a 5,000-byte
    file is `4.9 KiB`, not `0.005 MiB`), in the bar (done/total in the total's unit) and in
    the final line; a speed likewise. The speed's unit depends on the machine, so it is only
    checked to be one of the sensible ones."""
    env = emulator_thread.sandbox_env()
    source = tmp_path / "in.bin"
    source.write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    up = invoke(emulator_thread, "files", "upload", str(source), "/home/user/in.bin", env=env)
    down = invoke(
        emulator_thread, "files", "download", "/home/user/in.bin", str(tmp_path / "out"), env=env
    )
    number, unit = shown.split()
    for result, verb in ((up, "uploaded"), (down, "downloaded")):
        assert result.exit_code == 0, result.output
        assert re.match(rf"{verb} {re.escape(shown)} to .* \(\d+(\.\d)? \w+/s\)", result.stdout)
        assert f"{number}/{number} {unit}" in result.stderr  # the bar, at its end
        assert unit in size_units(result.stdout) <= units
        assert size_units(result.stderr) <= units


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (0, "0 B"),
        (1000, "1000 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (5000, "4.9 KiB"),
        (MiB - 1, "1.0 MiB"),
        (MiB, "1.0 MiB"),
        (64 * MiB, "64.0 MiB"),
        (3 << 30, "3.0 GiB"),
    ],
)
def test_format_size_picks_the_largest_unit_reached(size: int, shown: str) -> None:
    assert format_size(size) == shown
    assert format_rate(size) == f"{shown}/s"


# --- no blank line before an error ----------------------------------------------------------

TERMINAL = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "120"}


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_a_bar_cut_short_by_an_error_leaves_only_the_error_line(
    emulator_thread: EmulatorThread, tmp_path: Path, terminal: bool
) -> None:
    """A download that moved bytes, then failed: stderr is the error line alone, as a pipe
    reads it and as a terminal shows it (the bar erased, no blank line left)."""
    env = emulator_thread.sandbox_env()
    key = env["SANDBOXKIT_SANDBOX_KEY"]
    (emulator_thread.emu.sandbox_root(key) / "home/user/cut.bin").write_bytes(b"c" * 4 * MiB)
    emulator_thread.emu.faults.script(
        "files.download", Fault.cut(after_bytes=MiB), Fault.status(404)
    )
    result = invoke(
        emulator_thread,
        "files",
        "download",
        "/home/user/cut.bin",
        str(tmp_path),
        env={**env, **(TERMINAL if terminal else {})},
    )
    sent = emulator_thread.emu.journal_for("files.download")[-2:]
    assert [r.fault for r in sent] == ["cut", "404"]  # bytes moved, then the error
    # The bytes before the cut are kept (the default --keep-partial), and the line says so.
    fragments = ("NotFoundError", f"/home/user/cut.bin on {key}", "kept the partial file")
    if terminal:
        assert result.exit_code == 1, result.output
        assert "download /home/user/cut.bin" in result.stderr  # the bar was drawn
        shown = screen(result.stderr)
        assert len(shown) == 1 and shown[0].startswith("error: "), shown
        assert all(fragment in shown[0] for fragment in fragments)
    else:
        assert_one_line_error(result, 1, *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".cut.bin.part", ".cut.bin.part.json"]


def test_screen_applies_the_cursor_moves() -> None:
    """The terminal of the test above: it shows a blank line where one is left."""
    assert screen("\x1b[?25lbar\r\x1b[2K\n\x1b[?25h\rerror: x\n") == ["", "error: x"]
    assert screen("bar 1\nbar 2\n\x1b[?25h\r\x1b[1A\x1b[2K\x1b[1A\x1b[2Kerror: x\n") == ["error: x"]
    assert screen("\x1b[32mab\x1b[0mcd\rx") == ["xbcd"]
    with pytest.raises(AssertionError, match="does not know"):
        screen("\x1b[5J")


# --- a retry's wait replaces the speed ------------------------------------------------------


def test_waiting_shows_the_retry_instead_of_the_speed_until_bytes_move() -> None:
    """`TransferBar.waiting` counts down `retrying in N s after REASON` where the speed was
    (the ETA blanked), until bytes move again; `finish` ends it too."""
    now = [1000.0]
    console = Console(file=io.StringIO(), width=160, color_system=None)
    progress = new_progress(console, get_time=lambda: now[0])
    bar = TransferBar(progress, "download /f.bin")

    def shown() -> str:
        with console.capture() as capture:
            console.print(progress.get_renderable())
        return capture.get()

    bar(0, 300)  # a small total: bytes, not 0.000 MiB
    assert "0/300 B" in shown()
    bar(MiB, 4 * MiB)
    now[0] += 1.0
    bar(2 * MiB, 4 * MiB)
    assert "2.0/4.0 MiB" in shown() and "1.0 MiB/s" in shown() and "0:00:02" in shown()
    bar.waiting(2.5, "502")
    assert "retrying in 2.5 s after 502" in shown()
    assert "/s " not in shown() and "-:--:--" in shown()
    now[0] += 1.0
    bar(2 * MiB, 4 * MiB)  # a callback, but no byte moved: still waiting
    assert "retrying in 1.5 s after 502" in shown()
    now[0] += 2.0
    assert "retrying after 502" in shown()  # the wait is over, the try under way
    bar(3 * MiB, 4 * MiB)
    assert "retrying" not in shown() and "512.0 KiB/s" in shown()
    bar.waiting(1.0, "ServerDisconnectedError")
    assert "retrying in 1.0 s after ServerDisconnectedError" in shown()
    bar.finish(4 * MiB)
    assert "retrying" not in shown() and "4.0/4.0 MiB" in shown()
