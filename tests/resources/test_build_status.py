"""The typed BuildStatus: known statuses as members, unknown ones kept as strings, by the
client's generated decoders and the strict converter alike, over loopback."""

from __future__ import annotations

import linecache
import re

import pytest

import sandboxkit
from sandboxkit import BuildStatus
from sandboxkit._core.convert import converter, strict_converter, unstructure
from sandboxkit.emulator import Emulator, ManualClock

from ..conftest import ScriptServer, answer

BUILD = {"source": {"image": "ubuntu:22.04"}, "commands": ["make"]}
RESOURCES = sandboxkit.CustomResources(cpu_count=1, memory_mb=512, disk_size_mb=1024)
Created = sandboxkit.TemplateCreated


async def test_statuses_read_from_the_emulator_are_build_status_members(
    clocked_emulator: Emulator, manual_clock: ManualClock
) -> None:
    """Every status the emulator moves a build through (waiting, building, ready, and
    failed) is read as its BuildStatus member, the create answer's too."""
    async with clocked_emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        created = await client.templates.create(name="s", resources=RESOURCES, build=BUILD)
        assert created.status is BuildStatus.WAITING
        clocked_emulator.fail_next_build()
        failing = await client.templates.create(name="f", resources=RESOURCES, build=BUILD)
        seen = []
        for step in (0.0, 0.5, 0.5):  # builds take 1 s of the emulator's clock
            manual_clock.advance(step)
            build = await client.templates.get_build(created.id, created.build_id)
            assert build is not None
            seen.append(build.status)
        failed = await client.templates.get_build(failing.id, failing.build_id)
    assert seen == [BuildStatus.WAITING, BuildStatus.BUILDING, BuildStatus.READY]
    assert failed is not None and failed.status is BuildStatus.FAILED
    assert all(type(status) is BuildStatus for status in seen)


async def test_unknown_statuses_stay_strings_through_the_generated_decoder(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """A page read by the client (generated decoders) maps known statuses to members and
    keeps unknown ones, numbers made text, as plain strings; the strict converter agrees,
    and both write the plain strings back."""
    items = [
        {"id": "a", "status": "ready"},
        {"id": "b", "status": "paused-for-audit"},
        {"id": "c", "status": 7},
        {"id": "d", "status": None},
        {"id": "e"},
        {"id": "f", "status": "failed"},
    ]
    page = {"total": 6, "page": 1, "page_size": 20, "items": items}
    script_server.on("GET", "/api/v2/templates/t/builds", answer(page))
    builds = [b async for b in script_client.templates.builds("t")]
    statuses = [b.status for b in builds]
    assert statuses == ["ready", "paused-for-audit", "7", None, None, "failed"]
    assert [type(s).__name__ for s in statuses] == [
        "BuildStatus",
        "str",
        "str",
        "NoneType",
        "NoneType",
        "BuildStatus",
    ]
    strict = strict_converter.structure(page, sandboxkit.Page[sandboxkit.Build])
    assert [(type(b.status), b.status) for b in strict.items] == [(type(s), s) for s in statuses]
    wire = [unstructure(b).get("status") for b in builds]
    assert wire == ["ready", "paused-for-audit", "7", None, None, "failed"]
    assert type(unstructure(builds[0])["status"]) is str
    assert [b.is_finished for b in builds] == [True, False, False, False, False, True]


def test_status_fields_refuse_objects_and_template_created_is_typed_too() -> None:
    """An object where a status belongs is refused by both converters, not kept as its
    repr; TemplateCreated's status is read the same way."""
    with pytest.raises(TypeError, match="expected a string"):
        converter.structure({"id": "b", "status": {"x": 1}}, sandboxkit.Build)
    with pytest.raises(ExceptionGroup) as grouped:  # the strict converter's detailed errors
        strict_converter.structure({"id": "b", "status": ["x"]}, sandboxkit.Build)
    assert [str(e) for e in grouped.value.exceptions] == ["expected a string, got list"]
    for conv in (converter, strict_converter):
        created = conv.structure({"id": "t", "build_id": "b", "status": "building"}, Created)
        assert created.status is BuildStatus.BUILDING
        odd = conv.structure({"id": "t", "build_id": "b", "status": "queued"}, Created)
        assert type(odd.status) is str and odd.status == "queued"


def test_generated_decoders_look_known_statuses_up_inline() -> None:
    """The client's generated decoders for Build and TemplateCreated map a plain string
    status with the converter's own table, inline, rather than call its hook per Build."""
    converter.structure({"id": "t", "build_id": "b", "status": "ready"}, Created)
    converter.structure({"id": "b", "status": "ready"}, sandboxkit.Build)
    for model in ("Build", "TemplateCreated"):
        source = "".join(
            linecache.getlines(f"<sandboxkit record decoder sandboxkit.models.{model}>")
        )
        assert re.search(r"v(\d+) = \(m\1\.get\(v\1, v\1\) if type\(v\1\) is str", source), model


def test_build_status_is_a_string_enum_of_the_emulator_states() -> None:
    """BuildStatus is exported, its members are the four emulator states and compare equal
    to their strings; ready and failed are final."""
    assert "BuildStatus" in sandboxkit.__all__
    assert [s.value for s in BuildStatus] == ["waiting", "building", "ready", "failed"]
    assert BuildStatus.READY == "ready" and f"{BuildStatus.FAILED}" == "failed"
    assert [s.is_final for s in BuildStatus] == [False, False, True, True]
