"""The pytest plugin: fixtures giving a test a running emulator and clients wired to it.

pytest loads it through the ``pytest11`` entry point in every session of an environment that
has sandboxkit, so importing it must stay cheap: the emulator and aiohttp are imported inside
the fixtures, when a test asks for one.

Async tests (pytest-asyncio, strict or auto mode; the fixtures run on the test's
function-scoped loop):

- ``sandboxkit_emulator``: a running ``Emulator``, served by the test's own loop;
- ``sandboxkit_client``: a ``sandboxkit.Client`` wired to it, closed after the test;
- ``sandboxkit_sandbox``: a ``Sandbox`` handle on a fresh sandbox, through that client.

Blocking tests (no event loop of theirs, no pytest-asyncio needed):

- ``sandboxkit_emulator_thread``: an :class:`EmulatorThread`, the emulator on a loop thread;
- ``sandboxkit_sync_client``: a ``sandboxkit.sync.Client`` wired to it, closed after;
- ``sandboxkit_sync_sandbox``: a ``sandboxkit.sync.Sandbox`` on a fresh sandbox.

``@pytest.mark.sandboxkit(...)`` on a test, class or module (closest wins, per keyword)
configures them: ``faults=[(route, Fault, ...), ...]`` scripted before the test runs,
``retry=`` the clients' ``RetryPolicy`` (default ``RetryPolicy.no_delay()``), and any other
keyword goes to ``Emulator(...)`` (``idcs``, ``default_idc``, ``ca``, ``clock``,
``build_seconds``...).

Without pytest-asyncio installed the async fixtures fail with a message saying so; the
blocking ones work.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar

import pytest

if TYPE_CHECKING:
    from . import sync
    from ._core.options import RetryPolicy
    from .client import Client
    from .emulator import Emulator
    from .resources.sandbox import Sandbox

try:
    import pytest_asyncio
except ImportError:  # the async fixtures then explain what is missing
    pytest_asyncio = None  # type: ignore[assignment]

__all__ = [
    "EmulatorThread",
    "pytest_configure",
    "sandboxkit_client",
    "sandboxkit_emulator",
    "sandboxkit_emulator_thread",
    "sandboxkit_sandbox",
    "sandboxkit_sync_client",
    "sandboxkit_sync_sandbox",
]

T = TypeVar("T")

MARKER = "sandboxkit"
MARKER_HELP = (
    "sandboxkit(faults=[(route, Fault, ...)], retry=RetryPolicy, idcs=[Idc], default_idc=..., "
    "**emulator_options): configure the sandboxkit_* fixtures' emulator and clients"
)
_NO_PYTEST_ASYNCIO = (
    "{name} is an async fixture and needs pytest-asyncio: `pip install pytest-asyncio` "
    "(or use the blocking sandboxkit_emulator_thread, sandboxkit_sync_client and "
    "sandboxkit_sync_sandbox)"
)


def _usage(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, so that `--strict-markers` accepts it."""
    config.addinivalue_line("markers", MARKER_HELP)


class _Settings(NamedTuple):
    """What the `sandboxkit` markers of one test ask for."""

    emulator: dict[str, Any]
    faults: list[tuple[str, tuple[Any, ...]]]
    retry: RetryPolicy


def _settings(node: pytest.Item) -> _Settings:
    """The markers of `node` (test, then class, then module: the closest one wins)."""
    from ._core.options import RetryPolicy
    from .emulator import Emulator, Fault

    options: dict[str, Any] = {}
    for mark in reversed(list(node.iter_markers(MARKER))):
        if mark.args:
            _usage(f"@pytest.mark.{MARKER} takes keywords only, got {mark.args!r}")
        options.update(mark.kwargs)
    faults = []
    for entry in options.pop("faults", None) or []:
        route, *plan = entry if isinstance(entry, tuple | list) else (entry,)
        if not isinstance(route, str) or not plan or not all(isinstance(f, Fault) for f in plan):
            _usage(f"{MARKER} faults= wants (route, Fault, ...) tuples, got {entry!r}")
        faults.append((route, tuple(plan)))
    retry = options.pop("retry", None) or RetryPolicy.no_delay()
    if not isinstance(retry, RetryPolicy):
        _usage(f"{MARKER} retry= wants a sandboxkit.RetryPolicy, got {retry!r}")
    known = inspect.signature(Emulator).parameters
    unknown = sorted(set(options) - set(known))
    if unknown:
        wanted = ", ".join(["faults", "retry", *known])
        _usage(f"{MARKER} has no option {', '.join(unknown)}; it takes {wanted}")
    return _Settings(options, faults, retry)


def _script(emu: Emulator, faults: list[tuple[str, tuple[Any, ...]]]) -> None:
    for route, plan in faults:
        emu.faults.script(route, *plan)


async def _scripted(emu: Emulator, faults: list[tuple[str, tuple[Any, ...]]]) -> None:
    _script(emu, faults)  # on the emulator's own loop thread, like everything it does


def _check_async_test(request: pytest.FixtureRequest) -> None:
    """An emulator on the test's loop serves only while an async test on that loop runs."""
    test = getattr(request.node, "function", None)
    if not inspect.iscoroutinefunction(test):
        _usage(
            f"{request.fixturename} serves on the test's event loop, which a blocking test "
            "does not run: use sandboxkit_emulator_thread / sandboxkit_sync_client there"
        )
    marker = request.node.get_closest_marker("asyncio")
    scope = marker and (marker.kwargs.get("loop_scope") or marker.kwargs.get("scope"))
    if not scope:
        try:
            scope = request.config.getini("asyncio_default_test_loop_scope")
        except ValueError:  # pytest-asyncio before 0.26: tests run on the function loop
            scope = None
    if scope not in (None, "", "function"):
        _usage(
            f"{request.fixturename} runs on the function-scoped event loop, but this test runs "
            f"on a {scope}-scoped one; run it on the function loop"
        )


def _async_fixture(func: Callable[..., Any]) -> Any:
    """`func` as a pytest-asyncio fixture on the test's (function-scoped) loop, so it works
    in strict mode too; without pytest-asyncio, a fixture that says it is needed."""
    if pytest_asyncio is None:

        def missing() -> None:
            _usage(_NO_PYTEST_ASYNCIO.format(name=func.__name__))

        return pytest.fixture(name=func.__name__)(missing)
    try:
        return pytest_asyncio.fixture(func, loop_scope="function")
    except TypeError:  # pytest-asyncio before 0.24: function-scoped fixtures share the loop
        return pytest_asyncio.fixture(func)


@_async_fixture
async def sandboxkit_emulator(request: pytest.FixtureRequest) -> AsyncIterator[Emulator]:
    """A running emulator served by the test's event loop, its marker's faults scripted."""
    _check_async_test(request)
    wanted = _settings(request.node)
    from .emulator import Emulator

    async with Emulator(**wanted.emulator) as emu:
        _script(emu, wanted.faults)
        yield emu


@_async_fixture
async def sandboxkit_client(
    request: pytest.FixtureRequest, sandboxkit_emulator: Emulator
) -> AsyncIterator[Client]:
    """A `sandboxkit.Client` wired to `sandboxkit_emulator`, closed after the test."""
    async with sandboxkit_emulator.client(retry=_settings(request.node).retry) as client:
        yield client


@_async_fixture
async def sandboxkit_sandbox(sandboxkit_emulator: Emulator, sandboxkit_client: Client) -> Sandbox:
    """A handle, through `sandboxkit_client`, on a fresh sandbox of the default data center."""
    return sandboxkit_client.sandbox_from_response(await sandboxkit_emulator.create_sandbox())


class EmulatorThread:
    """An `Emulator` served by an event loop in a thread of its own, for blocking tests.

    Read `emulator.journal` and script `emulator.faults` directly; run its coroutine methods
    with :meth:`call`, e.g. ``thread.call(thread.emulator.delete_sandbox(key))``.
    """

    def __init__(self, **options: Any) -> None:
        from .emulator import Emulator
        from .sync._loop import Loop

        self._loop = Loop()
        try:
            self.emulator: Emulator = self._loop.call(lambda: Emulator(**options))
            self._loop.call(self.emulator.start)
        except BaseException:
            self._loop.stop()
            raise

    def call(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable` on the emulator's loop and return its result."""

        async def run() -> T:
            return await awaitable

        return self._loop.call(run)

    def create_sandbox(self, idc_name: str | None = None) -> dict[str, Any]:
        """`Emulator.create_sandbox`, from blocking code: a sandbox create answer."""
        return self.call(self.emulator.create_sandbox(idc_name))

    def close(self) -> None:
        """Stop the emulator (deleting its files) and its loop; idempotent."""
        if not self._loop.closed:
            try:
                self._loop.call(self.emulator.close)
            finally:
                self._loop.stop()


@pytest.fixture
def sandboxkit_emulator_thread(request: pytest.FixtureRequest) -> Iterator[EmulatorThread]:
    """An emulator on a loop thread of its own, its marker's faults scripted."""
    if "sandboxkit_emulator" in request.fixturenames:
        _usage(
            "a test gets either sandboxkit_emulator (async) or sandboxkit_emulator_thread "
            "(blocking: sandboxkit_sync_client, sandboxkit_sync_sandbox), not both"
        )
    wanted = _settings(request.node)
    running = EmulatorThread(**wanted.emulator)
    try:
        running.call(_scripted(running.emulator, wanted.faults))
        yield running
    finally:
        running.close()


@pytest.fixture
def sandboxkit_sync_client(
    request: pytest.FixtureRequest, sandboxkit_emulator_thread: EmulatorThread
) -> Iterator[sync.Client]:
    """A blocking `sandboxkit.sync.Client` wired to `sandboxkit_emulator_thread`, closed
    after the test."""
    import functools

    from . import sync

    emu = sandboxkit_emulator_thread.emulator
    client = sync.Client.__new__(sync.Client)
    # Built by `Emulator.client` (as `from_config` builds from a config) on the sync
    # client's own loop thread: the same wiring as the async fixture, never a copy of it.
    client._start(functools.partial(emu.client, retry=_settings(request.node).retry))
    with client:
        yield client


@pytest.fixture
def sandboxkit_sync_sandbox(
    sandboxkit_emulator_thread: EmulatorThread, sandboxkit_sync_client: sync.Client
) -> sync.Sandbox:
    """A blocking handle, through `sandboxkit_sync_client`, on a fresh sandbox."""
    return sandboxkit_sync_client.sandbox_from_response(sandboxkit_emulator_thread.create_sandbox())
