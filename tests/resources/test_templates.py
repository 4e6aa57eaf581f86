"""v2 control plane over real loopback sockets: create, builds, logs, request, retries."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from aiohttp import web

import sandboxkit
from sandboxkit import CustomResources, PresetResources

from ..conftest import API_KEY, FakeSleep, ScriptServer, answer, json_answer, raw, v2_error

TEMPLATES = "/api/v2/templates"
RES = CustomResources(cpu_count=2, memory_mb=2048, disk_size_mb=10240)
CREATED = {"request_id": "req-1", "data": {"id": "tpl-1", "build_id": "b-1", "status": "waiting"}}


def build(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": f"b-{i}", "template_id": "tpl-1", "status": "waiting", **extra}


async def test_create_sends_body_key_and_bearer(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """templates.create posts the documented body with a UUID4 Idempotency-Key and Bearer auth."""
    script_server.on("POST", TEMPLATES, answer(CREATED, 201, {"Idempotency-Key": "echoed"}))
    created = await script_client.templates.create(
        name="py-agent", resources=RES, description="d", labels={"team": "a"}
    )
    assert (created.id, created.build_id, created.status) == ("tpl-1", "b-1", "waiting")
    assert created.replayed is False
    assert created.idempotency_key == "echoed"
    assert created.request_id == "req-1"
    [seen] = script_server.requests("POST", TEMPLATES)
    assert seen.headers["Authorization"] == f"Bearer {API_KEY}"
    assert len(seen.headers["Idempotency-Key"]) == 36
    assert json.loads(seen.body) == {
        "name": "py-agent",
        "resources": {
            "type": "custom",
            "cpu_count": 2,
            "memory_mb": 2048,
            "disk_size_mb": 10240,
            "architecture": "x86_64",
        },
        "description": "d",
        "labels": {"team": "a"},
    }


async def test_create_preset_and_replay_header(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """A preset body carries only type and product; Idempotency-Replayed sets `replayed`."""
    script_server.on("POST", TEMPLATES, answer(CREATED, 200, {"Idempotency-Replayed": "true"}))
    created = await script_client.templates.create(
        name="x", resources=PresetResources(product="sku-1"), idempotency_key="key-1"
    )
    assert created.replayed is True
    assert created.idempotency_key == "key-1"
    body = json.loads(script_server.requests()[0].body)
    assert body["resources"] == {"type": "preset", "product": "sku-1"}
    assert script_server.requests()[0].headers["Idempotency-Key"] == "key-1"


async def test_retry_after_502_resends_identical_key_and_body(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """A 502 is retried with the very same Idempotency-Key and body bytes."""
    script_server.on("POST", TEMPLATES, v2_error(502, "Internal.ServerError"), answer(CREATED, 201))
    await script_client.templates.create(name="py-agent", resources=RES)
    first, second = script_server.requests("POST", TEMPLATES)
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    assert first.body == second.body
    assert len(fake_sleep.delays) == 1


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "Sandbox.IdempotentParameterMismatch", sandboxkit.IdempotencyMismatchError),
        (409, "Sandbox.IdempotentKeyConsumed", sandboxkit.IdempotencyKeyConsumedError),
        (403, "Resource.QuotaExceeded", sandboxkit.QuotaExceededError),
        (400, "Parameter.Invalid", sandboxkit.BadRequestError),
        (401, "Auth.Unauthorized", sandboxkit.AuthenticationError),
        (404, "Resource.NotFound", sandboxkit.NotFoundError),
        (409, "Resource.StateConflict", sandboxkit.ConflictError),
        (422, "Parameter.Invalid", sandboxkit.UnprocessableEntityError),
        (500, "Internal.ServerError", sandboxkit.InternalServerError),
    ],
)
async def test_v2_errors_map_to_classes_without_retry(
    script_server: ScriptServer,
    script_client: sandboxkit.Client,
    fake_sleep: FakeSleep,
    status: int,
    code: str,
    cls: type[sandboxkit.APIError],
) -> None:
    """v2 error bodies give their class by code, then status; none of these is retried."""
    script_server.on("POST", TEMPLATES, v2_error(status, code, details={"quota": 1}))
    with pytest.raises(cls) as info:
        await script_client.templates.create(name="n", resources=RES)
    assert info.value.status == status
    assert info.value.code == code
    assert info.value.request_id == "req-err"
    assert info.value.surface == "v2"
    assert len(script_server.requests()) == 1
    assert fake_sleep.delays == []


async def test_consumed_key_is_not_retried_even_with_retryable_policy(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """409 IdempotentKeyConsumed surfaces at once."""
    script_server.on("POST", TEMPLATES, v2_error(409, "Sandbox.IdempotentKeyConsumed"))
    with pytest.raises(sandboxkit.IdempotencyKeyConsumedError):
        await script_client.templates.create(name="n", resources=RES)
    assert len(script_server.requests()) == 1


async def test_429_retry_after_one_second_is_waited(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """A 429 with Retry-After: 1 waits one second (the server's delay wins)."""
    script_server.on(
        "GET",
        "/api/v2/templates/tpl-1/builds",
        answer({"code": "x", "message": "slow down"}, 429, {"Retry-After": "1"}),
        answer({"request_id": "r", "total": 0, "page": 1, "page_size": 20, "items": []}),
    )
    assert [b async for b in script_client.templates.builds("tpl-1")] == []
    assert fake_sleep.delays == [1.0]


async def test_retry_after_beyond_cap_raises_with_retry_after(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """A Retry-After above max_retry_after is not waited for; the error carries it."""
    script_server.on(
        "GET",
        "/api/v2/templates/tpl-1/builds",
        answer({"code": "x", "message": "later"}, 429, {"Retry-After": "3600"}),
    )
    with pytest.raises(sandboxkit.RateLimitError) as info:
        await script_client.templates.builds("tpl-1").pages().__anext__()
    assert info.value.retry_after == 3600.0
    assert fake_sleep.delays == []


async def test_500_is_not_retried(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """A plain 500 surfaces at once as InternalServerError."""
    script_server.on("GET", "/api/v2/templates/t/builds", v2_error(500, "Internal.ServerError"))
    with pytest.raises(sandboxkit.InternalServerError):
        [b async for b in script_client.templates.builds("t")]
    assert len(script_server.requests()) == 1


async def test_retries_stop_at_max_attempts(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """max_attempts counts requests: three 503s with max_attempts=3 make three requests."""
    script_server.always("GET", "/api/v2/templates/t/builds", v2_error(503, "Internal.ServerError"))
    with pytest.raises(sandboxkit.ServiceUnavailableError):
        [b async for b in script_client.templates.builds("t")]
    assert len(script_server.requests()) == 3
    assert len(fake_sleep.delays) == 2


async def test_start_build_is_never_retried(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """POST to start a build surfaces a 502 instead of risking a double start."""
    script_server.on("POST", "/api/v2/templates/t/builds/b", v2_error(502, "Internal.ServerError"))
    with pytest.raises(sandboxkit.BadGatewayError):
        await script_client.templates.start_build("t", "b")
    assert len(script_server.requests()) == 1


async def test_start_build_returns_data(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """start_build posts to the build's path and returns the unwrapped data."""
    script_server.on(
        "POST",
        "/api/v2/templates/t%2F1/builds/b",
        answer({"request_id": "r", "data": {"id": "b", "status": "building"}}),
    )
    assert await script_client.templates.start_build("t/1", "b") == {
        "id": "b",
        "status": "building",
    }
    assert script_server.requests()[0].path == "/api/v2/templates/t%2F1/builds/b"


async def test_paging_45_by_20_makes_three_requests(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """total 45 with page_size 20 asks page=1,2,3 and yields all 45 builds once."""
    all_builds = [build(i) for i in range(45)]

    async def pages(request: web.Request) -> web.StreamResponse:
        page, size = int(request.query["page"]), int(request.query["page_size"])
        items = all_builds[(page - 1) * size : page * size]
        return json_answer(
            {"request_id": "r", "total": 45, "page": page, "page_size": size, "items": items}
        )

    script_server.always("GET", "/api/v2/templates/tpl-1/builds", pages)
    got = [b.id async for b in script_client.templates.builds("tpl-1", page_size=20)]
    assert got == [b["id"] for b in all_builds]
    assert [(s.query["page"], s.query["page_size"]) for s in script_server.requests()] == [
        ("1", "20"),
        ("2", "20"),
        ("3", "20"),
    ]


async def test_shifted_pages_never_repeat_a_build(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """A new build pushing items onto the next page does not make a build appear twice."""
    script_server.on(
        "GET",
        "/api/v2/templates/t/builds",
        answer({"total": 4, "page": 1, "page_size": 2, "items": [build(3), build(2)]}),
        # b-9 arrived meanwhile: page 2 now starts with b-2 again.
        answer({"total": 5, "page": 2, "page_size": 2, "items": [build(2), build(1)]}),
        answer({"total": 5, "page": 3, "page_size": 2, "items": [build(0)]}),
    )
    got = [b.id async for b in script_client.templates.builds("t", page_size=2)]
    assert got == ["b-3", "b-2", "b-1", "b-0"]


async def test_a_failed_page_is_asked_again_by_the_next_step(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """When a page call fails, the stream stays at that page: the next step asks for it again
    and goes on, with no build lost or repeated."""
    script_server.on(
        "GET",
        "/api/v2/templates/t/builds",
        answer({"total": 3, "page": 1, "page_size": 2, "items": [build(2), build(1)]}),
        v2_error(500, "Internal.ServerError"),
        answer({"total": 3, "page": 2, "page_size": 2, "items": [build(0)]}),
    )
    stream = aiter(script_client.templates.builds("t", page_size=2))
    got = [(await anext(stream)).id, (await anext(stream)).id]
    with pytest.raises(sandboxkit.InternalServerError):
        await anext(stream)
    got += [b.id async for b in stream]
    assert got == ["b-2", "b-1", "b-0"]
    assert [s.query["page"] for s in script_server.requests()] == ["1", "2", "2"]


async def test_builds_page_asks_for_exactly_that_page(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """builds_page is one request for the page asked for, decoded into a typed Page."""
    script_server.on(
        "GET",
        "/api/v2/templates/t%2F1/builds",
        answer({"request_id": "r3", "total": 9, "page": 3, "page_size": 2, "items": [build(4)]}),
    )
    page = await script_client.templates.builds_page("t/1", page=3, page_size=2)
    assert (page.page, page.page_size, page.total, page.request_id) == (3, 2, 9, "r3")
    assert [b.id for b in page.items] == ["b-4"]
    assert isinstance(page.items[0], sandboxkit.Build)
    [seen] = script_server.requests()
    assert (seen.path, seen.query) == (
        "/api/v2/templates/t%2F1/builds",
        {"page": "3", "page_size": "2"},
    )


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"page": 0}, "page"),
        ({"page": "2"}, "page"),
        ({"page_size": 101}, "page_size"),
        ({"template_id": ""}, "template_id"),
    ],
)
async def test_builds_page_refuses_bad_input_before_any_request(
    script_server: ScriptServer,
    script_client: sandboxkit.Client,
    arguments: dict[str, Any],
    field: str,
) -> None:
    """A page below 1 or not an int, a page size past 100 or an empty id sends nothing."""
    call = {"template_id": "t", **arguments}
    with pytest.raises(sandboxkit.ValidationError, match=field):
        await script_client.templates.builds_page(call.pop("template_id"), **call)
    assert script_server.requests() == []


async def test_page_request_id_comes_from_the_body_else_the_header(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """A page's request_id is the body's; a body without one takes X-Request-ID."""
    script_server.on(
        "GET",
        "/api/v2/templates/t/builds",
        answer(
            {"request_id": "body", "total": 3, "page": 1, "page_size": 2, "items": [build(1)]},
            headers={"X-Request-ID": "header-1"},
        ),
        answer(
            {"total": 3, "page": 2, "page_size": 2, "items": [build(0)]},
            headers={"X-Request-ID": "header-2"},
        ),
    )
    pages = [p async for p in script_client.templates.builds("t", page_size=2).pages()]
    assert [p.request_id for p in pages] == ["body", "header-2"]


async def test_empty_page_stops_and_pages_expose_metadata(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """.pages() yields Page objects and stops at an empty page even if total claims more."""
    script_server.on(
        "GET",
        "/api/v2/templates/t/builds",
        answer({"request_id": "r1", "total": 99, "page": 1, "page_size": 2, "items": [build(1)]}),
        answer({"request_id": "r2", "total": 99, "page": 2, "page_size": 2, "items": []}),
    )
    pages = [p async for p in script_client.templates.builds("t", page_size=2).pages()]
    assert [(p.page, p.total, p.request_id, len(p.items)) for p in pages] == [
        (1, 99, "r1", 1),
        (2, 99, "r2", 0),
    ]
    assert isinstance(pages[0].items[0], sandboxkit.Build)


async def test_build_fields_parse_and_unknown_ones_are_ignored(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """Builds parse timestamps, resources, failure; unknown fields and statuses pass."""
    item = build(
        1,
        status="exotic-new-status",
        created_at="2026-01-02T03:04:05Z",
        resources={"cpu_count": 2, "memory_mb": 2, "disk_size_mb": 2, "architecture": "x86_64"},
        failure={"code": "TemplateBuild.OutOfMemory", "message": "oom"},
        commands=["a", "b"],
        brand_new_field={"x": 1},
    )
    script_server.on(
        "GET",
        "/api/v2/templates/t/builds",
        answer({"total": 1, "page": 1, "page_size": 20, "items": [item]}),
    )
    [b] = [b async for b in script_client.templates.builds("t")]
    assert b.status == "exotic-new-status"
    assert b.created_at is not None and b.created_at.utcoffset() is not None
    assert b.resources == sandboxkit.BuildResources(2, 2, 2, "x86_64")
    assert b.failure == sandboxkit.BuildFailure("TemplateBuild.OutOfMemory", "oom")
    assert b.commands == ("a", "b")
    assert b.is_finished


def log_page(entries: list[tuple[int, str]], next_offset: int, has_more: bool) -> dict[str, Any]:
    return {
        "request_id": "r",
        "data": {
            "entries": [
                {"offset": o, "level": lvl, "message": f"m{o}", "timestamp": "2026-01-01T00:00:00Z"}
                for o, lvl in entries
            ],
            "next_offset": next_offset,
            "has_more": has_more,
        },
    }


async def test_logs_follow_next_offset_with_level(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """build_logs pages by offset/limit/level until has_more is false."""
    path = "/api/v2/templates/t/builds/b/logs"
    script_server.on(
        "GET",
        path,
        answer(log_page([(0, "error"), (1, "error")], 2, True)),
        answer(log_page([(2, "error")], 3, False)),
    )
    got = [
        e.offset async for e in script_client.templates.build_logs("t", "b", level="error", limit=2)
    ]
    assert got == [0, 1, 2]
    assert [s.query for s in script_server.requests()] == [
        {"offset": "0", "limit": "2", "level": "error"},
        {"offset": "2", "limit": "2", "level": "error"},
    ]


async def test_logs_refuse_a_cursor_that_goes_backwards(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """A next_offset behind the current offset raises PaginationError instead of looping."""
    path = "/api/v2/templates/t/builds/b/logs"
    script_server.on("GET", path, answer(log_page([(5, "info")], 1, True)))
    with pytest.raises(sandboxkit.PaginationError):
        [e async for e in script_client.templates.build_logs("t", "b", offset=5)]


async def test_logs_follow_until_build_finishes(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """follow=True polls with backoff while the build runs and stops after it finishes."""
    logs = "/api/v2/templates/t/builds/b/logs"
    builds = "/api/v2/templates/t/builds"
    script_server.on(
        "GET",
        logs,
        answer(log_page([(0, "info")], 1, False)),
        answer(log_page([], 1, False)),
        answer(log_page([(1, "warn")], 2, False)),
        answer(log_page([(2, "info")], 3, False)),
    )
    running = {"total": 1, "page": 1, "page_size": 100, "items": [build(0, id="b")]}
    done = {
        "total": 1,
        "page": 1,
        "page_size": 100,
        "items": [build(0, id="b", finished_at="2026-01-01T00:00:09Z")],
    }
    script_server.on("GET", builds, answer(running), answer(running), answer(done))
    got = [
        e.offset
        async for e in script_client.templates.build_logs("t", "b", follow=True, poll_interval=0.25)
    ]
    assert got == [0, 1, 2]
    assert fake_sleep.delays == [0.25, 0.5]
    assert len(script_server.requests("GET", builds)) == 3


async def test_follow_raises_build_failed_when_asked(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """raise_on_failure turns a failed build into BuildFailedError after the logs drain."""
    script_server.on(
        "GET",
        "/api/v2/templates/t/builds/b/logs",
        answer(log_page([], 0, False)),
        answer(log_page([(0, "error")], 1, False)),
    )
    failed = build(0, id="b", failure={"code": "TemplateBuild.OutOfMemory", "message": "oom"})
    script_server.on(
        "GET",
        "/api/v2/templates/t/builds",
        answer({"total": 1, "page": 1, "page_size": 100, "items": [failed]}),
    )
    seen = []
    with pytest.raises(sandboxkit.BuildFailedError) as info:
        async for entry in script_client.templates.build_logs(
            "t", "b", follow=True, raise_on_failure=True
        ):
            seen.append(entry.offset)
    assert seen == [0]
    assert info.value.code == "TemplateBuild.OutOfMemory"


async def test_request_escape_hatch_unwraps_and_retries_get(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """client.request unwraps the v2 envelope, sends Bearer auth and retries GET on 504."""
    script_server.on(
        "GET",
        "/api/v2/products",
        v2_error(504, "Internal.ServerError"),
        answer({"request_id": "r", "data": [{"product": "sku"}]}),
    )
    assert await script_client.request("GET", "/api/v2/products", params={"a": "b c"}) == [
        {"product": "sku"}
    ]
    assert [s.query for s in script_server.requests()] == [{"a": "b c"}, {"a": "b c"}]
    assert script_server.requests()[1].headers["Authorization"] == f"Bearer {API_KEY}"


async def test_request_post_is_not_retried_by_default(
    script_server: ScriptServer, script_client: sandboxkit.Client, fake_sleep: FakeSleep
) -> None:
    """client.request does not resend a POST unless told it is idempotent."""
    script_server.on("POST", "/api/v2/sandboxes", v2_error(502, "Internal.ServerError"))
    with pytest.raises(sandboxkit.BadGatewayError):
        await script_client.request("POST", "/api/v2/sandboxes", json={"a": 1})
    assert len(script_server.requests()) == 1


@pytest.mark.parametrize(
    ("body", "status", "cls"),
    [
        (b"", 502, sandboxkit.BadGatewayError),
        (b"<html>bad gateway</html>", 404, sandboxkit.NotFoundError),
        (b"[1, 2]", 401, sandboxkit.AuthenticationError),
        (b'{"code": 5}', 400, sandboxkit.BadRequestError),
    ],
)
async def test_error_bodies_of_any_shape_give_the_status_class(
    script_server: ScriptServer,
    script_client: sandboxkit.Client,
    body: bytes,
    status: int,
    cls: type[sandboxkit.APIError],
) -> None:
    """Empty, non-JSON and wrong-shape error bodies still map by status."""
    script_server.always("POST", "/api/v2/x", raw(body, status, "text/html"))
    with pytest.raises(cls) as info:
        await script_client.request("POST", "/api/v2/x")
    assert info.value.status == status


@pytest.mark.parametrize("body", [b"{not json", b"[]", b'{"request_id": "r", "data": 5}'])
async def test_success_with_wrong_shape_raises_decode_error(
    script_server: ScriptServer, script_client: sandboxkit.Client, body: bytes
) -> None:
    """A 2xx body that is not what the interface shows raises ResponseDecodeError."""
    script_server.on("POST", TEMPLATES, raw(body, 201))
    with pytest.raises(sandboxkit.ResponseDecodeError):
        await script_client.templates.create(name="n", resources=RES)


async def test_connection_refused_is_retried_then_surfaces(fake_sleep_factory: Any) -> None:
    """A refused connection is an APIConnectionError, retried for idempotent calls."""
    async with sandboxkit.Client(
        api_key="k", base_url="http://127.0.0.1:9", retry=sandboxkit.RetryPolicy.no_delay(2)
    ) as client:
        sleeper = fake_sleep_factory(client)
        with pytest.raises(sandboxkit.APIConnectionError):
            await client.request("GET", "/api/v2/products")
        assert len(sleeper.delays) == 1


@pytest.fixture
def fake_sleep_factory() -> Any:
    """A function that gives any client a FakeSleep and returns it."""

    def install(client: sandboxkit.Client) -> FakeSleep:
        sleeper = FakeSleep()
        client._calls.sleep = sleeper
        return sleeper

    return install


async def test_retries_log_warning_without_token(
    script_server: ScriptServer,
    script_client: sandboxkit.Client,
    fake_sleep: FakeSleep,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each retry logs one WARNING with operation, status and attempt, and never the key."""
    script_server.on(
        "GET",
        "/api/v2/products",
        v2_error(429, "x"),
        answer({"request_id": "r", "data": []}),
    )
    with caplog.at_level(logging.DEBUG):
        await script_client.request("GET", "/api/v2/products")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "GET /api/v2/products" in text and "429" in text and "attempt 1 of 3" in text
    assert all(API_KEY not in r.getMessage() for r in caplog.records)


async def test_total_timeout_bounds_the_retry_loop(script_server: ScriptServer) -> None:
    """A retry wait that would outlive the call's total timeout is not taken."""
    script_server.always(
        "GET", "/api/v2/p", answer({"code": "x", "message": "m"}, 429, {"Retry-After": "30"})
    )
    async with sandboxkit.Client(
        api_key="k", base_url=script_server.url, timeout=sandboxkit.Timeout(total=5)
    ) as client:
        with pytest.raises(sandboxkit.RateLimitError):
            await client.request("GET", "/api/v2/p")
    assert len(script_server.requests()) == 1
