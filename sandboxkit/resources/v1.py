"""v1 account operations (OAuth, API keys, organizations) and the catalog (images, templates).

`client.v1` also carries the infrastructure families from `v1_infra`: `containers`,
`elastic_ips` and `vpcs`. v1 bodies are not wrapped and use camelCase names, which only the
converter knows; v1 errors are decoded into `APIError`s with `group` and an integer `code`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from .._core import operations as ops
from .._core import protocol as proto
from .._core import validation as check
from .._core.answers import Reply
from .._core.convert import structure, unstructure
from .._core.options import CallOptions, RetryPolicy, Timeout
from .._http.calls import Calls
from ..errors import ResponseDecodeError
from ..models import (
    ApiKey,
    ApiKeyRequest,
    Image,
    OAuthCodeExchange,
    OAuthToken,
    Organization,
    V1Template,
)
from .v1_infra import Containers, ElasticIps, Vpcs, send_v1

__all__ = ["V1"]

T = TypeVar("T")

# The Image rules: a name is at most 50 characters; other image strings at most 256.
MAX_IMAGE_NAME = 50


class V1:
    """The version 1 operations, under `client.v1`.

    Attributes:
        containers: create, read, delete containers and open shells.
        elastic_ips: associate and release elastic IPs.
        vpcs: release the default VPC.
    """

    def __init__(self, calls: Calls, *, wall_clock: Callable[[], float] = time.time) -> None:
        self._calls = calls
        # `expiresAt` is compared with the wall clock, not the monotonic one the retries use.
        self._wall_clock = wall_clock
        self.containers = Containers(calls)
        self.elastic_ips = ElasticIps(calls)
        self.vpcs = Vpcs(calls)

    def __repr__(self) -> str:
        return "V1()"

    async def exchange_oauth_code(
        self, provider: str, code: str, *, timeout: Timeout | None = None
    ) -> OAuthToken:
        """Exchange a one-time OAuth authorization code for an access token.

        Sent without credentials (the interface shows none for it) and never retried: the
        code is single-use. The token can be passed to `Client(api_key=...)`.

        Args:
            provider: the identity provider's name (the allowed values are not shown).
            code: the authorization code.

        Raises:
            ValidationError: an empty provider or code, before any request.
            APIError: group `oauth`, code 1200, when the exchange failed.
        """
        body = OAuthCodeExchange(
            provider=check.check_text("provider", provider),
            code=check.check_text("code", code, secret=True),
        )
        request = proto.v1_request(
            "POST",
            proto.V1_OAUTH_TOKEN_PATH,
            operation=ops.V1_OAUTH_EXCHANGE,
            json=unstructure(body),
            authenticated=False,
        )
        reply = await self._calls.send(request, CallOptions(timeout))
        return _decode_secret(reply, OAuthToken)

    async def create_api_key(
        self,
        org_id: str,
        name: str,
        scope: str = "ie_model",
        expires_at: datetime | int | None = None,
        *,
        timeout: Timeout | None = None,
    ) -> ApiKey:
        """Create an organization API key. The key is shown this once; keep it safe.

        Never retried: a resent request could mint a second key. The key never appears in a
        repr, a log line or an error message.

        Args:
            org_id: the organization's id, a UUID.
            name: the key's name.
            scope: `ie_model` (the default) or `ce_resource`.
            expires_at: an aware `datetime` or int UNIX seconds in the future; None for a
                key that does not expire.

        Raises:
            ValidationError: bad input, before any request.
            NotFoundError: the organization does not exist for this caller (group
                `organization`, code 2).
        """
        body = ApiKeyRequest(
            name=check.check_text("name", name),
            scope=check.check_scope(scope),
            expires_at=check.check_expires_at(expires_at, self._wall_clock()),
        )
        request = proto.v1_request(
            "POST",
            proto.api_keys_path(check.check_uuid("org_id", org_id)),
            operation=ops.V1_API_KEYS_CREATE,
            json=unstructure(body),
        )
        reply = await self._calls.send(request, CallOptions(timeout))
        return _decode_secret(reply, ApiKey)

    async def get_organization(
        self,
        org_id: str,
        *,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> Organization:
        """Read an organization; only its members may.

        Args:
            org_id: the organization's id, a UUID.

        Raises:
            ValidationError: `org_id` is not a UUID, before any request.
            APIError: group `organization` with code 2 (does not exist) or 1201 (database
                error on read), in the class of the answer's status.
        """
        request = proto.v1_request(
            "GET",
            proto.organization_path(check.check_uuid("org_id", org_id)),
            operation=ops.V1_ORGANIZATIONS_GET,
        )
        return await send_v1(self._calls, request, Organization, CallOptions(timeout, retry))

    async def list_images(
        self,
        *,
        name: str | None = None,
        os_series: str | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> tuple[Image, ...]:
        """List OS images, optionally filtered.

        The interface does not name the two filters; these are the names sandboxkit and its
        emulator use (`name` matches part of the image name, `os_series` its `OSSeries`).

        Args:
            name: 1-50 characters of letters, digits, `.`, `_`, `-`.
            os_series: 1-256 characters of the same set.

        Raises:
            ValidationError: a filter outside its bounds, before any request.
        """
        filters = (
            (proto.IMAGE_NAME_FILTER, check.check_image_filter("name", name, MAX_IMAGE_NAME)),
            (proto.IMAGE_OS_SERIES_FILTER, check.check_image_filter("os_series", os_series)),
        )
        request = proto.v1_request(
            "GET",
            proto.V1_IMAGES_PATH,
            operation=ops.V1_IMAGES_LIST,
            params=[(key, value) for key, value in filters if value is not None],
        )
        return await send_v1(self._calls, request, tuple[Image, ...], CallOptions(timeout, retry))

    async def get_template(
        self,
        template_id: str,
        *,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> V1Template:
        """Read one catalog Template.

        Args:
            template_id: the Template's id, a UUID.

        Raises:
            ValidationError: `template_id` is not a UUID, before any request.
            NotFoundError: no such Template.
        """
        request = proto.v1_request(
            "GET",
            proto.v1_template_path(check.check_uuid("template_id", template_id)),
            operation=ops.V1_TEMPLATES_GET,
        )
        return await send_v1(self._calls, request, V1Template, CallOptions(timeout, retry))

    async def list_templates(
        self,
        *,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> tuple[V1Template | Mapping[str, Any], ...]:
        """List the container Templates.

        The interface does not promise these records have the Template (v1) shape: each one
        that does is a `V1Template` (extra fields and unknown statuses included), any other
        is returned as the service sent it.

        Raises:
            ResponseDecodeError: the answer is not a list.
        """
        request = proto.v1_request(
            "GET",
            proto.V1_TEMPLATES_PATH,
            operation=ops.V1_TEMPLATES_LIST,
        )
        reply = await self._calls.send(request, CallOptions(timeout, retry))
        if not isinstance(reply.payload, list):
            raise ResponseDecodeError(
                "v1.templates.list: the answer is not a list",
                status=reply.status,
                request_id=reply.request_id,
            )
        return tuple(_template_or_raw(item) for item in reply.payload)


def _template_or_raw(item: Any) -> V1Template | Mapping[str, Any]:
    if isinstance(item, Mapping) and isinstance(item.get("id"), str):
        try:
            return structure(item, V1Template)
        except Exception:  # cattrs raises many types for a wrong shape: keep the record raw
            pass
    raw: Mapping[str, Any] = item
    return raw


def _decode_secret(reply: Reply, cls: type[T]) -> T:
    # Unlike decode_reply, the converter's message is dropped: it could quote the body, and
    # this body is a credential.
    try:
        return structure(reply.payload, cls)
    except Exception:
        raise ResponseDecodeError(
            f"unexpected response shape for {cls.__name__}",
            status=reply.status,
            request_id=reply.request_id,
        ) from None
