"""v1 infrastructure: containers, elastic IPs, VPCs, and the SSH environment entry.

v1 bodies are not wrapped (no `{request_id, data}` envelope) and name their fields in
camelCase; the converter maps them. GET and DELETE are retried; the POSTs here never are
(docs/design.md section 5): a resent create could start twice the containers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from .._core import operations as ops
from .._core import protocol as proto
from .._core import validation as check
from .._core.convert import unstructure
from .._core.options import CallOptions, RetryPolicy, Timeout
from .._http.calls import Calls, decode_reply
from ..errors import ValidationError
from ..models import (
    ActionResult,
    Container,
    ContainersCreated,
    ContainerSpec,
    ElasticIpAssociation,
    EnvVar,
    ShellResult,
)

__all__ = ["DEFAULT_IDC", "SSH_ENV_NAME", "Containers", "ElasticIps", "Vpcs", "send_v1", "ssh_env"]

T = TypeVar("T")

DEFAULT_IDC = "us-denver-1"
SSH_ENV_NAME = "SSH_PUBLIC_KEY"


async def send_v1(calls: Calls, request: proto.ApiRequest, cls: type[T], options: CallOptions) -> T:
    """Send a v1 request through the retry loop and structure its (unwrapped) body."""
    reply = await calls.send(request, options)
    return decode_reply(reply, reply.payload, cls)


def ssh_env(public_key: str | os.PathLike[str], name: str = SSH_ENV_NAME) -> EnvVar:
    """The environment entry that gives SSH access to a container created with it.

    A `str` is the key itself (`ssh-ed25519 AAAA... comment`); a path (`pathlib.Path` or any
    `os.PathLike`) names a `.pub` file to read. Either way it must be one OpenSSH public key
    line; a private key is refused.

    Args:
        public_key: the OpenSSH public key text, or the path of its `.pub` file.
        name: the environment variable that carries it.

    Raises:
        ValidationError: not a single-line OpenSSH public key, the file cannot be read, or a
            bad `name`.

    Example::

        env = sandboxkit.ssh_env(Path.home() / ".ssh" / "id_ed25519.pub")
        await client.v1.containers.create(..., envs=[env])
    """
    if isinstance(public_key, os.PathLike):
        text = _read_key_file(Path(public_key))
    elif isinstance(public_key, str):
        text = public_key
        if text.strip().endswith(".pub") and " " not in text.strip():
            # A lone file name is almost surely meant as a path; say how to pass one.
            raise ValidationError(
                "that looks like a file name: pass pathlib.Path(...) to read a .pub file"
            )
    else:
        raise ValidationError("public_key must be a str (the key) or a path to a .pub file")
    line = check.check_ssh_public_key(text)
    (entry,) = check.check_envs([EnvVar(name, line)])
    return entry


def _read_key_file(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            # A public key is a few hundred bytes; anything far larger is not one.
            raw = handle.read(check.MAX_SSH_PUBLIC_KEY + 1)
    except OSError as exc:
        raise ValidationError(f"cannot read SSH public key file {str(path)!r}: {exc}") from exc
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValidationError(f"{str(path)!r} is not an OpenSSH public key file") from None


class Containers:
    """Containers (v1): create from a catalog Template, read, delete, open a shell."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def create(
        self,
        *,
        name: str,
        template_id: str,
        product: str,
        count: int = 1,
        idc: str = DEFAULT_IDC,
        envs: Iterable[EnvVar] | Mapping[str, str] = (),
        ssh_public_key: str | os.PathLike[str] | None = None,
        timeout: Timeout | None = None,
    ) -> ContainersCreated:
        """Create `count` containers from a catalog Template. Never retried.

        Args:
            name: the containers' name.
            template_id: the catalog Template's id (a UUID).
            product: the product id (obtained from the provider's sales contact).
            count: how many containers, at least 1.
            idc: the data center, from the IDC listing.
            envs: environment entries, as `EnvVar`s or a mapping of names to values.
            ssh_public_key: an OpenSSH public key (text or `.pub` path) added as the
                `SSH_PUBLIC_KEY` entry; the same as adding `ssh_env(key)` to `envs`.

        Returns:
            The answer, read leniently: its shape is not shown by the interface.

        Raises:
            ValidationError: bad input, before any request.
            BadRequestError: the service's validation body (`group="request"`, `code=0`).
        """
        entries = list(check.check_envs(envs))
        if ssh_public_key is not None:
            entries.append(ssh_env(ssh_public_key))
        spec = ContainerSpec(
            name=check.check_text("name", name),
            template_id=check.check_uuid("template_id", template_id),
            count=check.check_count(count),
            product=check.check_text("product", product),
            idc=check.check_text("idc", idc),
            envs=check.check_envs(entries),  # again: the SSH entry must not clash by name
        )
        request = proto.v1_request(
            "POST",
            proto.V1_CONTAINERS_PATH,
            operation=ops.V1_CONTAINERS_CREATE,
            json=unstructure(spec),
        )
        return await send_v1(self._calls, request, ContainersCreated, CallOptions(timeout))

    async def get(
        self,
        container_id: str,
        *,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> Container:
        """Read one container record (its fields are not shown: all are kept in `raw`).

        Raises:
            ValidationError: an empty or multi-line id.
            NotFoundError: no such container.
        """
        request = proto.v1_request(
            "GET",
            proto.container_path(check.check_path_id("container_id", container_id)),
            operation=ops.V1_CONTAINERS_GET,
        )
        return await send_v1(self._calls, request, Container, CallOptions(timeout, retry))

    async def delete(
        self,
        container_id: str,
        *,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> ActionResult:
        """Delete one container.

        Raises:
            ValidationError: an empty or multi-line id.
            NotFoundError: no such container.
        """
        request = proto.v1_request(
            "DELETE",
            proto.container_path(check.check_path_id("container_id", container_id)),
            operation=ops.V1_CONTAINERS_DELETE,
        )
        return await send_v1(self._calls, request, ActionResult, CallOptions(timeout, retry))

    async def shell(self, container_id: str, *, timeout: Timeout | None = None) -> ShellResult:
        """Open a shell session on a container; returns its `url_path`. Never retried.

        Raises:
            ValidationError: an empty or multi-line id.
            NotFoundError: no such container.
        """
        request = proto.v1_request(
            "POST",
            proto.container_shell_path(check.check_path_id("container_id", container_id)),
            operation=ops.V1_CONTAINERS_SHELL,
        )
        return await send_v1(self._calls, request, ShellResult, CallOptions(timeout))


class ElasticIps:
    """Elastic IPs (v1): associate with an instance, release."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def associate(
        self, elastic_ip_id: str, *, instance_id: str, timeout: Timeout | None = None
    ) -> ActionResult:
        """Attach an elastic IP to an instance. Never retried.

        Args:
            elastic_ip_id: the elastic IP's id.
            instance_id: the instance (container) to attach it to, a UUID.

        Raises:
            ValidationError: bad input, before any request.
            NotFoundError: no such elastic IP or instance.
        """
        body = ElasticIpAssociation(instance_id=check.check_uuid("instance_id", instance_id))
        request = proto.v1_request(
            "POST",
            proto.elastic_ip_associate_path(check.check_path_id("elastic_ip_id", elastic_ip_id)),
            operation=ops.V1_ELASTIC_IPS_ASSOCIATE,
            json=unstructure(body),
        )
        return await send_v1(self._calls, request, ActionResult, CallOptions(timeout))

    async def release(
        self,
        elastic_ip_id: str,
        *,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> ActionResult:
        """Release an elastic IP.

        Raises:
            ValidationError: an empty or multi-line id.
            NotFoundError: no such elastic IP.
        """
        request = proto.v1_request(
            "DELETE",
            proto.elastic_ip_path(check.check_path_id("elastic_ip_id", elastic_ip_id)),
            operation=ops.V1_ELASTIC_IPS_RELEASE,
        )
        return await send_v1(self._calls, request, ActionResult, CallOptions(timeout, retry))


class Vpcs:
    """VPCs (v1): release the default VPC."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def release(
        self,
        vpc_id: str,
        *,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> ActionResult:
        """Release the default VPC.

        Raises:
            ValidationError: an empty or multi-line id.
            NotFoundError: no such VPC.
        """
        request = proto.v1_request(
            "DELETE",
            proto.vpc_path(check.check_path_id("vpc_id", vpc_id)),
            operation=ops.V1_VPCS_RELEASE,
        )
        return await send_v1(self._calls, request, ActionResult, CallOptions(timeout, retry))
