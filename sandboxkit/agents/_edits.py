"""Safe edits: an exact-text edit of a sandbox file, and the check that a file is still the
version a model read (its sha256, or a version token from the answer's validators).

One implementation, shared by the `edit_file` and `write_file` tools and the deepagents
backend (`sandboxkit.agents.deepagents`), so a refusal means the same everywhere:

- `no_match`: the old text is not in the file;
- `ambiguous_match`: it is there more than once (overlapping occurrences count) and
  `replace_all` is false;
- `conflict`: the file is no longer the version expected (its bytes hash otherwise, its
  version token differs, or it exists where it was expected absent, or the reverse).

The deepagents backend matches in the file's own line ends (`replaced_as_read`), since its
`read` shows every line end as LF; the tools' `read_file` shows them as they are, so
`edit_file` matches exactly what it is given.

Every refusal comes before the upload: nothing is written. What cannot be made atomic is the
window between the check (a read) and the upload: the service has no conditional upload, so
a write landing in between is overwritten. A conflict's message never shows the file's
current hash: a model must read the file again to learn it, not copy it from an error.
"""

from __future__ import annotations

import difflib
import hashlib
import re

import attrs

import sandboxkit

from ..errors import NotFoundError
from ..models import FileRange, TextPage
from ._errors import ErrorCode, ToolError, about

__all__ = [
    "ABSENT",
    "ENCODINGS",
    "Current",
    "Edited",
    "edit_file",
    "expect",
    "read_current",
    "replaced",
    "replaced_as_read",
    "unified_diff",
    "version_of",
]

ABSENT = "absent"
"""An `expected_sha256` that says the file must not exist yet."""

# Text encodings an edit may declare: each decodes and encodes back to the same bytes
# (utf-16 and utf-32 are left out: encoding anew may change the byte order a BOM chose).
ENCODINGS = ("utf-8", "latin-1", "cp1252")

_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_MAX_TOKEN = 256  # a version token longer than this is no validator worth showing


def version_of(page: FileRange | TextPage) -> str | None:
    """The version token of the answer a page came from: `etag:<ETag>`, else
    `last-modified:<date>`; None where the data center sent neither (or something no
    model should be shown: not printable ASCII, or over 256 characters)."""
    if page.etag:
        token = f"etag:{page.etag}"
    elif page.last_modified:
        token = f"last-modified:{page.last_modified}"
    else:
        return None
    ok = len(token) <= _MAX_TOKEN and token.isascii() and token.isprintable()
    return token if ok else None


@attrs.frozen
class Current:
    """A file as one read found it: its bytes (None: no such file; only a first part of
    them when `whole` is false) and its version token."""

    data: bytes | None
    whole: bool
    version: str | None

    @property
    def sha256(self) -> str | None:
        """The whole file's sha256; None for a missing file or a part."""
        if self.data is None or not self.whole:
            return None
        return hashlib.sha256(self.data).hexdigest()


async def read_current(sandbox: sandboxkit.Sandbox, path: str, subject: str, cap: int) -> Current:
    """The file, whole if it has at most `cap` bytes (else its first `cap + 1`, which tell
    it is larger), and its version; a missing file is `Current(None, True, None)`.

    Raises:
        ToolError: the read failed otherwise (translated by `about`).
    """
    with about(subject):
        try:
            page = await sandbox.files.read_range(path, 0, cap + 1)
        except NotFoundError:
            return Current(None, True, None)
    whole = page.eof and len(page.data) <= cap
    return Current(page.data, whole, version_of(page))


def expect(current: Current, subject: str, sha256: str | None, version: str | None) -> None:
    """Refuse with `conflict` unless the file is the version expected.

    Args:
        current: the file as read now (`whole` where a sha256 is checked).
        subject: what the file is, for the message.
        sha256: the expected sha256 (lowercase hex), `ABSENT`, or None (not checked).
        version: the expected version token, or None (not checked).

    Raises:
        ToolError: `conflict`, naming what differs but never the current hash.
    """
    again = "Read it again (read_file), then retry against what it holds now."
    if sha256 == ABSENT:
        if current.data is not None:
            raise ToolError(
                ErrorCode.CONFLICT, f"{subject} exists, and expected_sha256 said absent. {again}"
            )
    elif sha256 is not None:
        if current.data is None:
            raise ToolError(ErrorCode.CONFLICT, f"{subject} no longer exists. {again}")
        if current.sha256 != sha256:
            raise ToolError(
                ErrorCode.CONFLICT,
                f"{subject} changed since it was read: its bytes no longer hash to "
                f"expected_sha256. Nothing was written. {again}",
            )
    if version is not None:
        if current.data is None:
            raise ToolError(ErrorCode.CONFLICT, f"{subject} no longer exists. {again}")
        if current.version != version:
            now = "shows no version now" if current.version is None else "has another version"
            raise ToolError(
                ErrorCode.CONFLICT,
                f"{subject} {now} than expected_version. Nothing was written. {again}",
            )


def check_sha256(value: str | None) -> str | None:
    """An `expected_sha256` argument: 64 hex digits (lowered) or `absent`; None passes.

    Raises:
        ToolError: `invalid_argument`.
    """
    if value is None or value == ABSENT:
        return value
    lowered = value.lower()
    if len(lowered) != 64 or any(c not in "0123456789abcdef" for c in lowered):
        raise ToolError(
            ErrorCode.INVALID_ARGUMENT,
            "expected_sha256 must be 64 hex digits (the sha256 a full read_file returned) "
            f"or {ABSENT!r}.",
        )
    return lowered


def replaced(text: str, old: str, new: str, replace_all: bool, subject: str) -> tuple[str, int]:
    """`text` with `old` replaced by `new`, and how many times it was.

    Raises:
        ToolError: `no_match` (no occurrence), `ambiguous_match` (more than one, overlapping
            ones too, without `replace_all`), `invalid_argument` (empty `old`, or `new` the
            same as `old`).
    """
    if not old:
        raise ToolError(ErrorCode.INVALID_ARGUMENT, "old_text must not be empty.")
    if old == new:
        raise ToolError(
            ErrorCode.INVALID_ARGUMENT, "old_text and new_text are the same: nothing to do."
        )
    first = text.find(old)
    if first < 0:
        raise ToolError(
            ErrorCode.NO_MATCH,
            f"{subject} does not contain old_text (it must match exactly: whitespace, "
            "indentation and line ends included). Nothing was written. Read the file "
            "and copy the text as it is.",
        )
    if replace_all:
        return text.replace(old, new), text.count(old)
    second = text.find(old, first + 1)
    if second >= 0:
        count = text.count(old)
        many = "overlapping occurrences" if count < 2 else f"{count} occurrences"
        raise ToolError(
            ErrorCode.AMBIGUOUS_MATCH,
            f"{subject} holds old_text {many} (first at character {first}, next at "
            f"{second}). Nothing was written. Give more surrounding text so it matches "
            "once, or set replace_all=true to replace every one.",
        )
    return text[:first] + new + text[first + len(old) :], 1


def _crlf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def replaced_as_read(
    text: str, old: str, new: str, replace_all: bool, subject: str
) -> tuple[str, int]:
    """`replaced`, for `old` and `new` copied from a read that showed every line end as LF
    (deepagents' `read`), the text's own line ends kept.

    A text whose every line ends in CRLF has both matched and written with CRLF. Any other
    (LF, no line end at all, or mixed) takes deepagents' sandbox backend's rule: `old` as
    given, then with CRLF line ends, then with LF ones; the first that occurs is replaced by
    `new` written the same way. Old text spanning a CRLF line and an LF one matches none:
    `no_match`, saying the file mixes line ends.

    Raises:
        ToolError: as `replaced`.
    """
    if "\r\n" in text and "\n" not in text.replace("\r\n", ""):
        return replaced(text, _crlf(old), _crlf(new), replace_all, subject)
    for variant_old, variant_new in ((old, new), (_crlf(old), _crlf(new)), (_lf(old), _lf(new))):
        if variant_old and variant_old in text:
            return replaced(text, variant_old, variant_new, replace_all, subject)
    if "\r\n" in text and "\n" in old:
        raise ToolError(
            ErrorCode.NO_MATCH,
            f"{subject} does not contain old_string, and mixes CRLF and LF line ends: old "
            "text must lie within lines of one kind to match. Nothing was written. Give a "
            "shorter old_string (one line), or replace the file whole with write_file.",
        )
    return replaced(text, old, new, replace_all, subject)


def unified_diff(before: str, after: str, path: str) -> str:
    """The unified diff from `before` to `after` (3 lines of context; both headers name
    `path`), lines split at LF only; a last line without one is followed by
    `\\ No newline at end of file`, as `diff -u` writes it. Empty when they are equal."""
    out: list[str] = []
    lines = difflib.unified_diff(
        _LINE.findall(before), _LINE.findall(after), fromfile=path, tofile=path
    )
    for line in lines:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


@attrs.frozen
class Edited:
    """What an edit did (or, on a dry run, would do)."""

    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")
    replacements: int
    diff: str | None  # on a dry run only
    written: bool

    @property
    def sha256(self) -> str:
        """The new content's sha256."""
        return hashlib.sha256(self.data).hexdigest()


async def edit_file(
    sandbox: sandboxkit.Sandbox,
    path: str,
    subject: str,
    old: str,
    new: str,
    *,
    replace_all: bool = False,
    dry_run: bool = False,
    expected_sha256: str | None = None,
    expected_version: str | None = None,
    encoding: str = "utf-8",
    max_size: int,
    read_as_lf: bool = False,
) -> Edited:
    """Replace `old` by `new` in the text file at `path` (read whole, at most `max_size`
    bytes, as `encoding`), and upload the result unless `dry_run`. With `read_as_lf` (the
    model read the file with every line end shown as LF), `old` and `new` are matched and
    written in the file's own line ends (`replaced_as_read`); else exactly as given.

    Raises:
        ToolError: `not_found` (no such file), `too_large` (over `max_size`, before or
            after the edit), `invalid_argument` (not text in `encoding`; an empty or
            unchanged old text), `conflict` (not the version expected), `no_match`,
            `ambiguous_match`, or the upload's failure. Each before the upload but the last.
    """
    expected = check_sha256(expected_sha256)
    current = await read_current(sandbox, path, subject, max_size)
    if current.data is None:
        raise ToolError(ErrorCode.NOT_FOUND, f"{subject}: not found. Nothing was written.")
    if not current.whole:
        raise ToolError(
            ErrorCode.TOO_LARGE,
            f"{subject} is over the edit limit of {max_size} bytes. Nothing was written.",
        )
    expect(current, subject, expected, expected_version)
    try:
        text = current.data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ToolError(
            ErrorCode.INVALID_ARGUMENT,
            f"{subject} is not {encoding} text (byte {exc.start} does not decode). Nothing "
            "was written. Declare its encoding, or replace it whole with write_file.",
        ) from None
    replace = replaced_as_read if read_as_lf else replaced
    after, count = replace(text, old, new, replace_all, subject)
    try:
        data = after.encode(encoding)
    except UnicodeEncodeError:
        raise ToolError(
            ErrorCode.INVALID_ARGUMENT,
            f"new_text holds characters {encoding} cannot encode. Nothing was written.",
        ) from None
    if len(data) > max_size:
        raise ToolError(
            ErrorCode.TOO_LARGE,
            f"{subject} would be {len(data)} bytes after the edit, over the limit of "
            f"{max_size}. Nothing was written.",
        )
    if dry_run:
        return Edited(data, count, unified_diff(text, after, path), written=False)
    with about(subject):
        await sandbox.files.upload(path, data)
    return Edited(data, count, None, written=True)
