"""The standalone emulator (`sandboxkit emulator`, a separate process) is usable from the
lines it prints alone: by a plain `sandboxkit.Client()`, by the CLI, and by curl; and it makes
more sandboxes on request (`POST /_emulator/sandboxes`)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

import sandboxkit
from sandboxkit.cli import cli
from sandboxkit.emulator import BANNER_END, Emulator, EmulatorResolver, request_sandbox

from ..cli_support import assert_one_line_error
from ..reliability_support import refused_port
from ..standalone_support import CLI_COMMAND, EXPORTED, MODULE_COMMAND, Standalone


@pytest.fixture(scope="module")
def standalone() -> Iterator[Standalone]:
    """`sandboxkit emulator --sandboxes 2` in a child process, its banner read; stopped with
    Ctrl-C at the end of the module, which must exit 0 without a traceback."""
    running = Standalone("--sandboxes", "2")
    try:
        yield running
    finally:
        code, stderr = running.stop()
    assert code == 0, stderr
    assert "Traceback" not in stderr


def test_banner_exports_a_console_and_a_sandbox_under_localhost(standalone: Standalone) -> None:
    """The banner's export lines name the console, its key, the scheme and one sandbox
    whose host is under localhost; `--sandboxes 2` made two distinct sandboxes."""
    env = standalone.exports
    assert set(env) == EXPORTED
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", env["SANDBOXKIT_BASE_URL"])
    assert env["SANDBOXKIT_DATA_PLANE_SCHEME"] == "http"
    assert re.fullmatch(r"localhost:\d+", env["SANDBOXKIT_SANDBOX_DOMAIN"])
    keys = [line.split()[-1] for line in standalone.lines if "sandbox_key:" in line]
    assert len(set(keys)) == 2 and keys[0] == env["SANDBOXKIT_SANDBOX_KEY"]


CHILD = """
import asyncio, hashlib, os, sys
import sandboxkit

async def main() -> None:
    data = bytes(range(256)) * 1200 + b"tail"
    async with sandboxkit.Client() as client:
        sbx = client.sandbox(
            sandbox_key=os.environ["SANDBOXKIT_SANDBOX_KEY"],
            domain=os.environ["SANDBOXKIT_SANDBOX_DOMAIN"],
            access_token=os.environ["SANDBOXKIT_SANDBOX_TOKEN"],
        )
        await sbx.files.upload("/home/user/from-env.bin", data)
        result = await sbx.files.download("/home/user/from-env.bin", sys.argv[1])
        products = await client.request("GET", "/api/v2/products")
    print(client.data_plane_scheme, result.sha256 == hashlib.sha256(data).hexdigest(),
          len(products) > 0, result.attempts)

asyncio.run(main())
"""


def test_a_plain_client_built_from_the_exports_alone_moves_bytes(
    standalone: Standalone, tmp_path: Path
) -> None:
    """A child process whose environment holds only the printed variables uploads and
    downloads with `sandboxkit.Client()` and no other option, and reaches the console."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "out.bin")],
        env=standalone.exports,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["http", "True", "True", "1"]
    assert (tmp_path / "out.bin").read_bytes() == bytes(range(256)) * 1200 + b"tail"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_with_the_printed_lines_and_token(standalone: Standalone, tmp_path: Path) -> None:
    """The printed curl lines run as they are (upload, then download); curl also moves any
    bytes with the printed token and host, and without the token gets 401."""
    upload, download = standalone.commands("echo hello | curl"), standalone.commands("curl ")
    assert len(upload) == 1 and len(download) == 1
    for line in (upload[0], download[0]):
        done = subprocess.run(
            ["sh", "-c", line], cwd=tmp_path, capture_output=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
    assert done.stdout == b"hello\n"

    env = standalone.exports
    origin = f"http://{env['SANDBOXKIT_SANDBOX_KEY']}.{env['SANDBOXKIT_SANDBOX_DOMAIN']}"
    url = f"{origin}/files?path=/tmp/curl.bin"
    token = ["-H", f"X-Access-Token: {env['SANDBOXKIT_SANDBOX_TOKEN']}"]
    source = tmp_path / "in.bin"
    source.write_bytes(os.urandom(200_000))
    for args in (["-F", f"file=@{source}", url], ["-o", str(tmp_path / "back.bin"), url]):
        done = subprocess.run(
            ["curl", "-sS", "--fail", *token, *args], capture_output=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "back.bin").read_bytes() == source.read_bytes()
    refused = subprocess.run(
        ["curl", "-sS", "-o", os.devnull, "-w", "%{http_code}", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.stdout == "401"


def test_new_sandbox_command_makes_a_sandbox_the_files_commands_reach(
    standalone: Standalone, tmp_path: Path
) -> None:
    """`sandboxkit emulator new-sandbox` prints a new sandbox's export line, with which
    `sandboxkit files` uploads and downloads; a wrong key is refused in one line."""
    console = {k: v for k, v in standalone.exports.items() if not k.startswith("SANDBOXKIT_SAND")}
    made = CliRunner().invoke(cli, ["emulator", "new-sandbox"], env=console)
    assert made.exit_code == 0, made.output
    [line] = [line for line in made.stdout.splitlines() if line.strip().startswith("export ")]
    sandbox = dict(item.split("=", 1) for item in line.split()[1:])
    assert sandbox["SANDBOXKIT_SANDBOX_KEY"] != standalone.exports["SANDBOXKIT_SANDBOX_KEY"]
    env = {**console, **sandbox, "SANDBOXKIT_DATA_PLANE_SCHEME": "http"}
    source = tmp_path / "cli.txt"
    source.write_bytes(b"made by new-sandbox")
    up = CliRunner().invoke(cli, ["files", "upload", str(source), "/tmp/cli.txt"], env=env)
    assert up.exit_code == 0, up.output
    down = CliRunner().invoke(cli, ["files", "download", "/tmp/cli.txt", str(tmp_path)], env=env)
    assert down.exit_code == 0, down.output
    assert (tmp_path / "cli.txt").read_bytes() == b"made by new-sandbox"

    refused = CliRunner().invoke(
        cli, ["emulator", "new-sandbox", "--api-key", "sk-wrong"], env=console
    )
    assert_one_line_error(refused, 1, "AuthenticationError", "status=401")


def test_module_entry_point_prints_the_same_exports() -> None:
    """`python -m sandboxkit.emulator` prints the same export lines and curl lines."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sandboxkit.emulator", "--sandboxes", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        while BANNER_END not in lines:
            line = process.stdout.readline()
            assert line, "the emulator exited early"
            lines.append(line.rstrip("\n"))
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    exported = {
        item.split("=", 1)[0]
        for line in lines
        if line.strip().startswith("export ")
        for item in line.split()[1:]
    }
    assert exported == EXPORTED
    assert sum(line.strip().startswith(("curl ", "echo hello | curl ")) for line in lines) == 2
    assert process.returncode == 0 and "Traceback" not in stderr


_ENTRY_POINTS = pytest.mark.parametrize(
    "command", [MODULE_COMMAND, CLI_COMMAND], ids=["python-m", "sandboxkit-emulator"]
)


@_ENTRY_POINTS
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_exits_0_and_removes_the_sandbox_files(
    command: tuple[str, ...], signum: int, tmp_path: Path
) -> None:
    """`docker stop` (SIGTERM) or Ctrl-C: exit 0, and the `sandboxkit-emulator-*` directory
    the process made in TMPDIR is gone (SIGTERM used to kill `python -m` with -15, leaving it)."""
    running = Standalone(command=command, tmpdir=str(tmp_path))
    made = os.listdir(tmp_path)
    assert len(made) == 1 and made[0].startswith("sandboxkit-emulator-"), made
    code, stderr = running.stop(signum)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert os.listdir(tmp_path) == []


@_ENTRY_POINTS
def test_a_port_in_use_is_one_line_and_exit_2(command: tuple[str, ...], tmp_path: Path) -> None:
    """Another process holds the console port: one line on stderr that names the port,
    exit 2 (a usage problem), and nothing left in TMPDIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXKIT_")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", *command, "--port", str(port)],
            capture_output=True,
            text=True,
            env={**env, "TMPDIR": str(tmp_path)},
            timeout=60,
        )
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: the emulator cannot listen on 127.0.0.1")
    assert str(port) in lines[0] and "address already in use" in lines[0]
    assert done.stdout == ""
    assert os.listdir(tmp_path) == []


# -- the route, in process ---------------------------------------------------------------


async def test_create_route_makes_a_usable_sandbox(emulator: Emulator, tmp_path: Path) -> None:
    """POST /_emulator/sandboxes with the API key answers 201 and a create body (request id
    as in X-Request-ID) whose sandbox works; the journal names the route."""
    url = emulator.base_url + "/_emulator/sandboxes"
    bearer = {"Authorization": f"Bearer {emulator.api_key}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, headers=bearer) as response:  # no body at all
            assert response.status == 201
            body = await response.json()
            assert body["request_id"] == response.headers["X-Request-ID"]
        async with http.post(url, headers=bearer, json={"idc_name": "eu-lite"}) as response:
            assert response.status == 201
            second = await response.json()
    assert set(body["data"]) == {"sandbox_key", "domain", "sandbox_access_token"}
    assert body["data"]["domain"] == emulator.domain
    assert second["data"]["sandbox_key"] != body["data"]["sandbox_key"]
    assert (
        emulator.idcs["eu-lite"] == emulator._core.sandboxes.get(second["data"]["sandbox_key"]).idc
    )
    async with emulator.client() as client:
        sbx = client.sandbox_from_response(body)
        await sbx.files.upload("/home/user/r.txt", b"via the route")
        assert await sbx.files.read_bytes("/home/user/r.txt") == b"via the route"
    assert [r.status for r in emulator.journal_for("emulator.sandboxes.create")] == [201, 201]


@pytest.mark.parametrize(
    ("headers", "payload", "status", "code"),
    [
        ({}, None, 401, "Auth.Unauthorized"),
        ({"Authorization": "Bearer sk-emu-wrong"}, None, 401, "Auth.Unauthorized"),
        ("key", {"idc_name": "nowhere"}, 400, "Parameter.Invalid"),
        ("key", {"idc": "us-denver-1"}, 400, "Parameter.Invalid"),
        ("key", {"idc_name": 5}, 400, "Parameter.Invalid"),
        ("key", [], 400, "Parameter.Invalid"),
    ],
)
async def test_create_route_refuses_without_the_key_or_with_a_bad_body(
    emulator: Emulator, headers: object, payload: object, status: int, code: str
) -> None:
    """Without the key (or with another), or with a body that is not `{idc_name}` naming a
    data center, the route answers a v2 error and makes no sandbox."""
    if headers == "key":
        headers = {"Authorization": f"Bearer {emulator.api_key}"}
    assert isinstance(headers, dict)
    before = set(emulator._core.sandboxes.live)
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            emulator.base_url + "/_emulator/sandboxes", headers=headers, json=payload
        ) as response,
    ):
        assert response.status == status
        assert (await response.json())["code"] == code
    assert set(emulator._core.sandboxes.live) == before


async def test_request_sandbox_calls_the_route(emulator: Emulator) -> None:
    """`request_sandbox` returns the create body, and raises sandboxkit's errors: a wrong
    key is AuthenticationError, an unknown data center BadRequestError, no server
    APIConnectionError."""
    body = await request_sandbox(emulator.base_url, emulator.api_key, idc_name="us-denver-1")
    assert body["data"]["sandbox_key"] in emulator._core.sandboxes.live
    with pytest.raises(sandboxkit.AuthenticationError) as refused:
        await request_sandbox(emulator.base_url + "/", "sk-emu-wrong")
    assert refused.value.request_id and "sk-emu-wrong" not in str(refused.value)
    with pytest.raises(sandboxkit.BadRequestError, match="nowhere"):
        await request_sandbox(emulator.base_url, emulator.api_key, idc_name="nowhere")
    with pytest.raises(sandboxkit.APIConnectionError) as unreachable:
        await request_sandbox(f"http://127.0.0.1:{refused_port()}", emulator.api_key)
    assert unreachable.value.__context__ is None and unreachable.value.__cause__ is None


def test_domain_must_be_a_host_name() -> None:
    """`Emulator(domain=...)` takes a host name without a port."""
    for bad in ("localhost:80", "", ".", "a/b", "-x.test", "a..b"):
        with pytest.raises(ValueError, match="domain"):
            Emulator(domain=bad)
    Emulator(domain="Emu.Example.")  # normalised, accepted


async def test_localhost_emulator_refuses_other_domains(tmp_path: Path) -> None:
    """An emulator on `localhost` serves `{key}.localhost` only: the same key under
    `sandbox.test` is an unknown host (401)."""
    async with Emulator(domain="localhost") as emu:
        body = await emu.create_sandbox()
        key, token = body["data"]["sandbox_key"], body["data"]["sandbox_access_token"]
        port = emu.domain.rsplit(":", 1)[1]
        connector = aiohttp.TCPConnector(resolver=EmulatorResolver())  # both names
        async with aiohttp.ClientSession(connector=connector) as http:
            for host, status in ((f"{key}.localhost", 400), (f"{key}.sandbox.test", 401)):
                async with http.get(
                    f"http://{host}:{port}/files",
                    params={"path": "/home/user"},  # a directory: 400 once the host is known
                    headers={"X-Access-Token": token},
                ) as response:
                    assert response.status == status, host
