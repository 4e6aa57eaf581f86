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
