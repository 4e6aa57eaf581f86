"""Every script in examples/ runs as a user runs it: a standalone `sandboxkit emulator` in
one process, the script in another whose environment is only the emulator's printed exports."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .standalone_support import Standalone

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def exports() -> Iterator[dict[str, str]]:
    """The exports of a standalone emulator that runs for this module."""
    running = Standalone()
    try:
        yield running.exports
    finally:
        code, stderr = running.stop()
    assert code == 0, stderr


def run_example(name: str, exports: dict[str, str], cwd: Path, *args: str) -> str:
    """Run examples/`name` with the exports as its only SANDBOXKIT_* settings, and a TMPDIR
    of its own (`cwd / "tmp"`), in dev mode with every warning an error: its stdout, once it
    has exited 0 with nothing on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXKIT_")}
    (cwd / "tmp").mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(EXAMPLES / name), *args],
        env={**env, **exports, "TMPDIR": str(cwd / "tmp")},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    return done.stdout


def test_every_example_has_a_test() -> None:
    tested = {"agent_tool.py", "batch_download.py", "dask_download.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_agent_tool(exports: dict[str, str], tmp_path: Path) -> None:
    out = run_example("agent_tool.py", exports, tmp_path)
    assert "refused before sending: remote path='../etc/passwd': must be absolute" in out
    assert "task=\"print('hello')\" saved=15B" in out
    assert "log=b'step 1 done\\nstep 2 done\\n'" in out


def test_batch_download_skips_what_the_first_pass_fetched(
    exports: dict[str, str], tmp_path: Path
) -> None:
    out = run_example("batch_download.py", exports, tmp_path, "results")
    first, second = out.splitlines()[:2]
    assert "total=20, done=20, failed=0" in first and "skipped=0" in first
    assert "done=0, failed=0" in second and "skipped=20" in second
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == sorted(
        f"result-{n}.json" for n in range(20)
    )
    assert (tmp_path / "results" / "result-3.json").read_text() == '{"run": 3, "score": 0.15}'


def test_batch_download_without_a_directory_writes_nothing_where_it_runs(
    exports: dict[str, str], tmp_path: Path
) -> None:
    """Run from a checkout, it must not leave files in the tree: a temporary directory,
    named on its last line."""
    out = run_example("batch_download.py", exports, tmp_path)
    [made] = (tmp_path / "tmp").iterdir()
    assert out.splitlines()[-1] == f"the files are in {made}"
    assert len(list(made.iterdir())) == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]


def test_dask_download(exports: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    out = run_example("dask_download.py", exports, tmp_path)
    assert "total=8, done=8, failed=0" in out and "failed:" not in out
    [made] = (tmp_path / "tmp").glob("sandboxkit-dask-*")
    assert out.splitlines()[-1] == f"the files are in {made} (remove it when done)"
