"""A smoke run of benchmarks/run.py: the benchmark code still works (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
CASES = [
    "download",
    "upload",
    "control",
    "hosts",
    "faults",
    "rerun",
    "outage",
    "link",
    "smallfiles",
    "page",
    "budgets",
    "pacing",
]


def test_quick_run_reports_every_case_as_json() -> None:
    """`run.py --quick --json` runs every case and prints a report with their figures."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["machine"]["cpu_count"] >= 1
    assert report["machine"]["python"] and report["machine"]["aiohttp"]
    assert [case["name"] for case in report["cases"]] == CASES
    for case in report["cases"]:
        assert case["server"] and case["rows"], case["name"]
        assert all("contender" in row for row in case["rows"])
        assert all(isinstance(t["met"], bool) for t in case["targets"])
    by_name = {case["name"]: case for case in report["cases"]}
    # Correctness, unlike speed, is asserted: every download finished with the right bytes.
    hosts = [row for row in by_name["hosts"]["rows"] if row["contender"].startswith("sandboxkit")]
    assert hosts and all(row["errors"] == 0 for row in hosts)
    # Not the default-policy row: with 5 attempts one download in ~3,000 may run out of tries.
    faults = {row["contender"]: row for row in by_name["faults"]["rows"]}
    assert faults["fault-free"]["completion"] == 1.0
    assert [row["completion"] for name, row in faults.items() if "max_attempts=10" in name] == [1.0]
    # A killed batch rerun ends with every file right and nothing left behind; through an
    # outage, with the default policy, every job is done.
    rerun = by_name["rerun"]["rows"][0]
    assert (rerun["right"], rerun["leftovers"]) == (1.0, 0)
    outage = by_name["outage"]["rows"]
    assert [row["completion"] for row in outage[:4]] == [1.0] * 4  # reset, close, head
    # Small files: the three clients (sandboxkit, raw aiohttp, the floor) each read every
    # file right.
    small = by_name["smallfiles"]["rows"]
    assert len(small) == 3 and all(row["errors"] == 0 for row in small), small
    assert_page_case(by_name["page"])
    # Budgets: every transfer row moved bytes (the figures are reported, not asserted).
    assert all(row["mib_s"] > 0 for row in by_name["budgets"]["rows"]), by_name["budgets"]
    # The link case needs root: elsewhere it is skipped with its reason; where it runs,
    # every download that ran came out whole (rows this tree cannot run say so).
    link = by_name["link"]
    if "skipped" in link["config"]:
        assert link["config"]["skipped"] and link["rows"][0]["contender"] == "skipped"
    else:
        ran = [row for row in link["rows"] if row["sha256"] != "not available"]
        assert len(ran) >= 3 and all(row["sha256"] == "ok" for row in ran), ran


def assert_page_case(case: dict[str, Any]) -> None:
    """Case 10's reads came out right: a page with ranges moved exactly the page, one
    without moved the file up to the page's end and stopped short of the file's end."""
    rows = {row["contender"]: row for row in case["rows"]}
    assert all(row["right"] == 1 for row in rows.values()), rows
    ranged = rows["sandboxkit read_range, ranges (206)"]
    whole = rows["sandboxkit read_range, no ranges (200)"]
    assert (ranged["x_page"], ranged["whole"]) == (1, 1)
    page_end = case["config"]["offset"] + case["config"]["page"]
    size = case["config"]["size_mib"] << 20
    assert page_end <= whole["server_mib"] * (1 << 20) < size and whole["whole"] == 0, whole


def test_the_page_case_alone() -> None:
    """`run.py --quick --case page --json` reads its pages right (the quick run's check)."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), "--quick", "--case", "page", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (case,) = json.loads(done.stdout)["cases"]
    assert case["name"] == "page"
    assert_page_case(case)


def test_one_case_prints_a_table() -> None:
    """Without --json the chosen case is printed as a table with its targets."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), "--quick", "--case", "upload"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "## 2. upload" in done.stdout
    assert "sandboxkit upload (path)" in done.stdout and "target" in done.stdout
    assert "cpu_count=" in done.stdout and "aiohttp=" in done.stdout
