"""Cleanup that survives repeated cancellation.

A plain `Task.cancel()` gets through `anyio.CancelScope(shield=True)`, so a second one used
to cut cleanup short. `sandboxkit._cancel` waits for a cleanup through any number of them.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest

from sandboxkit._cancel import raise_held, wait_through_cancels

from .test_cancellation import loop_reports

__all__ = ["loop_reports"]  # the autouse fixture, re-exported

LIMIT = 10


async def test_a_cleanup_is_awaited_through_every_cancellation() -> None:
    """A cleanup awaited through three cancellations runs to its end, and the first of them
    comes back to be raised."""
    gate = asyncio.Event()
    finished: list[bool] = []

    async def cleanup() -> None:
        await gate.wait()
        finished.append(True)

    future = asyncio.ensure_future(cleanup())
    waiter = asyncio.create_task(wait_through_cancels(future))
    await asyncio.sleep(0)
    for n in range(3):
        waiter.cancel(f"cancel {n}")
        await asyncio.sleep(0)
    assert not waiter.done() and not future.done()
    gate.set()
    held = await waiter
    assert finished == [True]
    assert isinstance(held, asyncio.CancelledError) and held.args == ("cancel 0",)


async def test_a_cleanup_inside_a_cancelled_anyio_scope_is_awaited_too() -> None:
    """Inside an anyio scope that keeps re-delivering its cancellation, plus a plain one, the
    cleanup still runs to its end."""
    gate = asyncio.Event()
    future = asyncio.ensure_future(gate.wait())
    held: list[asyncio.CancelledError | None] = []

    async def clean_up_when_cancelled() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            try:
                await anyio.sleep_forever()
            except asyncio.CancelledError as exc:
                held.append(await wait_through_cancels(future))
                raise_held(held[0], exc)
                raise

    task = asyncio.create_task(clean_up_when_cancelled())
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    gate.set()
    await asyncio.wait([task], timeout=LIMIT)
    assert future.done() and task.cancelled()
    assert len(held) == 1 and held[0] is not None


@pytest.mark.parametrize(
    ("held", "handling", "raised"),
    [
        (None, None, False),
        (None, ValueError("x"), False),
        (asyncio.CancelledError("held"), None, True),
        (asyncio.CancelledError("held"), ValueError("x"), True),
        (asyncio.CancelledError("held"), asyncio.CancelledError("first"), False),
    ],
)
def test_a_held_cancellation_is_raised_unless_one_is_already_on_its_way(
    held: asyncio.CancelledError | None, handling: BaseException | None, raised: bool
) -> None:
    """The held cancellation is raised after a cleanup for an error or for none, never on
    top of the cancellation the cleanup ran for."""
    if raised:
        with pytest.raises(asyncio.CancelledError) as caught:
            raise_held(held, handling)
        assert caught.value is held
    else:
        raise_held(held, handling)
