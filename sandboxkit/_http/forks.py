"""What sandboxkit's objects do in a child process made by `os.fork()`.

A forked child (multiprocessing's default start method on Linux, gunicorn with `--preload`,
Celery's prefork pool) gets a copy of every object, the parent's sockets and event loops
among them, but only the thread that forked. Those copies are no use to the child and no
harm to the parent only as long as the child leaves them alone: each socket, and the epoll
instance its loop watches it with, is shared with the parent, so a child that closes a
session takes the parent's sockets out of the parent's own epoll (its next answer never
arrives), and one that reads takes the parent's bytes.

An object registered here starts afresh in the child, at once, before any code of the
child's runs: its `restart` makes new, empty state, and the state it replaces is kept
referenced for the child's lifetime, so that no finalizer or `__del__` ever closes it there.

An object that runs threads of its own registers to be parked around every fork instead:
its `park` ends them in the forking thread just before the fork, and its `resume` starts them
again in the parent just after. A process that forks with only the forking thread is safe
to fork (no lock another thread held is copied locked) and, on Python 3.12+, forks without
its `DeprecationWarning`.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["park_around_fork", "restart_in_child"]

T = TypeVar("T")

# Live registered objects (weakly: registering keeps nothing alive) and their restarts.
_RESTARTS: weakref.WeakKeyDictionary[Any, Callable[[Any], None]] = weakref.WeakKeyDictionary()
# In a child: what registered objects held before the fork. Never emptied, never closed.
_LEFT_TO_THE_PARENT: list[dict[str, Any]] = []
# Live objects parked around a fork (weakly), with their park and resume.
_PARKED: weakref.WeakKeyDictionary[Any, tuple[Callable[[Any], None], Callable[[Any], None]]] = (
    weakref.WeakKeyDictionary()
)


def restart_in_child(obj: T, restart: Callable[[T], None]) -> None:
    """Call `restart(obj)` in every child forked from now on, while `obj` lives."""
    _RESTARTS[obj] = restart


def park_around_fork(obj: T, park: Callable[[T], None], resume: Callable[[T], None]) -> None:
    """Call `park(obj)` before every fork from now on, and `resume(obj)` in the parent after,
    while `obj` lives. In the child nothing resumes: what was parked is the parent's."""
    _PARKED[obj] = (park, resume)


def _before_fork() -> None:
    for obj, (park, _) in list(_PARKED.items()):
        park(obj)


def _after_fork_in_parent() -> None:
    for obj, (_, resume) in list(_PARKED.items()):
        resume(obj)


def _after_fork_in_child() -> None:
    _PARKED.clear()  # the parent's threads, which the child has not got and must not start
    for obj, restart in list(_RESTARTS.items()):
        _LEFT_TO_THE_PARENT.append(dict(vars(obj)))
        restart(obj)


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork to survive
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
