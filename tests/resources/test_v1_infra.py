"""v1 containers, elastic IPs and VPCs over real loopback sockets against the emulator."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit.emulator import Emulator, Fault

NO_DELAY = sandboxkit.RetryPolicy.no_delay()


def _ssh_key() -> str:
    blob = b"\x00\x00\x00\x0bssh-ed25519" + (32).to_bytes(4, "big") + bytes(range(32))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} dev@laptop"


async def _container(client: sandboxkit.Client, emu: Emulator) -> str:
    created = await client.v1.containers.create(
        name="worker", template_id=emu.v1_template_ids[0], product="sku-small"
    )
    (container_id,) = created.ids
    return container_id


# --- containers -------------------------------------------------------------------------------


async def test_create_containers(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """Create posts the quick-start shape; the records carry its fields, SSH key included."""
    pub = tmp_path / "id_ed25519.pub"
    pub.write_text(_ssh_key() + "\n")
    template_id = emulator.v1_template_ids[1]
    created = await emulator_client.v1.containers.create(
        name="worker",
        template_id=template_id,
        count=2,
        product="sku-small",
        envs={"MODE": "batch"},
        ssh_public_key=pub,
    )
    assert isinstance(created, sandboxkit.ContainersCreated)
    assert len(created.ids) == 2 and created.result == "ok"
    (recorded,) = emulator.journal_for("v1.containers.create")
    assert (recorded.method, recorded.path, recorded.status) == ("POST", "/api/v1/containers", 201)
    assert recorded.headers["Authorization"].startswith("Bearer ")
    container = await emulator_client.v1.containers.get(created.ids[0])
    assert container.raw["templateId"] == template_id
    assert (container.raw["product"], container.raw["idc"]) == ("sku-small", "us-denver-1")
    assert container.raw["envs"] == [
        {"name": "MODE", "value": "batch"},
        {"name": "SSH_PUBLIC_KEY", "value": _ssh_key()},
    ]


@pytest.mark.parametrize(
    "arguments",
    [
        {"template_id": "tpl-1"},
        {"template_id": ""},
        {"count": 0},
        {"count": "2"},
        {"name": ""},
        {"product": ""},
        {"idc": ""},
        {"envs": [("A", "1")]},
        {"envs": {"A=B": "1"}},
        {"envs": {"SSH_PUBLIC_KEY": "x"}, "ssh_public_key": _ssh_key()},
        {"ssh_public_key": "ssh-ed25519 AAAA"},
        {"ssh_public_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END"},
    ],
)
async def test_create_containers_bad_input_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, arguments: dict[str, Any]
) -> None:
    """Bad ids, counts, names, envs or SSH keys are refused before any request."""
    call: dict[str, Any] = {
        "name": "worker",
        "template_id": emulator.v1_template_ids[0],
        "product": "sku-small",
        **arguments,
    }
    with pytest.raises(sandboxkit.ValidationError):
        await emulator_client.v1.containers.create(**call)
    assert emulator.journal_for("v1.containers.create") == []


async def test_create_containers_not_retried_on_502(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Container create meets a 502 once and surfaces it: a resend could double the fleet."""
    emulator.faults.script("v1.containers.create", Fault.status(502))
    with pytest.raises(sandboxkit.BadGatewayError):
        await emulator_client.v1.containers.create(
            name="w", template_id=emulator.v1_template_ids[0], product="sku-small"
        )
    assert len(emulator.journal_for("v1.containers.create")) == 1


async def test_create_containers_unknown_template(emulator_client: sandboxkit.Client) -> None:
    """A template id the service does not know gives group `template`, code 2."""
    with pytest.raises(sandboxkit.NotFoundError) as caught:
        await emulator_client.v1.containers.create(
            name="w", template_id=str(uuid.uuid4()), product="sku-small"
        )
    assert (caught.value.group, caught.value.code) == ("template", 2)


async def test_get_container(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """A container record keeps every field in `raw` and lifts `id` and `status`."""
    container_id = await _container(emulator_client, emulator)
    container = await emulator_client.v1.containers.get(container_id)
    assert isinstance(container, sandboxkit.Container)
    assert container.id == container_id and container.status
    assert container.raw["name"] == "worker"
    (recorded,) = emulator.journal_for("v1.containers.get")
    assert (recorded.method, recorded.path) == ("GET", f"/api/v1/containers/{container_id}")


async def test_get_container_retried_on_502(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """A container read that meets a 502 is sent again."""
    container_id = await _container(emulator_client, emulator)
    emulator.faults.script("v1.containers.get", Fault.status(502))
    assert (await emulator_client.v1.containers.get(container_id)).id == container_id
    assert [r.status for r in emulator.journal_for("v1.containers.get")] == [502, 200]


@pytest.mark.parametrize("container_id", ["", "a\nb", None, 42])
async def test_get_container_bad_id_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, container_id: Any
) -> None:
    """An empty, multi-line or non-string id is refused before any request."""
    with pytest.raises(sandboxkit.ValidationError, match="container_id"):
        await emulator_client.v1.containers.get(container_id)
    assert emulator.journal_for("v1.containers.get") == []


async def test_delete_container(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """Delete returns the action result; the container is then gone (group container, 2)."""
    container_id = await _container(emulator_client, emulator)
    result = await emulator_client.v1.containers.delete(container_id)
    assert result == sandboxkit.ActionResult("ok")
    (recorded,) = emulator.journal_for("v1.containers.delete")
    assert (recorded.method, recorded.path) == ("DELETE", f"/api/v1/containers/{container_id}")
    with pytest.raises(sandboxkit.NotFoundError) as caught:
        await emulator_client.v1.containers.get(container_id)
    assert (caught.value.group, caught.value.code) == ("container", 2)


async def test_delete_container_retried_on_502(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """A DELETE that meets a 502 is sent again."""
    container_id = await _container(emulator_client, emulator)
    emulator.faults.script("v1.containers.delete", Fault.status(502))
    assert (await emulator_client.v1.containers.delete(container_id)).result == "ok"
    assert [r.status for r in emulator.journal_for("v1.containers.delete")] == [502, 200]


@pytest.mark.parametrize("container_id", ["", "x\r\n"])
async def test_delete_container_bad_id_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, container_id: str
) -> None:
    """A bad container id is refused before any DELETE."""
    with pytest.raises(sandboxkit.ValidationError):
        await emulator_client.v1.containers.delete(container_id)
    assert emulator.journal_for("v1.containers.delete") == []


async def test_container_shell(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """Shell posts to the container's shell path and returns its url_path."""
    container_id = await _container(emulator_client, emulator)
    shell = await emulator_client.v1.containers.shell(container_id)
    assert isinstance(shell, sandboxkit.ShellResult)
    assert shell.url_path.startswith("/") and container_id in shell.url_path
    (recorded,) = emulator.journal_for("v1.containers.shell")
    assert (recorded.method, recorded.path) == (
        "POST",
        f"/api/v1/containers/{container_id}/shell",
    )


async def test_container_shell_not_retried_on_502(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Shell is a POST: a 502 surfaces after one request."""
    container_id = await _container(emulator_client, emulator)
    emulator.faults.script("v1.containers.shell", Fault.status(502))
    with pytest.raises(sandboxkit.BadGatewayError):
        await emulator_client.v1.containers.shell(container_id)
    assert len(emulator.journal_for("v1.containers.shell")) == 1


async def test_container_shell_bad_id_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """An empty container id is refused before any shell request."""
    with pytest.raises(sandboxkit.ValidationError):
        await emulator_client.v1.containers.shell("")
    assert emulator.journal_for("v1.containers.shell") == []


# --- elastic IPs and VPCs ---------------------------------------------------------------------


async def test_associate_elastic_ip(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """Associate posts instanceID for an existing container and returns the result."""
    container_id = await _container(emulator_client, emulator)
    eip = emulator.elastic_ip_ids[0]
    result = await emulator_client.v1.elastic_ips.associate(eip, instance_id=container_id)
    assert result == sandboxkit.ActionResult("ok")
    (recorded,) = emulator.journal_for("v1.elastic_ips.associate")
    assert (recorded.method, recorded.path) == ("POST", f"/api/v1/elastic-ips/{eip}/associate")
    assert recorded.status == 200 and recorded.body_size > 0


async def test_associate_elastic_ip_not_retried_on_502(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Associate is a POST: a 502 surfaces after one request."""
    emulator.faults.script("v1.elastic_ips.associate", Fault.status(502))
    with pytest.raises(sandboxkit.BadGatewayError):
        await emulator_client.v1.elastic_ips.associate(
            emulator.elastic_ip_ids[0], instance_id=str(uuid.uuid4())
        )
    assert len(emulator.journal_for("v1.elastic_ips.associate")) == 1


@pytest.mark.parametrize(
    ("eip", "instance_id"),
    [("", str(uuid.uuid4())), ("eip-1", "not-a-uuid"), ("eip-1", ""), ("eip-1", None)],
)
async def test_associate_elastic_ip_bad_input_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, eip: str, instance_id: Any
) -> None:
    """An empty elastic IP id or a non-UUID instance id is refused before any request."""
    with pytest.raises(sandboxkit.ValidationError):
        await emulator_client.v1.elastic_ips.associate(eip, instance_id=instance_id)
    assert emulator.journal_for("v1.elastic_ips.associate") == []


async def test_release_elastic_ip(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """Release deletes the elastic IP; releasing it again is group elastic_ip, code 2."""
    eip = emulator.elastic_ip_ids[0]
    assert (await emulator_client.v1.elastic_ips.release(eip)).result == "ok"
    (recorded,) = emulator.journal_for("v1.elastic_ips.release")
    assert (recorded.method, recorded.path) == ("DELETE", f"/api/v1/elastic-ips/{eip}")
    assert eip not in emulator.elastic_ip_ids
    with pytest.raises(sandboxkit.NotFoundError) as caught:
        await emulator_client.v1.elastic_ips.release(eip)
    assert (caught.value.group, caught.value.code) == ("elastic_ip", 2)


async def test_release_elastic_ip_bad_id_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """An empty elastic IP id is refused before any DELETE."""
    with pytest.raises(sandboxkit.ValidationError, match="elastic_ip_id"):
        await emulator_client.v1.elastic_ips.release("")
    assert emulator.journal_for("v1.elastic_ips.release") == []


async def test_release_vpc(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """Release deletes the default VPC, retrying a 502 since DELETE is idempotent."""
    (vpc,) = emulator.vpc_ids
    emulator.faults.script("v1.vpcs.release", Fault.status(502))
    assert (await emulator_client.v1.vpcs.release(vpc)) == sandboxkit.ActionResult("ok")
    recorded = emulator.journal_for("v1.vpcs.release")
    assert [(r.method, r.path, r.status) for r in recorded] == [
        ("DELETE", f"/api/v1/vpcs/{vpc}", 502),
        ("DELETE", f"/api/v1/vpcs/{vpc}", 200),
    ]
    assert emulator.vpc_ids == []


@pytest.mark.parametrize("vpc_id", ["", "\x00", 3])
async def test_release_vpc_bad_id_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, vpc_id: Any
) -> None:
    """An empty, NUL-bearing or non-string VPC id is refused before any DELETE."""
    with pytest.raises(sandboxkit.ValidationError, match="vpc_id"):
        await emulator_client.v1.vpcs.release(vpc_id)
    assert emulator.journal_for("v1.vpcs.release") == []
