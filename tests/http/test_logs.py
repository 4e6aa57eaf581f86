"""The `sandboxkit` logger: silent for an application that configured no logging, a DEBUG
line per request and per answer, and only allowlisted headers in them."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import sandboxkit
from sandboxkit.emulator import Emulator, Fault

from ..conftest import ScriptServer, answer
from ..files_support import new_box, payload

LIMIT = 10
FAST = sandboxkit.RetryPolicy.no_delay()

UNCONFIGURED = """
import asyncio
import sandboxkit
from sandboxkit.emulator import Emulator, Fault

async def main():
    async with Emulator() as emu:
        async with emu.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
            emu.faults.script("v1.organizations.get", Fault.status(502), Fault.status(503))
            await client.v1.get_organization(emu.org_id)
        print([e.status for e in emu.journal])

asyncio.run(main())
"""


def test_an_application_that_configured_no_logging_sees_nothing_on_stderr() -> None:
    """Two retries (each a WARNING record) in a program that never set up logging: stderr
    stays empty, because the `sandboxkit` logger has a NullHandler (Python would otherwise
    print WARNINGs through its last-resort handler)."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", UNCONFIGURED],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "[502, 503, 200]\n", "")


def test_the_null_handler_does_not_hide_records_from_the_application() -> None:
    """The NullHandler sits on `sandboxkit` only: records still propagate to the root
    logger's handlers of an application that has some."""
    logger = logging.getLogger("sandboxkit")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert logger.propagate


DEBUG_LINE = re.compile(
    r"(?P<op>.+?): (?P<kind>request|answer) (?P<n>\d+): (?P<rest>.*) headers=(?P<headers>\{.*\})$"
)


def debug_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.DEBUG
        and r.name == "sandboxkit"
        and DEBUG_LINE.match(r.getMessage())
    ]


async def test_a_debug_line_tells_each_request_and_each_answer(
    emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At DEBUG: per request its operation, number, method and host (and a Range); per
    answer its status (or none), host, elapsed time, request id, error class and the
    allowlisted headers; on both planes, through a retry and a resume."""
    caplog.set_level(logging.DEBUG, logger="sandboxkit")
    data = payload(100_000)
    async with emulator.client(retry=FAST) as client:
        box = await new_box(emulator, client)
        box.put("/home/user/f.bin", data)
        emulator.faults.script("v1.organizations.get", Fault.status(502))
        emulator.faults.script("files.download", Fault.cut(after_bytes=4000))
        caplog.clear()
        with anyio.fail_after(LIMIT):
            await client.v1.get_organization(emulator.org_id)
            await box.files.download("/home/user/f.bin", tmp_path / "f.bin")
    console = emulator.journal_for("v1.organizations.get")[0].host
    sandbox = emulator.journal_for("files.download")[0].host
    lines = [re.sub(r"in \d+\.\d{3}s", "in Ts", line) for line in debug_lines(caplog)]
    lines = [re.sub(r"'Content-Length': '\d+'(?=})", "'Content-Length': 'N'", x) for x in lines]
    assert lines == [
        f"v1.organizations.get: request 1: GET {console} headers={{}}",
        f"v1.organizations.get: answer 1: 502 from {console} in Ts error=BadGatewayError "
        "headers={'Content-Type': 'application/json', 'Content-Length': 'N'}",
        f"v1.organizations.get: request 2: GET {console} headers={{}}",
        f"v1.organizations.get: answer 2: 200 from {console} in Ts "
        "headers={'Content-Type': 'application/json', 'Content-Length': 'N'}",
        f"files.download: request 1: GET {sandbox} headers={{}}",
        f"files.download: answer 1: 200 from {sandbox} in Ts error=APIConnectionError "
        "headers={'Content-Type': 'application/octet-stream', 'Content-Length': '100000', "
        "'Accept-Ranges': 'bytes'}",
        f"files.download: request 2: GET {sandbox} headers={{'Range': 'bytes=4000-'}}",
        f"files.download: answer 2: 206 from {sandbox} in Ts "
        "headers={'Content-Type': 'application/octet-stream', 'Content-Length': '96000', "
        "'Content-Range': 'bytes 4000-99999/100000', 'Accept-Ranges': 'bytes'}",
    ]


async def test_debug_lines_name_the_request_id_and_only_allowlisted_headers(
    script_server: ScriptServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that answers cookies and headers of its own, to a request with headers of
    the caller's: the lines show the request id and the listed headers, nothing else."""
    caplog.set_level(logging.DEBUG, logger="sandboxkit")
    answered = {
        "X-Request-ID": "req-42",
        "Set-Cookie": "session=cookie-SECRET",
        "X-Internal-Route": "route-SECRET",
        "Retry-After": "0",
    }
    script_server.on("GET", "/api/v2/things", answer({"code": "x"}, 503, answered))
    script_server.on("GET", "/api/v2/things", answer({"ok": 1}, 200, {"X-Request-ID": "req-43"}))
    async with sandboxkit.Client(
        api_key="sk-log-SECRET", base_url=script_server.url, retry=FAST
    ) as client:
        with anyio.fail_after(LIMIT):
            await client.request(
                "GET",
                "/api/v2/things",
                params={"username": "user-SECRET"},
                headers={"X-Caller": "caller-SECRET", "RANGE": "bytes=0-"},
            )
    lines = debug_lines(caplog)
    assert len(lines) == 4
    assert lines[0].endswith("headers={'Range': 'bytes=0-'}")
    assert "request_id=req-42 error=ServiceUnavailableError" in lines[1]
    assert "'X-Request-ID': 'req-42'" in lines[1] and "'Retry-After': '0'" in lines[1]
    assert "request_id=req-43" in lines[3]
    assert script_server.requests()[0].headers["X-Caller"] == "caller-SECRET"  # it was sent
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "SECRET" not in text and "Set-Cookie" not in text and "X-Caller" not in text


async def test_no_debug_line_when_debug_is_off(
    emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    """At INFO, no request or answer line is even made."""
    caplog.set_level(logging.INFO, logger="sandboxkit")
    async with emulator.client(retry=FAST) as client:
        with anyio.fail_after(LIMIT):
            await client.v1.get_organization(emulator.org_id)
    assert caplog.records == []
