"""Client-side checks of every rule the interface states, run before any request.

Each check raises `ValidationError` naming the argument and the rule. Pure: no I/O.
"""

from __future__ import annotations

import base64
import codecs
import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .. import models
from ..errors import ValidationError
from ..rules import (
    MAX_CPU,
    MAX_DESCRIPTION,
    MAX_DISK_MB,
    MAX_IDEMPOTENCY_KEY,
    MAX_IMAGE_FILTER,
    MAX_LOG_LIMIT,
    MAX_MEMORY_MB,
    MAX_PAGE_SIZE,
    MAX_TEMPLATE_NAME,
)
from .options import Timeout

__all__ = [
    "MIN_TEXT_LENGTH",
    "check_chunk_size",
    "check_codec",
    "check_count",
    "check_description",
    "check_envs",
    "check_expires_at",
    "check_flag",
    "check_idempotency_key",
    "check_image_filter",
    "check_labels",
    "check_length",
    "check_log_level",
    "check_log_limit",
    "check_log_offset",
    "check_max_size",
    "check_offset",
    "check_page",
    "check_page_size",
    "check_parts",
    "check_path_id",
    "check_remote_path",
    "check_resources",
    "check_scope",
    "check_seconds",
    "check_ssh_public_key",
    "check_template_name",
    "check_text",
    "check_username",
    "check_uuid",
    "check_wait",
    "resources_from",
]

TEMPLATE_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_TEMPLATE_NAME}}}")
# Printable ASCII without whitespace is exactly 0x21..0x7E.
IDEMPOTENCY_KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_IDEMPOTENCY_KEY}}}")
IMAGE_FILTER = re.compile(r"[A-Za-z0-9._-]+")
API_KEY_SCOPES = ("ie_model", "ce_resource")


def _fail(argument: str, rule: str, value: Any) -> ValidationError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ValidationError(f"{argument}={shown}: {rule}")


def _check_int(argument: str, value: Any, low: int, high: int | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(argument, "must be an integer", value)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise _fail(argument, f"must be {bound}", value)
    return value


def check_seconds(argument: str, value: Any) -> float:
    """A positive number of seconds (not a bool, not NaN)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise _fail(argument, "must be a positive number of seconds", value)
    return float(value)


def check_wait(
    timeout: Any, poll_interval: Any, max_poll_interval: Any
) -> tuple[float | None, Timeout | None, tuple[float, float]]:
    """A wait's limit in seconds (None: none), the time limits of each poll (None: the
    client's), and its first and longest poll intervals. `timeout` is seconds or None, or
    a `Timeout` whose `total` is the limit and whose other limits apply to each poll."""
    if isinstance(timeout, Timeout):
        limit, per_poll = timeout.total, Timeout(connect=timeout.connect, read=timeout.read)
    else:
        limit = None if timeout is None else check_seconds("timeout", timeout)
        per_poll = None
    first = check_seconds("poll_interval", poll_interval)
    longest = check_seconds("max_poll_interval", max_poll_interval)
    if longest < first:
        raise _fail("max_poll_interval", f"must be >= poll_interval ({first})", max_poll_interval)
    return limit, per_poll, (first, longest)


def check_template_name(name: Any) -> str:
    """1-64 characters of letters, digits, `_` and `-`."""
    if not isinstance(name, str) or not TEMPLATE_NAME.fullmatch(name):
        raise _fail("name", "must be 1-64 characters of A-Z, a-z, 0-9, '_' or '-'", name)
    return name


def check_description(description: Any) -> str | None:
    """At most 256 characters."""
    if description is None:
        return None
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise _fail("description", f"must be a string of at most {MAX_DESCRIPTION} chars", "…")
    return description


def check_resources(resources: Any) -> models.Resources:
    """A PresetResources or a CustomResources within the custom limits."""
    if isinstance(resources, models.PresetResources):
        if not isinstance(resources.product, str) or not resources.product.strip():
            raise _fail("resources.product", "must be a non-empty SKU", resources.product)
        return resources
    if isinstance(resources, models.CustomResources):
        _check_int("resources.cpu_count", resources.cpu_count, 1, MAX_CPU)
        _check_int("resources.memory_mb", resources.memory_mb, 1, MAX_MEMORY_MB)
        _check_int("resources.disk_size_mb", resources.disk_size_mb, 1, MAX_DISK_MB)
        return resources
    raise _fail(
        "resources",
        "must be sandboxkit.CustomResources or sandboxkit.PresetResources (exactly one form)",
        resources,
    )


def resources_from(
    *,
    cpu_count: int | None = None,
    memory_mb: int | None = None,
    disk_size_mb: int | None = None,
    product: str | None = None,
) -> models.Resources:
    """A template's `resources` from its parts, as the CLI's options and the agent tools'
    arguments give them: `PresetResources(product)`, or `CustomResources` of all three
    sizes (their bounds are checked where the resources are used, `check_resources`).

    Raises:
        ValidationError: both forms, or some of the sizes only (named by these parameters'
            names, which the CLI's options spell `--cpu-count`...).
    """
    sizes = {"cpu_count": cpu_count, "memory_mb": memory_mb, "disk_size_mb": disk_size_mb}
    missing = [name for name, value in sizes.items() if value is None]
    if product is not None:
        if len(missing) < len(sizes):
            raise ValidationError(
                "give either product or cpu_count, memory_mb and disk_size_mb, not both"
            )
        return models.PresetResources(product=product)
    if cpu_count is None or memory_mb is None or disk_size_mb is None:
        raise ValidationError(
            "give cpu_count, memory_mb and disk_size_mb together, or product (missing: "
            f"{', '.join(missing)})"
        )
    return models.CustomResources(
        cpu_count=cpu_count, memory_mb=memory_mb, disk_size_mb=disk_size_mb
    )


def check_labels(labels: Any) -> dict[str, str] | None:
    """A string-to-string map."""
    if labels is None:
        return None
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise _fail("labels", "must map strings to strings", labels)
    return dict(labels)


def check_idempotency_key(key: Any) -> str:
    """1-64 printable ASCII characters, no whitespace."""
    if not isinstance(key, str) or not IDEMPOTENCY_KEY.fullmatch(key):
        raise _fail("idempotency_key", "must be 1-64 printable ASCII chars, no whitespace", key)
    return key


def check_parts(parts: Any) -> int:
    """`parts` of `files.download`: an integer >= 1."""
    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise ValidationError(f"parts={parts!r}: must be an integer >= 1")
    return parts


def check_page(page: Any) -> int:
    """A page number >= 1."""
    return _check_int("page", page, 1, None)


def check_page_size(page_size: Any) -> int:
    """Items per page, 1-100."""
    return _check_int("page_size", page_size, 1, MAX_PAGE_SIZE)


def check_log_limit(limit: Any) -> int:
    """Log entries per request, 1-100."""
    return _check_int("limit", limit, 1, MAX_LOG_LIMIT)


def check_log_offset(offset: Any) -> int:
    """A zero-based log offset."""
    return _check_int("offset", offset, 0, None)


def check_log_level(level: Any) -> str | None:
    """One of debug, info, warn, error (or None for all)."""
    if level is None:
        return None
    if level not in models.LogLevel.ALL:
        raise _fail("level", f"must be one of {', '.join(models.LogLevel.ALL)}", level)
    return str(level)


def check_remote_path(path: Any) -> str:
    """Non-empty, absolute, no `.` or `..` segments, no NUL, valid Unicode
    (docs/design.md section 6)."""
    if not isinstance(path, str) or not path:
        raise _fail("remote path", "must be a non-empty string", path)
    if not path.startswith("/"):
        raise _fail("remote path", "must be absolute (start with '/')", path)
    if "\x00" in path:
        raise _fail("remote path", "must not contain NUL", path)
    if not _utf8(path):
        raise _fail("remote path", "must be valid Unicode (no lone surrogates)", path)
    segments = path + "/"  # absolute: every segment now sits between two slashes
    if "/./" in segments or "/../" in segments:
        raise _fail("remote path", "must not contain '.' or '..' segments", path)
    return path


def check_username(username: Any) -> str | None:
    """None, or a non-empty single-line string of valid Unicode, passed to the service."""
    if username is None:
        return None
    if not isinstance(username, str) or not username or not _single_line(username):
        raise _fail("username", "must be a non-empty single-line string without NUL", username)
    if not _utf8(username):
        raise _fail("username", "must be valid Unicode (no lone surrogates)", username)
    return username


def check_flag(argument: str, value: Any) -> bool:
    """True or False, nothing else: a truthy string such as `"false"` is refused rather than
    taken for True."""
    if not isinstance(value, bool):
        raise _fail(argument, "must be True or False", value)
    return value


def check_uuid(argument: str, value: Any) -> str:
    """A UUID in its canonical text form."""
    try:
        parsed = uuid.UUID(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or str(parsed) != value.lower():
        raise _fail(argument, "must be a UUID", value)
    return str(value)


def check_scope(scope: Any) -> str:
    """`ie_model` or `ce_resource`."""
    if scope not in API_KEY_SCOPES:
        raise _fail("scope", f"must be one of {', '.join(API_KEY_SCOPES)}", scope)
    return str(scope)


def check_expires_at(expires_at: Any, now: float) -> int | None:
    """An aware datetime or int UNIX seconds, in the future; returns UNIX seconds."""
    if expires_at is None:
        return None
    if isinstance(expires_at, datetime):
        if expires_at.tzinfo is None:
            raise _fail("expires_at", "must be timezone-aware", expires_at)
        seconds = int(expires_at.timestamp())
    elif isinstance(expires_at, int) and not isinstance(expires_at, bool):
        seconds = expires_at
    else:
        raise _fail("expires_at", "must be an aware datetime or int UNIX seconds", expires_at)
    if seconds <= now:
        raise _fail("expires_at", "must be in the future", expires_at)
    return seconds


def check_image_filter(argument: str, value: Any, max_length: int = MAX_IMAGE_FILTER) -> str | None:
    """Letters, digits, `.`, `_`, `-`, 1 to `max_length` characters (the Image bounds)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not IMAGE_FILTER.fullmatch(value)
        or not 1 <= len(value) <= max_length
    ):
        raise _fail(
            argument, f"must be 1-{max_length} chars of A-Z, a-z, 0-9, '.', '_' or '-'", value
        )
    return value


def _utf8(value: str) -> bool:
    # A lone surrogate has no UTF-8 form: no URL or header can carry it as given.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _single_line(value: str) -> bool:
    return "\n" not in value and "\r" not in value and "\x00" not in value


def check_text(argument: str, value: Any, *, secret: bool = False) -> str:
    """A non-empty single-line string (a field the interface types only as `string`).

    A `secret` value (a one-time code, say) is never echoed in the error.
    """
    if not isinstance(value, str) or not value or not _single_line(value):
        if secret:
            raise ValidationError(f"{argument}: must be a non-empty single-line string")
        raise _fail(argument, "must be a non-empty single-line string", value)
    return value


def check_path_id(argument: str, value: Any) -> str:
    """An id that goes into a path: non-empty, single-line; `segment()` quotes the rest."""
    if type(value) is str and value and value.isascii() and value.isprintable():
        return value  # the usual id, which no check below can refuse
    if not _utf8(check_text(argument, value)):
        raise _fail(argument, "must be valid Unicode (no lone surrogates)", value)
    return str(value)


def check_count(count: Any) -> int:
    """A container count >= 1 (the interface states no upper bound)."""
    return _check_int("count", count, 1, None)


def check_envs(envs: Any) -> tuple[models.EnvVar, ...]:
    """Environment entries as `EnvVar`s, or a mapping of names to values; names unique.

    A name is a non-empty string without `=` or NUL (what an environment can hold); a value
    is any string without NUL. Values never appear in the error message: they may be secret.
    """
    if isinstance(envs, Mapping):
        items: list[Any] = [models.EnvVar(k, v) for k, v in envs.items()]
    elif isinstance(envs, str | bytes) or not hasattr(envs, "__iter__"):
        raise ValidationError("envs must be EnvVar entries or a mapping of names to values")
    else:
        items = list(envs)
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, models.EnvVar):
            raise ValidationError("envs: every entry must be a sandboxkit.EnvVar")
        name, value = item.name, item.value
        if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
            raise _fail("envs name", "must be a non-empty string without '=' or NUL", name)
        if not isinstance(value, str) or "\x00" in value:
            raise ValidationError(f"envs[{name!r}]: the value must be a string without NUL")
        if name in seen:
            raise _fail("envs name", "must be unique", name)
        seen.add(name)
    return tuple(items)


# Key types OpenSSH writes to a .pub file (ssh-keygen -t ..., FIDO keys included).
SSH_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ssh-dss",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
MAX_SSH_PUBLIC_KEY = 16384


def check_ssh_public_key(text: Any) -> str:
    """One OpenSSH public key line: `<type> <base64 blob> [comment]`; returns it stripped.

    The blob must decode and name the same key type, which catches pasted fragments. A
    private key is refused outright, and no message ever echoes the text: it may be secret.
    """
    if not isinstance(text, str):
        raise ValidationError("the SSH public key must be a string")
    line = text.strip()
    if "PRIVATE KEY" in line:
        raise ValidationError("that is a private SSH key: pass the public key (the .pub file)")
    if not line or len(line) > MAX_SSH_PUBLIC_KEY or not _single_line(line):
        raise ValidationError("the SSH public key must be one non-empty line")
    parts = line.split(maxsplit=2)
    if len(parts) < 2 or parts[0] not in SSH_KEY_TYPES:
        raise ValidationError(
            "not an OpenSSH public key: expected '<type> <base64> [comment]' with a type "
            "such as ssh-ed25519, ssh-rsa or ecdsa-sha2-nistp256"
        )
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except ValueError:
        raise ValidationError("not an OpenSSH public key: the key data is not base64") from None
    # The blob starts with the key type as an SSH string: uint32 length, then the name.
    size = int.from_bytes(blob[:4], "big")
    if blob[4 : 4 + size] != parts[0].encode():
        raise ValidationError("not an OpenSSH public key: the key data does not match its type")
    return line


# Bounded reads' arguments (the reads themselves: `bounds`).

# The longest character of the encodings read_text accepts (UTF-8, UTF-16 surrogate pairs,
# UTF-32, GB18030): a text page at least this long always holds a character or an error, so
# paging by `next_offset` always moves on.
MIN_TEXT_LENGTH = 4
# Their byte order is in the BOM at the file's first byte: a page past it cannot know it.
_BOM_ORDERED = frozenset({"utf-16", "utf-32"})
# Decoded by a state that escapes or shifts run along the text: a page that starts at an
# arbitrary byte offset cannot know it (`iso2022*` are matched by their prefix).
_STATEFUL = frozenset({"utf-7", "hz", "idna", "punycode", "unicode-escape", "raw-unicode-escape"})


def _whole_number(argument: str, value: Any, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValidationError(f"{argument}={value!r}: must be an integer >= {low}")
    return value


def check_offset(offset: Any) -> int:
    """A byte offset: an integer >= 0 (not a bool)."""
    return _whole_number("offset", offset, 0)


def check_length(length: Any, low: int = 1) -> int:
    """A page's length in bytes: an integer >= `low` (not a bool)."""
    return _whole_number("length", length, low)


def check_max_size(max_size: Any) -> int | None:
    """None, or a cap in bytes: a positive integer (not a bool)."""
    return None if max_size is None else _whole_number("max_size", max_size, 1)


def check_codec(encoding: Any, errors: Any, offset: int) -> str:
    """The codec's canonical name (`codecs.lookup`), once it is known to decode bytes to text
    from any byte offset, and `errors` a registered error handler."""
    if not isinstance(encoding, str):
        raise ValidationError(f"encoding={encoding!r}: must be a str naming a text encoding")
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise ValidationError(f"encoding={encoding!r}: no such encoding") from None
    name = info.name
    if not getattr(info, "_is_text_encoding", True):  # base64, hex, rot13: bytes to bytes
        raise ValidationError(f"encoding={encoding!r}: not a text encoding")
    if name in _STATEFUL or name.startswith("iso2022"):
        raise ValidationError(
            f"encoding={encoding!r}: a stateful encoding cannot be decoded from a byte offset"
        )
    if name in _BOM_ORDERED and offset > 0:
        raise ValidationError(
            f"encoding={encoding!r}: its byte order is in the BOM at byte 0; from offset "
            f"{offset} name it: {name}-le or {name}-be"
        )
    if not isinstance(errors, str):
        raise ValidationError(f"errors={errors!r}: must be the name of an error handler")
    try:
        codecs.lookup_error(errors)
    except LookupError:
        raise ValidationError(f"errors={errors!r}: no such error handler") from None
    return name


def check_chunk_size(chunk_size: Any) -> int:
    """A positive number of bytes."""
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValidationError(f"chunk_size={chunk_size!r}: must be a positive integer")
    return chunk_size
