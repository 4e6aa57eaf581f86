"""Pure modules, table-driven, no event loop: errors, retry math, cursors, converter."""

from __future__ import annotations

import json
import pickle
import zlib
from datetime import UTC, datetime

import pytest

import sandboxkit
from sandboxkit import models
from sandboxkit._core import answers
from sandboxkit._core.answers import ContentDecoder, content_coding, parse_retry_after
from sandboxkit._core.convert import converter, strict_converter, structure, unstructure
from sandboxkit._core.cursors import BuildCursor, LogCursor
from sandboxkit._core.options import Timeout
from sandboxkit._core.protocol import DataRequest, data_request, range_headers, request_target
from sandboxkit._core.retry import (
    ConcurrencyWindow,
    RetryBudget,
    RetryPolicy,
    backoff_delay,
    is_retryable,
    retry_delay,
)
from sandboxkit.errors import APIConnectionError, APITimeoutError, ValidationError

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("status", "body", "surface", "cls", "code", "group"),
    [
        (
            400,
            {"code": "Sandbox.IdempotentParameterMismatch", "message": "m"},
            "v2",
            sandboxkit.IdempotencyMismatchError,
            "Sandbox.IdempotentParameterMismatch",
            None,
        ),
        (
            409,
            {"code": "Sandbox.IdempotentKeyConsumed", "message": "m"},
            "v2",
            sandboxkit.IdempotencyKeyConsumedError,
            "Sandbox.IdempotentKeyConsumed",
            None,
        ),
        (
            429,
            {"code": "Resource.QuotaExceeded", "message": "m"},
            "v2",
            sandboxkit.QuotaExceededError,
            "Resource.QuotaExceeded",
            None,
        ),
        (418, {"code": "Odd.Code", "message": "m"}, "v2", sandboxkit.APIError, "Odd.Code", None),
        (599, {}, "v2", sandboxkit.InternalServerError, None, None),
        (
            400,
            {"group": "oauth", "code": 1200, "message": "m"},
            "v1",
            sandboxkit.BadRequestError,
            1200,
            "oauth",
        ),
        (
            404,
            {"group": "organization", "code": 2, "message": "m"},
            "v1",
            sandboxkit.NotFoundError,
            2,
            "organization",
        ),
        (
            500,
            {"group": "organization", "code": 1201, "message": "m", "traces": ["t"]},
            "v1",
            sandboxkit.InternalServerError,
            1201,
            "organization",
        ),
        # A v2-looking code on the data plane is never parsed: the status decides.
        (
            400,
            {"message": "m", "code": "Sandbox.IdempotentKeyConsumed"},
            "data",
            sandboxkit.BadRequestError,
            None,
            None,
        ),
        (502, {"message": "backend"}, "data", sandboxkit.BadGatewayError, None, None),
        (416, {"message": "m"}, "data", sandboxkit.RangeNotSatisfiableError, None, None),
        (413, {"message": "m"}, "data", sandboxkit.PayloadTooLargeError, None, None),
        (415, {"message": "m"}, "data", sandboxkit.UnsupportedMediaTypeError, None, None),
        (403, {"message": "m"}, "data", sandboxkit.PermissionDeniedError, None, None),
        (504, {"message": "m"}, "data", sandboxkit.GatewayTimeoutError, None, None),
        (302, {}, "data", sandboxkit.RedirectNotFollowedError, None, None),
        (301, {"code": "X.Y"}, "v2", sandboxkit.RedirectNotFollowedError, "X.Y", None),
    ],
)
def test_decode_error_table(
    status: int, body: dict[str, object], surface: str, cls: type, code: object, group: object
) -> None:
    """Each error body format maps to its class, code and group."""
    err = answers.decode_error(status, json.dumps(body).encode(), {}, surface)  # type: ignore[arg-type]
    assert type(err) is cls
    assert (err.status, err.code, err.group, err.surface) == (status, code, group, surface)


def test_decode_v1_validation_body() -> None:
    """A v1 validation body is the status class with group request, code 0 and records."""
    body = {
        "group": "request",
        "code": 0,
        "validationDetail": [
            {"field": "orgId", "expression": "uuid", "originalValue": "x", "reason": "bad"}
        ],
    }
    err = answers.decode_error(400, json.dumps(body).encode(), {}, "v1")
    assert type(err) is sandboxkit.BadRequestError
    assert (err.group, err.code) == ("request", 0)
    assert err.validation_detail == (sandboxkit.ValidationDetail("orgId", "uuid", "x", "bad"),)
    assert "orgId" in err.message


@pytest.mark.parametrize("body", [b"", b"not json", b"[1]", b'"str"', b"{", b"\xff\xfe"])
def test_decode_error_survives_any_body(body: bytes) -> None:
    """Bodies that are empty, not JSON or of the wrong shape still give the status class."""
    err = answers.decode_error(404, body, {"X-Request-ID": "hdr"}, "v2")
    assert type(err) is sandboxkit.NotFoundError
    assert err.message == "HTTP 404"
    assert err.request_id == "hdr"


def test_errors_pickle_with_their_fields() -> None:
    """Errors cross process boundaries intact (batch and Dask results carry them)."""
    err = answers.decode_error(
        429, b'{"code":"x","message":"m","request_id":"r"}', {}, "v2", retry_after=2.0
    )
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is sandboxkit.RateLimitError
    assert (clone.status, clone.code, clone.request_id, clone.retry_after) == (429, "x", "r", 2.0)
    conn = pickle.loads(pickle.dumps(APIConnectionError("boom", operation="op")))
    assert (conn.message, conn.operation) == ("boom", "op")


@pytest.mark.parametrize(
    "error",
    [
        answers.decode_error(404, b'{"code":"c","message":"m"}', {"X-Request-ID": "r"}, "v2"),
        sandboxkit.ResponseDecodeError("bad body", status=200, request_id="r"),
        sandboxkit.BuildFailedError(build_id="b", code="E", message="no"),
        sandboxkit.ProxyError("refused", status=407, operation="files.download"),
        sandboxkit.DestinationUnsafeError("a link"),
        ValidationError("bad"),
    ],
    ids=type,
)
def test_every_error_pickles_with_every_field_and_its_operation(
    error: sandboxkit.SandboxKitError,
) -> None:
    """One rule for every class (the call's operation is set after the error is made)."""
    error.operation = "builds.list"
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is type(error)
    assert (clone.args, vars(clone), str(clone)) == (error.args, vars(error), str(error))
    assert clone.operation == "builds.list"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", 1.0),
        ("0", 0.0),
        ("2.5", 2.5),
        ("-3", None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("Mon, 23 Nov 2026 12:00:30 GMT", 30.0),
        ("Mon, 23 Nov 2026 11:00:00 GMT", 0.0),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    """Retry-After is delta-seconds or an HTTP date; garbage and negatives are ignored."""
    assert parse_retry_after(value, NOW) == expected


def test_backoff_is_full_jitter_capped() -> None:
    """The delay is rand() times min(max_backoff, initial * 2**(n-1))."""
    policy = RetryPolicy(initial_backoff=0.5, max_backoff=3.0)
    assert [backoff_delay(policy, n, lambda: 1.0) for n in (1, 2, 3, 4, 5)] == [
        0.5,
        1.0,
        2.0,
        3.0,
        3.0,
    ]
    assert backoff_delay(policy, 3, lambda: 0.25) == 0.5


def test_retry_after_wins_up_to_the_cap() -> None:
    """A server delay within max_retry_after is used as is; beyond it, no retry."""
    policy = RetryPolicy(max_retry_after=60.0)
    assert retry_delay(policy, 1, 7.0, lambda: 0.0) == 7.0
    assert retry_delay(policy, 1, 61.0, lambda: 0.0) is None
    assert retry_delay(RetryPolicy.no_delay(), 1, 61.0, lambda: 1.0) == 0.0


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (answers.decode_error(429, b"", {}, "v2"), True),
        (answers.decode_error(502, b"", {}, "data"), True),
        (answers.decode_error(503, b"", {}, "v1"), True),
        (answers.decode_error(504, b"", {}, "v2"), True),
        (answers.decode_error(500, b"", {}, "v2"), False),
        (answers.decode_error(409, b'{"code":"Sandbox.IdempotentKeyConsumed"}', {}, "v2"), False),
        (answers.decode_error(404, b"", {}, "data"), False),
        (APIConnectionError("x"), True),
        (APITimeoutError("x"), True),
        (ValidationError("x"), False),
        (sandboxkit.HostNotFoundError("x"), False),
        (sandboxkit.TLSHandshakeError("x"), False),
        (sandboxkit.CertificateVerificationError("x"), False),
        (sandboxkit.RemoteProtocolError("x"), True),  # once: see the next test
    ],
)
def test_is_retryable(error: sandboxkit.SandboxKitError, retryable: bool) -> None:
    """Only 429/502/503/504 and connection failures are retryable by default; an unknown
    name, a failed TLS handshake and an untrusted certificate never are."""
    assert is_retryable(error, RetryPolicy()) is retryable


def test_a_malformed_answer_is_retried_only_once() -> None:
    """After one answer that was not valid HTTP, another is the server's: not retried."""
    error = sandboxkit.RemoteProtocolError("x")
    assert is_retryable(error, RetryPolicy(), malformed_before=True) is False
    assert is_retryable(APIConnectionError("x"), RetryPolicy(), malformed_before=True)


def test_budget_spends_and_refunds() -> None:
    """The retry budget empties under failures and refills on success."""
    budget = RetryBudget(capacity=12, retry_cost=5, timeout_cost=10)
    assert budget.try_spend(connection_failure=False) == 5
    assert budget.try_spend(connection_failure=False) == 5
    assert budget.try_spend(connection_failure=False) is None
    assert budget.tokens == 2
    budget.refund(10)
    assert budget.tokens == 12
    assert budget.try_spend(connection_failure=True) == 10
    budget.refund(0)
    assert budget.tokens == 3


def test_window_halves_on_throttle_and_grows_back() -> None:
    """AIMD: a 429 halves the host window, successes grow it back to the maximum."""
    window = ConcurrencyWindow(maximum=8)
    assert [window.on_throttled() for _ in range(4)] == [4, 2, 1, 1]
    for _ in range(200):
        window.on_success()
    assert window.allowed == 8


def test_build_cursor_stops_at_total() -> None:
    """The cursor asks page 1, 2, 3 for 45 items by 20, then is done."""
    cursor = BuildCursor(page_size=20)
    asked = []
    while not cursor.done:
        asked.append(dict(cursor.params())["page"])
        n = min(20, 45 - (cursor.page - 1) * 20)
        items = tuple(models.Build(id=f"{cursor.page}-{i}") for i in range(n))
        cursor.feed(models.Page(items=items, total=45, page=cursor.page, page_size=20))
    assert asked == ["1", "2", "3"]


def test_log_cursor_guards() -> None:
    """Stuck cursors raise after a few empty pages unless following."""
    entry = models.LogEntry(offset=0, level="info", message="m")
    cursor = LogCursor(offset=0, limit=10)
    assert cursor.feed(models.LogPage((entry,), 1, True)) == ((entry,), True)
    stuck = models.LogPage((), 1, True)
    cursor.feed(stuck)
    cursor.feed(stuck)
    with pytest.raises(sandboxkit.PaginationError):
        cursor.feed(stuck)
    follower = LogCursor(offset=1, limit=10, following=True)
    for _ in range(10):
        assert follower.feed(stuck) == ((), False)


def test_models_round_trip_and_ignore_unknown_fields() -> None:
    """Records parse with unknown fields and round-trip through the converter."""
    wire = {
        "id": "b",
        "status": "new-status",
        "created_at": "2026-01-01T00:00:00Z",
        "resources": {"cpu_count": 2},
        "unknown": 1,
    }
    build = structure(wire, models.Build)
    assert build.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert structure(converter.unstructure(build), models.Build) == build


def test_v1_names_map_to_snake_case() -> None:
    """v1 camelCase and PascalCase names map to snake_case attributes and back."""
    wire = {
        "id": "i",
        "supportedProducts": ["p"],
        "BootMode": "UEFI",
        "DefaultPartitionTable": [
            {"fileSystem": "ext4", "mountPoint": "/", "name": "r", "size": "1"}
        ],
        "OSArchitecture": "x86_64",
        "OSSeries": "ubuntu",
        "OSVersion": "24.04",
        "SystemDiskSize": "40",
        "orgId": "o",
        "createdAt": "2026-01-01T00:00:00Z",
        "type": "Odd",
    }
    image = strict_converter.structure(wire, models.Image)
    assert image.boot_mode == "UEFI" and image.os_series == "ubuntu" and image.org_id == "o"
    assert image.default_partition_table[0].mount_point == "/"
    back = converter.unstructure(image)
    assert back["supportedProducts"] == ["p"] and back["createdAt"] == "2026-01-01T00:00:00Z"


def test_resources_unstructure_tagged() -> None:
    """Resources carry their `type` tag on the wire and parse back by it."""
    custom = models.CustomResources(2, 2048, 4096)
    assert unstructure(custom)["type"] == "custom"
    assert structure(unstructure(custom), models.Resources) == custom  # type: ignore[arg-type]
    preset = models.PresetResources("sku")
    assert unstructure(preset) == {"type": "preset", "product": "sku"}


def test_secret_fields_stay_out_of_reprs() -> None:
    """Keys, tokens and credentials never show in a repr."""
    for value in (
        models.ApiKey(key="SECRET"),
        models.OAuthToken(access_token="SECRET"),
        models.TemplateCredential(secret="SECRET", username="u"),
    ):
        assert "SECRET" not in repr(value)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("bytes 0-9/10", answers.ContentRange(0, 9, 10)),
        ("bytes 5-9/*", answers.ContentRange(5, 9, None)),
        ("bytes 9-5/10", None),
        ("bytes 0-10/10", None),
        ("items 0-1/2", None),
        ("bytes */10", None),
        ("", None),
    ],
)
def test_parse_content_range(value: str, parsed: answers.ContentRange | None) -> None:
    """Content-Range parses strictly; malformed or inconsistent ones are None."""
    assert answers.parse_content_range(value) == parsed


def test_build_cursor_refuses_endless_repeated_pages() -> None:
    """Three pages in a row of builds already listed raise PaginationError."""
    cursor = BuildCursor(page_size=1)
    same = models.Page(items=(models.Build(id="b"),), total=10**9, page=1, page_size=1)
    cursor.feed(same)
    cursor.feed(same)
    cursor.feed(same)
    with pytest.raises(sandboxkit.PaginationError):
        cursor.feed(same)


def test_log_cursor_refuses_endless_empty_pages_even_when_advancing() -> None:
    """Empty pages that claim more stop after a few, though next_offset creeps forward."""
    cursor = LogCursor(offset=0, limit=10)
    cursor.feed(models.LogPage((), 1, True))
    cursor.feed(models.LogPage((), 2, True))
    with pytest.raises(sandboxkit.PaginationError):
        cursor.feed(models.LogPage((), 3, True))


def test_untrusted_certificate_is_not_retryable() -> None:
    """A certificate failure is a connection error that retrying cannot fix."""
    error = sandboxkit.CertificateVerificationError("bad cert")
    assert isinstance(error, APIConnectionError)
    assert not is_retryable(error, RetryPolicy())


@pytest.mark.parametrize("bad", [{"x": 1}, ["a"]])
def test_objects_are_not_strings(bad: object) -> None:
    """An object or array where the interface says string is refused, not stored as its repr."""
    with pytest.raises(TypeError, match="expected a string"):
        structure({"id": bad}, models.Build)
    with pytest.raises(TypeError, match="expected a string"):
        structure({"id": "b", "status": bad}, models.Build)


@pytest.mark.parametrize(
    ("field", "bad", "message"),
    [
        ("commands", "make", "expected an array, got str"),  # was ('m', 'a', 'k', 'e')
        ("commands", {"a": 1}, "expected an array, got dict"),
        ("source", "ubuntu", "expected an object, got str"),
        ("source", [["image", "x"]], "expected an object, got list"),
        ("resources", ["cpu_count"], "BuildResources must be an object, not list"),
    ],
)
def test_arrays_and_objects_keep_their_shape(field: str, bad: object, message: str) -> None:
    """A string or object where an array is due, or a string or array where an object is due,
    is refused rather than taken apart (a string's characters as commands)."""
    with pytest.raises(TypeError, match=message):
        structure({"id": "b", field: bad}, models.Build)


def test_a_page_decodes_through_generated_code_with_wire_values_kept() -> None:
    """A Build page decodes field by field: strings as given, numbers made text, a nested
    record, a timestamp in UTC, and an absent field's default."""
    wire = {
        "items": [
            {
                "id": "b1",
                "status": 5,
                "resources": {"cpu_count": 2, "architecture": "arm64"},
                "created_at": "2026-01-02T03:04:05+01:00",
                "source": {"image": "x"},
                "commands": ["make", 7],
            }
        ],
        "total": "1",
        "page": 1,
        "page_size": 20,
    }
    page = structure(wire, models.Page[models.Build])
    build = page.items[0]
    assert (page.total, page.request_id) == (1, None)
    assert (build.id, build.status, build.commands) == ("b1", "5", ("make", "7"))
    assert build.resources == models.BuildResources(cpu_count=2, architecture="arm64")
    assert build.created_at == datetime(2026, 1, 2, 2, 4, 5, tzinfo=UTC)
    assert (build.source, build.failure, build.finished_at) == ({"image": "x"}, None, None)


def test_numbers_and_nulls_in_string_fields_are_tolerated() -> None:
    """A number where a string is due becomes its text; null stays None."""
    build = structure({"id": 7, "status": None, "product": 3}, models.Build)
    assert (build.id, build.status, build.product) == ("7", None, "3")


# -- content codings ------------------------------------------------------------------------


def _coded(coding: str, data: bytes) -> bytes:
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "raw": -zlib.MAX_WBITS}
    coder = zlib.compressobj(wbits=wbits[coding])
    return coder.compress(data) + coder.flush()


def _decode_in_pieces(decoder: ContentDecoder, coded: bytes, piece: int, limit: int) -> bytes:
    out = []
    for start in range(0, len(coded), piece):
        for decoded in decoder.decode(coded[start : start + piece], limit):
            assert len(decoded) <= limit
            out.append(decoded)
    return b"".join(out)


@pytest.mark.parametrize(
    ("header", "coding"),
    [(None, None), ("", None), ("identity", None), (" Identity ", None), ("GZIP", "gzip")],
)
def test_content_coding_is_none_for_identity(header: str | None, coding: str | None) -> None:
    """Absent, empty and `identity` (any case) all mean the body is the raw bytes."""
    assert content_coding(header) == coding


@pytest.mark.parametrize(
    ("name", "coding"), [("gzip", "gzip"), ("x-gzip", "gzip"), ("deflate", "deflate")]
)
@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_decoder_gives_back_the_bytes_piece_by_piece_within_the_limit(
    name: str, coding: str, piece: int
) -> None:
    """Any split of the coded body decodes to the original, never more than `limit` at once."""
    data = bytes(range(256)) * 400 + b"\0" * 100_000  # expands well past the limit
    decoder = ContentDecoder(name)
    assert _decode_in_pieces(decoder, _coded(coding, data), piece, limit=1000) == data
    assert decoder.complete


def test_decoder_takes_raw_deflate_and_concatenated_gzip_members() -> None:
    """`deflate` without its zlib header, and two gzip members in a row, both decode."""
    raw = ContentDecoder("deflate")
    assert _decode_in_pieces(raw, _coded("raw", b"raw body" * 50), 13, 64) == b"raw body" * 50
    members = ContentDecoder("gzip")
    coded = _coded("gzip", b"first,") + _coded("gzip", b"second")
    assert _decode_in_pieces(members, coded, 5, 4) == b"first,second"
    assert members.complete


def test_decoder_knows_a_stream_cut_short_and_refuses_a_corrupt_one() -> None:
    """A truncated stream is not `complete`; corrupt bytes or bytes after a deflate end raise."""
    coded = _coded("gzip", b"x" * 10_000)
    cut = ContentDecoder("gzip")
    _decode_in_pieces(cut, coded[: len(coded) // 2], 100, 1 << 20)
    assert not cut.complete
    with pytest.raises(ValueError, match="corrupt"):
        list(ContentDecoder("gzip").decode(b"not gzip at all", 100))
    with pytest.raises(ValueError, match="follow the end"):
        list(ContentDecoder("deflate").decode(_coded("deflate", b"abc") + b"junk", 100))
    with pytest.raises(ValueError, match="cannot decode"):
        ContentDecoder("br")


def test_range_headers() -> None:
    """A Range, open or closed (end exclusive), with If-Range only when given."""
    assert range_headers(5) == {"Range": "bytes=5-"}
    assert range_headers(5, 10) == {"Range": "bytes=5-9"}
    assert range_headers(0, 1, '"v1"') == {"Range": "bytes=0-0", "If-Range": '"v1"'}


def test_a_data_request_is_one_value_its_headers_written_once() -> None:
    """`data_request` writes a request's own headers (a Range only with `start`); the target
    is the path and the query, written once, or the path alone."""
    target = request_target("/files", [("path", "/a b"), ("username", "u")])
    assert target == "/files?path=/a%20b&username=u"
    assert request_target("/files") == "/files" and request_target("/f", "q=1") == "/f?q=1"
    timeout = Timeout()
    whole = data_request("GET", target, "files.download", timeout)
    assert whole == DataRequest("GET", target, "files.download", timeout, None, None)
    ranged = data_request("GET", target, "files.download", timeout, start=3, if_range='"v"')
    assert ranged.headers == {"Range": "bytes=3-", "If-Range": '"v"'}
    posted = data_request("POST", target, "files.upload", timeout, data=b"body")
    assert (posted.method, posted.headers, posted.data) == ("POST", None, b"body")
