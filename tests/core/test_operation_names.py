"""One list of operation names (issue 16): the name the SDK gives an operation in its logs,
errors and retry warnings is the name of the emulator's route serving it, and a name on
neither list is refused where a test scripts a fault or reads the journal."""

from __future__ import annotations

import ast
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

import sandboxkit
from sandboxkit._core import operations as ops
from sandboxkit._core.operations import OPERATIONS
from sandboxkit.emulator import Emulator, Fault, FaultPlan
from sandboxkit.emulator._core import ROUTES

ROOT = Path(sandboxkit.__file__).parent
RESOURCES = sandboxkit.CustomResources(2, 2048, 10240)


def served_routes(emu: Emulator) -> set[str]:
    """The route names the emulator's two servers register."""
    return {*emu._console_app()[ROUTES].names, *emu._data_app()[ROUTES].names}


async def test_the_emulator_serves_every_sdk_operation_under_its_name() -> None:
    """Every route the emulator registers is named by an SDK operation, or starts with
    `emulator.`; every SDK operation has its route; and the names the fault plan and the
    journal accept are exactly the routes served."""
    routes = served_routes(Emulator())
    own = {route for route in routes if route.startswith("emulator.")}
    assert routes - own == set(OPERATIONS)
    assert Emulator.route_names == routes
    assert len(OPERATIONS) == len(set(OPERATIONS))


def _sdk_modules() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if p.relative_to(ROOT).parts[0] != "emulator"]


def test_the_sdk_takes_every_operation_name_from_the_list() -> None:
    """No SDK module names an operation with a string of its own (`client.request`'s
    `"VERB /path"` aside), and every listed name is used by some SDK operation."""
    literal: list[str] = []
    used: set[str] = set()
    for path in _sdk_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "operation" and isinstance(keyword.value, ast.Constant):
                        literal.append(f"{path.name}:{node.lineno}")
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if "OPERATION" in names:
                    literal.append(f"{path.name}:{node.lineno}")
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "ops"
                and path.name != "_operations.py"
            ):
                used.add(getattr(ops, node.attr))
    assert literal == []
    assert used == set(OPERATIONS)


def test_the_emulator_shares_names_not_request_recipes() -> None:
    """The emulator imports the operation names, never `_protocol`: paths and headers stay
    written twice, independently, so a wrong one on either side shows (ARCHITECTURE.md)."""
    for path in sorted((ROOT / "emulator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(a.name for a in node.names)]
                assert not any(n.endswith("_protocol") for n in names), path.name
            elif isinstance(node, ast.Import):
                assert not any(a.name.endswith("_protocol") for a in node.names), path.name


# -- a misspelled name is refused at the call ------------------------------------------------


def _refused(call: Callable[[], object]) -> str:
    with pytest.raises(ValueError) as caught:
        call()
    return str(caught.value)


def test_a_misspelled_route_is_refused_by_script_random_pending_and_journal_for() -> None:
    """Before anything is served (the emulator is not even started), each of them raises
    ValueError naming the bad route, the closest good one, and every route, sorted."""
    emu = Emulator()
    every = ", ".join(sorted(Emulator.route_names))
    calls: list[Callable[[], object]] = [
        lambda: emu.faults.script("files.dowload", Fault.status(503)),
        lambda: emu.faults.random(seed=1, rates={"503": 0.5}, routes=["files.dowload"]),
        lambda: emu.faults.pending("files.dowload"),
        lambda: emu.journal_for("files.dowload"),
    ]
    for call in calls:
        message = _refused(call)
        assert "'files.dowload'" in message and "did you mean 'files.download'?" in message
        assert message.endswith(every)
    assert emu.faults.injected == {} and emu.journal == []


def test_a_refused_random_plan_leaves_the_previous_one() -> None:
    """A random plan with one bad route changes nothing: the plan in force stays."""
    plan = FaultPlan()
    plan.random(seed=1, rates={"503": 1.0}, routes=["files.upload"])
    _refused(lambda: plan.random(seed=1, rates={"429": 1.0}, routes=["files.upload", "nope"]))
    fault = plan.take("files.upload")
    assert fault is not None and fault.http_status == 503
    assert plan.take("files.download") is None


def test_one_string_of_routes_is_refused() -> None:
    """`routes="files.download"` would be a set of letters: it is refused, not ignored."""
    message = _refused(
        lambda: FaultPlan().random(seed=1, rates={"503": 0.5}, routes="files.download")
    )
    assert "'files.download'" in message


def test_a_plan_knows_the_names_it_was_given() -> None:
    """A FaultPlan checks against the names it was built with: the emulator's by default,
    a subclass's own (an extra route) when the emulator passes them."""
    assert FaultPlan().routes == Emulator.route_names
    assert "files.stat" in _refused(lambda: FaultPlan().script("files.stat"))
    extended = FaultPlan({*Emulator.route_names, "files.stat"})
    extended.script("files.stat", Fault.status(502))
    assert extended.pending("files.stat") == 1


# -- the SDK's name at run time is the journal's ---------------------------------------------


@attrs.frozen
class World:
    """What every operation needs to exist before it is called."""

    emu: Emulator
    client: sandboxkit.Client
    sandbox: sandboxkit.Sandbox
    template_id: str
    build_id: str
    waiting_build_id: str
    container_id: str


async def _world(emu: Emulator, client: sandboxkit.Client) -> World:
    created = await client.templates.create(
        name="names", resources=RESOURCES, build={"commands": ["x"]}
    )
    (waiting,) = emu.add_builds(created.id, 1)
    containers = await client.v1.containers.create(
        name="worker", template_id=emu.v1_template_ids[0], product="sku-small"
    )
    body = await emu.create_sandbox()
    (emu.sandbox_root(body["data"]["sandbox_key"]) / "home/user/f.bin").write_bytes(b"abc")
    return World(
        emu,
        client,
        client.sandbox_from_response(body),
        created.id,
        created.build_id,
        waiting,
        containers.ids[0],
    )


async def _drain(items: Any) -> list[Any]:
    return [item async for item in items]


CALLS: dict[str, Callable[[World], Awaitable[Any]]] = {
    "templates.create": lambda w: w.client.templates.create(name="t2", resources=RESOURCES),
    "builds.list": lambda w: _drain(w.client.templates.builds(w.template_id)),
    "builds.start": lambda w: w.client.templates.start_build(w.template_id, w.waiting_build_id),
    "builds.logs": lambda w: _drain(w.client.templates.build_logs(w.template_id, w.build_id)),
    "files.download": lambda w: w.sandbox.files.read_bytes("/home/user/f.bin"),
    "files.upload": lambda w: w.sandbox.files.upload("/home/user/g.bin", b"xyz"),
    "v1.oauth.exchange": lambda w: w.client.v1.exchange_oauth_code("github", w.emu.oauth_code),
    "v1.api_keys.create": lambda w: w.client.v1.create_api_key(w.emu.org_id, "ci"),
    "v1.organizations.get": lambda w: w.client.v1.get_organization(w.emu.org_id),
    "v1.images.list": lambda w: w.client.v1.list_images(),
    "v1.templates.get": lambda w: w.client.v1.get_template(w.emu.v1_template_ids[0]),
    "v1.templates.list": lambda w: w.client.v1.list_templates(),
    "v1.containers.create": lambda w: w.client.v1.containers.create(
        name="w2", template_id=w.emu.v1_template_ids[0], product="sku-small"
    ),
    "v1.containers.get": lambda w: w.client.v1.containers.get(w.container_id),
    "v1.containers.delete": lambda w: w.client.v1.containers.delete(w.container_id),
    "v1.containers.shell": lambda w: w.client.v1.containers.shell(w.container_id),
    "v1.elastic_ips.associate": lambda w: w.client.v1.elastic_ips.associate(
        w.emu.elastic_ip_ids[0], instance_id=w.container_id
    ),
    "v1.elastic_ips.release": lambda w: w.client.v1.elastic_ips.release(w.emu.elastic_ip_ids[0]),
    "v1.vpcs.release": lambda w: w.client.v1.vpcs.release(w.emu.vpc_ids[0]),
}


def test_every_operation_is_called_below() -> None:
    """The run-time check below covers every listed operation."""
    assert sorted(CALLS) == sorted(OPERATIONS)


@pytest.mark.parametrize("name", list(CALLS))
async def test_the_sdk_logs_and_raises_under_the_route_name_the_journal_shows(
    emulator: Emulator,
    emulator_client: sandboxkit.Client,
    caplog: pytest.LogCaptureFixture,
    name: str,
) -> None:
    """A cut connection on the route `name` is retried with a WARNING (or, for a request
    never sent twice, raised) under the operation name `name`, the journal's route."""
    world = await _world(emulator, emulator_client)
    emulator.journal.clear()
    emulator.faults.script(name, Fault.cut_before_headers())
    said: list[str] = []
    with caplog.at_level(logging.WARNING, logger="sandboxkit"):
        try:
            await CALLS[name](world)
        except sandboxkit.TransportError as exc:
            assert exc.operation is not None and str(exc).startswith(f"{exc.operation}: ")
            said.append(exc.operation)
    retries = [r for r in caplog.records if r.getMessage().startswith("retrying ")]
    said += [str(r.args[0]) for r in retries if isinstance(r.args, tuple)]
    assert said, "the cut must show in a retry warning or in the error"
    assert set(said) == {emulator.journal[-1].route} == {name}
    assert emulator.journal[0].fault is not None and emulator.journal[0].route == name


@pytest.mark.parametrize("name", list(CALLS))
async def test_an_error_status_names_the_operation_that_met_it(
    emulator: Emulator, emulator_client: sandboxkit.Client, name: str
) -> None:
    """Every SandboxKitError a call raises carries its operation (`exc.operation`), an
    APIError too: one to script a fault for, the journal's route."""
    world = await _world(emulator, emulator_client)
    emulator.faults.script(name, Fault.status(404))
    with pytest.raises(sandboxkit.NotFoundError) as caught:
        await CALLS[name](world)
    assert caught.value.operation == name == emulator.journal[-1].route


async def test_an_error_before_any_call_names_no_operation(
    emulator_client: sandboxkit.Client,
) -> None:
    with pytest.raises(sandboxkit.ValidationError) as caught:
        await emulator_client.templates.create(name="", resources=RESOURCES)
    assert caught.value.operation is None
