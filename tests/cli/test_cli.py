"""The `sandboxkit` CLI against a real emulator: output, exit codes, and nothing sent on bad input.

The CLI runs its own event loop (`asyncio.run`), so the emulator runs in a background thread
(`emulator_thread`, see tests/cli_support.py); click's `CliRunner` drives the CLI in-process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import sandboxkit
from sandboxkit.cli import cli
from sandboxkit.cli._app import describe

from ..cli_support import EmulatorThread, assert_one_line_error, cli_process, invoke


def create(emu: EmulatorThread, name: str, *extra: str) -> dict[str, Any]:
    """Create a template through the CLI and return its JSON result."""
    result = invoke(
        emu, "templates", "create", name, "--cpu-count", "2", "--memory-mb", "2048",
        "--disk-size-mb", "4096", "--json", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    created: dict[str, Any] = json.loads(result.stdout)
    return created


# --- templates create --------------------------------------------------------------------


def test_create_twice_under_one_key_replays(emulator_thread: EmulatorThread) -> None:
    """A second create under the same key prints replayed=True and the same ids."""
    args = ["templates", "create", "twice", "--product", "sku-small", "--idempotency-key", "k-1"]
    first, second = invoke(emulator_thread, *args), invoke(emulator_thread, *args)
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    assert "replayed=False" in first.stdout and "replayed=True" in second.stdout
    assert first.stdout.split()[:4] == second.stdout.split()[:4]  # template and build ids
    sent = emulator_thread.emu.journal_for("templates.create")[-1]
    assert sent.headers["Idempotency-Key"] == "k-1"


def test_create_labels_and_split_flow(emulator_thread: EmulatorThread) -> None:
    """--label and --split reach the service; a split-flow build waits."""
    created = create(
        emulator_thread, "labelled", "--label", "team=ml", "--split", "--idempotency-key", "k-l"
    )
    assert created["status"] == "waiting" and created["replayed"] is False
    assert emulator_thread.emu.build_status(created["build_id"]) == "waiting"
    # The label is in the body the key was first used with: another label is a mismatch.
    relabelled = invoke(
        emulator_thread, "templates", "create", "labelled", "--cpu-count", "2", "--memory-mb",
        "2048", "--disk-size-mb", "4096", "--label", "team=other", "--split",
        "--idempotency-key", "k-l",
    )  # fmt: skip
    assert relabelled.exit_code == 1, relabelled.output
    assert "IdempotencyMismatchError" in relabelled.output


def test_create_bad_name_is_one_line_and_sends_nothing(emulator_thread: EmulatorThread) -> None:
    """A name with a space exits 2 with one ValidationError line; nothing is sent."""
    before = len(emulator_thread.emu.journal)
    result = invoke(emulator_thread, "templates", "create", "my template", "--product", "sku-small")
    assert_one_line_error(result, 2, "ValidationError", "name=", "nothing was sent")
    assert len(emulator_thread.emu.journal) == before


def test_create_needs_resources(emulator_thread: EmulatorThread) -> None:
    """Missing resources is a one-line usage error, exit 2."""
    result = invoke(emulator_thread, "templates", "create", "x", "--cpu-count", "2")
    assert_one_line_error(result, 2, "--memory-mb, --disk-size-mb", "--help")


def test_service_error_names_class_status_and_request_id(emulator_thread: EmulatorThread) -> None:
    """A split flow in an IDC without it prints the 422 with its request id, exit 1."""
    result = invoke(
        emulator_thread, "templates", "create", "nosplit", "--product", "sku-small",
        "--idc-name", "cli-nosplit", "--split",
    )  # fmt: skip
    assert_one_line_error(result, 1, "UnprocessableEntityError", "status=422", "request_id=req-")


def test_debug_shows_the_traceback(emulator_thread: EmulatorThread) -> None:
    """--debug adds the traceback before the one-line summary."""
    result = invoke(
        emulator_thread, "--debug", "templates", "create", "bad name", "--product", "sku-small"
    )
    assert result.exit_code == 2
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ValidationError")


def test_missing_api_key_is_a_usage_error(emulator_thread: EmulatorThread) -> None:
    """Without an API key the command says how to give one and exits 2."""
    result = CliRunner().invoke(
        cli, ["templates", "create", "x", "--product", "p"], env={"SANDBOXKIT_API_KEY": None}
    )
    assert_one_line_error(result, 2, "--api-key", "SANDBOXKIT_API_KEY")


# --- builds ------------------------------------------------------------------------------


def test_builds_list_table_and_json(emulator_thread: EmulatorThread) -> None:
    """Builds are listed over several pages as a table, and as one JSON object per line."""
    created = create(emulator_thread, "paged")
    emulator_thread.emu.add_builds(created["id"], 4)
    table = invoke(emulator_thread, "builds", "list", created["id"], "--page-size", "2")
    assert table.exit_code == 0, table.output
    assert "5 builds, 3 page(s) of up to 2" in table.stdout
    assert "rebuild" in table.stdout and "initial_build" in table.stdout
    lines = invoke(emulator_thread, "builds", "list", created["id"], "--json", "--page-size", "2")
    assert lines.exit_code == 0, lines.output
    records = [json.loads(line) for line in lines.stdout.splitlines()]
    assert len(records) == 5
    assert records[-1]["id"] == created["build_id"]
    assert {r["template_id"] for r in records} == {created["id"]}


def test_builds_list_bad_page_size_sends_nothing(emulator_thread: EmulatorThread) -> None:
    """--page-size 0 exits 2 with one line and no request."""
    before = len(emulator_thread.emu.journal)
    result = invoke(emulator_thread, "builds", "list", "tpl-x", "--page-size", "0")
    assert_one_line_error(result, 2, "ValidationError", "page_size")
    assert len(emulator_thread.emu.journal) == before


def test_builds_list_unknown_template(emulator_thread: EmulatorThread) -> None:
    """An unknown template prints NotFoundError with status 404, exit 1."""
    result = invoke(emulator_thread, "builds", "list", "tpl-missing")
    assert_one_line_error(result, 1, "NotFoundError", "status=404", "request_id=req-")


def test_create_without_a_build_definition_waits_as_the_sdk_does(
    emulator_thread: EmulatorThread,
) -> None:
    """One default for the CLI and the SDK: no definition, no build run (the split flow,
    and a line saying how to start it); --build runs one with no steps."""
    waiting = invoke(
        emulator_thread, "templates", "create", "plain", "--product", "sku-small", "--json"
    )
    assert waiting.exit_code == 0, waiting.output
    plain = json.loads(waiting.stdout)
    assert f"start it with `sandboxkit builds start {plain['id']}" in waiting.stderr
    logs = invoke(emulator_thread, "builds", "logs", plain["id"], plain["build_id"])
    assert logs.stdout == "" and "has not started" in logs.stderr
    built = create(emulator_thread, "built", "--build")
    logs = invoke(emulator_thread, "builds", "logs", built["id"], built["build_id"])
    assert f"build {built['build_id']} queued" in logs.stdout, logs.output


def test_builds_logs_follow_to_the_end(emulator_thread: EmulatorThread) -> None:
    """--follow prints every line until the build is finished, then exits 0."""
    created = create(emulator_thread, "followed", "--command", "make")
    result = invoke(
        emulator_thread, "builds", "logs", created["id"], created["build_id"], "--follow"
    )
    assert result.exit_code == 0, result.output
    assert "running step 1/1: make" in result.stdout
    assert "finished: ready" in result.stdout.splitlines()[-1]
    errors = invoke(
        emulator_thread, "builds", "logs", created["id"], created["build_id"], "--level", "error"
    )
    levels = {line.split()[1] for line in errors.stdout.splitlines()}
    assert errors.exit_code == 0 and levels == {"ERROR"}


def test_builds_start_then_follow_a_failing_build(emulator_thread: EmulatorThread) -> None:
    """A split-flow build started by `builds start` that fails makes --follow exit 1."""
    created = create(emulator_thread, "failing", "--split")
    emulator_thread.emu.fail_next_build()
    started = invoke(emulator_thread, "builds", "start", created["id"], created["build_id"])
    assert started.exit_code == 0 and "started build" in started.stdout
    result = invoke(emulator_thread, "builds", "logs", created["id"], created["build_id"], "-f")
    assert "build failed: TemplateBuild.OutOfMemory" in result.stdout
    assert_one_line_error(result, 1, "BuildFailedError", "TemplateBuild.OutOfMemory")


def test_builds_logs_bad_level_sends_nothing(emulator_thread: EmulatorThread) -> None:
    """An unknown --level exits 2 with one line naming the choices, and no request."""
    before = len(emulator_thread.emu.journal)
    result = invoke(emulator_thread, "builds", "logs", "tpl-x", "bld-x", "--level", "loud")
    assert_one_line_error(result, 2, "--level", "'loud'", "'debug', 'info', 'warn', 'error'")
    assert len(emulator_thread.emu.journal) == before


def test_builds_logs_level_is_case_insensitive(emulator_thread: EmulatorThread) -> None:
    """--level ERROR is --level error: the same lines, and `level=error` on the wire."""
    created = create(emulator_thread, "levels", "--command", "make")
    ids = [created["id"], created["build_id"]]
    followed = invoke(emulator_thread, "builds", "logs", *ids, "--follow")  # to its end
    assert followed.exit_code == 0, followed.output
    lower = invoke(emulator_thread, "builds", "logs", *ids, "--level", "error")
    for spelling in ("ERROR", "Error"):
        result = invoke(emulator_thread, "builds", "logs", *ids, "--level", spelling)
        assert result.exit_code == 0, result.output
        assert result.stdout == lower.stdout
        sent = emulator_thread.emu.journal_for("builds.logs")[-1]
        assert sent.query.get("level") == "error"
    assert {line.split()[1] for line in lower.stdout.splitlines()} == {"ERROR"}


def test_builds_logs_help_lists_the_levels_in_lower_case() -> None:
    """The help shows the four levels as they are sent."""
    result = CliRunner().invoke(cli, ["builds", "logs", "--help"])
    assert result.exit_code == 0, result.output
    assert "[debug|info|warn|error]" in result.stdout


# --- pure helpers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            sandboxkit.NotFoundError(
                "no such\ntemplate", status=404, surface="v2", request_id="r-1", code="X.Y"
            ),
            "NotFoundError: status=404 code=X.Y request_id=r-1: no such template",
        ),
        (
            sandboxkit.BadGatewayError("down", status=502, surface="data"),
            "BadGatewayError: status=502: down",
        ),
        (sandboxkit.ValidationError("bad"), "ValidationError: bad (nothing was sent)"),
        (sandboxkit.APIConnectionError("reset"), "APIConnectionError: reset"),
        (OSError(28, "No space left on device"), "OSError: [Errno 28] No space left on device"),
    ],
)
def test_describe_is_one_line(error: BaseException, line: str) -> None:
    """Each error becomes one line naming its class, status, request id and message."""
    assert describe(error) == line


def test_debug_shows_each_request_and_answer_and_no_token(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    """--debug turns on the SDK's DEBUG lines (a request and its answer) on stderr; the
    sandbox token and the API key appear nowhere in them."""
    env = {**emulator_thread.env(), **emulator_thread.sandbox_env()}
    root = emulator_thread.emu.sandbox_root(env["SANDBOXKIT_SANDBOX_KEY"])
    (root / "home/user/d.bin").write_bytes(b"d" * 10)
    process = cli_process(
        "--debug", "files", "download", "/home/user/d.bin", str(tmp_path / "d"), env=env
    )
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "files.download: request 1: GET" in err and "files.download: answer 1: 200" in err
    assert env["SANDBOXKIT_SANDBOX_TOKEN"] not in err + out
    assert env["SANDBOXKIT_API_KEY"] not in err + out
