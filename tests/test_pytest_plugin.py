"""The pytest plugin, as a user meets it: a fresh project whose only file besides its
pyproject.toml is a test module using the sandboxkit_* fixtures, run by pytest in a
subprocess (strict and auto asyncio modes), with the plugin found through its entry point."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import sandboxkit.pytest_plugin

# The emulator's route name for a download; the marker scripts faults by route.
DOWNLOAD = "files.download"

PROJECT = """\
[project]
name = "my-agent"
version = "0.1.0"
dependencies = ["sandboxkit"]

[tool.pytest.ini_options]
{ini}
"""

ASYNCIO_INI = 'asyncio_mode = "{mode}"\nasyncio_default_fixture_loop_scope = "function"\n'

# What a user writes. {mark} is `@pytest.mark.asyncio` in strict mode, nothing in auto mode.
USER_TESTS = """\
import pytest

import sandboxkit
from sandboxkit.emulator import Fault, Idc

DOWNLOAD = {download!r}


{mark}async def test_upload_then_download(sandboxkit_emulator, sandboxkit_client, tmp_path):
    sbx = sandboxkit_client.sandbox_from_response(await sandboxkit_emulator.create_sandbox())
    await sbx.files.upload("/home/user/report.txt", b"made by my agent")
    result = await sbx.files.download("/home/user/report.txt", tmp_path / "report.txt")
    assert (tmp_path / "report.txt").read_bytes() == b"made by my agent"
    assert result.attempts == 1
    assert sandboxkit_client.retry == sandboxkit.RetryPolicy.no_delay()


@pytest.mark.sandboxkit(
    idcs=[Idc("us-1"), Idc("eu-norange", supports_resume=False)],
    default_idc="eu-norange",
    faults=[(DOWNLOAD, Fault.status(503), Fault.cut(after_bytes=10))],
)
{mark}async def test_a_scripted_fault_is_retried(sandboxkit_emulator, sandboxkit_sandbox, tmp_path):
    await sandboxkit_sandbox.files.upload("/home/user/big.bin", bytes(range(256)) * 64)
    result = await sandboxkit_sandbox.files.download("/home/user/big.bin", tmp_path / "b")
    assert (tmp_path / "b").read_bytes() == bytes(range(256)) * 64
    assert result.attempts == 3
    tries = sandboxkit_emulator.journal_for(DOWNLOAD)
    assert [r.status for r in tries] == [503, 200, 200]  # no resume in eu-norange: restart
    assert "Range" not in tries[-1].headers


def test_blocking_code(sandboxkit_emulator_thread, sandboxkit_sync_client):
    body = sandboxkit_emulator_thread.create_sandbox()
    sbx = sandboxkit_sync_client.sandbox_from_response(body)
    sbx.files.upload("/home/user/notes.txt", b"written without a loop")
    assert sbx.files.read_bytes("/home/user/notes.txt") == b"written without a loop"
    journal = sandboxkit_emulator_thread.emulator.journal
    assert [(r.method, r.status) for r in journal] == [("POST", 200), ("GET", 200)]


@pytest.mark.sandboxkit(
    faults=[(DOWNLOAD, Fault.status(503))], retry=sandboxkit.RetryPolicy.no_delay()
)
class TestBlockingFaults:
    @pytest.mark.sandboxkit(retry=sandboxkit.RetryPolicy.none())  # the closest mark wins
    def test_without_retries_the_fault_surfaces(
        self, sandboxkit_emulator_thread, sandboxkit_sync_sandbox
    ):
        sandboxkit_sync_sandbox.files.upload("/home/user/a.txt", b"a")
        with pytest.raises(sandboxkit.ServiceUnavailableError):
            sandboxkit_sync_sandbox.files.read_bytes("/home/user/a.txt")
        tries = sandboxkit_emulator_thread.emulator.journal_for(DOWNLOAD)
        assert [r.status for r in tries] == [503]
"""

MISUSES = """\
import pytest


def test_blocking_with_the_async_emulator(sandboxkit_emulator):
    pass


@pytest.mark.asyncio(loop_scope="module")
async def test_on_a_module_loop(sandboxkit_client):
    pass


def test_both_emulators(sandboxkit_emulator_thread, sandboxkit_emulator):
    pass


@pytest.mark.sandboxkit(idc="us-1")
def test_a_misspelt_option(sandboxkit_sync_client):
    pass


@pytest.mark.sandboxkit(faults=["files.download"])
async def test_a_fault_without_its_route(sandboxkit_client):
    pass
"""

WITHOUT_PYTEST_ASYNCIO = """\
async def test_async(sandboxkit_client):
    pass


def test_blocking(sandboxkit_sync_sandbox):
    sandboxkit_sync_sandbox.files.upload("/home/user/a.txt", b"a")
    assert sandboxkit_sync_sandbox.files.read_bytes("/home/user/a.txt") == b"a"
"""


def user_project(root: Path, ini: str, tests: str) -> Path:
    """A project of a sandboxkit user: a pyproject.toml and one test module, nothing else."""
    root.mkdir()
    (root / "pyproject.toml").write_text(PROJECT.format(ini=ini))
    (root / "test_my_agent.py").write_text(tests)
    return root


def run_pytest(
    project: Path, *args: str, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m pytest` in `project`, as strict as ours, untouched by this session's
    PYTEST_* settings, with `project/tmp` as its temporary directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("PYTHONPATH", None)
    (project / "tmp").mkdir()
    env["TMPDIR"] = str(project / "tmp")
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "error"]
    command += ["--strict-markers", "-q", *args]
    return subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def summary(run: subprocess.CompletedProcess[str]) -> str:
    """The last line of pytest's output without its timing: '4 passed', '1 passed, 1 error'."""
    lines = run.stdout.strip().splitlines()
    return re.sub(r" in [0-9.]+s.*$", "", lines[-1] if lines else "")


def setup_errors(run: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Each test that errored at setup, with the first line of its error."""
    found = re.findall(r"_+ ERROR at setup of (\S+) _+\n(.*)\n", run.stdout)
    return dict(found)


def test_the_plugin_is_loaded_through_its_entry_point(pytestconfig: pytest.Config) -> None:
    """The pytest11 entry point registers the plugin in every session, this one included."""
    assert pytestconfig.pluginmanager.get_plugin("sandboxkit") is sandboxkit.pytest_plugin


def test_importing_the_plugin_imports_neither_aiohttp_nor_the_emulator() -> None:
    """pytest imports the plugin in every session: that costs neither aiohttp nor the
    emulator (nor the client), only what a test asking for a fixture needs."""
    # As pytest imports it: pytest (`_pytest`) is loaded first.
    code = "import sys, pytest, sandboxkit.pytest_plugin; print(' '.join(sorted(sys.modules)))"
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(run.stdout.split())
    assert "sandboxkit.pytest_plugin" in loaded
    heavy = {"aiohttp", "sandboxkit.emulator", "sandboxkit.client"}
    assert {m for m in loaded if any(m == h or m.startswith(h + ".") for h in heavy)} == set()
    # Nor sandboxkit's own names (attrs classes, converters): about 60 ms a session before
    # they loaded on first use. Only the package, its version and the plugin.
    assert {m for m in loaded if m.startswith("sandboxkit")} == {
        "sandboxkit",
        "sandboxkit._version",
        "sandboxkit.pytest_plugin",
    }
    assert not {"attrs", "attr", "cattrs"} & loaded


def test_outside_pytest_importing_sandboxkit_loads_the_client() -> None:
    """An application's `import sandboxkit` loads the client there and then, not on its first
    use, which is often inside a running event loop that the import would block."""
    names = ("sandboxkit.client", "aiohttp", "anyio._backends._asyncio")
    code = f"import sys, sandboxkit; print(*(n in sys.modules for n in {names}))"
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout == "True True True\n"


def test_every_public_name_loads_on_first_use() -> None:
    """The names `import sandboxkit` promises are all there, each the object its module has
    (a type alias, `Progress`, the object of the module `_LAZY` names for it)."""
    for name in sandboxkit.__all__:
        value = getattr(sandboxkit, name)
        if isinstance(value, types.GenericAlias):
            module = importlib.import_module(sandboxkit._LAZY[name], "sandboxkit")
            assert getattr(module, name) is value
        elif hasattr(value, "__module__") and name != "__version__":
            assert getattr(sys.modules[value.__module__], value.__name__) is value
    assert set(sandboxkit.__all__) <= set(dir(sandboxkit))
    with pytest.raises(AttributeError, match="no attribute 'Clinet'"):
        sandboxkit.Clinet  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_a_project_tests_its_code_with_the_fixtures(tmp_path: Path, mode: str) -> None:
    """Async and blocking tests, a marker's data centers, faults and retry policy: all pass
    under pytest-asyncio's strict mode (marked tests) and auto mode (unmarked)."""
    mark = "@pytest.mark.asyncio\n" if mode == "strict" else ""
    tests = USER_TESTS.format(download=DOWNLOAD, mark=mark)
    project = user_project(tmp_path / "my-agent", ASYNCIO_INI.format(mode=mode), tests)
    run = run_pytest(project)
    assert (run.returncode, summary(run)) == (0, "4 passed"), run.stdout + run.stderr
    assert list((project / "tmp").glob("sandboxkit-emulator-*")) == []  # every one closed


def test_misused_fixtures_fail_saying_what_to_do(tmp_path: Path) -> None:
    """A fixture asked for where it cannot work fails at setup with one line saying why,
    instead of hanging or passing options nobody reads."""
    project = user_project(tmp_path / "my-agent", ASYNCIO_INI.format(mode="auto"), MISUSES)
    run = run_pytest(project)
    assert summary(run) == "5 errors", run.stdout + run.stderr
    errors = setup_errors(run)
    wanted = {
        "test_blocking_with_the_async_emulator": "use sandboxkit_emulator_thread",
        "test_on_a_module_loop": "this test runs on a module-scoped one",
        "test_both_emulators": "not both",
        "test_a_misspelt_option": "sandboxkit has no option idc; it takes faults, retry, idcs",
        "test_a_fault_without_its_route": "wants (route, Fault, ...) tuples",
    }
    assert set(errors) == set(wanted), run.stdout
    for test, fragment in wanted.items():
        assert fragment in errors[test], errors[test]


def test_async_fixtures_without_pytest_asyncio_say_to_install_it(tmp_path: Path) -> None:
    """Without pytest-asyncio (hidden here by a package that fails to import), the async
    fixtures say it is needed and the blocking ones work."""
    hidden = tmp_path / "hidden" / "pytest_asyncio"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        "raise ModuleNotFoundError('hidden by the test', name='pytest_asyncio')\n"
    )
    project = user_project(tmp_path / "my-agent", "", WITHOUT_PYTEST_ASYNCIO)
    run = run_pytest(project, "-p", "no:asyncio", pythonpath=hidden.parent)
    assert summary(run) == "1 passed, 1 error", run.stdout + run.stderr
    message = setup_errors(run)["test_async"]
    assert message.startswith("sandboxkit_client is an async fixture and needs pytest-asyncio")
