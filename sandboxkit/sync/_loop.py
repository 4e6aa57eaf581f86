"""The background event loop of a `sandboxkit.sync.Client`, and how calls cross into it.

The loop runs in a daemon thread of its own, so that a client nobody closed cannot keep the
interpreter from exiting: a finalizer warns (`ResourceWarning`) and stops it, bounded, at
garbage collection or at exit. Every call is an asyncio task of its own on that loop:

- a thread hands its call over without waiting for the loop, so there is never a moment
  when a task runs that its caller could not cancel;
- the task is made by a callback that runs in a copy of the caller's context (what
  `call_soon_threadsafe` gives every callback), so the caller's context variables (a
  tracing span, say) reach the call as they would reach an `await`;
- an interrupted caller (Ctrl-C) cancels its own task and waits, bounded, for its cleanup
  (temporary file, connection) before the interrupt goes on: nothing carries on behind it;
- `stop()` cancels every call in flight at once; their threads get `ClientStateError`.

The callback that hands a call over only makes an asyncio task: nothing of anyio's runs
outside a task. anyio asks which async library runs the code (through sniffio where that is
installed, and it comes with openai, anthropic, trio and langsmith), and a bare callback,
running in the caller's context, is no library's: anyio raises `NoEventLoopError` there.
Inside a task the answer is always asyncio.

A Ctrl-C reaches a waiting caller only if its thread wakes to run Python's handler. The
kernel may deliver SIGINT to any thread that does not block it, and a main thread blocked
in a plain lock wait is not woken when another thread takes the signal. So the loop's thread
(and every thread it starts) blocks the asynchronous signals, and callers wait in short
slices, which also covers a signal taken by some other thread of the application's.

Around `os.fork()` the loop is parked (`forks.park_around_fork`): its thread, the thread
workers it started and its executor's threads end before the fork, and in the parent a new
thread picks up the same loop, its calls in flight included, with the next call (at once if
calls are in flight). So the process forks with only the forking thread (Python 3.12+ warns
at any fork of a process with threads, and a child of one may inherit a lock some other
thread held), and the child starts a loop of its own on its first call
(`forks.restart_in_child`).

anyio's `start_blocking_portal` is not used: its portal hands a call over by waiting for the
loop (an interrupt there leaves a task nobody can cancel), and a portal nobody closed is
stopped by its generator's cleanup during interpreter teardown, which then waits forever for
a loop whose (daemon, or in older anyio executor) thread can no longer run.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Any, TypeVar, overload

import anyio

from .._http.forks import park_around_fork, restart_in_child
from ..errors import ClientStateError

__all__ = ["Loop"]

T = TypeVar("T")
Closer = Callable[[], Awaitable[object]]

# How long a stop, or an interrupted call's cleanup, is waited for: ample for what cleanup
# does (delete a temporary file, close sockets), short enough that a wedged loop cannot
# hold up a Ctrl-C or the interpreter's exit for long.
STOP_SECONDS = 5.0
# How long a fork waits for the loop's threads to end. Past it the fork goes ahead with them
# running (Python 3.12+ then warns), and the parent's loop goes on once its thread is free.
PARK_SECONDS = 2.0
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
        self.task: asyncio.Task[None] | None = None
        self.scope: anyio.CancelScope | None = None
        self.cancelled = False

    async def run(self) -> None:
        """The call as a task of the loop; its errors go to the waiting thread."""
        try:
            with anyio.CancelScope() as self.scope:
                if self.cancelled:  # cancelled before the task first ran
                    self.scope.cancel()
                value = self.func()
                self.outcome.set_result(await value if inspect.isawaitable(value) else value)
        except asyncio.CancelledError:
            raise  # the task itself was cancelled: `finally` tells the thread
        except BaseException as exc:  # the thread raises it; one call's error ends no other
            self.outcome.set_exception(exc)
        finally:
            self.fail(ClientStateError(f"{CLOSED} (closed mid-call)"))

    def fail(self, error: BaseException) -> None:
        """Give the waiting thread `error` unless it has its outcome; the call is over."""
        with contextlib.suppress(InvalidStateError):  # a race with the loop's own outcome
            self.outcome.set_exception(error)
        self.finished.set()

    def cancel(self) -> None:
        """On the loop: cancel the call; its cleanup still runs to the end."""
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()


class _Runner:
    """A loop and the thread that runs it: what the finalizer and the fork hooks hold.

    The loop outlives its thread: parked for a fork, the thread ends and a new one runs the
    same loop on. Everything but `thread` is touched on the loop's thread only, once begun.
    """

    def __init__(self) -> None:
        # The policy's loop: uvloop's where an application made that the policy.
        self.loop = asyncio.new_event_loop()
        # The loop's own executor (aiohttp resolves names in it), so a fork can end its threads.
        self.executor = _new_executor()
        self.loop.set_default_executor(self.executor)
        self.calls: set[_Call] = set()
        self.aclose: Closer | None = None
        self.wake = asyncio.Event()  # set by a stop or a park; the main task then returns
        self.stopping = False  # the main task ends for good, not for a fork
        self.ended = False  # the loop is closed: no call will ever run on it again
        self.thread: threading.Thread | None = None
        self._parking = threading.Lock()  # park and resume, from any thread
        self.parked = False  # its thread ended for a fork: `resume` starts another
        self.executor_parked = False
        park_around_fork(self, _Runner.park, _Runner.after_fork)

    def start(self, after: threading.Thread | None = None) -> None:
        thread = threading.Thread(target=self._run, args=(after,), name="sandboxkit-sync")
        thread.daemon = True
        thread.start()
        self.thread = thread

    def _run(self, after: threading.Thread | None) -> None:
        if hasattr(signal, "pthread_sigmask"):  # POSIX; threads started from here inherit it
            signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
        if after is not None:  # a thread asked to park that has not yet let go of the loop
            after.join()
        loop = self.loop
        asyncio.set_event_loop(loop)
        parked = False
        try:
            # Run until the main task returns, as `asyncio.run` does: anyio takes a task run
            # that way for the loop's root, and ends the worker threads it starts with it.
            parked = not loop.run_until_complete(loop.create_task(self._serve()))
            if not parked:
                loop.run_until_complete(loop.shutdown_asyncgens())
                # Not the loop's `shutdown_default_executor`: at the interpreter's exit (a
                # forgotten client's finalizer) the thread it starts cannot start.
                self.executor.shutdown(wait=False, cancel_futures=True)
        finally:
            if not parked:  # stopped, or failed: no call will run on this loop again
                self._end()

    def _end(self) -> None:
        self.ended = True
        for call in list(self.calls):
            call.fail(ClientStateError(CLOSED))
        asyncio.set_event_loop(None)
        with contextlib.suppress(RuntimeError):
            self.loop.close()

    async def _serve(self) -> bool:
        """The loop's main task: True once asked to stop (calls cancelled, client closed)."""
        await self.wake.wait()
        self.wake.clear()
        if not self.stopping:
            return False
        for call in list(self.calls):
            call.cancel()
        running = [call.task for call in self.calls if call.task is not None]
        if running:
            await asyncio.wait(running)
        if self.aclose is not None:
            with anyio.move_on_after(STOP_SECONDS):
                await self.aclose()
        return True

    def begin(self, call: _Call) -> None:
        """On the loop, in a copy of the caller's context: start `call` as a task."""
        if self.stopping:
            call.fail(ClientStateError(CLOSED))
            return
        self.calls.add(call)
        call.task = self.loop.create_task(call.run())
        call.task.add_done_callback(lambda _: self.calls.discard(call))

    def stop(self, aclose: Closer | None) -> None:
        """Ask the loop to cancel its calls, then run `aclose`; wait for its thread, bounded."""
        self.resume()  # a loop parked for a fork still has its calls and pools to close

        def stopping() -> None:
            self.stopping = True
            self.aclose = aclose
            self.wake.set()

        try:
            self.loop.call_soon_threadsafe(stopping)
        except RuntimeError:  # the loop has already ended
            return
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_SECONDS)

    def park(self) -> None:
        """Before a fork: end the loop's thread and every thread it started, bounded."""
        with self._parking:
            thread = self.thread
            if thread is None or self.ended or self.parked or thread is threading.current_thread():
                return  # a call forking from the loop's own thread keeps it
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.wake.set)
            self.parked = True
            deadline = time.monotonic() + PARK_SECONDS
            thread.join(PARK_SECONDS)
            if thread.is_alive():
                return  # wedged in a callback: it forks along, and lets go of the loop later
            # anyio's thread workers end with the loop's main task; the executor's when shut.
            self.executor.shutdown(wait=False)
            self.executor_parked = True
            _join([thread, *_threads_of(self.loop, self.executor)], deadline)

    def after_fork(self) -> None:
        """In the parent after a fork: calls in flight go on at once; else the next call
        starts the loop's thread again (`resume`).

        Not at once in any case: Python 3.13 counts the process's threads for its fork
        warning only after this hook has run. A process with calls in flight has their
        waiting threads anyway.
        """
        if self.calls:  # no thread runs the loop: safe to read here
            self.resume()

    def resume(self) -> None:
        """Start a thread that runs the parked loop on; a no-op unless parked."""
        with self._parking:
            thread = self.thread
            if not self.parked or self.ended or thread is None:
                return
            self.parked = False
            if self.executor_parked:  # threads start again as work comes
                self.executor = _new_executor()
                self.loop.set_default_executor(self.executor)
                self.executor_parked = False
            # If the old thread has not yet let go of the loop, the new one waits for it.
            self.start(after=thread if thread.is_alive() else None)


def _new_executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(thread_name_prefix="sandboxkit-sync-executor")


def _threads_of(loop: asyncio.AbstractEventLoop, executor: ThreadPoolExecutor) -> list[Any]:
    """The threads a parked loop started: its executor's, and anyio's thread workers."""
    # Neither is public: a version that renames them leaves them running through the fork,
    # which is what happened before parking existed, never worse.
    mine = list(getattr(executor, "_threads", ()))
    workers = [thread for thread in threading.enumerate() if getattr(thread, "loop", None) is loop]
    return mine + workers


def _join(threads: Iterable[threading.Thread], deadline: float) -> None:
    """Wait, until `deadline`, for each thread to be gone from the operating system too."""
    for thread in threads:
        if thread is threading.current_thread():
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        # A joined thread has finished its Python work, but before Python 3.13 its system
        # thread may not have exited yet, and a fork then still copies (and counts) it.
        task = f"/proc/self/task/{thread.native_id}"
        while not thread.is_alive() and os.path.exists(task) and time.monotonic() < deadline:
            time.sleep(0.0002)


def _forgotten(runner: _Runner, aclose: Closer) -> None:
    # The finalizer of a Loop nobody stopped, run at garbage collection or at exit.
    try:
        warnings.warn(
            ResourceWarning("sandboxkit.sync.Client was never closed; use `with` or close()"),
            stacklevel=1,  # no line of the user's to point at: the collector or exit runs this
        )
    finally:
        runner.stop(aclose)


class Loop:
    """A running event loop in a daemon thread, shared by one sync Client's facades.

    Stopped by `stop()`, or else by a finalizer (with a `ResourceWarning`) once no facade
    holds it. In a child process after `os.fork()` the thread is gone: the child's first
    call starts one of its own, and the parent's loop is left alone (`forks`).
    """

    def __init__(self) -> None:
        self.closed = False
        self._lock = threading.Lock()
        self._aclose: Closer | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._runner: _Runner | None = self._start()
        restart_in_child(self, Loop._forget_the_parents)

    def _forget_the_parents(self) -> None:
        # In a forked child, before its code runs. At exit the finalizer would ask the
        # parent's loop to stop: a write to the wake-up socket the child shares with it.
        if self._finalizer is not None:
            self._finalizer.detach()
        self._lock = threading.Lock()  # a thread that held it is not in the child
        self._runner = self._finalizer = None

    def _start(self) -> _Runner:
        runner = _Runner()
        try:
            runner.start()
        except BaseException:
            runner.loop.close()
            raise
        if self._aclose is not None:
            self._finalizer = weakref.finalize(self, _forgotten, runner, self._aclose)
        return runner

    def closes(self, aclose: Closer) -> None:
        """Run `aclose` on the loop when it stops; from now on a forgotten stop warns."""
        self._aclose = aclose
        if self._runner is not None:  # else a forked child's first call registers it
            self._finalizer = weakref.finalize(self, _forgotten, self._runner, aclose)

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
        runner = self._runner
        if runner is not None and threading.current_thread() is runner.thread:
            raise ClientStateError("a sync call cannot be made from a callback on its loop")
        call = _Call(func)
        with self._lock:  # no call may be handed over behind stop()'s request
            if self.closed:
                raise ClientStateError(CLOSED)
            if self._runner is None:  # the first call in a forked child
                self._runner = self._start()
            runner = self._runner
            runner.resume()  # the first call since a fork
            runner.loop.call_soon_threadsafe(runner.begin, call)
        try:
            while not call.finished.wait(WAKE_SECONDS):  # a timed wait lets a signal in
                if runner.ended:  # the loop closed without running it (it cannot, now)
                    call.fail(ClientStateError(CLOSED))
                runner.resume()  # handed over as another thread forked
            return call.outcome.result()
        except BaseException:
            if not call.outcome.done():
                # Interrupted while waiting (Ctrl-C): the operation must not go on without
                # its caller. Another Ctrl-C cuts this wait short.
                with contextlib.suppress(RuntimeError):  # the loop has already ended
                    runner.loop.call_soon_threadsafe(call.cancel)
                call.finished.wait(STOP_SECONDS)
            raise

    def stop(self) -> None:
        """Cancel every call in flight, run the closer, end the thread; idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            runner = self._runner  # None: a forked child that made no call has no loop
        if self._finalizer is not None:
            self._finalizer.detach()
        if runner is not None:
            runner.stop(self._aclose)
