"""What the framework adapters share: each imports its own framework, and only when it is
imported; `import sandboxkit.agents` imports none."""

from __future__ import annotations

import ast
import copy
import subprocess
import sys
from typing import Any

import pytest

import sandboxkit
from sandboxkit.agents import ErrorCode, ToolError
from sandboxkit.agents._adapter import Answer, answer, arguments_from_json
from sandboxkit.emulator import Emulator

from ..agents_adapters_support import stage

# Each adapter module and the top-level packages of its framework.
FRAMEWORKS = {
    "openai_agents": ("agents", "openai"),
    "langchain": ("langchain_core", "langsmith"),
    "pydantic_ai": ("pydantic_ai", "pydantic_graph"),
}
EVERY = sorted({name for names in FRAMEWORKS.values() for name in names} | {"pydantic"})

_LOADED = """
import sys
{imports}
frameworks = {every!r}
print(sorted(m for m in sys.modules if m.split(".")[0] in frameworks))
"""


def loaded(*imports: str) -> list[str]:
    """The framework packages in `sys.modules` of a fresh interpreter after `imports`."""
    code = _LOADED.format(imports="\n".join(imports), every=EVERY)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return sorted({name.split(".")[0] for name in ast.literal_eval(done.stdout)})


def test_import_sandboxkit_agents_imports_no_framework() -> None:
    """`import sandboxkit.agents` (and making a Toolkit's names) loads no agent framework."""
    assert loaded("import sandboxkit.agents", "from sandboxkit.agents import Toolkit") == []


@pytest.mark.parametrize("adapter", list(FRAMEWORKS))
def test_each_adapter_imports_its_own_framework_only(adapter: str) -> None:
    """Importing one adapter loads its framework and none of the others'."""
    got = set(loaded(f"import sandboxkit.agents.{adapter}"))
    assert set(FRAMEWORKS[adapter][:1]) <= got
    others = {n for a, names in FRAMEWORKS.items() if a != adapter for n in names[:1]}
    assert not got & others, got


@pytest.mark.parametrize(
    ("text", "expected"),
    [('{"a": 1}', {"a": 1}), ("", None), ("  ", None), ("[1]", [1]), ("null", None)],
)
def test_arguments_from_json(text: str, expected: object) -> None:
    """A model's JSON text is parsed as it is; empty text stands for no arguments."""
    assert arguments_from_json(text) == expected


@pytest.mark.parametrize("text", ["{nope", "[" * 100_000, "\ud800"])
def test_arguments_that_are_no_json_are_invalid_argument(text: str) -> None:
    """Text that is not JSON (cut, nested past the parser's depth) is `invalid_argument`."""
    with pytest.raises(ToolError) as caught:
        arguments_from_json(text)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_an_answer_is_compact_json_keeping_characters() -> None:
    """The text a model is shown: compact JSON, non-ASCII as it is; an error under "error"."""
    assert Answer({"content": "héllo"}, failed=False).text == '{"content":"héllo"}'
    failed = Answer.of_error(ToolError(ErrorCode.NOT_FOUND, "gone"))
    assert failed.failed
    assert failed.text == '{"error":{"code":"not_found","message":"gone","retryable":false}}'


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"sandbox": "dev", "remote": "a", "content": "x", "z\ud800": 1}, "Argument z\\ud800:"),
        ({"sandbox": "dev", "remote": "a", "content": "x", "k" * 10_000: 1}, "Argument kkk"),
        ([1, 2], "The arguments: must be an object"),
    ],
)
async def test_a_hostile_argument_name_is_quoted_sendable_and_short(
    emulator: Emulator, emulator_client: sandboxkit.Client, arguments: Any, said: str
) -> None:
    """An unknown argument's name comes back escaped (a lone surrogate is no UTF-8, which a
    framework would fail to send) and cut short; no arguments object is "The arguments"."""
    scene = await stage(emulator, emulator_client)
    done = await answer(scene.kit, "write_file", arguments)
    assert done.failed and done.content["error"]["code"] == "invalid_argument"
    assert done.text.encode("utf-8") and len(done.text) < 400, done.text
    assert done.content["error"]["message"].startswith(said), done.content


async def test_a_framework_changing_a_schema_it_was_given_changes_no_tool(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Each adapter gives its framework a copy of every schema: changing it (as a schema
    transformer may) leaves what `Toolkit.call` checks as it was."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from sandboxkit.agents import langchain, openai_agents, pydantic_ai

    scene = await stage(emulator, emulator_client)
    before = [copy.deepcopy(dict(tool.input_schema)) for tool in scene.kit.tools]
    shown: list[Any] = [t.params_json_schema for t in openai_agents.function_tools(scene.kit)]
    shown += [t.args_schema for t in langchain.tools(scene.kit)]

    def respond(messages: Any, info: AgentInfo) -> ModelResponse:
        shown.extend(d.parameters_json_schema for d in info.function_tools)
        return ModelResponse(parts=[TextPart("ok")])

    await Agent(FunctionModel(respond), toolsets=[pydantic_ai.toolset(scene.kit)]).run("hi")
    assert len(shown) == 3 * len(before)
    for schema in shown:
        schema["properties"].clear()
        schema["required"].append("nothing")
    assert [dict(tool.input_schema) for tool in scene.kit.tools] == before
