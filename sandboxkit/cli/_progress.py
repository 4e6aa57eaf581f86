"""Progress bars for transfers, fed by the SDK's `(done_bytes, total_or_None)` callbacks.

One unit system: every size the CLI prints is in MiB and every speed in MiB/s (`format_mib`,
`format_rate`), in the bars as in the final lines, so figures can be compared at a glance.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import attrs
from rich.console import Console
from rich.progress import (
    BarColumn,
    GetTimeCallable,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

import sandboxkit

__all__ = [
    "MIB",
    "MiBColumn",
    "RateColumn",
    "TransferBar",
    "format_mib",
    "format_rate",
    "format_throughput",
    "new_progress",
    "transfer_progress",
]

MIB = 1 << 20


def _mib_number(size: float) -> str:
    # One decimal from 1 MiB up; three below, so a small file is not shown as 0.0.
    value = size / MIB
    return f"{value:.1f}" if value >= 1 or size == 0 else f"{value:.3f}"


def format_mib(size: float) -> str:
    """A byte count in MiB: `67108864` -> `64.0 MiB`, `5120` -> `0.005 MiB`."""
    return f"{_mib_number(size)} MiB"


def format_rate(bytes_per_second: float) -> str:
    """A speed in MiB/s: `52428800.0` -> `50.0 MiB/s`."""
    return f"{format_mib(bytes_per_second)}/s"


def format_throughput(size: float, seconds: float) -> str:
    """`size` bytes moved in `seconds`, in MiB/s (0 when no time passed)."""
    return format_rate(size / seconds if seconds > 0 else 0.0)


@attrs.frozen
class _Waiting:
    """A retry's wait, shown instead of the speed: until when, and after what (the task
    field `waiting`, None when there is none)."""

    until: float
    reason: str

    def text(self, now: float) -> str:
        left = self.until - now
        if left <= 0:  # the wait is over: the next try is on its way
            return f"retrying after {self.reason}"
        return f"retrying in {math.ceil(left * 10) / 10:.1f} s after {self.reason}"


class MiBColumn(ProgressColumn):
    """Bytes done of the total in MiB: `12.0/64.0 MiB` (`12.0 MiB` while the size is unknown)."""

    def render(self, task: Task) -> Text:
        """The column's text for `task`."""
        if task.total is None:
            text = format_mib(task.completed)
        else:
            text = f"{_mib_number(task.completed)}/{format_mib(task.total)}"
        return Text(text, style="progress.download")


class RateColumn(ProgressColumn):
    """The speed in MiB/s, or `retrying in N s after REASON` while a retry waits."""

    def render(self, task: Task) -> Text:
        """The column's text for `task`."""
        waiting = task.fields.get("waiting")
        if isinstance(waiting, _Waiting):
            return Text(waiting.text(task.get_time()), style="progress.remaining")
        speed = task.finished_speed or task.speed
        if speed is None:
            return Text("?", style="progress.data.speed")
        return Text(format_rate(speed), style="progress.data.speed")


class _EtaColumn(TimeRemainingColumn):
    """rich's time remaining, blank while a retry waits (the speed it divides by is stale)."""

    def render(self, task: Task) -> Text:
        """The column's text for `task`."""
        if isinstance(task.fields.get("waiting"), _Waiting):
            return Text("-:--:--", style="progress.remaining")
        return super().render(task)


def new_progress(console: Console, *, get_time: GetTimeCallable | None = None) -> Progress:
    """A rich `Progress` (not started) with the transfer columns: bar, MiB, MiB/s, ETA."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MiBColumn(),
        RateColumn(),
        _EtaColumn(),
        console=console,
        get_time=get_time,
    )


@contextmanager
def transfer_progress(console: Console) -> Iterator[Progress]:
    """A running `new_progress`; add one `TransferBar` per transfer.

    If the transfer fails the display leaves nothing behind, so the error line is all that
    remains, with no blank line before it. Hiding the bars is not enough: rich would still
    end the display with a newline (on a pipe or a file; on a terminal too with rich 13),
    a blank line before the error. A transient display is erased instead, the cursor back at
    its first line on a terminal, and nothing printed on a pipe.
    """
    progress = new_progress(console)
    progress.start()
    try:
        yield progress
    except BaseException:
        progress.live.transient = True
        # Not `progress.stop()`: on a console that is no terminal it ends the display's last
        # line with a newline of its own, which with nothing shown is an empty line.
        progress.live.stop()
        raise
    progress.stop()


class TransferBar:
    """One bar; call it as the SDK's `progress=` callback.

    The SDK reports bytes done so far; `done` can go back to 0 when a download starts over
    (a server without resume support), and `total` is None while the size is unknown
    (chunked answers), in which case rich shows an indeterminate bar.
    """

    def __init__(self, progress: Progress, description: str) -> None:
        self._progress = progress
        self._task: TaskID = progress.add_task(description, total=None, waiting=None)
        self._done = 0
        self._waiting_at: int | None = None  # `done` when the retry's wait began

    def __call__(self, done: int, total: int | None) -> None:
        """Move the bar to `done` of `total` bytes."""
        self._done = done
        if self._waiting_at is not None and done != self._waiting_at:
            self._stop_waiting()
        self._progress.update(self._task, completed=done, total=total)

    def waiting(self, seconds: float, reason: str) -> None:
        """Show `retrying in N s after REASON` (counting down) instead of the speed.

        For a retry hook: the SDK is about to wait `seconds` before trying again after
        `reason` (e.g. `502`). The speed comes back as soon as bytes move again.
        """
        self._waiting_at = self._done
        until = self._progress.get_time() + max(0.0, seconds)
        self._progress.update(self._task, waiting=_Waiting(until, reason))

    def on_retry(self, event: sandboxkit.RetryEvent) -> None:
        """The client's `on_retry` hook: its one transfer waits before trying again."""
        self.waiting(event.delay, event.reason)

    def finish(self, size: int) -> None:
        """Show the transfer as complete at `size` bytes (also when no callback came)."""
        self._stop_waiting()
        self._progress.update(self._task, completed=size, total=size)

    def _stop_waiting(self) -> None:
        self._waiting_at = None
        self._progress.update(self._task, waiting=None)
