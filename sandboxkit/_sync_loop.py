"""The background event loop of a `sandboxkit.sync.Client`, and how calls cross into it.

The loop runs in a daemon thread of its own, so that a client nobody closed cannot keep the
interpreter from exiting: a finalizer warns (`ResourceWarning`) and stops it, bounded, at
garbage collection or at exit. Every call is a task in one task group on that loop:

- a thread hands its call over without waiting for the loop, so there is never a moment
  when a task runs that its caller could not cancel;
- an interrupted caller (Ctrl-C) cancels its own task and waits, bounded, for its cleanup
  (temporary file, connection) before the interrupt goes on: nothing carries on behind it;
- `stop()` cancels every call in flight at once; their threads get `ClientStateError`.

A Ctrl-C reaches a waiting caller only if its thread wakes to run Python's handler. The
kernel may deliver SIGINT to any thread that does not block it, and a main thread blocked
in a plain lock wait is not woken when another thread takes the signal. So the loop's thread
(and every thread it starts) blocks the asynchronous signals, and callers wait in short
slices, which also covers a signal taken by some other thread of the application's.

anyio's `start_blocking_portal` is not used: its portal hands a call over by waiting for the
loop (an interrupt there leaves a task nobody can cancel), and a portal nobody closed is
stopped by its generator's cleanup during interpreter teardown, which then waits forever for
a loop whose (daemon, or in older anyio executor) thread can no longer run.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import threading
import warnings
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, NamedTuple, TypeVar, overload

import anyio
from anyio.abc import TaskGroup

from ._forks import restart_in_child
from .errors import ClientStateError

__all__ = ["Loop"]

T = TypeVar("T")
Closer = Callable[[], Awaitable[object]]

# How long a stop, or an interrupted call's cleanup, is waited for: ample for what cleanup
# does (delete a temporary file, close sockets), short enough that a wedged loop cannot
# hold up a Ctrl-C or the interpreter's exit for long.
STOP_SECONDS = 5.0
CLOSED = "this sandboxkit.sync.Client is closed"
# How long a waiting caller may go without checking for a signal another thread took.
WAKE_SECONDS = 0.2
# Signals that come from outside the process: their handlers belong on the main thread.
# (Never the synchronous ones, SIGSEGV and kin, which a faulting thread must take itself.)
ASYNC_SIGNALS = frozenset(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")
    if hasattr(signal, name)
)


class _Call:
    """One blocking call: its thread waits on `outcome` while the loop runs it in a scope."""

    def __init__(self, func: Callable[[], Any]) -> None:
        self.func = func
        self.outcome: Future[Any] = Future()
        self.finished = threading.Event()  # set once the call and all its cleanup are over
        self.scope: anyio.CancelScope | None = None
        self.cancelled = False

    async def run(self) -> None:
        """The call as a task of the loop's task group; its errors go to the waiting thread."""
        try:
            with anyio.CancelScope() as self.scope:
                if self.cancelled:  # cancelled before the task first ran
                    self.scope.cancel()
                value = self.func()
                self.outcome.set_result(await value if inspect.isawaitable(value) else value)
        except anyio.get_cancelled_exc_class():
            raise  # stop() cancelled the whole group; `finally` tells the thread
        except BaseException as exc:  # the thread raises it; one call's error ends no other
            self.outcome.set_exception(exc)
        finally:
            if not self.outcome.done():
                self.outcome.set_exception(ClientStateError(f"{CLOSED} (closed mid-call)"))
            self.finished.set()

    def cancel(self) -> None:
        """On the loop: cancel the call; its cleanup still runs to the end."""
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()


class _Parts(NamedTuple):
    """What other threads use of a running loop (the finalizer holds these, not the Loop)."""

    loop: asyncio.AbstractEventLoop
    calls: TaskGroup
    stop: asyncio.Future[Closer | None]  # resolved with what to close last, to stop
    thread: threading.Thread


async def _serve(ready: Future[_Parts]) -> None:
    """The loop's main task: runs calls until asked to stop, then closes the async client."""
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[Closer | None] = loop.create_future()
    async with anyio.create_task_group() as calls:
        ready.set_result(_Parts(loop, calls, stop, threading.current_thread()))
        aclose = await stop
        calls.cancel_scope.cancel()  # the group exits once every call has cleaned up
    if aclose is not None:
        with anyio.move_on_after(STOP_SECONDS):
            await aclose()


def _run(ready: Future[_Parts]) -> None:
    if hasattr(signal, "pthread_sigmask"):  # POSIX; threads started from here inherit it
        signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
    try:
        anyio.run(_serve, ready)
    except BaseException as exc:
        if not ready.done():  # the constructor waits for the loop: fail it, never hang it
            ready.set_exception(exc)
        raise


def _stop(parts: _Parts, aclose: Closer | None) -> None:
    """Ask the loop to cancel its calls, then run `aclose`; wait for its thread, bounded."""
    with contextlib.suppress(RuntimeError):  # the loop has already ended
        parts.loop.call_soon_threadsafe(parts.stop.set_result, aclose)
    if parts.thread is not threading.current_thread():  # a callback on the loop may close
        parts.thread.join(STOP_SECONDS)


def _forgotten(parts: _Parts, aclose: Closer) -> None:
    # The finalizer of a Loop nobody stopped, run at garbage collection or at exit.
    try:
        warnings.warn(
            ResourceWarning("sandboxkit.sync.Client was never closed; use `with` or close()"),
            stacklevel=1,  # no line of the user's to point at: the collector or exit runs this
        )
    finally:
        _stop(parts, aclose)


class Loop:
    """A running event loop in a daemon thread, shared by one sync Client's facades.

    Stopped by `stop()`, or else by a finalizer (with a `ResourceWarning`) once no facade
    holds it. In a child process after `os.fork()` the thread is gone: the child's first
    call starts one of its own, and the parent's loop is left alone (`_forks`).
    """

    def __init__(self) -> None:
        self.closed = False
        self._lock = threading.Lock()
        self._aclose: Closer | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._parts: _Parts | None = self._start()
        restart_in_child(self, Loop._forget_the_parents)

    def _forget_the_parents(self) -> None:
        # In a forked child, before its code runs. At exit the finalizer would ask the
        # parent's loop to stop: a write to the wake-up socket the child shares with it.
        if self._finalizer is not None:
            self._finalizer.detach()
        self._lock = threading.Lock()  # a thread that held it is not in the child
        self._parts = self._finalizer = None

    def _start(self) -> _Parts:
        ready: Future[_Parts] = Future()
        threading.Thread(target=_run, args=(ready,), name="sandboxkit-sync", daemon=True).start()
        parts = ready.result()
        if self._aclose is not None:
            self._finalizer = weakref.finalize(self, _forgotten, parts, self._aclose)
        return parts

    def closes(self, aclose: Closer) -> None:
        """Run `aclose` on the loop when it stops; from now on a forgotten stop warns."""
        self._aclose = aclose
        if self._parts is not None:  # else a forked child's first call registers it
            self._finalizer = weakref.finalize(self, _forgotten, self._parts, aclose)

    @overload
    def call(self, func: Callable[[], Awaitable[T]]) -> T: ...
    @overload
    def call(self, func: Callable[[], T]) -> T: ...
    def call(self, func: Callable[[], Any]) -> Any:
        """Run `func` on the loop (awaiting it if it is a coroutine) and return its result.

        Raises:
            ClientStateError: the loop is stopped, or was stopped during the call, or this
                is the loop's own thread (a callback), where waiting would never end.
        """
        parts = self._parts
        if parts is not None and threading.current_thread() is parts.thread:
            raise ClientStateError("a sync call cannot be made from a callback on its loop")
        call = _Call(func)
        with self._lock:  # no call may join the group behind stop()'s request
            if self.closed:
                raise ClientStateError(CLOSED)
            if self._parts is None:  # the first call in a forked child
                self._parts = self._start()
            parts = self._parts
            parts.loop.call_soon_threadsafe(parts.calls.start_soon, call.run)
        loop = parts.loop
        try:
            while not call.finished.wait(WAKE_SECONDS):  # a timed wait lets a signal in
                pass
            return call.outcome.result()
        except BaseException:
            if not call.outcome.done():
                # Interrupted while waiting (Ctrl-C): the operation must not go on without
                # its caller. Another Ctrl-C cuts this wait short.
                with contextlib.suppress(RuntimeError):  # the loop has already ended
                    loop.call_soon_threadsafe(call.cancel)
                call.finished.wait(STOP_SECONDS)
            raise

    def stop(self) -> None:
        """Cancel every call in flight, run the closer, end the thread; idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            parts = self._parts  # None: a forked child that made no call has no loop to stop
        if self._finalizer is not None:
            self._finalizer.detach()
        if parts is not None:
            _stop(parts, self._aclose)
