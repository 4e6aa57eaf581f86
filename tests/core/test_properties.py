"""Property tests: models round-trip, validators match the interface, resume is exact.

Hypothesis runs derandomized with a bounded number of examples, so CI is deterministic; a
failure prints the falsifying example (and `@reproduce_failure`) to replay.
"""

from __future__ import annotations

import asyncio
import enum
import random
import string
import types
import typing
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
import yarl
from aiohttp import web
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sandboxkit
from sandboxkit import models
from sandboxkit._core import protocol as proto
from sandboxkit._core import validation as check
from sandboxkit._core.convert import converter, make_converter, strict_converter
from sandboxkit.emulator import EmulatorResolver

BOUNDED = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# -- models ---------------------------------------------------------------------------------

JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8))
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
JSON_OBJECT = st.dictionaries(st.text(max_size=6), JSON, max_size=4)
AWARE = st.datetimes(
    min_value=datetime(1900, 1, 2),
    max_value=datetime(9000, 1, 1),
    timezones=st.builds(
        timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
    ).map(lambda tz: tz if tz.utcoffset(None) else UTC),
)


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """A strategy for one field's type, recursing into attrs classes."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is str:
        return st.text(max_size=10)
    if hint is int:
        return st.integers(-(2**40), 2**40)
    if hint is bool:
        return st.booleans()
    if hint is datetime:
        return AWARE
    if hint is Any:
        return JSON
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy_for(a) for a in args))
    if hint is type(None):
        return st.none()
    if origin is tuple:
        return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
    if origin is Mapping:
        return JSON_OBJECT
    if attrs.has(origin or hint):
        return model(hint)
    raise NotImplementedError(hint)


def model(cls: Any) -> st.SearchStrategy[Any]:
    """Instances of an attrs model (generic ones included), every field drawn."""
    base = typing.get_origin(cls) or cls
    hints = typing.get_type_hints(base)
    params = dict(zip(getattr(base, "__parameters__", ()), typing.get_args(cls), strict=False))
    fields = {}
    for field in attrs.fields(base):
        hint = hints[field.name]
        hint = params.get(hint, hint)
        if typing.get_origin(hint) is tuple and typing.get_args(hint)[0] in params:
            hint = tuple[params[typing.get_args(hint)[0]], ...]  # type: ignore[valid-type]
        fields[field.name] = strategy_for(hint)
    if base is models.CustomResources:
        # None means "leave it out of the request"; read back, the default applies.
        fields["architecture"] = st.text(max_size=8)
    return st.builds(base, **fields)


WIRE_MODELS = [
    cls
    for name in models.__all__
    if attrs.has(cls := getattr(models, name))
    # Results the SDK makes itself, never read off the wire.
    and cls
    not in (
        models.DownloadResult,
        models.UploadResult,
        models.FileRange,
        models.TextPage,
        models.Container,
        models.ContainersCreated,
        models.Page,
    )
] + [
    models.Page[models.Build],
    models.OAuthCodeExchange,
    models.ApiKeyRequest,
    models.ContainerSpec,
    models.ElasticIpAssociation,
]


@pytest.mark.parametrize("cls", WIRE_MODELS, ids=lambda c: getattr(c, "__name__", str(c)))
@pytest.mark.parametrize("conv", [converter, strict_converter], ids=["lenient", "strict"])
@BOUNDED
@given(data=st.data())
def test_models_round_trip_through_the_converter(data: Any, cls: Any, conv: Any) -> None:
    """Every wire model unstructures to JSON-able data that structures back to an equal
    value, with the lenient and the strict converter alike."""
    value = data.draw(model(cls))
    # Resources are read back through their union, which is what strips the `type` tag.
    target = models.Resources if cls in (models.CustomResources, models.PresetResources) else cls
    wire = conv.unstructure(value)
    assert conv.structure(wire, target) == value
    assert converter.structure(strict_converter.unstructure(value), target) == value


@pytest.mark.parametrize("cls", WIRE_MODELS, ids=lambda c: getattr(c, "__name__", str(c)))
@BOUNDED
@given(data=st.data())
def test_generated_decoders_agree_with_cattrs(data: Any, cls: Any) -> None:
    """The client's generated decoders (sandboxkit._core.record_decoder) give what cattrs's own
    functions give, on a converter as lenient as the client's (a record swapped for any JSON
    may have keys no model knows), for the same wire object, fields dropped, nulled or
    swapped for any JSON included: an equal value, or an error from both."""
    target = models.Resources if cls in (models.CustomResources, models.PresetResources) else cls
    wire = strict_converter.unstructure(data.draw(model(cls)))
    for key in sorted(wire):
        change = data.draw(st.sampled_from(["keep", "keep", "drop", "null", "any"]), label=key)
        if change == "drop":
            del wire[key]
        elif change != "keep":
            wire[key] = None if change == "null" else data.draw(JSON, label=f"{key} value")
    assert _decoded(converter, wire, target) == _decoded(CATTRS_LENIENT, wire, target)


CATTRS_LENIENT = make_converter(strict=False, generated=False)


def _decoded(conv: Any, wire: Any, target: Any) -> Any:
    try:
        return conv.structure(wire, target)
    except Exception:  # the strict converter groups errors; only "refused" is compared
        return "refused"


def test_nested_v1_records_keep_their_wire_names() -> None:
    """An Image's partition entries unstructure with the v1 names they were read with."""
    wire = {
        "id": "img",
        "DefaultPartitionTable": [
            {"fileSystem": "ext4", "mountPoint": "/", "name": "root", "size": "40G"}
        ],
    }
    for conv in (converter, strict_converter):
        image = conv.structure(wire, models.Image)
        assert conv.unstructure(image)["DefaultPartitionTable"] == wire["DefaultPartitionTable"]


@BOUNDED
@given(raw=JSON_OBJECT, kind=st.sampled_from([models.Container, models.ContainersCreated]))
def test_shapeless_records_keep_every_field(raw: dict[str, Any], kind: Any) -> None:
    """Container records (fields not shown) keep the whole wire object through a round trip."""
    value = converter.structure(raw, kind)
    assert converter.structure(converter.unstructure(value), kind) == value
    assert converter.unstructure(value) == raw


# -- query strings --------------------------------------------------------------------------

QUERY_TEXT = st.text(
    # URL syntax characters drawn often (Unicode at large rarely yields `#`); no lone
    # surrogates: validation refuses those first.
    alphabet=st.one_of(st.sampled_from("&=+#%?/; "), st.characters(blacklist_categories=["Cs"])),
    max_size=12,
)


@BOUNDED
@given(params=st.lists(st.tuples(QUERY_TEXT, QUERY_TEXT), max_size=4))
@example(params=[("a#b", "&=+#%?/; é"), ("", "x y"), ("p%2F", "100%")])  # always tried
def test_query_strings_reach_the_server_as_given(params: list[tuple[str, str]]) -> None:
    """What `query_string` writes and yarl (aiohttp's URL) then reads gives back every name
    and value exactly, `&`, `=`, `+`, `#`, `%`, spaces and non-ASCII included; and yarl's
    requoting leaves it as written, so aiohttp's path and the lean one send the same bytes."""
    written = proto.query_string(params)
    url = yarl.URL("http://127.0.0.1/p?" + written) if params else None
    assert url is None or list(url.query.items()) == params
    assert url is None or url.raw_query_string == written


def test_safe_segments_are_left_alone_and_others_quoted_whole() -> None:
    """The fast path returns unreserved ids as they are; anything else is quoted whole."""
    assert proto.segment("tpl-A.1_~") == "tpl-A.1_~"
    assert proto.segment("a/b c&d=e#f+g%") == "a%2Fb%20c%26d%3De%23f%2Bg%25"
    assert proto.query_string([("path", "/x y"), ("n", "1")]) == "path=/x%20y&n=1"
    assert proto.query_string([("a&b", "c=d+e#f%g;h")]) == "a%26b=c%3Dd%2Be%23f%25g%3Bh"


# -- validators against an oracle written from the interface ---------------------------------

NAME_CHARS = string.ascii_letters + string.digits + "_-"
ODD_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(NAME_CHARS + " ./\\\x00\t\n\x7f~!#%"),
        st.characters(min_codepoint=0, max_codepoint=0x10FFFF),
    ),
    max_size=70,
)
ANYTHING = st.one_of(
    ODD_TEXT,
    st.integers(-10, 70_000),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=True),
    st.binary(max_size=4),
)


def accepts(validator: Any, *args: Any) -> bool:
    """Whether `validator` accepts; anything but ValidationError is a bug and propagates."""
    try:
        validator(*args)
    except sandboxkit.ValidationError:
        return False
    return True


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def name_oracle(v: Any) -> bool:
    """Template name: 1-64 chars, pattern ^[A-Za-z0-9_-]+$."""
    return isinstance(v, str) and 1 <= len(v) <= 64 and all(c in NAME_CHARS for c in v)


def key_oracle(v: Any) -> bool:
    """Idempotency-Key: 1-64 printable ASCII characters, no whitespace."""
    return isinstance(v, str) and 1 <= len(v) <= 64 and all(33 <= ord(c) <= 126 for c in v)


def path_oracle(v: Any) -> bool:
    """Remote path: min length 1, absolute, no `.`/`..` segments, no NUL, and expressible in
    a URL (UTF-8: a lone surrogate is not)."""
    if not isinstance(v, str) or not v.startswith("/") or "\x00" in v:
        return False
    if any(s in (".", "..") for s in v.split("/")):
        return False
    return all(not 0xD800 <= ord(c) <= 0xDFFF for c in v)


@BOUNDED
@given(value=st.one_of(ANYTHING, st.from_regex(r"[A-Za-z0-9_-]{1,70}", fullmatch=True)))
@example(value="a" * 64)
@example(value="a" * 65)
@example(value="a b")
def test_template_names(value: Any) -> None:
    """check_template_name accepts exactly the interface's names."""
    assert accepts(check.check_template_name, value) == name_oracle(value), repr(value)


@BOUNDED
@given(
    value=st.one_of(
        ANYTHING, st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7F), max_size=70)
    )
)
@example(value="k" * 64)
@example(value="k" * 65)
@example(value="k\x7f")
@example(value="k y")
def test_idempotency_keys(value: Any) -> None:
    """check_idempotency_key accepts exactly 1-64 printable ASCII without whitespace."""
    assert accepts(check.check_idempotency_key, value) == key_oracle(value), repr(value)


SEGMENT = st.one_of(
    st.sampled_from(["", ".", "..", "...", "a", "home", "..a", ". ", "\x00", "%2e%2e"]), ODD_TEXT
)


@BOUNDED
@given(
    value=st.one_of(
        ANYTHING,
        st.lists(SEGMENT, min_size=1, max_size=5).map("/".join),
        st.lists(SEGMENT, max_size=5).map(lambda s: "/" + "/".join(s)),
    )
)
@example(value="/a/./b")
@example(value="/a/../b")
@example(value="/x\udc80")
def test_remote_paths(value: Any) -> None:
    """check_remote_path accepts exactly absolute paths without `.`, `..` or NUL."""
    assert accepts(check.check_remote_path, value) == path_oracle(value), repr(value)


LIMITS = {"cpu_count": 16, "memory_mb": 65536, "disk_size_mb": 65536}
RESOURCE_VALUE = st.one_of(
    st.integers(-2, 70_000),
    st.sampled_from([0, 1, 16, 17, 65536, 65537]),
    st.booleans(),
    st.floats(0, 20),
    st.text(max_size=2),
)


@BOUNDED
@given(cpu=RESOURCE_VALUE, memory=RESOURCE_VALUE, disk=RESOURCE_VALUE)
@example(cpu=16, memory=65536, disk=65536)
@example(cpu=17, memory=1, disk=1)
@example(cpu=1, memory=65537, disk=1)
@example(cpu=1, memory=1, disk=65537)
def test_custom_resources(cpu: Any, memory: Any, disk: Any) -> None:
    """check_resources accepts exactly positive integers within the custom limits."""
    values = {"cpu_count": cpu, "memory_mb": memory, "disk_size_mb": disk}
    resources = models.CustomResources(cpu, memory, disk)
    expected = all(is_int(v) and 0 < v <= LIMITS[k] for k, v in values.items())
    assert accepts(check.check_resources, resources) == expected, values


@BOUNDED
@given(value=st.one_of(ANYTHING, st.integers(-3, 200)))
@example(value=-1)
@example(value=0)
@example(value=1)
@example(value=100)
@example(value=101)
def test_paging_numbers(value: Any) -> None:
    """Page size and log limit 1-100, page >= 1, log offset >= 0: integers only."""
    assert accepts(check.check_page_size, value) == (is_int(value) and 1 <= value <= 100)
    assert accepts(check.check_log_limit, value) == (is_int(value) and 1 <= value <= 100)
    assert accepts(check.check_page, value) == (is_int(value) and value >= 1)
    assert accepts(check.check_log_offset, value) == (is_int(value) and value >= 0)


@BOUNDED
@given(
    value=st.one_of(
        ANYTHING, st.sampled_from(["debug", "info", "warn", "error", "WARN", "warning"])
    )
)
def test_log_levels(value: Any) -> None:
    """A log level filter is one of the four levels, or None for all."""
    expected = value is None or value in ("debug", "info", "warn", "error")
    assert accepts(check.check_log_level, value) == expected


@BOUNDED
@given(value=st.one_of(ANYTHING, st.text(max_size=300)))
@example(value="d" * 256)
@example(value="d" * 257)
def test_descriptions(value: Any) -> None:
    """A description is at most 256 characters (or absent)."""
    expected = value is None or (isinstance(value, str) and len(value) <= 256)
    assert accepts(check.check_description, value) == expected


# -- resume against a server that cuts and switches between 200 and 206 ----------------------

Step = tuple[str, float | None, bool, bool]  # kind, cut fraction, chunked, Accept-Ranges: bytes


class Flaky:
    """A data plane that answers by a plan: 200 or 206 (even unasked), cut at a fraction of
    the body or not, chunked or not; after the plan, honest answers."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.plan: list[Step] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        size = len(self.data)
        kind, cut, chunked, accept = (
            self.plan.pop(0) if self.plan else ("honest", None, False, True)
        )
        asked = request.headers.get("Range")
        start = int(asked[6:-1]) if asked else 0
        if asked and start >= size:
            return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
        partial = size > 0 and (kind == "206" or (kind == "honest" and asked is not None))
        if not partial:
            start = 0
        body = self.data[start:]
        response = web.StreamResponse(status=206 if partial else 200)
        response.headers["Accept-Ranges"] = "bytes" if accept or partial else "none"
        if partial:
            response.headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
        if chunked and not partial:
            response.enable_chunked_encoding()
        else:
            response.content_length = len(body)
        await response.prepare(request)
        stop = int(cut * len(body)) if cut is not None else len(body)
        if stop < len(body):
            await response.write(body[:stop])
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write(body)
        await response.write_eof()
        return response


STEP = st.tuples(
    st.sampled_from(["200", "206"]),
    st.one_of(st.none(), st.floats(0, 0.999)),
    st.booleans(),
    st.booleans(),
)


async def _run_all_sinks(data: bytes, plan: list[Step], tmp: Any) -> None:
    flaky = Flaky(data)
    app = web.Application()
    app.router.add_get("/files", flaky.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with sandboxkit.Client(
            api_key="k",
            base_url=f"http://127.0.0.1:{port}",
            data_plane_scheme="http",
            resolver=EmulatorResolver(),
            retry=sandboxkit.RetryPolicy.no_delay(len(plan) + 2),
        ) as client:
            sbx = client.sandbox(sandbox_key="s", domain=f"sandbox.test:{port}", access_token="t")
            flaky.plan = list(plan)
            result = await sbx.files.download("/f", tmp / "f.bin", chunk_size=4096)
            assert (tmp / "f.bin").read_bytes() == data and result.size == len(data)
            flaky.plan = list(plan)
            assert await sbx.files.read_bytes("/f", chunk_size=4096) == data
            flaky.plan = list(plan)
            streamed = bytearray()
            async with sbx.files.iter_bytes("/f", chunk_size=4096) as chunks:
                async for chunk in chunks:
                    streamed += chunk
            assert bytes(streamed) == data
    finally:
        await runner.cleanup()


@settings(BOUNDED, max_examples=30)
@given(
    size=st.one_of(st.integers(0, 5000), st.integers(5000, 300_000)),
    plan=st.lists(STEP, max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_resume_always_yields_exactly_the_original_bytes(
    size: int, plan: list[Step], seed: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Cut at arbitrary offsets, answered 200 or 206 (asked for or not), chunked or not,
    download, read_bytes and iter_bytes each end with exactly the original bytes."""
    data = random.Random(seed).randbytes(size)
    tmp = tmp_path_factory.mktemp("resume")
    asyncio.run(_run_all_sinks(data, plan, tmp))
