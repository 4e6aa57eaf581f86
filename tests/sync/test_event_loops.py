"""`--event-loop` / SANDBOXKIT_TEST_LOOP: every event loop of the run is the one asked for.

Run under `--event-loop=uvloop`, these fail if any kind of loop the suite makes (pytest-asyncio's,
a portal's, asyncio.run's, a sandboxkit loop thread's) is still asyncio's own.
"""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace
from typing import Any

import anyio.from_thread
import pytest

from sandboxkit.pytest_plugin import EmulatorThread

from ..conftest import TEST_LOOP, loop_policy, requested


def loop_class(loop: str) -> type[asyncio.AbstractEventLoop]:
    if loop == "uvloop":
        import uvloop

        return uvloop.Loop
    return asyncio.SelectorEventLoop


async def current_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


async def test_the_test_runs_on_the_loop_asked_for(requested_loop: str) -> None:
    assert type(asyncio.get_running_loop()) is loop_class(requested_loop)


def test_loops_the_code_makes_are_the_loop_asked_for(
    requested_loop: str, sandboxkit_emulator_thread: EmulatorThread
) -> None:
    """A portal, asyncio.run, new_event_loop and the sync client's loop thread (which
    serves `sandboxkit_emulator_thread`: anyio.run in a thread of its own)."""
    made: dict[str, asyncio.AbstractEventLoop] = {}
    with anyio.from_thread.start_blocking_portal() as portal:
        made["portal"] = portal.call(current_loop)
    made["asyncio.run"] = asyncio.run(current_loop())
    made["new_event_loop"] = asyncio.new_event_loop()
    made["new_event_loop"].close()
    made["sync loop thread"] = sandboxkit_emulator_thread.call(current_loop())
    expected = loop_class(requested_loop)
    assert {name: type(loop) for name, loop in made.items()} == dict.fromkeys(made, expected)


def config(option: str | None) -> Any:
    return SimpleNamespace(getoption=lambda _: option)


def test_the_option_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_LOOP, "uvloop")
    assert requested(config("asyncio")) == "asyncio"
    assert requested(config(None)) == "uvloop"
    monkeypatch.delenv(TEST_LOOP)
    assert requested(config(None)) == "asyncio"


def test_an_unknown_loop_in_the_environment_stops_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TEST_LOOP, "uv-loop")
    with pytest.raises(pytest.UsageError, match="'uv-loop'"):
        requested(config(None))


def test_uvloop_asked_for_but_missing_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never the standard loop quietly in its place."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what importing a missing module does
    with pytest.raises(pytest.UsageError, match="uvloop, which is not installed"):
        loop_policy("uvloop")
    assert loop_policy("asyncio") is None
