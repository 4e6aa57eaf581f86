"""A sandbox host that never answered this client: a mistake while its domain answers, an
outage while its domain is down (issue 38, part 2: "A typo in a sandbox key waits a
minute").

A wrong sandbox key on a domain whose other sandboxes answer fails after the policy's
attempts, with a message saying to check the key; a sandbox first contacted while its
domain is down (others of it failing, none answering) waits for it as they do. Both ways a
wrong key shows: an ingress that answers 502 for a key it does not know, and a name whose
host refuses connections; both shapes of outage: the ingress answering 502 for every key,
and a relay in front of it that stops listening. Over real loopback sockets, on a virtual
clock (timings are exact, an outage ends at a virtual time), or for the batches, which
overlap many calls, on real time with 50 ms backoffs and an outage that ends on an event.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import attrs
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

import sandboxkit
from sandboxkit import batch

from ..reliability_support import (
    LoopbackServer,
    Relay,
    VirtualTime,
    http_answer,
    on_virtual_time,
    read_head,
    refused_port,
    started,
)

TOKEN = "sat-WRONG-KEYS-TOKEN-0123456789"
REMOTE = "/home/user/notes.txt"
BODY = b"what sbx-good holds\n"
SHAPES = ["502", "refused"]
# What a call to a host that is not there (or a domain that is down) ends with, by shape.
ERRORS: dict[str, type[sandboxkit.SandboxKitError]] = {
    "502": sandboxkit.BadGatewayError,
    "refused": sandboxkit.APIConnectionError,
}
DEFAULT_BACKOFFS = [0.5, 1.0, 2.0, 4.0]  # the default policy's, jitter at its ceiling


class Ingress(LoopbackServer):
    """A sandbox domain's ingress: a GET to the host of a key it knows answers `BODY`; any
    other key gets a 502 (as some ingresses answer a key with no sandbox), as does every
    request while `down`."""

    def __init__(self, keys: set[str]) -> None:
        super().__init__()
        self.keys = keys
        self.down = False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (head := await read_head(reader)) is not None:
            key = _host(head).split(".")[0]
            if self.down or key not in self.keys:
                writer.write(http_answer(502, b"no healthy upstream", {"Connection": "close"}))
                await writer.drain()
                return
            writer.write(http_answer(200, BODY))
            await writer.drain()


def _host(head: bytes) -> str:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"host":
            return value.strip().decode()
    raise AssertionError(f"no Host header in {head!r}")


class Names(AbstractResolver):
    """`*.sandbox.test` to 127.0.0.1: the keys in `known` at the port their URL says, any
    other on a port where nothing listens when `refuse_unknown` (a name whose host refuses
    connections), else at the URL's port too (the ingress then answers for it)."""

    def __init__(self, known: set[str], *, refuse_unknown: bool) -> None:
        self.known = known
        self.refuse_unknown = refuse_unknown
        self.closed_port = refused_port()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if not host.endswith(".sandbox.test"):
            raise OSError(f"{host!r} is no test name")
        refused = self.refuse_unknown and host.split(".")[0] not in self.known
        return [
            ResolveResult(
                hostname=host,
                host="127.0.0.1",
                port=self.closed_port if refused else port,
                family=socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        pass


@attrs.define
class Domain:
    """A sandbox domain behind `relay`, seen by `client` on virtual `time`; `sent` counts
    the requests the client sent, by sandbox key."""

    shape: str
    ingress: Ingress
    relay: Relay
    client: sandboxkit.Client
    time: VirtualTime
    sent: collections.Counter[str]

    def sandbox(self, key: str) -> sandboxkit.Sandbox:
        domain = f"sandbox.test:{self.relay.port}"
        return self.client.sandbox(sandbox_key=key, domain=domain, access_token=TOKEN)

    async def down(self) -> None:
        """Every sandbox of the domain fails: the ingress answers 502, or nothing listens."""
        if self.shape == "502":
            self.ingress.down = True
        else:
            await self.relay.refuse()

    async def up(self) -> None:
        if self.shape == "502":
            self.ingress.down = False
        else:
            await self.relay.serve()

    def fails_once(self, sandbox: sandboxkit.Sandbox) -> Callable[[], Awaitable[None]]:
        """A call to `sandbox` that sends one request and meets the domain's failure."""

        async def call() -> None:
            with pytest.raises(ERRORS[self.shape]):
                await sandbox.files.read_bytes(REMOTE, retry=sandboxkit.RetryPolicy.none())

        return call


@contextlib.asynccontextmanager
async def a_domain(
    shape: str, *keys: str, retry: sandboxkit.RetryPolicy | None = None
) -> AsyncIterator[Domain]:
    """A domain whose ingress knows `keys`, and a client with the default retry policy on
    virtual time (`retry`: with that policy, on real time), its backoffs at their ceilings
    (the default's: 0.5, 1, 2, 4 s)."""
    known = set(keys)
    sent: collections.Counter[str] = collections.Counter()
    async with started(Ingress(known)) as ingress:
        relay = Relay(ingress.port)
        await relay.serve()
        try:
            async with sandboxkit.Client(
                api_key="k",
                base_url=f"http://127.0.0.1:{refused_port()}",  # never called
                data_plane_scheme="http",
                resolver=Names(known, refuse_unknown=shape == "refused"),
                retry=retry or sandboxkit.RetryPolicy(),
                on_request=lambda event: sent.update([event.host.split(".")[0]]),
            ) as client:
                time = VirtualTime()
                if retry is None:
                    on_virtual_time(client, time)
                client._calls.rand = lambda: 1.0
                yield Domain(shape, ingress, relay, client, time, sent)
        finally:
            await relay.refuse()  # its listening socket closed


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


# -- the rule, as a table --------------------------------------------------------------


@pytest.mark.parametrize(
    ("answered", "sibling", "newcomers", "down"),
    [
        (True, None, [], True),  # it answered before: its failures may say it is down
        (True, "long ago", [], True),
        (False, None, [], False),  # its domain answers (or no other host failed): a mistake
        (False, "just now", [], True),  # a host that answered has just failed: an outage
        (False, "at the limit", [], True),
        (False, "long ago", [], False),  # nothing heard of the domain for that long
        (False, None, ["just now"], False),  # one other wrong key, typed at the same time
        (False, None, ["just now", "at the limit"], True),  # several failing: an outage
        (False, None, ["just now", "long ago"], False),
        (False, "long ago", ["just now", "just now", "long ago"], True),
    ],
)
def test_which_failures_of_a_host_may_say_it_is_down(
    answered: bool, sibling: str | None, newcomers: list[str], down: bool
) -> None:
    """`may_be_down(answered, sibling_failed_at, newcomers_failed_at, now)`: a host that
    never answered is down only while its domain is, as fresh failures of others tell."""
    from sandboxkit._http.hosts import DOMAIN_DOWN_FOR, NEWCOMERS_DOWN, may_be_down

    assert NEWCOMERS_DOWN == 2
    now = 1e6
    ago = {"just now": 0.0, "at the limit": DOMAIN_DOWN_FOR, "long ago": DOMAIN_DOWN_FOR + 0.1}
    sibling_failed_at = None if sibling is None else now - ago[sibling]
    newcomers_failed_at = [now - ago[n] for n in newcomers]
    assert may_be_down(answered, sibling_failed_at, newcomers_failed_at, now) is down


def test_a_never_answered_hosts_failures_open_its_circuit_only_while_its_domain_fails() -> None:
    """Decided at each failure: a wrong key's failures open nothing while its domain
    answers; once a host that answered fails, its next failure opens its circuit at once
    (the domain is down); the domain answering again drops that circuit at its next
    failure, and so does the sibling's failure growing stale. Two other hosts that never
    answered failing tell the same as one that did; a host's own failures tell nothing."""
    from sandboxkit._http.hosts import DOMAIN_DOWN_FOR, Circuits

    now = [0.0]
    circuits = Circuits(lambda: now[0], console="http://api.sandbox.test:9")
    good, typo = "http://sbx-good.sandbox.test:9", "http://sbx-gdoo.sandbox.test:9"
    circuits.heard_from(good)
    circuits.answered(good, 200)
    for _ in range(10):
        circuits.failed(typo, "502 answer")
    assert circuits.get(typo) is None and not circuits.may_be_down(typo)
    circuits.failed(good, "502 answer")  # a sibling that answered fails: the domain is down
    assert circuits.may_be_down(typo) and not circuits.ever_answered(typo)
    circuits.failed(typo, "502 answer")
    circuit = circuits.get(typo)
    assert circuit is not None and not circuit.closed and circuit.failures == 1
    circuits.heard_from(good)
    circuits.answered(good, 200)  # the domain answers: the wrong key is a mistake again
    circuits.failed(typo, "502 answer")
    assert circuits.get(typo) is None
    circuits.failed(good, "refused")
    now[0] = DOMAIN_DOWN_FOR + 1  # and nothing heard from the domain since
    circuits.failed(typo, "refused")
    assert circuits.get(typo) is None
    # Other hosts that never answered: one is not enough, two are; not the host's own.
    first, second = "http://sbx-new1.sandbox.test:9", "http://sbx-new2.sandbox.test:9"
    circuits.failed(first, "refused")
    assert not circuits.may_be_down(typo) and circuits.get(first) is None
    circuits.failed(second, "refused")  # it finds `typo` and `first` failing
    assert circuits.may_be_down(typo) and circuits.get(second) is not None
    circuits.answered(good, 200)
    assert not circuits.may_be_down(typo) and not circuits.may_be_down(first)
    # The console is no sibling of the sandboxes: its failures and answers say nothing of
    # their domain, nor do those of an address or a one-label name.
    circuits.heard_from("http://api.sandbox.test:9")
    circuits.failed("http://api.sandbox.test:9", "503 answer")
    assert not circuits.may_be_down(typo)
    assert circuits.siblings_answered(typo) and not circuits.siblings_answered("http://x:9")
    # Nothing is known of a domain that never answered: its hosts are never down.
    strangers = [f"http://sbx-{i}.elsewhere.test:9" for i in range(5)]
    for stranger in strangers * 2:
        circuits.failed(stranger, "refused")
    assert not any(circuits.may_be_down(s) or circuits.get(s) for s in strangers)


# -- a wrong key while the domain answers: seconds, not a minute -----------------------


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_wrong_key_fails_after_the_policys_attempts_while_its_domain_answers(
    caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    """The issue's case: a file read from `sbx-good`, then `read_bytes` from `sbx-gdoo` on
    the same domain with the default policy. It fails after 5 requests and the policy's
    backoffs (7.5 s at most), with a message that says to check the sandbox key; no host is
    said to be down or waited for. Before the fix: 16 requests, "looks down", a wait of up
    to `max_stall` (60 s)."""
    async with a_domain(shape, "sbx-good") as domain:
        good, typo = domain.sandbox("sbx-good"), domain.sandbox("sbx-gdoo")
        assert await good.files.read_bytes(REMOTE) == BODY
        with pytest.raises(ERRORS[shape]) as caught:
            await typo.files.read_bytes(REMOTE)
        assert domain.client._transport.circuits.get(typo.origin) is None
    assert type(caught.value) is ERRORS[shape]
    assert domain.sent == {"sbx-good": 1, "sbx-gdoo": 5}
    assert domain.time.sleeps == DEFAULT_BACKOFFS  # backoffs only, no wait for a host
    message = str(caught.value)
    assert (
        f"{typo.origin} has not answered this client yet, while other hosts of its domain "
        "have: check the sandbox key)"
    ) in message
    if shape == "502":
        assert "the 502 likely comes from its domain's gateway, which knows no such" in message
    assert not _messages(caplog, "looks down") and not _messages(caplog, "waiting up to")


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_wrong_key_waited_for_as_a_sibling_failed_stops_waiting_when_the_domain_answers(
    caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    """A sibling's last request failed and nothing of the domain answered since: the
    wrong key's first failure finds the domain looking down, and its call waits. A sibling
    answers during the wait; the wrong key's next failure (the probe) finds the domain up,
    and the call stops waiting and fails after its attempts, saying to check the key."""
    async with a_domain(shape, "sbx-good") as domain:
        good, typo = domain.sandbox("sbx-good"), domain.sandbox("sbx-gdoo")
        assert await good.files.read_bytes(REMOTE) == BODY
        await domain.down()
        await domain.fails_once(good)()
        await domain.up()

        async def sibling_answers() -> None:
            assert await good.files.read_bytes(REMOTE) == BODY

        domain.time.at(0.1, sibling_answers)
        with pytest.raises(ERRORS[shape]) as caught:
            await typo.files.read_bytes(REMOTE)
    # One failure opened its circuit (forgiven); the probe at 0.25 s found the domain up:
    # 5 counted requests from there, with the policy's backoffs.
    assert domain.sent == {"sbx-good": 3, "sbx-gdoo": 1 + 5}
    assert domain.time.sleeps == [0.25, *DEFAULT_BACKOFFS]
    assert "check the sandbox key" in str(caught.value)
    stopped = _messages(caplog, "no longer looks down")
    assert len(stopped) == 1 and stopped[0].startswith(typo.origin)


# -- a sandbox first contacted during an outage of its domain: time, not a job ---------


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_sandbox_first_contacted_while_its_domain_is_down_waits_for_it(
    caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    """The domain goes down after `sbx-good` answered, and a call to it fails. A sandbox
    never contacted before is then read with the default policy: its first failure finds
    its domain failing, so its circuit opens at once and the call waits, probing, until the
    domain is back (at 5 s), and reads the file. Before the fix it spent 4 backoffs (7.5 s)
    on the 5 failures a host that answered needs to be found down."""
    async with a_domain(shape, "sbx-good", "sbx-new") as domain:
        good, new = domain.sandbox("sbx-good"), domain.sandbox("sbx-new")
        assert await good.files.read_bytes(REMOTE) == BODY
        await domain.down()
        await domain.fails_once(good)()
        domain.time.at(5.0, domain.up)
        assert await new.files.read_bytes(REMOTE) == BODY
    # Opened at the first failure; probes at 0.25, 0.75, 1.75 and 3.75 s failed, the one
    # at 5.75 s read the file.
    assert domain.time.sleeps == [0.25, 0.5, 1.0, 2.0, 2.0]
    assert domain.sent["sbx-new"] == 1 + 4 + 1
    down = _messages(caplog, f"{new.origin} looks down")
    assert len(down) == 1 and "1 failures in a row, as do other hosts of its domain" in down[0]
    waiting = _messages(caplog, "waiting up to")
    assert len(waiting) == 1 and f"{new.origin} is down; waiting up to 60s" in waiting[0]
    assert not _messages(caplog, "no longer looks down")


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_new_sandbox_failing_before_its_siblings_waits_once_one_fails(
    shape: str,
) -> None:
    """The outage has just begun: the new sandbox's first failure finds no sibling failing
    (an attempt, with its backoff); a sibling fails during that backoff, and the next
    failure finds the domain down: the call waits for it, and reads the file once the
    domain is back (at 3 s). Its failures are decided one at a time, not once."""
    async with a_domain(shape, "sbx-good", "sbx-new") as domain:
        good, new = domain.sandbox("sbx-good"), domain.sandbox("sbx-new")
        assert await good.files.read_bytes(REMOTE) == BODY
        await domain.down()
        domain.time.at(0.1, domain.fails_once(good))
        domain.time.at(3.0, domain.up)
        assert await new.files.read_bytes(REMOTE) == BODY
    # A failure and its backoff; a failure at 0.5 s that opened the circuit; probes at
    # 0.75, 1.25 and 2.25 s failed, the one at 4.25 s read the file.
    assert domain.time.sleeps == [0.5, 0.25, 0.5, 1.0, 2.0]
    assert domain.sent["sbx-new"] == 2 + 3 + 1


class LooksDown(logging.Handler):
    """Keeps what the hosts' logger says of `origins` going down, and sets `all_down` once
    each of them has been said to."""

    def __init__(self, origins: set[str]) -> None:
        super().__init__()
        self.waiting = set(origins)
        self.said: dict[str, str] = {}
        self.all_down = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        said = record.getMessage()
        origin = said.split(" ", 1)[0]
        if origin in self.waiting and "looks down" in said:
            self.waiting.discard(origin)
            self.said[origin] = said
            if not self.waiting:
                self.all_down.set()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("in_flight", ["siblings too", "new sandboxes only"])
async def test_a_batch_through_an_outage_waits_for_sandboxes_it_had_not_reached(
    shape: str, in_flight: str, tmp_path: Path
) -> None:
    """Thousands of sandboxes in one domain, in small: 8 answered before the outage, 8 are
    first contacted as it begins, in a batch of downloads started together (real time,
    backoffs of 50 ms) with the 8 others too, or alone (a batch that reads each sandbox
    once has only new ones in flight when an outage begins). Whichever fails first, each
    new sandbox's circuit opens at its first failure that finds the domain down (others
    failing), not after the 5 a host that answered needs; the domain comes back once all 8
    are waited for, and every download finishes."""
    known = [f"sbx-old{i}" for i in range(8)]
    new = [f"sbx-new{i}" for i in range(8)]
    keys = new if in_flight == "new sandboxes only" else known + new
    quick = sandboxkit.RetryPolicy(initial_backoff=0.05, max_backoff=0.05, max_stall=10.0)
    async with a_domain(shape, *known, *new, retry=quick) as domain:
        for key in known:
            assert await domain.sandbox(key).files.read_bytes(REMOTE) == BODY
        said = LooksDown({domain.sandbox(key).origin for key in new})
        hosts = logging.getLogger("sandboxkit.hosts")
        hosts.addHandler(said)
        try:
            jobs = [
                batch.DownloadJob(
                    batch.SandboxRef(key, f"sandbox.test:{domain.relay.port}", TOKEN),
                    REMOTE,
                    tmp_path / key,
                )
                for key in keys
            ]
            await domain.down()

            async def outage() -> None:
                await said.all_down.wait()
                await domain.up()

            ending = asyncio.create_task(outage())
            result = await batch.download_many(domain.client, jobs, concurrency=len(jobs))
            ending.cancel()  # done, unless some new sandbox was never waited for
            with contextlib.suppress(asyncio.CancelledError):
                await ending
        finally:
            hosts.removeHandler(said)
    errors = [o.error for o in result.outcomes if o.error]
    assert result.summary.done == len(jobs), errors
    assert all((tmp_path / key).read_bytes() == BODY for key in keys)
    assert len(said.said) == len(new)
    for message in said.said.values():
        assert "(1 failures in a row, as do other hosts of its domain" in message, message


# -- the message for a host never heard from, siblings or not --------------------------


async def test_a_sandbox_on_a_domain_never_heard_from_is_told_to_check_the_domain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No sandbox of the domain has answered: its hosts' refused connects fail after the
    policy's attempts and the message names the domain and port to check, as before."""
    async with a_domain("refused") as domain:
        lone = domain.sandbox("sbx-lone")
        with pytest.raises(sandboxkit.APIConnectionError) as caught:
            await lone.files.read_bytes(REMOTE)
    assert domain.sent == {"sbx-lone": 5}
    assert f"{lone.origin} has not answered this client yet: check the base URL or the " in str(
        caught.value
    )
    assert not _messages(caplog, "looks down")
