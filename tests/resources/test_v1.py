"""v1 account and catalog operations over real loopback sockets against the emulator."""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import sandboxkit
from sandboxkit.emulator import Emulator, Fault, ManualClock

NO_DELAY = sandboxkit.RetryPolicy.no_delay()


def _only(emu: Emulator, route: str) -> Any:
    """The one request the emulator received on `route`."""
    (recorded,) = emu.journal_for(route)
    return recorded


# --- OAuth ------------------------------------------------------------------------------------


async def test_exchange_oauth_code_sends_no_credentials(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """The OAuth exchange posts provider and code without an Authorization header."""
    token = await emulator_client.v1.exchange_oauth_code("github", emulator.oauth_code)
    assert isinstance(token, sandboxkit.OAuthToken)
    assert token.access_token
    recorded = _only(emulator, "v1.oauth.exchange")
    assert (recorded.method, recorded.path, recorded.status) == ("POST", "/api/v1/oauth/token", 200)
    assert "Authorization" not in recorded.headers
    assert recorded.body_size > 0
    # The token works as a credential: the gateway tells it from an API key
    # (docs/design.md section 9).
    async with emulator.client(api_key=token.access_token, retry=NO_DELAY) as as_user:
        assert (await as_user.v1.get_organization(emulator.org_id)).name


async def test_exchange_oauth_code_failure_is_oauth_1200(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """A code the service refuses gives group `oauth`, integer code 1200."""
    with pytest.raises(sandboxkit.APIError) as caught:
        await emulator_client.v1.exchange_oauth_code("github", "not-a-real-code")
    error = caught.value
    assert (error.surface, error.group, error.code) == ("v1", "oauth", 1200)
    assert error.status == 400 and isinstance(error, sandboxkit.BadRequestError)


@pytest.mark.parametrize(
    ("provider", "code"),
    [("", "c"), ("github", ""), ("github", "two\nlines"), (None, "c"), ("github", 5)],
)
async def test_exchange_oauth_code_bad_input_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, provider: Any, code: Any
) -> None:
    """An empty, multi-line or non-string provider or code is refused before any request."""
    with pytest.raises(sandboxkit.ValidationError):
        await emulator_client.v1.exchange_oauth_code(provider, code)
    assert emulator.journal_for("v1.oauth.exchange") == []


# --- API keys ---------------------------------------------------------------------------------


async def test_create_api_key_sends_camel_case_and_the_key_works(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """API key creation posts name, scope and expiresAt; the returned key authenticates."""
    expires = datetime.now(UTC) + timedelta(hours=1)
    created = await emulator_client.v1.create_api_key(emulator.org_id, "ci", "ce_resource", expires)
    assert isinstance(created, sandboxkit.ApiKey) and created.key
    recorded = _only(emulator, "v1.api_keys.create")
    assert recorded.method == "POST"
    assert recorded.path == f"/api/v1/organizations/{emulator.org_id}/api-keys"
    assert recorded.headers["Authorization"].startswith("Bearer ")
    assert recorded.status == 201
    async with emulator.client(api_key=created.key, retry=NO_DELAY) as with_key:
        assert (await with_key.v1.get_organization(emulator.org_id)).name


async def test_api_key_expiry_reaches_the_service() -> None:
    """The expiry travels as expiresAt: once the emulator clock passes it, the key fails."""
    clock = ManualClock(start=time.time())
    async with Emulator(clock=clock) as emu, emu.client(retry=NO_DELAY) as client:
        created = await client.v1.create_api_key(emu.org_id, "short", expires_at=int(clock()) + 60)
        clock.advance(61)
        async with emu.client(api_key=created.key, retry=NO_DELAY) as with_key:
            with pytest.raises(sandboxkit.AuthenticationError):
                await with_key.v1.get_organization(emu.org_id)


@pytest.mark.parametrize(
    "arguments",
    [
        {"org_id": "not-a-uuid"},
        {"org_id": "../../v2/templates"},
        {"name": ""},
        {"scope": "admin"},
        {"expires_at": int(time.time()) - 1},
        {"expires_at": datetime(2099, 1, 1)},  # naive
        {"expires_at": "2099-01-01"},
    ],
)
async def test_create_api_key_bad_input_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, arguments: dict[str, Any]
) -> None:
    """A bad org id, name, scope or expiry is refused before any request."""
    call: dict[str, Any] = {"org_id": emulator.org_id, "name": "ci", **arguments}
    with pytest.raises(sandboxkit.ValidationError):
        await emulator_client.v1.create_api_key(**call)
    assert emulator.journal_for("v1.api_keys.create") == []


async def test_api_key_never_logged_or_shown(
    emulator: Emulator, emulator_client: sandboxkit.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """The API key appears in no log record at DEBUG, no repr and no error message."""
    caplog.set_level(logging.DEBUG)
    created = await emulator_client.v1.create_api_key(emulator.org_id, "ci")
    async with emulator.client(api_key=created.key, retry=NO_DELAY) as with_key:
        emulator.faults.script("v1.organizations.get", Fault.status(502))  # a logged retry
        await with_key.v1.get_organization(emulator.org_id)
    assert any(r.levelno == logging.WARNING for r in caplog.records)
    for record in caplog.records:
        assert created.key not in record.getMessage()
        assert created.key not in repr(record.__dict__)
    assert created.key not in repr(created) and created.key not in str(created)


async def test_api_key_in_a_malformed_answer_is_not_quoted(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """A key-creation answer of the wrong shape raises without quoting the body."""
    emulator.faults.script("v1.api_keys.create", Fault.garbage(201, body=b'["sk-leaked-value"]'))
    with pytest.raises(sandboxkit.ResponseDecodeError) as caught:
        await emulator_client.v1.create_api_key(emulator.org_id, "ci")
    assert "sk-leaked-value" not in str(caught.value)
    assert caught.value.__cause__ is None


# --- organizations ----------------------------------------------------------------------------


async def test_get_organization(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """An organization is read by GET with the bearer token."""
    org = await emulator_client.v1.get_organization(emulator.org_id)
    assert isinstance(org, sandboxkit.Organization) and org.name
    recorded = _only(emulator, "v1.organizations.get")
    assert (recorded.method, recorded.path) == ("GET", f"/api/v1/organizations/{emulator.org_id}")
    assert "Authorization" in recorded.headers


async def test_missing_organization_is_organization_2(emulator_client: sandboxkit.Client) -> None:
    """An organization that does not exist gives group `organization`, code 2."""
    with pytest.raises(sandboxkit.APIError) as caught:
        await emulator_client.v1.get_organization(str(uuid.uuid4()))
    assert (caught.value.group, caught.value.code) == ("organization", 2)
    assert isinstance(caught.value, sandboxkit.NotFoundError)


async def test_organization_read_error_is_organization_1201(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """A database error on read gives group `organization`, code 1201, and is not retried."""
    emulator.break_org_reads()
    with pytest.raises(sandboxkit.APIError) as caught:
        await emulator_client.v1.get_organization(emulator.org_id)
    assert (caught.value.group, caught.value.code) == ("organization", 1201)
    assert isinstance(caught.value.code, int)
    assert isinstance(caught.value, sandboxkit.InternalServerError)
    assert len(emulator.journal_for("v1.organizations.get")) == 1  # 500 is not retried


@pytest.mark.parametrize("org_id", ["", "nope", str(uuid.uuid4())[:-1], None])
async def test_get_organization_bad_id_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, org_id: Any
) -> None:
    """An org id that is not a UUID is refused before any request."""
    with pytest.raises(sandboxkit.ValidationError, match="org_id"):
        await emulator_client.v1.get_organization(org_id)
    assert emulator.journal_for("v1.organizations.get") == []


# --- images -----------------------------------------------------------------------------------


async def test_list_images_unfiltered(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Images list as typed records with their PascalCase and camelCase fields mapped."""
    images = await emulator_client.v1.list_images()
    assert images and all(isinstance(i, sandboxkit.Image) for i in images)
    assert all(i.boot_mode and i.os_series and i.created_at is not None for i in images)
    assert {i.type for i in images} >= {"Public"}
    recorded = _only(emulator, "v1.images.list")
    assert (recorded.method, recorded.path, dict(recorded.query)) == ("GET", "/api/v1/images", {})


async def test_list_images_filters(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """The two filters travel as the `name` and `os_series` query parameters."""
    everything = await emulator_client.v1.list_images()
    target = everything[0]
    assert target.name and target.os_series
    found = await emulator_client.v1.list_images(name=target.name, os_series=target.os_series)
    assert [i.id for i in found] == [target.id]
    last = emulator.journal_for("v1.images.list")[-1]
    assert dict(last.query) == {"name": target.name, "os_series": target.os_series}


@pytest.mark.parametrize(
    "filters",
    [
        {"name": "a" * 51},
        {"name": "ubuntu 22"},
        {"name": ""},
        {"os_series": "a" * 257},
        {"os_series": "deb/ian"},
    ],
)
async def test_list_images_bad_filters_send_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, filters: dict[str, Any]
) -> None:
    """Filters outside their length or character rules are refused before any request."""
    with pytest.raises(sandboxkit.ValidationError):
        await emulator_client.v1.list_images(**filters)
    assert emulator.journal_for("v1.images.list") == []


# --- templates --------------------------------------------------------------------------------


async def test_list_templates_parses_odd_records(
    emulator_client: sandboxkit.Client, emulator: Emulator
) -> None:
    """Templates with extra fields and unknown statuses still parse as V1Template."""
    templates = await emulator_client.v1.list_templates()
    parsed = [t for t in templates if isinstance(t, sandboxkit.V1Template)]
    assert len(parsed) == len(templates) >= 2
    assert {t.status for t in parsed} - {"draft", "published", "unpublished"}  # e.g. archived
    recorded = _only(emulator, "v1.templates.list")
    assert (recorded.method, recorded.path) == ("GET", "/api/v1/templates")


async def test_list_templates_keeps_unfit_records_raw(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """A listed record that does not fit the Template shape comes back as its raw mapping."""
    fits = {"id": str(uuid.uuid4()), "name": "ok", "status": "published"}
    unfit = [{"templateName": "no id"}, {"id": str(uuid.uuid4()), "credential": "plain"}]
    emulator.faults.script(
        "v1.templates.list", Fault.garbage(200, body=json.dumps([fits, *unfit]).encode())
    )
    first, *rest = await emulator_client.v1.list_templates()
    assert isinstance(first, sandboxkit.V1Template) and first.id == fits["id"]
    assert rest == unfit


async def test_list_templates_not_a_list(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """An answer that is not a list raises ResponseDecodeError."""
    emulator.faults.script("v1.templates.list", Fault.garbage(200, body=b'{"templates": []}'))
    with pytest.raises(sandboxkit.ResponseDecodeError):
        await emulator_client.v1.list_templates()


async def test_get_template(emulator: Emulator, emulator_client: sandboxkit.Client) -> None:
    """One catalog Template is read by its UUID."""
    listed = await emulator_client.v1.list_templates()
    wanted = next(t for t in listed if isinstance(t, sandboxkit.V1Template) and t.credential)
    template = await emulator_client.v1.get_template(wanted.id)
    assert template == wanted
    recorded = _only(emulator, "v1.templates.get")
    assert (recorded.method, recorded.path) == ("GET", f"/api/v1/templates/{wanted.id}")


async def test_get_missing_template(emulator_client: sandboxkit.Client) -> None:
    """An unknown Template id is a NotFoundError with the v1 group and code."""
    with pytest.raises(sandboxkit.NotFoundError) as caught:
        await emulator_client.v1.get_template(str(uuid.uuid4()))
    assert (caught.value.group, caught.value.code) == ("template", 2)


@pytest.mark.parametrize("template_id", ["", "tpl-123", "../images", 7])
async def test_get_template_bad_id_sends_nothing(
    emulator: Emulator, emulator_client: sandboxkit.Client, template_id: Any
) -> None:
    """A Template id that is not a UUID is refused before any request."""
    with pytest.raises(sandboxkit.ValidationError, match="template_id"):
        await emulator_client.v1.get_template(template_id)
    assert emulator.journal_for("v1.templates.get") == []


# --- errors and retries -----------------------------------------------------------------------


async def test_v1_validation_body(emulator_client: sandboxkit.Client) -> None:
    """A v1 validation body is a BadRequestError with group request, code 0 and its records."""
    with pytest.raises(sandboxkit.BadRequestError) as caught:
        await emulator_client.v1.containers.get("not-a-uuid")  # the emulator wants UUID ids
    error = caught.value
    assert (error.surface, error.status, error.group, error.code) == ("v1", 400, "request", 0)
    (detail,) = error.validation_detail
    assert isinstance(detail, sandboxkit.ValidationDetail)
    assert (detail.field, detail.original_value) == ("id", "not-a-uuid")
    assert detail.expression and detail.reason


@pytest.mark.parametrize(
    ("route", "call"),
    [
        ("v1.organizations.get", lambda c, e: c.v1.get_organization(e.org_id)),
        ("v1.images.list", lambda c, e: c.v1.list_images()),
        ("v1.templates.list", lambda c, e: c.v1.list_templates()),
    ],
)
async def test_gets_are_retried_on_502(
    emulator: Emulator, emulator_client: sandboxkit.Client, route: str, call: Any
) -> None:
    """A v1 GET that meets a 502 is sent again and succeeds."""
    emulator.faults.script(route, Fault.status(502))
    await call(emulator_client, emulator)
    assert [r.status for r in emulator.journal_for(route)] == [502, 200]


@pytest.mark.parametrize(
    ("route", "call"),
    [
        ("v1.oauth.exchange", lambda c, e: c.v1.exchange_oauth_code("github", e.oauth_code)),
        ("v1.api_keys.create", lambda c, e: c.v1.create_api_key(e.org_id, "ci")),
    ],
)
async def test_posts_are_not_retried_on_502(
    emulator: Emulator, emulator_client: sandboxkit.Client, route: str, call: Any
) -> None:
    """A v1 POST that meets a 502 surfaces it: the journal shows one request."""
    emulator.faults.script(route, Fault.status(502))
    with pytest.raises(sandboxkit.BadGatewayError) as caught:
        await call(emulator_client, emulator)
    assert caught.value.surface == "v1"
    assert len(emulator.journal_for(route)) == 1
