"""Helpers for the emulator tests: IDCs, sandboxes as the wire sees them, bodies, error checks."""

from __future__ import annotations

import io
from typing import Any

import aiohttp
import attrs

from sandboxkit.emulator import Emulator, Idc

BOUNDARY = "emu-test-boundary-7f3a"
SIMPLE_CUSTOM = {"type": "custom", "cpu_count": 2, "memory_mb": 2048, "disk_size_mb": 10240}


def idcs() -> list[Idc]:
    """The data centers every test emulator has."""
    return [
        Idc("us-denver-1"),
        Idc(
            "eu-lite",
            supports_resume=False,
            supports_split_flow=False,
            max_upload_bytes=10 * 2**20,
        ),
        Idc("ap-chunked", chunked_downloads=True, honors_username=False),
    ]


@attrs.frozen
class Box:
    """A sandbox as a test sees it."""

    key: str
    token: str
    domain: str

    @property
    def files(self) -> str:
        """The ``/files`` URL of this sandbox's data plane."""
        return f"http://{self.key}.{self.domain}/files"

    @property
    def auth(self) -> dict[str, str]:
        """The data-plane auth header."""
        return {"X-Access-Token": self.token}


async def new_box(emu: Emulator, idc: str | None = None) -> Box:
    """Create a sandbox through the emulator's Python API."""
    data = (await emu.create_sandbox(idc))["data"]
    return Box(data["sandbox_key"], data["sandbox_access_token"], data["domain"])


def multipart(*parts: tuple[str, str | None, bytes], close: bool = True) -> bytes:
    """A raw multipart/form-data body; ``close=False`` leaves out the closing boundary."""
    out = b""
    for name, filename, content in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        out += content + b"\r\n"
    if close:
        out += f"--{BOUNDARY}--\r\n".encode()
    return out


MULTIPART_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


async def upload(
    http: aiohttp.ClientSession, box: Box, path: str, content: bytes, **params: str
) -> aiohttp.ClientResponse:
    """Upload ``content`` as the one ``file`` part; the caller reads the response."""
    body = io.BytesIO(multipart(("file", path.rsplit("/", 1)[-1] or "x", content)))
    headers = {**box.auth, "Content-Type": MULTIPART_TYPE}
    return await http.post(box.files, params={"path": path, **params}, data=body, headers=headers)


async def data_error(response: aiohttp.ClientResponse, status: int) -> str:
    """Check a data-plane error: the status and a body that is ``{message}`` only."""
    assert response.status == status, await response.text()
    body = await response.json()
    assert list(body) == ["message"] and isinstance(body["message"], str)
    return str(body["message"])


async def v2_error(response: aiohttp.ClientResponse, status: int, code: str) -> dict[str, Any]:
    """Check a v2 error body: status, code, message, request_id matching X-Request-ID."""
    assert response.status == status, await response.text()
    body = await response.json()
    assert body["code"] == code
    assert isinstance(body["message"], str)
    assert body["request_id"] == response.headers["X-Request-ID"]
    assert set(body) <= {"code", "message", "request_id", "details"}
    return dict(body)


async def v1_error(response: aiohttp.ClientResponse, status: int, group: str, code: int) -> None:
    """Check a v1 domain error body."""
    assert response.status == status, await response.text()
    body = await response.json()
    assert (body["group"], body["code"]) == (group, code)
    assert isinstance(body["message"], str)


async def v1_validation(response: aiohttp.ClientResponse, field: str) -> None:
    """Check a v1 validation body naming ``field``."""
    assert response.status == 400, await response.text()
    body = await response.json()
    assert (body["group"], body["code"]) == ("request", 0)
    details = body["validationDetail"]
    assert {"field", "expression", "originalValue", "reason"} <= set(details[0])
    assert field in [d["field"] for d in details]


async def create_template(
    http: aiohttp.ClientSession,
    emu: Emulator,
    body: dict[str, Any] | None = None,
    key: str = "key-1",
    **fields: Any,
) -> aiohttp.ClientResponse:
    """POST /api/v2/templates with a valid body unless told otherwise."""
    payload = body if body is not None else {"name": "tpl", "resources": SIMPLE_CUSTOM, **fields}
    headers = {"Authorization": f"Bearer {emu.api_key}", "Idempotency-Key": key}
    return await http.post(f"{emu.base_url}/api/v2/templates", json=payload, headers=headers)
