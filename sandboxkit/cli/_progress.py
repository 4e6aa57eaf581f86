"""Progress bars for transfers, fed by the SDK's `(done_bytes, total_or_None)` callbacks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

__all__ = ["TransferBar", "format_size", "transfer_progress"]


@contextmanager
def transfer_progress(console: Console) -> Iterator[Progress]:
    """A rich `Progress` showing bytes, rate and ETA; add one `TransferBar` per transfer.

    If the transfer fails the bars are hidden, so the error line is all that remains.
    """
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )
    with progress:
        try:
            yield progress
        except BaseException:
            for task in progress.tasks:
                progress.update(task.id, visible=False)
            raise


class TransferBar:
    """One bar; call it as the SDK's `progress=` callback.

    The SDK reports bytes done so far; `done` can go back to 0 when a download starts over
    (a server without resume support), and `total` is None while the size is unknown
    (chunked answers), in which case rich shows an indeterminate bar.
    """

    def __init__(self, progress: Progress, description: str) -> None:
        self._progress = progress
        self._task: TaskID = progress.add_task(description, total=None)

    def __call__(self, done: int, total: int | None) -> None:
        """Move the bar to `done` of `total` bytes."""
        self._progress.update(self._task, completed=done, total=total)

    def finish(self, size: int) -> None:
        """Show the transfer as complete at `size` bytes (also when no callback came)."""
        self._progress.update(self._task, completed=size, total=size)


def format_size(size: int) -> str:
    """`67108864` -> `64.0 MiB`."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
