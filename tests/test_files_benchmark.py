"""A smoke run of the transfer memory benchmark, so that it keeps working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "transfer_memory.py"


def test_transfer_memory_benchmark_smoke() -> None:
    """The benchmark uploads and downloads a small file and reports growth within the bound."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), "--size-mib", "8"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "sandboxkit download" in done.stdout and "within the 32 MiB bound" in done.stdout
