"""The agent kit's pure parts, table-driven: the schema validator, sandbox path confinement,
the error codes' JSON and the SDK exceptions they are translated from."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from sandboxkit import errors
from sandboxkit.agents import ErrorCode, ToolError, ToolLimits
from sandboxkit.agents._errors import translate
from sandboxkit.agents._paths import check_root, sandbox_path
from sandboxkit.agents._schema import array_of, check_schema, integer, number, obj, string, validate

SCHEMA = obj(
    {
        "path": string("p"),
        "offset": integer("o", minimum=0, maximum=10, default=0),
        "wait": number("w", exclusiveMinimum=0, maximum=5, default=1.5),
        "mode": string("m", enum=["text", "base64"], default="text"),
        "tags": array_of(string("t", maxLength=3), "tags", maxItems=2),
        "labels": {"type": "object", "additionalProperties": string("v"), "maxProperties": 1},
        "flag": {"type": "boolean", "description": "f"},
    },
    required=("path",),
)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"path": "a"}, {"path": "a", "offset": 0, "wait": 1.5, "mode": "text"}),
        ({"path": "a", "offset": 3.0}, {"path": "a", "offset": 3, "wait": 1.5, "mode": "text"}),
        (
            {"path": "a", "tags": ["x"], "labels": {"k": "v"}, "flag": False},
            {
                "path": "a",
                "offset": 0,
                "wait": 1.5,
                "mode": "text",
                "tags": ["x"],
                "labels": {"k": "v"},
                "flag": False,
            },
        ),
    ],
)
def test_valid_arguments_get_their_defaults(arguments: Any, expected: Any) -> None:
    """Valid arguments come back with defaults filled in and integral floats made ints."""
    got = validate(SCHEMA, arguments)
    assert got == expected
    assert type(got["offset"]) is int


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "path: is required"),
        ({"path": 5}, "path: must be a string"),
        ({"path": ["a"]}, "path: must be a string"),
        ({"path": None}, "path: must be a string"),
        ({"path": "a", "offset": -1}, "at least 0"),
        ({"path": "a", "offset": 11}, "at most 10"),
        ({"path": "a", "offset": 1.5}, "must be an integer"),
        ({"path": "a", "offset": True}, "must be an integer"),
        ({"path": "a", "offset": "3"}, "must be an integer"),
        ({"path": "a", "wait": 0}, "more than 0"),
        ({"path": "a", "wait": float("nan")}, "finite"),
        ({"path": "a", "mode": "utf-16"}, "must be one of 'text', 'base64'"),
        ({"path": "a", "tags": ["x", "y", "z"]}, "at most 2 items"),
        ({"path": "a", "tags": ["long"]}, "tags[0]: must have at most 3"),
        ({"path": "a", "tags": "x"}, "must be an array"),
        ({"path": "a", "labels": {"k": 1}}, "labels.k: must be a string"),
        ({"path": "a", "labels": {"a": "1", "b": "2"}}, "at most 1 entries"),
        ({"path": "a", "flag": "yes"}, "true or false"),
        ({"path": "a", "bogus": 1}, "bogus: is not an argument of this tool"),
        (["path", "a"], "must be an object"),
        ("path=a", "must be an object"),
    ],
)
def test_invalid_arguments_are_refused_naming_the_rule(arguments: Any, says: str) -> None:
    """Each broken rule raises invalid_argument naming the argument and the rule."""
    with pytest.raises(ToolError) as caught:
        validate(SCHEMA, arguments)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.retryable is False
    assert says in caught.value.message


def test_a_huge_value_is_shown_shortened() -> None:
    """A refused value is quoted at most about 60 characters long."""
    with pytest.raises(ToolError) as caught:
        validate(SCHEMA, {"path": "a", "mode": "x" * 100_000})
    assert len(caught.value.message) < 200


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "a+"},
        {"type": "tuple"},
        {"type": "object", "properties": {}, "required": ["a"]},
        {"type": "integer", "minimum": 1, "default": 0},
    ],
)
def test_a_schema_the_validator_cannot_enforce_is_refused(schema: dict[str, Any]) -> None:
    """Keywords outside the subset, unknown types, required names that are not properties
    and defaults that break their own rule are refused when a tool is built."""
    with pytest.raises(ValueError):
        check_schema(schema)


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        ("notes.txt", "/home/user/notes.txt"),
        ("a/./b/../c.txt", "/home/user/a/c.txt"),
        ("/home/user/x/../y.txt", "/home/user/y.txt"),
        ("//home//user//z", "/home/user/z"),
        ("/home/user", "/home/user"),
    ],
)
def test_sandbox_paths_resolve_under_the_root(given: str, resolved: str) -> None:
    """Relative paths join the root; `.`, `..` and doubled slashes are folded."""
    assert sandbox_path(given, "/home/user", 4096) == resolved


@pytest.mark.parametrize(
    "given",
    [
        "../etc/passwd",
        "/etc/passwd",
        "a/../../x",
        "/home/user/../other/x",
        "/home/username",
        "/../../etc/shadow",
        "a\x00b",
        "a\nb",
        "a\x7fb",
        "\ud800",
        "",
        "   ",
        "dir/",
        "x" * 4097,
    ],
)
def test_sandbox_paths_that_leave_the_root_or_hold_no_name_are_refused(given: str) -> None:
    """Escapes, other roots, control characters, lone surrogates, empty names, directory
    names and over-long paths are invalid_path."""
    with pytest.raises(ToolError) as caught:
        sandbox_path(given, "/home/user", 4096)
    assert caught.value.code is ErrorCode.INVALID_PATH
    assert len(caught.value.message) < 300


def test_the_root_is_checked_and_folded() -> None:
    """A root is absolute and folded; "/" lets every absolute path through."""
    assert check_root("/home/user/") == "/home/user"
    assert check_root("/") == "/"
    assert sandbox_path("/etc/hosts", "/", 4096) == "/etc/hosts"
    for bad in ("home/user", "/a/../..", "/a\x00", 5):
        with pytest.raises(errors.ValidationError):
            check_root(bad)


def test_tool_errors_are_json_and_pickle() -> None:
    """to_json has exactly code, message and retryable; retryable defaults by code; the
    error survives pickling."""
    error = ToolError(ErrorCode.UNAVAILABLE, "down")
    assert error.to_json() == {"code": "unavailable", "message": "down", "retryable": True}
    assert json.loads(json.dumps(error.to_json()))["code"] == "unavailable"
    assert ToolError(ErrorCode.NOT_FOUND, "x").retryable is False
    assert ToolError(ErrorCode.CONFLICT, "x", retryable=True).retryable is True
    again = pickle.loads(pickle.dumps(error))
    assert (again.code, again.message, again.retryable) == (error.code, "down", True)


def api(cls: type[errors.APIError], status: int, **extra: Any) -> errors.APIError:
    return cls("service text with sk-SECRET", status=status, surface="v2", **extra)


@pytest.mark.parametrize(
    ("exc", "code", "retryable"),
    [
        (api(errors.NotFoundError, 404, request_id="r-1"), ErrorCode.NOT_FOUND, False),
        (api(errors.PermissionDeniedError, 403), ErrorCode.PERMISSION_DENIED, False),
        (api(errors.QuotaExceededError, 403), ErrorCode.PERMISSION_DENIED, False),
        (api(errors.AuthenticationError, 401), ErrorCode.AUTHENTICATION_FAILED, False),
        (api(errors.RateLimitError, 429, retry_after=3.0), ErrorCode.RATE_LIMITED, True),
        (api(errors.PayloadTooLargeError, 413), ErrorCode.TOO_LARGE, False),
        (api(errors.ConflictError, 409), ErrorCode.CONFLICT, False),
        (api(errors.IdempotencyMismatchError, 400), ErrorCode.CONFLICT, False),
        (api(errors.IdempotencyKeyConsumedError, 409), ErrorCode.CONFLICT, False),
        (api(errors.InternalServerError, 500), ErrorCode.UNAVAILABLE, True),
        (api(errors.ServiceUnavailableError, 503), ErrorCode.UNAVAILABLE, True),
        (api(errors.BadRequestError, 400), ErrorCode.INVALID_ARGUMENT, False),
        (api(errors.UnprocessableEntityError, 422), ErrorCode.INVALID_ARGUMENT, False),
        (api(errors.RedirectNotFollowedError, 302), ErrorCode.UNAVAILABLE, False),
        (errors.APIConnectionError("reset"), ErrorCode.UNAVAILABLE, True),
        (errors.APITimeoutError("slow"), ErrorCode.UNAVAILABLE, True),
        (errors.HostUnavailableError("down"), ErrorCode.UNAVAILABLE, True),
        (errors.HostNotFoundError("no such host"), ErrorCode.UNAVAILABLE, False),
        (errors.CertificateVerificationError("untrusted"), ErrorCode.UNAVAILABLE, False),
        (errors.ProxyError("407", status=407), ErrorCode.UNAVAILABLE, False),
        (errors.ProxyError("502", status=502), ErrorCode.UNAVAILABLE, True),
        (errors.FileTooLargeError("big", size=10, limit=5), ErrorCode.TOO_LARGE, False),
        (errors.ValidationError("bad"), ErrorCode.INVALID_ARGUMENT, False),
        (errors.ResponseDecodeError("odd", status=200), ErrorCode.UNAVAILABLE, True),
        (errors.DestinationLockedError("locked"), ErrorCode.CONFLICT, True),
        (errors.DestinationUnsafeError("link"), ErrorCode.INVALID_PATH, False),
        (OSError(28, "No space left on device", "/secret/place"), ErrorCode.UNAVAILABLE, False),
    ],
)
def test_sdk_exceptions_map_to_codes(exc: Exception, code: ErrorCode, retryable: bool) -> None:
    """Each SDK exception class gets its code and retryable flag; the service's own text
    and a local path never reach the message, a request id does."""
    error = translate(exc, "File /home/user/a in sandbox 'dev'")
    assert error is not None
    assert (error.code, error.retryable) == (code, retryable)
    assert "sk-SECRET" not in error.message and "/secret/place" not in error.message
    if getattr(exc, "request_id", None):
        assert "r-1" in error.message


def test_anything_else_is_not_translated() -> None:
    """An exception that is not sandboxkit's (nor a local OSError) is left to the caller."""
    assert translate(RuntimeError("x"), "s") is None
    assert translate(KeyError("x"), "s") is None


def test_limits_refuse_nonsense() -> None:
    """Bounds must be positive, the default page within the maximum read, and a Build page
    within the service's 100."""
    for bad in (
        {"max_read": 0},
        {"read_page": 2, "max_read": 1},
        {"max_build_page": 101},
        {"max_wait": -1.0},
        {"max_copy": True},
    ):
        with pytest.raises(errors.ValidationError):
            ToolLimits(**bad)
    assert ToolLimits(default_wait=900.0, max_wait=30.0).wait == 30.0
