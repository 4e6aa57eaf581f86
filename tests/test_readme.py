"""The README stays true: its commands are the CI's, and its emulator example runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run calls exactly the README's test command, and the README names the demo."""
    assert "make test" in README and "make demo" in README
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_python_block_compiles() -> None:
    """Each Python example in the README is valid Python."""
    blocks = python_blocks()
    assert len(blocks) >= 5
    for block in blocks:
        compile(block, "README.md", "exec")


def test_emulator_example_passes_as_a_users_test(tmp_path: Path) -> None:
    """The README's pytest example passes when a user runs it as their own test file."""
    [example] = [b for b in python_blocks() if "def test_" in b]
    (tmp_path / "test_users_code.py").write_text(example)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


QUICK_START_DRIVER = """
import asyncio, os
from sandboxkit.emulator import Emulator

async def main() -> None:
    async with Emulator(build_seconds=0.2) as emu:
        os.environ["SANDBOXKIT_API_KEY"] = emu.api_key
        os.environ["SANDBOXKIT_BASE_URL"] = emu.base_url
        namespace: dict = {}
        exec(compile(QUICK_START, "README.md", "exec"), namespace)
        await namespace["make_template"]()

asyncio.run(main())
print("quick start done")
"""


def test_quick_start_runs_clean_under_dev_mode_and_warnings_as_errors(tmp_path: Path) -> None:
    """The README's first example, run against the emulator by `python -X dev -W error`,
    exits 0 with nothing on stderr: no warning, no unclosed resource, no ignored error."""
    [quick_start] = [b for b in python_blocks() if "async def make_template" in b]
    script = tmp_path / "quick_start.py"
    script.write_text(f"QUICK_START = {quick_start!r}\n{QUICK_START_DRIVER}")
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.endswith("quick start done\n")
    assert "ready" in done.stdout or "info" in done.stdout  # the logs and builds were printed
