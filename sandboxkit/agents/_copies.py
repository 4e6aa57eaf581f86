"""Copy handles: a copy that outlasts a client's patience answers at once with a handle.

MCP clients give up on a call idle for 300 s even while it reports progress, and other
agent frameworks time tools out too; a 1 GiB copy over a slow link takes longer. With
`CopyHandles` a toolkit runs `upload_file` and `download_file` as tasks it owns: the call
waits `answer_within` seconds and answers the finished result if the copy is done by then,
else a handle (`copy_id`) that `copy_status` and `cancel_copy` take. This is the toolkit's
(not the MCP server's) so every adapter offers the same tools and results.

Bounded: at most `max_running` copies at once (another is refused, retryable), at most
`max_kept` finished ones remembered (the oldest forgotten first), and none longer than
`keep_for` seconds after it ended. Ids are 128 random bits: a model cannot guess another's.
A call cancelled before it answered cancels its copy; `Toolkit.aclose` cancels them all.
Cancelling a copy waits for the SDK's cleanup: a download leaves no partial file and does
not touch `dest`; an upload replaces the sandbox file only when its request completes.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal

import attrs

from sandboxkit import Progress

from ..errors import ValidationError
from ._errors import ErrorCode, ToolError
from ._schema import field, result

__all__ = ["HANDLE_RESULT", "Copies", "CopyHandles", "status_result"]

logger = logging.getLogger("sandboxkit.agents")

State = Literal["running", "done", "failed", "cancelled"]
Work = Callable[[Progress], Coroutine[Any, Any, dict[str, Any]]]


def _positive(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValidationError(f"CopyHandles.{attribute.name}={value!r}: must be a positive number")


def _positive_count(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    # A count of copies: 2.5 running at once means nothing (and made a limiter of 2.5).
    if isinstance(value, bool) or not isinstance(value, int) or not value > 0:
        raise ValidationError(f"CopyHandles.{attribute.name}={value!r}: must be an integer >= 1")


@attrs.frozen
class CopyHandles:
    """Copies answered with a handle when they take long (`Toolkit(copy_handles=...)`).

    Args:
        answer_within: seconds a copy call waits before it answers a handle (1).
        max_running: copies that may run at once (4); one more is refused, retryable.
        max_kept: finished copies whose outcome `copy_status` still tells (64).
        keep_for: seconds a finished copy's outcome is kept (3600).

    Raises:
        ValidationError: a bound that is not positive, or a count that is not an integer.
    """

    answer_within: float = attrs.field(default=1.0, validator=_positive)
    max_running: int = attrs.field(default=4, validator=_positive_count)
    max_kept: int = attrs.field(default=64, validator=_positive_count)
    keep_for: float = attrs.field(default=3600.0, validator=_positive)


_ID = field("string", description="The copy's handle, for copy_status and cancel_copy.")
_COUNT = field("integer", minimum=0, description="Bytes moved so far.")
_TOTAL = field("integer", nullable=True, minimum=0, description="The file's size, if known.")

# A copy's first answer when it is still running.
HANDLE_RESULT = result(
    {
        "copy_id": _ID,
        "tool": field("string"),
        "state": field("string", enum=["running"]),
        "bytes_done": _COUNT,
        "total": _TOTAL,
        "hint": field("string"),
    }
)


def status_result(finished: list[dict[str, Any]]) -> dict[str, Any]:
    """`copy_status`'s and `cancel_copy`'s result, `result` being one of `finished` (the
    copy tools' own results) once done."""
    error = result(
        {"code": field("string"), "message": field("string"), "retryable": field("boolean")}
    )
    return result(
        {
            "copy_id": _ID,
            "tool": field("string"),
            "state": field("string", enum=["running", "done", "failed", "cancelled"]),
            "bytes_done": _COUNT,
            "total": _TOTAL,
            "result": {"anyOf": [*finished, {"type": "null"}]},
            "error": {"anyOf": [error, {"type": "null"}]},
            "hint": field("string"),
        }
    )


class _Copy:
    """One copy: its task, what it has moved, and how it ended."""

    def __init__(self, copy_id: str, tool: str) -> None:
        self.id = copy_id
        self.tool = tool
        self.task: asyncio.Task[dict[str, Any]] | None = None
        self.done = 0
        self.total: int | None = None
        self.watcher: Progress | None = None  # the first call's progress, while it waits
        self.ended: float | None = None  # monotonic time it finished
        self.handed = False  # whether its first call answered a handle
        self.state: State = "running"
        self.value: dict[str, Any] | None = None
        self.error: ToolError | None = None

    def progress(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total
        if self.watcher is not None:
            self.watcher(done, total)

    def status(self, hint: str) -> dict[str, Any]:
        return {
            "copy_id": self.id,
            "tool": self.tool,
            "state": self.state,
            "bytes_done": self.done,
            "total": self.total,
            "result": self.value,
            "error": None if self.error is None else self.error.to_json(),
            "hint": hint,
        }


class Copies:
    """The copies one toolkit runs in the background, by handle."""

    def __init__(self, options: CopyHandles) -> None:
        self.options = options
        self._copies: dict[str, _Copy] = {}
        self._clock = time.monotonic
        self._closed = False

    def _running(self) -> int:
        return sum(1 for c in self._copies.values() if c.state == "running")

    def _forget_old(self) -> None:
        now = self._clock()
        ended = sorted(
            ((c.ended, c.id) for c in self._copies.values() if c.ended is not None), reverse=True
        )
        for rank, (when, copy_id) in enumerate(ended):
            if rank >= self.options.max_kept or now - when > self.options.keep_for:
                del self._copies[copy_id]

    async def start(self, tool: str, work: Work, progress: Progress | None) -> dict[str, Any]:
        """Run `work` as a task; its result if it ends within `answer_within`, else a
        handle. A failure within that time is raised as the direct call's would be.

        Raises:
            ToolError: `rate_limited` (retryable) with `max_running` copies under way; or
                the copy's own failure.
        """
        if self._closed:
            raise ToolError(ErrorCode.UNAVAILABLE, "The toolkit is closing.", retryable=False)
        self._forget_old()
        if self._running() >= self.options.max_running:
            raise ToolError(
                ErrorCode.RATE_LIMITED,
                f"{self.options.max_running} copies are running, the most at once. Wait for "
                "one (copy_status) or cancel one (cancel_copy), then call again.",
            )
        copy = _Copy("copy_" + secrets.token_urlsafe(16), tool)
        copy.watcher = progress
        task: asyncio.Task[dict[str, Any]] = asyncio.create_task(
            work(copy.progress), name=f"sandboxkit {tool}"
        )
        copy.task = task
        self._copies[copy.id] = copy
        task.add_done_callback(lambda _: self._ended(copy))
        try:
            await asyncio.wait([task], timeout=self.options.answer_within)
        except asyncio.CancelledError:
            # The caller gave up before any answer: nobody holds a handle to this copy.
            self._copies.pop(copy.id, None)
            await _cancelled(task)
            raise
        finally:
            copy.watcher = None
        if not task.done():
            copy.handed = True
            return {
                "copy_id": copy.id,
                "tool": tool,
                "state": "running",
                "bytes_done": copy.done,
                "total": copy.total,
                "hint": "The copy goes on. Call copy_status with this copy_id to follow it "
                "(its result comes there), or cancel_copy to stop it.",
            }
        self._copies.pop(copy.id, None)  # answered whole: no handle was given
        return task.result()  # its ToolError, if it failed, is this call's

    def _ended(self, copy: _Copy) -> None:
        task = copy.task
        assert task is not None
        copy.ended = self._clock()
        if task.cancelled():
            copy.state = "cancelled"
            return
        failure = task.exception()
        if failure is None:
            copy.state, copy.value = "done", task.result()
            return
        copy.state = "failed"
        copy.error = (
            failure
            if isinstance(failure, ToolError)
            else ToolError(ErrorCode.INTERNAL, f"{copy.tool} failed on an internal error.")
        )
        if copy.handed:  # else its first call raises it, and is logged as any call
            logger.warning("tool %s failed in the background: %s", copy.tool, copy.error.code.value)

    def _find(self, copy_id: str) -> _Copy:
        self._forget_old()
        found = self._copies.get(copy_id)
        if found is None:
            raise ToolError(
                ErrorCode.NOT_FOUND,
                f"No copy has that copy_id (a finished copy is forgotten after "
                f"{self.options.keep_for:g} s, or once {self.options.max_kept} newer ones "
                "finished).",
            )
        return found

    def status(self, copy_id: str) -> dict[str, Any]:
        """Where the copy `copy_id` is.

        Raises:
            ToolError: `not_found` for an id never given, or forgotten.
        """
        copy = self._find(copy_id)
        hint = {
            "running": "Still copying: call copy_status again later, or cancel_copy.",
            "done": "Done: result holds what the copy tool returns.",
            "failed": "Failed: error says why; call the copy tool again if it is retryable.",
            "cancelled": "Cancelled: nothing was left behind.",
        }[copy.state]
        return copy.status(hint)

    async def cancel(self, copy_id: str) -> dict[str, Any]:
        """Cancel the copy `copy_id` and wait for its cleanup; its status after.

        Raises:
            ToolError: `not_found` as for `status`.
        """
        copy = self._find(copy_id)
        if copy.state == "running" and copy.task is not None:
            await _cancelled(copy.task)
            return copy.status("Cancelled: nothing was left behind.")
        return copy.status(f"Nothing to cancel: the copy had ended ({copy.state}).")

    async def aclose(self) -> None:
        """Cancel every running copy and wait for their cleanup."""
        self._closed = True
        tasks = [c.task for c in self._copies.values() if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._copies.clear()


async def _cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait for it to end, its cleanup done (its outcome is `_ended`'s)."""
    task.cancel()
    await asyncio.wait([task])
