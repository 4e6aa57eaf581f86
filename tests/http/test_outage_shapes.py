"""Outages that close connections instead of refusing them (issue 29): a server in a rolling
restart accepts and then closes, or sends an answer's head and closes before its body. Each
such failure says the host is going away: it counts toward the host's circuit, costs the
call no attempt once the host is known down, and a head closes the circuit only when its
body then flows. Over real loopback sockets, against the emulator's outage shapes and a
relay that stops listening (refused connects)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit import batch
from sandboxkit.emulator import Emulator, Fault, Outage

from ..files_support import Box, payload, sha
from ..reliability_support import (
    RawServer,
    Relay,
    box_on_virtual_time,
    http_answer,
    outage_until,
    port_of,
    refused_port,
    same_file_jobs,
    started,
)

HOSTS = 25
JOBS_PER_HOST = 8
CONCURRENCY = 100
OUTAGE_SECONDS = 3.0  # the outage's length, a real one: the default policy's real waits
REMOTE = "/home/user/data.bin"


@contextlib.asynccontextmanager
async def taken_down(emulator: Emulator, relay: Relay, shape: str) -> AsyncIterator[None]:
    """The data plane down in `shape`: the emulator's ``close`` or ``head``, or the relay
    refusing connects."""
    if shape == "refused":
        await relay.refuse()
        try:
            yield
        finally:
            await relay.serve()
        return
    down: Outage
    async with emulator.outage(shape=shape) as down:
        yield
    assert down.requests, "the outage met no request"


@pytest.mark.parametrize("shape", ["close", "head", "refused"])
async def test_a_batch_through_an_outage_that_closes_connections_loses_no_job(
    collected_after_the_emulator: None, emulator: Emulator, tmp_path: Path, shape: str
) -> None:
    """The issue's case: 200 downloads over 25 sandbox hosts at concurrency 100, default
    policy; once 50 are done the data plane goes away for 3 s, closing what it accepts
    (after the request, or after an answer's head) or refusing connects. Every job finishes
    with the right bytes, and the requests sent while it was down stay near what opening
    each host's circuit and probing it cost. Before the fix the heads closed the circuits
    again and failures before a circuit opened were counted attempts: jobs were lost, and
    the requests during the outage were several times as many."""
    data = payload(1 << 20, seed=29)
    relay = Relay(port_of(emulator.domain))
    await relay.serve()
    port = relay.port if shape == "refused" else None
    jobs = await same_file_jobs(emulator, HOSTS, JOBS_PER_HOST, data, tmp_path, port)
    down = False
    during = 0

    def on_request(_: object) -> None:
        nonlocal during
        during += down

    fifty = asyncio.Event()

    def progress(done: int, total: int, outcome: object) -> None:
        if done == 50:
            fifty.set()

    async def outage() -> None:
        nonlocal down
        await fifty.wait()
        async with taken_down(emulator, relay, shape):
            down = True
            await asyncio.sleep(OUTAGE_SECONDS)  # the outage's length, not a wait for an event
            down = False

    try:
        async with emulator.client(on_request=on_request) as client:
            taking_down = asyncio.create_task(outage())
            result = await batch.download_many(
                client, jobs, concurrency=CONCURRENCY, progress=progress
            )
            await taking_down
    finally:
        await relay.refuse()  # its listening socket closed
    errors = [o.error for o in result.outcomes if o.error]
    assert result.summary.done == len(jobs), (len(errors), errors[:3])
    wrong = [
        (job.dest.name, job.dest.stat().st_size)
        for job in jobs
        if sha(job.dest.read_bytes()) != sha(data)
    ]
    assert not wrong, (len(wrong), wrong[:5])
    # Each host: up to 5 failures in a row open its circuit, plus about one per transfer in
    # flight when it went; then probes after 0.25, 0.5, 1 and 2 s (4 in 3 s, one late).
    assert during <= HOSTS * (5 + 4) + CONCURRENCY, during


# -- what tells a host's circuit it is back: a body that flows, not a head ----------------


def test_a_head_closes_the_circuit_only_once_its_body_flows() -> None:
    """A host going away sends some heads and closes before the body: such a cut counts as
    an outage failure; only a body that flows (or a failure of ours after the head) says
    the host is back. A cancellation says nothing."""
    from sandboxkit._http.hosts import Circuits

    circuits = Circuits(lambda: 0.0)
    host = "http://sbx-1.sandbox.test:1"
    cut = sandboxkit.APIConnectionError("files.download: server closed the connection")
    assert circuits.headed(host, 200) == 200  # heard from: its failures may say it is down
    for _ in range(5):
        circuits.failed(host, "refused")
    circuit = circuits.get(host)
    assert circuit is not None and not circuit.closed
    circuits.ended(host, circuits.headed(host, 200), cut, 0)  # a head, then nothing
    circuits.ended(host, circuits.headed(host, 200), asyncio.CancelledError(), 0)
    assert circuits.get(host) is circuit and not circuit.closed
    assert circuit.failures == 6 and circuit.last_failure.startswith("closed after the head")
    assert circuits.headed(host, 503) == 0  # a gateway's 503 is a failure at its head
    assert circuit.failures == 7
    flowing = circuits.on_body(host, circuits.headed(host, 200))
    assert flowing is not None and circuits.get(host) is circuit  # not at the head
    flowing()  # the first body byte
    assert circuits.get(host) is None  # closed, and forgotten
    circuits.failed(host, "refused")
    circuits.ended(host, 200, cut, 10)  # cut after some of the body: the host was up
    assert circuits.get(host) is None


def test_a_host_never_heard_from_opens_no_circuit_unless_its_domain_is_down() -> None:
    """Failures of a host that never answered open no circuit (it is a mistake, reported),
    even when other sandboxes of its domain answered (a wrong key: issue 38); only while a
    sibling that answered is failing (the domain is down) does its failure open it."""
    from sandboxkit._http.hosts import Circuits

    circuits = Circuits(lambda: 0.0)
    for _ in range(10):
        circuits.failed("http://127.0.0.1:9", "refused")
    assert circuits.get("http://127.0.0.1:9") is None
    circuits.heard_from("http://sbx-1.sandbox.test:9")
    assert not circuits.ever_answered("http://sbx-2.sandbox.test:9")
    assert circuits.siblings_answered("http://sbx-2.sandbox.test:9")
    assert not circuits.siblings_answered("http://sbx-2.other.test:9")
    assert not circuits.siblings_answered("http://127.0.0.2:9")
    for _ in range(5):
        circuits.failed("http://sbx-2.sandbox.test:9", "refused")
    assert circuits.get("http://sbx-2.sandbox.test:9") is None
    circuits.failed("http://sbx-1.sandbox.test:9", "refused")  # its domain is down
    circuits.failed("http://sbx-2.sandbox.test:9", "refused")
    circuit = circuits.get("http://sbx-2.sandbox.test:9")
    assert circuit is not None and not circuit.closed


# -- RetryPolicy.none() means one request ---------------------------------------------


async def test_retry_policy_none_sends_exactly_one_request_even_when_bytes_moved(
    emulator: Emulator, box: Box, tmp_path: Path
) -> None:
    """A body cut after every 1,000 bytes: with `none()` (or `max_attempts=1`) the call
    is one request and fails with the cut; any other policy carries the transfer on for
    free (before the fix, `none()` sent 25 requests and succeeded)."""
    box.put(REMOTE, payload(25_000, seed=3))
    for policy in (sandboxkit.RetryPolicy.none(), sandboxkit.RetryPolicy(max_attempts=1)):
        emulator.faults.script("files.download", *[Fault.cut(after_bytes=1_000)] * 30)
        before = len(emulator.journal_for("files.download"))
        with pytest.raises(sandboxkit.APIConnectionError):
            await box.files.download(REMOTE, tmp_path / "none.bin", retry=policy)
        assert len(emulator.journal_for("files.download")) - before == 1
        emulator.faults.clear()
    emulator.faults.script("files.download", *[Fault.cut(after_bytes=1_000)] * 30)
    before = len(emulator.journal_for("files.download"))
    result = await box.files.download(
        REMOTE, tmp_path / "two.bin", retry=sandboxkit.RetryPolicy(max_attempts=2)
    )
    assert result.sha256 == sha(box.get(REMOTE))
    assert len(emulator.journal_for("files.download")) - before == 25


# -- a host that was never up is a mistake, not an outage -------------------------------


async def test_a_console_that_never_answered_fails_after_the_policys_attempts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing listens on the base URL's port: the call fails after the policy's 5
    requests (backoffs only, no wait for a host), with a message that says what to check;
    no circuit opens and no 'waiting for it' warning is given."""
    sent: list[object] = []
    slept: list[float] = []
    base_url = f"http://127.0.0.1:{refused_port()}"
    async with sandboxkit.Client(api_key="k", base_url=base_url, on_request=sent.append) as client:

        async def sleep(delay: float) -> None:
            slept.append(delay)

        client._calls.sleep = sleep
        with pytest.raises(sandboxkit.APIConnectionError) as caught:
            await client.v1.get_organization("00000000-0000-0000-0000-000000000000")
        assert client._calls.transport.circuits.get(base_url) is None
    assert type(caught.value) is sandboxkit.APIConnectionError
    message = str(caught.value)
    assert f"{base_url} has not answered this client yet" in message
    assert "check the base URL" in message and "port" in message and "proxy" in message
    assert len(sent) == 5 and len(slept) == 4  # the policy's attempts and backoffs
    assert not [r for r in caplog.records if "waiting up to" in r.getMessage()]


async def test_a_call_that_starts_waiting_for_a_host_says_so_once(
    emulator: Emulator, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Three calls wait for a host that answered before and went down: one WARNING says a
    call waits, for how long at most; the host coming back is said once too."""
    async with box_on_virtual_time(emulator) as (box, time):
        box.put(REMOTE, payload(10_000, seed=4))
        box.handle._calls.transport.circuits.heard_from(box.handle.origin)
        await outage_until(emulator, time, 1.0, shape="close")
        await asyncio.gather(*(box.files.download(REMOTE, tmp_path / f"{i}.bin") for i in range(3)))
    waiting = [r for r in caplog.records if "waiting up to" in r.getMessage()]
    assert [r.levelname for r in waiting] == ["WARNING"]
    assert f"{box.handle.origin} is down; waiting up to 10s" in waiting[0].getMessage()
    back = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(back) == 1


async def test_the_cli_shows_a_host_wait_on_screen_but_not_each_retry(
    emulator: Emulator, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With the CLI's logging (no --debug), the host's state lines reach stderr as
    `warning: ...`, each once; the retry lines around them do not; installed twice (two
    commands in one process), they still show once."""
    from sandboxkit.cli._app import _configure_logging

    _configure_logging(debug=False)
    _configure_logging(debug=False)  # the conftest fixture takes the handler away after
    async with box_on_virtual_time(emulator) as (box, time):
        box.put(REMOTE, payload(10_000, seed=5))
        await box.files.read_bytes(REMOTE)  # the host answered: from now on it is waited for
        await outage_until(emulator, time, 1.0, shape="close")
        await box.files.download(REMOTE, tmp_path / "data.bin")
    lines = capsys.readouterr().err.splitlines()
    assert all(line.startswith("warning: ") for line in lines), lines
    assert [line for line in lines if "is down; waiting up to 10s" in line] == [lines[1]]
    assert "looks down" in lines[0] and "answers again" in lines[-1] and len(lines) == 3
    assert not [line for line in lines if "retrying" in line]


def test_every_cli_command_but_debug_ones_installs_the_screen_line_once() -> None:
    """The CLI's group sets the screen line up for every command, once however many
    commands run in one process; --debug shows every record its own way instead."""
    from click.testing import CliRunner

    from sandboxkit.cli import cli
    from sandboxkit.cli._app import HostWarnings

    hosts = logging.getLogger("sandboxkit.hosts")

    def installed() -> int:
        return sum(isinstance(handler, HostWarnings) for handler in hosts.handlers)

    for _ in range(2):
        assert CliRunner().invoke(cli, ["files", "download", "--help"]).exit_code == 0
        assert installed() == 1
    assert CliRunner().invoke(cli, ["--debug", "files", "download", "--help"]).exit_code == 0
    assert installed() == 0


# -- the emulator's outage shapes themselves -------------------------------------------


@pytest.mark.parametrize(
    ("shape", "answer"),
    [
        ("close", b""),
        ("head", b"HTTP/1.1 200 OK\r\n"),
    ],
)
async def test_the_emulators_outage_shapes_close_what_they_read(
    emulator: Emulator, shape: str, answer: bytes
) -> None:
    """``close``: the request is read, recorded and its connection closed with no answer
    (a clean close, not a reset); ``head``: an answer's head declaring a body, then the
    close. Neither reaches the journal."""
    port = int(emulator.domain.rsplit(":", 1)[1])
    async with emulator.outage(shape=shape) as down:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /files?path=/x HTTP/1.1\r\nHost: sbx-1.sandbox.test\r\n\r\n")
        received = await asyncio.wait_for(reader.read(), 10.0)  # bounds a hang; no wait
        writer.close()
        await writer.wait_closed()
    assert received.startswith(answer)
    if shape == "head":
        head, _, body = received.partition(b"\r\n\r\n")
        assert b"Content-Length: 1048576" in head and body == b""
    else:
        assert received == b""
    assert [(r.server, r.target) for r in down.requests] == [("data", "/files?path=/x")]
    assert emulator.journal == []
    with pytest.raises(ValueError, match="shape"):
        async with emulator.outage(shape="melt"):
            pass


async def test_a_proxys_502_for_a_host_never_reached_is_named_as_the_proxys() -> None:
    """Through a proxy that answers 502 (it cannot reach the host): the call fails after
    the policy's 5 requests, not after `max_stall`, and the message names the proxy."""
    proxy = RawServer()
    proxy.always(http_answer(502, b"upstream unreachable", {"Connection": "close"}))
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    async with (
        started(proxy),
        sandboxkit.Client(
            api_key="k",
            base_url="http://console.unreachable.test:8080",
            proxy=f"http://user:secret@127.0.0.1:{proxy.port}",
        ) as client,
    ):
        client._calls.sleep = sleep
        with pytest.raises(sandboxkit.BadGatewayError) as caught:
            await client.v1.get_organization("00000000-0000-0000-0000-000000000000")
    assert len(proxy.heads) == 5 and len(slept) == 4
    message = str(caught.value)
    assert f"the 502 likely comes from the proxy http://127.0.0.1:{proxy.port}," in message
    assert "http://console.unreachable.test:8080 has not answered this client yet" in message
    assert "secret" not in message
