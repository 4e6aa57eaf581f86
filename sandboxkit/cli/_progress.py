"""Progress bars for transfers, fed by the SDK's `(done_bytes, total_or_None)` callbacks.

Sizes and speeds are in the binary unit that suits their size (B, KiB, MiB, GiB, and the same
per second: `format_size`, `format_rate`), so a 5 KB file reads `4.9 KiB`, not `0.005 MiB`.
A bar's `done/total` is written in its total's unit, so the two numbers compare at a glance.
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
    "RateColumn",
    "SizeColumn",
    "TransferBar",
    "format_rate",
    "format_size",
    "format_throughput",
    "new_progress",
    "transfer_progress",
]

_UNITS = (("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30))


def _unit_of(size: float) -> tuple[str, int]:
    """The unit a size of `size` bytes is shown in, and its scale: the smallest in which it
    reads under 1024 once rounded as shown (so 1,048,575 bytes read `1.0 MiB`, not
    `1024.0 KiB`); GiB past that."""
    for unit, scale in _UNITS:
        if float(_number(size, scale)) < 1024:
            return unit, scale
    return _UNITS[-1]


def _number(size: float, scale: int) -> str:
    # Whole bytes have no decimals; one decimal in the larger units.
    return f"{size:.0f}" if scale == 1 else f"{size / scale:.1f}"


def format_size(size: float) -> str:
    """A byte count in the unit that suits it: `512` -> `512 B`, `5000` -> `4.9 KiB`,
    `67108864` -> `64.0 MiB`."""
    unit, scale = _unit_of(size)
    return f"{_number(size, scale)} {unit}"


def format_rate(bytes_per_second: float) -> str:
    """A speed in the unit that suits it: `52428800.0` -> `50.0 MiB/s`."""
    return f"{format_size(bytes_per_second)}/s"


def format_throughput(size: float, seconds: float) -> str:
    """`size` bytes moved in `seconds`, as a speed (0 B/s when no time passed)."""
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


class SizeColumn(ProgressColumn):
    """Bytes done of the total, both in the total's unit: `12.0/64.0 MiB` (`12.0 MiB` while
    the size is unknown)."""

    def render(self, task: Task) -> Text:
        """The column's text for `task`."""
        if task.total is None:
            text = format_size(task.completed)
        else:
            unit, scale = _unit_of(task.total)
            text = f"{_number(task.completed, scale)}/{_number(task.total, scale)} {unit}"
        return Text(text, style="progress.download")


class RateColumn(ProgressColumn):
    """The speed (`1.5 MiB/s`), or `retrying in N s after REASON` while a retry waits."""

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
    """A rich `Progress` (not started) with the transfer columns: bar, size, speed, ETA."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        SizeColumn(),
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
