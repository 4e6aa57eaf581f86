"""The public stream type and a discoverable Client (issue 16): `sandboxkit.AsyncStream` is
what streams return, and help() shows `templates`, `v1` and `Sandbox.files`."""

from __future__ import annotations

import inspect
import pydoc
import re
import typing

import pytest

import sandboxkit
from sandboxkit.emulator import Emulator
from sandboxkit.resources.files import Files
from sandboxkit.resources.templates import BuildPager, Templates

from ..files_support import Box

# -- the public stream type -----------------------------------------------------------------


async def test_streams_are_the_public_async_stream(
    emulator: Emulator, emulator_client: sandboxkit.Client, box: Box
) -> None:
    """iter_bytes and build_logs return sandboxkit.AsyncStream, which closes with `async with`,
    and their annotations and docstrings name it."""
    assert "AsyncStream" in sandboxkit.__all__
    box.put("/home/user/f.txt", b"abc" * 1000)
    async with box.files.iter_bytes("/home/user/f.txt", chunk_size=1000) as chunks:
        assert isinstance(chunks, sandboxkit.AsyncStream)
        assert b"".join([c async for c in chunks]) == b"abc" * 1000
    resources = sandboxkit.CustomResources(cpu_count=1, memory_mb=512, disk_size_mb=1024)
    created = await emulator_client.templates.create(
        name="logs", resources=resources, build={"commands": ["make"]}
    )
    logs = emulator_client.templates.build_logs(created.id, created.build_id)
    assert isinstance(logs, sandboxkit.AsyncStream)
    await logs.aclose()
    pager = emulator_client.templates.builds(created.id)
    assert isinstance(pager.pages(), sandboxkit.AsyncStream)
    for method, item in ((Files.iter_bytes, bytes), (Templates.build_logs, sandboxkit.LogEntry)):
        hints = typing.get_type_hints(method)
        assert hints["return"] == sandboxkit.AsyncStream[item]  # type: ignore[index]
        assert "sandboxkit.AsyncStream" in (method.__doc__ or "")
    assert typing.get_type_hints(BuildPager.pages)["return"].__origin__ is sandboxkit.AsyncStream


# -- discoverable attributes ----------------------------------------------------------------


def test_help_shows_templates_v1_and_files() -> None:
    """help(sandboxkit.Client) lists `templates` and `v1` with what they hold, and
    help(sandboxkit.Sandbox) lists `files`."""
    client_doc = pydoc.render_doc(sandboxkit.Client, renderer=pydoc.plaintext)
    assert "\n |  templates\n |      The v2 control plane" in client_doc
    assert "wait_for_build" in client_doc
    assert "\n |  v1\n |      The v1 operations" in client_doc
    sandbox_doc = pydoc.render_doc(sandboxkit.Sandbox, renderer=pydoc.plaintext)
    assert "\n |  files\n |      This sandbox's files" in sandbox_doc


async def test_documented_attributes_still_reach_their_resources(
    emulator: Emulator, emulator_client: sandboxkit.Client, box: Box
) -> None:
    """client.templates, client.v1 and sandbox.files are the same objects on every read,
    and work."""
    assert emulator_client.templates is emulator_client.templates
    assert emulator_client.v1 is emulator_client.v1
    assert box.handle.files is box.handle.files
    await box.handle.files.upload("/home/user/x", b"x")
    assert await box.handle.files.read_bytes("/home/user/x") == b"x"
    assert len(await emulator_client.v1.list_templates()) == len(emulator.v1_template_ids)


def test_a_plain_with_says_to_use_async_with_or_the_sync_client() -> None:
    """Python's own error ("does not support the context manager protocol") named neither."""
    client = sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:9")
    with pytest.raises(TypeError) as caught, client:  # type: ignore[misc]  # the mistake
        raise AssertionError("a plain with must not enter")
    assert "async with sandboxkit.Client()" in str(caught.value)
    assert "sandboxkit.sync.Client()" in str(caught.value)


def test_help_and_dir_show_what_a_user_calls() -> None:
    """help(sync.Client) names its options and shows its members as methods with their real
    parameters; help(Sandbox) says how to get one; dir(sandboxkit.sync) lists no typing
    helpers (`A`, `F`, `P`, `R`, `T`)."""
    from sandboxkit import sync

    shown = pydoc.render_doc(sync.Client, renderer=pydoc.plaintext)
    assert "Unpack" not in shown and "_Member" not in shown and "object at 0x" not in shown
    # The constructor's signature heads the page: on one line before 3.13, one option a line
    # from 3.13 on. Either way every option is there by name with its type and default.
    head = shown[shown.index("\n |  Client(") : shown.index("The blocking client")]
    assert re.match(r"\n \|  Client\(\s*(\|\s*)?\*,", head), head  # keyword-only
    key = "'str | Callable[[], str] | Callable[[], Awaitable[str]] | None'"
    assert f"api_key: {key} = None" in head
    for option in inspect.signature(sandboxkit.Client).parameters.values():
        assert str(option) in head
    assert "sandbox_from_response(self, body: 'Mapping[str, Any]') -> 'Sandbox'" in shown
    # The members are the sync class's own, not the async class's they wrap (3.13's help()
    # would say "from sandboxkit.client.Client"), under the name they are called by.
    assert " from sandboxkit." not in shown
    assert "\n |  close(self) -> 'None'" in pydoc.render_doc(sync.Sandbox, renderer=pydoc.plaintext)
    for facade in {sync.Client, *sync._FACADES.values()}:
        for name, member in vars(facade).items():
            if isinstance(member, sync._Member):
                method = getattr(facade, name)
                where = (method.__module__, method.__qualname__)
                assert where == ("sandboxkit.sync", f"{facade.__qualname__}.{name}")
    assert "client.sandbox_from_response(answer)" in pydoc.render_doc(
        sandboxkit.Sandbox, renderer=pydoc.plaintext
    )
    assert set(dir(sync)) == set(sync.__all__)
    assert not {"A", "F", "P", "R", "T"} & set(dir(sync))
