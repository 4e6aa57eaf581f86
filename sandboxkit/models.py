"""The service's records as frozen attrs classes.

They are dict classes (`slots=False`): a list answer builds them by the hundred, and attrs
gives a frozen dict class a plain `__init__` of dictionary stores, where a frozen slotted
class pays an `object.__setattr__` call per field: measured, a Build is built in 56% of the
instructions (a page of 5 Builds decodes in ~20% fewer), for ~110 more bytes per instance.

Forward compatible (docs/design.md section 8): enumerations whose full set the interface
does not show are plain `str` with the known values as constants, or (Build statuses) a
`StrEnum` of the known values typed `BuildStatus | str`, an unknown value kept as its string;
Build fields other than `id` are optional, and unknown fields are ignored by the converter in
`convert.py`, the only place that knows wire names and maps values to enum members.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs

__all__ = [
    "ActionResult",
    "ApiKey",
    "ArtifactState",
    "Build",
    "BuildFailure",
    "BuildResources",
    "BuildStatus",
    "BuildTrigger",
    "Container",
    "ContainersCreated",
    "CustomResources",
    "DownloadResult",
    "EnvVar",
    "FileEntry",
    "FileRange",
    "Image",
    "LogEntry",
    "LogLevel",
    "LogPage",
    "OAuthToken",
    "Organization",
    "Page",
    "PartitionEntry",
    "PresetResources",
    "Resources",
    "ShellResult",
    "TemplateCreated",
    "TemplateCredential",
    "TemplateStatus",
    "TextPage",
    "UploadResult",
    "V1Template",
]

T = TypeVar("T")


class BuildStatus(enum.StrEnum):
    """The Build statuses known so far: `waiting`, `building`, `ready`, `failed`.

    The full set is not shown, so a status field is typed `BuildStatus | str`: a known value
    is read as its member, any other is kept as the plain string the service sent. Members
    are strings, so `build.status == "ready"` holds for `BuildStatus.READY` too.
    """

    WAITING = "waiting"
    """Not started yet (split flow), or queued for a builder."""
    BUILDING = "building"
    """Running its commands."""
    READY = "ready"
    """Finished: the artifact is there."""
    FAILED = "failed"
    """Finished with a `failure`."""

    @property
    def is_final(self) -> bool:
        """Whether a Build in this status will not change any more (`ready` or `failed`)."""
        return self in _FINAL_STATUSES


_FINAL_STATUSES = frozenset({BuildStatus.READY, BuildStatus.FAILED})


class BuildTrigger:
    """Build trigger values seen so far."""

    INITIAL_BUILD = "initial_build"


class ArtifactState:
    """Build artifact states seen so far."""

    ABSENT = "absent"


class LogLevel:
    """The four log levels the interface lists."""

    DEBUG = "debug"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"
    ALL = ("debug", "info", "warn", "error")


# --- v2 control plane -----------------------------------------------------------------------


@attrs.frozen(slots=False)
class CustomResources:
    """Custom template resources: at most 16 vCPU, 65536 MiB memory, 65536 MiB boot disk."""

    cpu_count: int
    memory_mb: int
    disk_size_mb: int
    architecture: str | None = "x86_64"


@attrs.frozen(slots=False)
class PresetResources:
    """Preset template resources: a catalog SKU, used as configured."""

    product: str


Resources = CustomResources | PresetResources


@attrs.frozen(slots=False)
class TemplateCreated:
    """The result of `templates.create`.

    `replayed` is True when the service answered from an earlier request under the same
    `idempotency_key` (the `Idempotency-Replayed` header).
    """

    id: str
    build_id: str
    status: BuildStatus | str
    replayed: bool = False
    idempotency_key: str | None = None
    request_id: str | None = None


@attrs.frozen(slots=False)
class BuildResources:
    """Resources recorded on a Build."""

    cpu_count: int | None = None
    memory_mb: int | None = None
    disk_size_mb: int | None = None
    architecture: str | None = None


@attrs.frozen(slots=False)
class BuildFailure:
    """Why a Build failed, e.g. code `TemplateBuild.OutOfMemory`."""

    code: str | None = None
    message: str | None = None


@attrs.frozen(slots=False)
class Build:
    """One immutable build attempt of a Template."""

    id: str
    template_id: str | None = None
    trigger: str | None = None
    status: BuildStatus | str | None = None
    artifact_state: str | None = None
    source_type: str | None = None
    resources: BuildResources | None = None
    created_at: datetime | None = None
    source: Mapping[str, Any] | None = None
    product: str | None = None
    product_name: str | None = None
    commands: tuple[str, ...] = ()
    start_cmd: str | None = None
    failure: BuildFailure | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def is_finished(self) -> bool:
        """True once the Build has `finished_at` or a `failure` (the signals the interface
        shows), or a final status (`ready` or `failed`)."""
        return (
            self.finished_at is not None
            or self.failure is not None
            or self.status in _FINAL_STATUSES
        )


@attrs.frozen(slots=False)
class Page(Generic[T]):
    """One page of a v2 list."""

    items: tuple[T, ...]
    total: int
    page: int
    page_size: int
    request_id: str | None = None


@attrs.frozen(slots=False)
class LogEntry:
    """One Build log line."""

    offset: int
    level: str
    message: str
    timestamp: datetime | None = None


@attrs.frozen(slots=False)
class LogPage:
    """One page of Build logs."""

    entries: tuple[LogEntry, ...]
    next_offset: int
    has_more: bool


# --- data plane -----------------------------------------------------------------------------


@attrs.frozen(slots=False)
class FileEntry:
    """A file written by an upload."""

    path: str
    name: str
    type: str


@attrs.frozen(slots=False)
class DownloadResult:
    """What `files.download` wrote.

    `attempts` counts GET requests, every slice's included when the file came in parallel
    slices. `resumes` counts the GETs that continued bytes already held: on one stream every
    ranged GET; in slices, a slice's GET that asks from past the slice's first byte (after
    a cut) or continues a range a dead process's partial file held (a slice's first GET is
    ranged but no resume). `sha256` is the hex digest of the whole file as written (None with
    `checksum=False`); `elapsed` is in seconds.
    """

    path: Path
    size: int
    sha256: str | None
    attempts: int
    resumes: int
    elapsed: float = attrs.field(repr=lambda seconds: f"{seconds:.3f}")  # seconds, shown rounded


@attrs.frozen(slots=False)
class UploadResult:
    """What `files.upload` wrote: the file the service reports (`path`, `name`, `type`, the
    fields of the `FileEntry` upload returned before), and how it went.

    Attributes:
        path: the file's path in the sandbox, as the service reports it.
        name: its base name.
        type: what the service calls it (`file`).
        size: the bytes sent (the body of the POST that succeeded).
        attempts: the POSTs sent, the one that succeeded included: a retry sends the whole
            file again (an upload never resumes).
        elapsed: seconds, from the call to the service's answer.
    """

    path: str
    name: str
    type: str
    size: int
    attempts: int
    elapsed: float = attrs.field(repr=lambda seconds: f"{seconds:.3f}")  # shown rounded


# The records of bounded reads (`files.read_range`, `files.read_text`). Offsets are byte
# offsets in the remote file: a reader pages by passing `next_offset` as the next call's
# `offset` until `eof`, so no byte is read twice and none is skipped, and a text page never
# ends inside a character.


@attrs.frozen
class FileRange:
    """Part of a remote file: `data` starts at byte `offset`.

    Attributes:
        data: the bytes read; shorter than asked only at the end of the file (empty when
            `offset` is at or past it).
        offset: the byte offset of `data[0]` in the file, as asked.
        size: the file's size in bytes where an answer showed it (a 206's `Content-Range`
            total, a 416's `bytes */N`, a 200's `Content-Length`), else None.
        eof: `data` reaches the end of the file.
        etag: the ETag of the answer the bytes came from, where the data center sent one
            (it names this version of the file: compare it with a later read's to tell a
            change), else None.
        last_modified: that answer's Last-Modified, where sent, else None.
    """

    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")
    offset: int
    size: int | None
    eof: bool
    etag: str | None = None
    last_modified: str | None = None

    @property
    def next_offset(self) -> int:
        """Where the next range starts: `offset + len(data)`."""
        return self.offset + len(self.data)


@attrs.frozen
class TextPage:
    """Whole characters of a remote file, decoded.

    Attributes:
        text: the characters of the page.
        offset: the byte offset where `text` starts (past the asked offset when that fell
            inside a UTF-8 character: see `files.read_text`).
        next_offset: the byte offset just past the last whole character in `text`: where
            the next page starts (the bytes of a character the page's end cut are its).
        size: the file's size in bytes where an answer showed it, else None.
        eof: `next_offset` is the end of the file.
        etag: the ETag of the answer the bytes came from, where the data center sent one,
            else None (as `FileRange.etag`).
        last_modified: that answer's Last-Modified, where sent, else None.
    """

    text: str
    offset: int
    next_offset: int
    size: int | None
    eof: bool
    etag: str | None = None
    last_modified: str | None = None


# --- v1 -------------------------------------------------------------------------------------


class TemplateStatus:
    """v1 Template statuses the interface lists; others may appear, so statuses stay `str`."""

    DRAFT = "draft"
    PUBLISHED = "published"
    UNPUBLISHED = "unpublished"


@attrs.frozen(slots=False)
class PartitionEntry:
    """One entry of an Image's default partition table."""

    file_system: str | None = None
    mount_point: str | None = None
    name: str | None = None
    size: str | None = None


@attrs.frozen(slots=False)
class Image:
    """An OS image (v1). `boot_mode` and `type` stay `str`: their sets may grow."""

    id: str
    name: str | None = None
    supported_products: tuple[str, ...] = ()
    boot_mode: str | None = None
    default_partition_table: tuple[PartitionEntry, ...] = ()
    os_architecture: str | None = None
    os_series: str | None = None
    os_version: str | None = None
    system_disk_size: str | None = None
    icon: str | None = None
    path: str | None = None
    idc: str | None = None
    org_id: str | None = None
    created_at: datetime | None = None
    type: str | None = None


@attrs.frozen(slots=False)
class TemplateCredential:
    """Credentials of a v1 Template; the secret never shows in a repr."""

    secret: str = attrs.field(default="", repr=False)
    username: str = ""


@attrs.frozen(slots=False)
class V1Template:
    """A catalog Template (v1). `status` is `draft`, `published` or `unpublished` so far."""

    id: str
    official: bool | None = None
    name: str | None = None
    path: str | None = None
    org_id: str | None = None
    credential: TemplateCredential | None = None
    description: str = ""
    status: str | None = None


@attrs.frozen(slots=False)
class Organization:
    """An organization (v1)."""

    name: str


@attrs.frozen(slots=False)
class ApiKey:
    """A freshly created API key. The service shows it once; it never shows in a repr."""

    key: str = attrs.field(repr=False)


@attrs.frozen(slots=False)
class OAuthToken:
    """The access token from an OAuth code exchange; never shown in a repr."""

    access_token: str = attrs.field(repr=False)


@attrs.frozen(slots=False)
class ActionResult:
    """The `result` of a v1 infrastructure action."""

    result: str


@attrs.frozen(slots=False)
class ShellResult:
    """Where to open a container shell."""

    url_path: str


@attrs.frozen(slots=False)
class EnvVar:
    """An environment entry of a container create request."""

    name: str
    value: str = attrs.field(repr=False)


@attrs.frozen(slots=False)
class Container:
    """A container record (v1).

    The interface shows none of its fields, so the whole record is kept in `raw`; `id` and
    `status` are lifted out of it when the record carries them as strings.
    """

    id: str | None = None
    status: str | None = None
    raw: Mapping[str, Any] = attrs.field(factory=dict, repr=False)


@attrs.frozen(slots=False)
class ContainersCreated:
    """What a container create answered.

    The interface does not show this body, so it is read leniently: `ids` are the new
    containers' ids where the answer names them (an `ids` array, an `id`, or records with an
    `id`), `result` its `result` string if any, and `raw` the whole answer.
    """

    ids: tuple[str, ...] = ()
    result: str | None = None
    raw: Any = attrs.field(default=None, repr=False)


# --- v1 request bodies ----------------------------------------------------------------------
# Built by the resources from keyword arguments and named on the wire by the converter; they
# are not part of the public API, hence absent from `__all__`.


@attrs.frozen(slots=False)
class OAuthCodeExchange:
    """Body of the OAuth code exchange."""

    provider: str
    code: str = attrs.field(repr=False)


@attrs.frozen(slots=False)
class ApiKeyRequest:
    """Body of an API key creation; `expires_at` is UNIX seconds, None for no expiry."""

    name: str
    scope: str
    expires_at: int | None = None


@attrs.frozen(slots=False)
class ContainerSpec:
    """Body of a container create request (the quick-start shape)."""

    name: str
    template_id: str
    count: int
    product: str
    idc: str
    envs: tuple[EnvVar, ...] = ()


@attrs.frozen(slots=False)
class ElasticIpAssociation:
    """Body of an elastic IP association: the instance to attach it to."""

    instance_id: str
