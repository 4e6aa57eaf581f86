"""Cleanup that runs to its end however many times its task is cancelled.

`anyio.CancelScope(shield=True)` keeps out anyio's own cancellation only: a plain
`Task.cancel()` (a caller's, `asyncio.timeout`'s, a signal handler's) still interrupts what
the shielded code awaits, so a second cancellation arriving during cleanup cut the cleanup
short (a download left its temporary file and an open handle behind). Here the cleanup runs
as a future of its own that the task only waits for: a cancellation interrupts the wait,
which resumes, never the cleanup. The cancellation is held back, not lost: the caller raises
it once the cleanup is done (`raise_held`).

Example::

    try:
        ...
    except BaseException as exc:
        held = await wait_through_cancels(cleanup_future)
        raise_held(held, exc)
        raise
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio

__all__ = ["raise_held", "wait_through_cancels"]


async def wait_through_cancels(future: asyncio.Future[Any]) -> asyncio.CancelledError | None:
    """Wait until `future` is done, however many times this task is cancelled meanwhile.

    `future` itself is never cancelled by the wait, and its outcome is left to the caller.

    Returns:
        The first cancellation that arrived while waiting, or None: the caller must raise it
        once its cleanup is done (`raise_held`), so that the task still ends cancelled.
    """
    held: asyncio.CancelledError | None = None
    # The shield only spares anyio's cancel scopes from re-delivering their cancellation on
    # every loop turn meanwhile; a plain Task.cancel() gets through it and is caught below.
    with anyio.CancelScope(shield=True):
        while not future.done():
            try:
                await asyncio.wait([future])
            except asyncio.CancelledError as exc:
                if held is None:
                    held = exc
    return held


def raise_held(held: asyncio.CancelledError | None, handling: BaseException | None) -> None:
    """Raise the cancellation held back during a cleanup, unless one is already on its way.

    When the cleanup ran for another exception (or for none), the cancellation must still
    end the task: it is raised, with that exception as its context. When the cleanup ran
    for a cancellation, the caller re-raises that one and nothing more is needed.

    Args:
        held: what `wait_through_cancels` returned.
        handling: the exception the cleanup ran for; None on the normal path.
    """
    if held is not None and not isinstance(handling, asyncio.CancelledError):
        raise held
