"""The README stays true: its commands are the CI's, and its emulator example runs."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sandboxkit

from .standalone_support import Standalone

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run calls exactly the README's test command, and the README names the demo."""
    assert "make test" in README and "make demo" in README
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_python_block_compiles() -> None:
    """Each Python example in the README is valid Python."""
    blocks = python_blocks()
    assert len(blocks) >= 5
    for block in blocks:
        compile(block, "README.md", "exec")


def test_emulator_example_passes_as_a_users_test(tmp_path: Path) -> None:
    """The README's pytest example passes, through the plugin, when a user runs it as their
    own test file with the README's pyproject settings."""
    [example] = [b for b in python_blocks() if "def test_" in b]
    (tmp_path / "test_users_code.py").write_text(example)
    [toml] = [b for b in re.findall(r"```toml\n(.*?)```", README, flags=re.DOTALL) if "pytest" in b]
    (tmp_path / "pyproject.toml").write_text(toml)  # the README's own settings
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_a_newcomer_pastes_the_first_block_against_the_standalone_emulator(
    tmp_path: Path,
) -> None:
    """The newcomer's path: start `sandboxkit emulator`, take the exports it prints, save the
    README's first block as a file and run it with `python -X dev -W error`: it exits 0 with
    nothing on stderr (no warning, no unclosed resource), having printed the build's logs."""
    [first, *_] = python_blocks()
    assert "asyncio.run(" in first and 'if __name__ == "__main__":' in first
    script = tmp_path / "quick_start.py"
    script.write_text(first)
    emulator = Standalone()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXKIT_")}
        done = subprocess.run(
            [sys.executable, "-X", "dev", "-W", "error", str(script)],
            cwd=tmp_path,
            env={**env, **emulator.exports},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        emulator.stop()
    # Not even dev mode's slow-callback note: nothing is imported inside the running loop.
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    assert "ready" in done.stdout or "info" in done.stdout  # the logs and builds were printed


def test_every_python_block_type_checks_under_mypy_strict(tmp_path: Path) -> None:
    """Each block, saved as its own module, passes `mypy --strict` (as a user's CI would)."""
    files = []
    for number, block in enumerate(python_blocks()):
        files.append(tmp_path / f"readme_block_{number}.py")
        files[-1].write_text(block)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache")]
        + [str(f) for f in files],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# Every other Python block runs too: the "fixture" around it is an emulator whose variables
# are exported (a plain `sandboxkit.Client()` reaches it), `import sandboxkit` as in the
# quick start, and a call of the block's function with what it needs. Keyed by a line the
# block contains; a new block without a driver fails `test_every_python_block_is_run`.
DRIVERS: dict[str, tuple[str, str]] = {
    "async def grep_log": (
        "",
        """
body = portal.call(emu.create_sandbox)
log = "".join(f"line {i} {'ERROR é' if i % 1000 == 0 else 'ok'}\\n" for i in range(30_000))
(emu.sandbox_root(body["data"]["sandbox_key"]) / "home/user/app.log").write_text(log)

async def drive():
    async with sandboxkit.Client() as client:
        sbx = client.sandbox_from_response(body)
        return await namespace["grep_log"](sbx, "/home/user/app.log", "ERROR")

found = asyncio.run(drive())
assert found == [f"line {i} ERROR é" for i in range(0, 30_000, 1000)], found
""",
    ),
    "async def run_tool_calls": (
        "",
        """
import json
body = portal.call(emu.create_sandbox)
calls = [
    ("write_file", json.dumps({"sandbox": "dev", "remote": "notes.txt", "content": "hi"})),
    ("read_file", json.dumps({"sandbox": "dev", "remote": "notes.txt"})),
    ("read_file", json.dumps({"sandbox": "dev", "remote": "../../etc/passwd"})),
]

async def drive():
    async with sandboxkit.Client() as client:
        return await namespace["run_tool_calls"](client, body, calls)

written, read, refused = asyncio.run(drive())
assert read["content"] == "hi", read
assert refused["error"]["code"] == "invalid_path" and not refused["error"]["retryable"], refused
token = body["data"]["sandbox_access_token"]
assert token not in json.dumps([written, read, refused])
""",
    ),
    "async def run_deep_agent": (
        "",
        """
from typing import Any
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

class Scripted(GenericFakeChatModel):  # answers from a script; binds no tools
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

def call(name, **args):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": name}])

body = portal.call(emu.create_sandbox)
model = Scripted(messages=iter([
    call("write_file", file_path="/home/user/plan.md", content="1. read\\n2. write\\n"),
    call("edit_file", file_path="/home/user/plan.md", old_string="write", new_string="ship"),
    call("read_file", file_path="/etc/shadow"),
    "done",
]))

async def drive():
    # create_deep_agent builds its graph synchronously (~0.15 s here, inside the block's
    # coroutine), which -X dev's slow-callback warning would report: deepagents' own cost.
    asyncio.get_running_loop().slow_callback_duration = 2.0
    async with sandboxkit.Client() as client:
        return await namespace["run_deep_agent"](client, body, model, "plan it")

assert asyncio.run(drive()) == "done"
root = emu.sandbox_root(body["data"]["sandbox_key"])
assert (root / "home/user/plan.md").read_bytes() == b"1. read\\n2. ship\\n"
""",
    ),
    # The three adapters' blocks, each driven by its framework's own scripted model: the
    # model writes a file, reads it back and asks for a path outside the root.
    "async def ask_openai_agent": (
        "",
        """
import json
from agents import Model, ModelResponse, Usage, set_tracing_disabled
from openai.types.responses import (
    ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
)
from sandboxkit.agents import Toolkit

set_tracing_disabled(True)  # no trace exporter reaching for the network
STEPS = [
    ("write_file", {"sandbox": "dev", "remote": "hi.txt", "content": "hi", "encoding": None}),
    ("read_file", {"sandbox": "dev", "remote": "hi.txt", "offset": None, "length": None,
                   "encoding": None}),
    ("read_file", {"sandbox": "dev", "remote": "../../etc/passwd", "offset": None,
                   "length": None, "encoding": None}),
]

class Scripted(Model):
    def __init__(self):
        self.inputs = []

    async def get_response(self, system_instructions, input, *args, **kwargs):
        self.inputs.append(input)
        turn = len(self.inputs) - 1
        if turn < len(STEPS):
            name, arguments = STEPS[turn]
            item = ResponseFunctionToolCall(
                id=f"fc{turn}", call_id=f"c{turn}", type="function_call", name=name,
                arguments=json.dumps(arguments),
            )
        else:
            text = ResponseOutputText(text="done", type="output_text", annotations=[])
            item = ResponseOutputMessage(
                id="m", type="message", role="assistant", status="completed", content=[text]
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError

body = portal.call(emu.create_sandbox)
model = Scripted()

async def drive():
    async with sandboxkit.Client() as client:
        kit = Toolkit(client, {"dev": client.sandbox_from_response(body)})
        return await namespace["ask_openai_agent"](kit, model, "write hi.txt")

assert asyncio.run(drive()) == "done"
root = emu.sandbox_root(body["data"]["sandbox_key"])
assert (root / "home/user/hi.txt").read_bytes() == b"hi"
outputs = [
    json.loads(i["output"]) for i in model.inputs[-1] if i.get("type") == "function_call_output"
]
assert outputs[1]["content"] == "hi", outputs
assert outputs[2]["error"]["code"] == "invalid_path", outputs
assert body["data"]["sandbox_access_token"] not in json.dumps(model.inputs, default=str)
""",
    ),
    "async def ask_langchain_model": (
        "",
        """
import json
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from sandboxkit.agents import Toolkit

STEPS = [
    ("write_file", {"sandbox": "dev", "remote": "hi.txt", "content": "hi"}),
    ("read_file", {"sandbox": "dev", "remote": "hi.txt"}),
    ("read_file", {"sandbox": "dev", "remote": "../../etc/passwd"}),
]

class Scripted(BaseChatModel):
    turns: int = 0

    @property
    def _llm_type(self):
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.turns += 1
        if self.turns <= len(STEPS):
            name, args = STEPS[self.turns - 1]
            call = {"name": name, "args": args, "id": f"c{self.turns}", "type": "tool_call"}
            reply = AIMessage(content="", tool_calls=[call])
        else:
            reply = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=reply)])

body = portal.call(emu.create_sandbox)

async def drive():
    async with sandboxkit.Client() as client:
        kit = Toolkit(client, {"dev": client.sandbox_from_response(body)})
        return await namespace["ask_langchain_model"](kit, Scripted(), "write hi.txt")

messages = asyncio.run(drive())
assert messages[-1].content == "done"
root = emu.sandbox_root(body["data"]["sandbox_key"])
assert (root / "home/user/hi.txt").read_bytes() == b"hi"
answers = [m for m in messages if isinstance(m, ToolMessage)]
assert [m.status for m in answers] == ["success", "success", "error"], answers
assert json.loads(answers[1].content)["content"] == "hi"
assert json.loads(answers[2].content)["error"]["code"] == "invalid_path"
""",
    ),
    "async def ask_pydantic_agent": (
        "",
        """
import json

# Pydantic AI loads its price table (genai_prices.data, about 0.2 s) on an agent's first run,
# inside the loop: loaded first, as an application would at start, or dev mode notes a slow
# step.
import genai_prices.data
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from sandboxkit.agents import Toolkit

STEPS = [
    ("write_file", {"sandbox": "dev", "remote": "hi.txt", "content": "hi"}),
    ("read_file", {"sandbox": "dev", "remote": "hi.txt"}),
    ("read_file", {"sandbox": "dev", "remote": "../../etc/passwd"}),
]
seen = []

def scripted(messages, info):
    seen[:] = messages
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if turn < len(STEPS):
        name, args = STEPS[turn]
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{turn}")])
    return ModelResponse(parts=[TextPart("done")])

body = portal.call(emu.create_sandbox)

async def drive():
    async with sandboxkit.Client() as client:
        kit = Toolkit(client, {"dev": client.sandbox_from_response(body)})
        return await namespace["ask_pydantic_agent"](kit, FunctionModel(scripted), "write hi.txt")

assert asyncio.run(drive()) == "done"
root = emu.sandbox_root(body["data"]["sandbox_key"])
assert (root / "home/user/hi.txt").read_bytes() == b"hi"
answers = [
    p.content for m in seen for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
]
assert answers[1]["content"] == "hi", answers
assert answers[2]["error"]["code"] == "invalid_path", answers
""",
    ),
    "def make_client": (
        "",
        """
key_file = pathlib.Path("key")
namespace["KEY_FILE"] = key_file  # the block's secret path, here a file of the test's

async def drive(key):
    key_file.write_text(key + "\\n")
    async with namespace["make_client"]() as client:
        try:
            await client.templates.builds_page("tpl-none")
        except sandboxkit.SandboxKitError as exc:
            return type(exc).__name__

assert asyncio.run(drive(emu.api_key)) == "NotFoundError"  # the key read was accepted
assert asyncio.run(drive("sk-rotated-away")) == "AuthenticationError"
""",
    ),
    "async def make_template": ("", "asyncio.run(namespace['make_template']())"),
    "async def collect": (
        "",
        """
bodies = [portal.call(emu.create_sandbox) for _ in range(3)]
for body in bodies:
    root = emu.sandbox_root(body["data"]["sandbox_key"])
    (root / "home/user/result.json").write_text('{"ok": true}')

async def drive():
    async with sandboxkit.Client() as client:
        await namespace["collect"](client, bodies)

asyncio.run(drive())
assert sorted(os.listdir("results")) == sorted(
    b["data"]["sandbox_key"] + ".json" for b in bodies
), os.listdir("results")
""",
    ),
    "async def fetch_politely": (
        "",
        """
from sandboxkit.emulator import Fault
bodies = [portal.call(emu.create_sandbox) for _ in range(2)]
refs = [sandboxkit.SandboxRef.from_response(body) for body in bodies]
for body in bodies:
    root = emu.sandbox_root(body["data"]["sandbox_key"])
    (root / "home/user/result.json").write_text('{"ok": true}')
emu.faults.script("files.download", Fault.status(429, retry_after="0.1"))

async def drive():
    async with sandboxkit.Client() as client:
        return await namespace["fetch_politely"](client, refs)

summary = asyncio.run(drive())
assert summary.done == 2, summary
[(host, count)] = summary.pauses.items()
assert count == 1 and summary.paused_seconds == 0.1, summary.pace_events
assert 1 <= summary.concurrency <= 4, summary
assert {r.sandbox_key + ".json" for r in refs} <= set(os.listdir(".")), os.listdir(".")
""",
    ),
    "async def read_and_write": (
        "",
        """
async def drive():
    async with sandboxkit.Client() as client:
        return await namespace["read_and_write"](client, portal.call(emu.create_sandbox))

assert asyncio.run(drive()) == "print('hello')\\n"
assert pathlib.Path("task.py").read_text() == "print('hello')\\n"
""",
    ),
    "async def polite_batch": (
        "",
        """
bodies = [portal.call(emu.create_sandbox) for _ in range(3)]
for body in bodies:
    root = emu.sandbox_root(body["data"]["sandbox_key"])
    (root / "home/user/result.json").write_text('{"ok": true}')

summary = asyncio.run(namespace["polite_batch"](bodies))
assert (summary.done, summary.failed) == (3, 0), summary
assert summary.budgets == sandboxkit.Budgets.from_bwlimit("1M:5M"), summary
assert "budgets='download 5 MiB/s, upload 1 MiB/s, requests off'" in repr(summary)
""",
    ),
    "async def send_work": (
        "",
        """
import pathlib
pathlib.Path("data.csv").write_text("a,b\\n1,2\\n")
body = portal.call(emu.create_sandbox)

async def drive():
    async with sandboxkit.Client() as client:
        await namespace["send_work"](client, body)

asyncio.run(drive())
root = emu.sandbox_root(body["data"]["sandbox_key"])
assert (root / "home/user/task.py").read_bytes() == b"print('hello')\\n"
assert (root / "home/user/data.csv").read_text() == "a,b\\n1,2\\n"
""",
    ),
    "async def through_a_proxy": (
        "",
        """
import pathlib, sys, tempfile
sys.path.insert(0, str(pathlib.Path(sandboxkit.__file__).resolve().parent.parent))
from tests.proxy_support import ProxyServer

with tempfile.TemporaryDirectory() as folder, ProxyServer(pathlib.Path(folder)) as proxy:
    body = portal.call(emu.create_sandbox)
    got = asyncio.run(namespace["through_a_proxy"](proxy.url, body))
    assert got == b"hello through the proxy\\n", got
    assert [r["method"] for r in proxy.records()] == ["POST", "GET"], proxy.records()
""",
    ),
    "async def traced_upload": (
        "",
        """
names = asyncio.run(namespace["traced_upload"](portal.call(emu.create_sandbox)))
assert names == ["POST", "files.upload"], names
assert emu.journal[-1].headers["traceparent"].startswith("00-")
""",
    ),
    "async def download_counting_retries": (
        "",
        """
import pathlib
from sandboxkit.emulator import Fault

body = portal.call(emu.create_sandbox)
(emu.sandbox_root(body["data"]["sandbox_key"]) / "home/user/x.bin").write_bytes(b"x" * 100)
emu.faults.script("files.download", Fault.status(502), Fault.status(503))
counts = asyncio.run(namespace["download_counting_retries"](body, "/home/user/x.bin", "x.bin"))
host = body["data"]["sandbox_key"] + "." + body["data"]["domain"]
assert counts == {host: 2}, counts
assert pathlib.Path("x.bin").read_bytes() == b"x" * 100
""",
    ),
    "def show_builds": (
        "",
        """
with sandboxkit.sync.Client() as setup:
    resources = sandboxkit.CustomResources(cpu_count=1, memory_mb=512, disk_size_mb=1024)
    template_id = setup.templates.create(name="t", resources=resources).id
namespace["show_builds"](template_id)
""",
    ),
}

RUNNER = """
import asyncio, os, pathlib
import anyio.from_thread
import sandboxkit
import sandboxkit.sync
from sandboxkit.emulator import Emulator

with anyio.from_thread.start_blocking_portal() as portal:
    emulator = Emulator(domain="localhost", build_seconds=0.2)
    with portal.wrap_async_context_manager(emulator) as emu:
        os.environ["SANDBOXKIT_API_KEY"] = emu.api_key
        os.environ["SANDBOXKIT_BASE_URL"] = emu.base_url
        os.environ["SANDBOXKIT_DATA_PLANE_SCHEME"] = emu.data_plane_scheme
        # A module of its own, as pasted: nothing imported for it, not run as __main__.
        namespace = {"__name__": "readme_block"}
        exec(compile(SETUP, "setup", "exec"))
        exec(compile(BLOCK, "README.md", "exec"), namespace)
        exec(compile(DRIVE, "drive", "exec"))
print("block done")
"""


def test_every_python_block_is_run() -> None:
    """Each block is the pytest example (run as a user's test above) or has a driver."""
    for block in python_blocks():
        drivers = [key for key in DRIVERS if key in block]
        assert len(drivers) == 1 or "def test_" in block, block[:200]


@pytest.mark.parametrize("key", list(DRIVERS))
def test_python_block_runs_against_the_emulator(key: str, tmp_path: Path) -> None:
    [block] = [b for b in python_blocks() if key in b]
    setup, drive = DRIVERS[key]
    script = tmp_path / "block.py"
    script.write_text(f"BLOCK = {block!r}\nSETUP = {setup!r}\nDRIVE = {drive!r}\n{RUNNER}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXKIT_")}
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    assert done.stdout.endswith("block done\n")


def test_the_mcp_config_example_loads_and_the_client_entry_starts_it(tmp_path: Path) -> None:
    """The README's `mcp.toml` is a valid `sandboxkit mcp` configuration (its token from the
    variable it names), and its MCP client entries run `sandboxkit mcp --config FILE`, as
    installed and from an environment of its own (uvx)."""
    import json

    from sandboxkit.agents._mcp_config import load_config

    [example] = [b for b in re.findall(r"```toml\n(.*?)```", README, flags=re.DOTALL) if "mcp" in b]
    (tmp_path / "mcp.toml").write_text(example)
    (tmp_path / "agent-files").mkdir()
    bearer = "bearer-readme-" + "0" * 32
    env = {
        "SANDBOXKIT_API_KEY": "sk-readme",
        "MAIN_SANDBOX_TOKEN": "sat-readme",
        "SANDBOXKIT_MCP_TOKEN": bearer,
    }
    config = load_config(tmp_path / "mcp.toml", env)
    assert config.http_token == bearer and bearer not in repr(config)
    assert list(config.sandboxes) == ["main"]
    assert config.templates is False and config.limits.max_copy == 100 << 20
    assert config.copies.answer_within == 2.0 and config.copies.max_running == 4
    assert config.workspace == tmp_path / "agent-files"
    assert "sat-readme" not in repr(config) and "sk-readme" not in repr(config)
    entries = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", README, flags=re.DOTALL)]
    installed, own = [entry["mcpServers"]["sandboxkit"] for entry in entries]
    assert installed["command"] == "sandboxkit" and installed["args"][:2] == ["mcp", "--config"]
    # The same command from an environment of its own, with the same variables.
    assert own["command"] == "uvx"
    assert own["args"] == ["--from", "sandboxkit-sdk[mcp]", "sandboxkit", *installed["args"]]
    assert own["env"] == installed["env"]


# --- what a newcomer reads first (issue 38, item 4) -----------------------------------------


def _headings() -> list[tuple[int, str]]:
    """The README's headings (level, text), those inside code blocks left out."""
    prose = re.sub(r"```.*?```", "", README, flags=re.DOTALL)
    return [(len(m[1]), m[2].strip()) for m in re.finditer(r"^(#{2,4}) (.+)$", prose, re.M)]


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` dropped, spaces `-`."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_contents_link_every_section_in_order() -> None:
    """The contents, right under the introduction, link every `##` section in the order they
    come, and each of its links lands on a heading."""
    contents = README.split("**Contents:**", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    anchors = {_anchor(text) for _, text in _headings()}
    assert set(links) <= anchors, set(links) - anchors
    sections = [_anchor(text) for level, text in _headings() if level == 2]
    assert [link for link in links if link in sections] == sections


def test_the_quick_start_counts_the_export_lines_the_emulator_prints() -> None:
    """ "Paste the three `export` lines (four with `--tls`)": as many as the banner has."""
    match = re.search(r"paste the (\w+) `export` lines .*? \((\w+) with `--tls`", README, re.S)
    assert match is not None
    numbers = {"two": 2, "three": 3, "four": 4, "five": 5}
    for args, said in (((), match[1]), (("--tls",), match[2])):
        emulator = Standalone(*args)
        try:
            printed = emulator.commands("export ")
        finally:
            emulator.stop()
        assert len(printed) == numbers[said], printed


def test_new_sandbox_json_is_a_create_body_the_examples_take(tmp_path: Path) -> None:
    """The README's way to a `create_body`, `sandboxkit emulator new-sandbox --json` against
    a running emulator, prints one JSON line that `sandbox_from_response` takes, and the
    sandbox it names answers (a file up and down through it)."""
    [block] = [
        b
        for b in re.findall(r"```sh\n(.*?)```", README, flags=re.DOTALL)
        if "new-sandbox --json" in b
    ]
    emulator = Standalone()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXKIT_")}
        # As pasted into a shell whose PATH has this Python's `sandboxkit` and `python`.
        path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env={**env, **emulator.exports, "PATH": path},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
        text = (tmp_path / "sandbox.json").read_text()
        assert text.count("\n") == 1  # one line
        body = json.loads(text)
        assert done.stdout == body["data"]["sandbox_key"] + "\n"
        assert body["data"]["sandbox_key"] != emulator.exports["SANDBOXKIT_SANDBOX_KEY"]

        async def round_trip() -> bytes:
            async with sandboxkit.Client(
                api_key=emulator.exports["SANDBOXKIT_API_KEY"],
                base_url=emulator.exports["SANDBOXKIT_BASE_URL"],
                data_plane_scheme="http",
            ) as client:
                sandbox = client.sandbox_from_response(body)
                await sandbox.files.upload("/home/user/a.txt", b"from the json body")
                return await sandbox.files.read_bytes("/home/user/a.txt")

        assert asyncio.run(round_trip()) == b"from the json body"
    finally:
        emulator.stop()


def test_a_sandbox_is_reached_at_plain_127_0_0_1_by_its_host_header() -> None:
    """Where `*.localhost` stops (the system resolver) the README says to connect to plain
    127.0.0.1 with the sandbox's `Host`: a client that never resolves the name gets the
    sandbox's file, and another sandbox's key in `Host` does not."""
    assert "Where `*.localhost` stops working" in README
    emulator = Standalone("--sandboxes", "2")
    try:
        exports = emulator.exports
        host = f"{exports['SANDBOXKIT_SANDBOX_KEY']}.{exports['SANDBOXKIT_SANDBOX_DOMAIN']}"
        port = int(exports["SANDBOXKIT_SANDBOX_DOMAIN"].rsplit(":", 1)[1])
        token = {"X-Access-Token": exports["SANDBOXKIT_SANDBOX_TOKEN"]}

        def get(host_header: str) -> tuple[int, bytes]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                connection.request(
                    "GET",
                    "/files?path=/home/user/h.txt",
                    headers={"Host": host_header, **token},
                )
                answer = connection.getresponse()
                return answer.status, answer.read()
            finally:
                connection.close()

        async def put() -> None:
            async with sandboxkit.Client(
                api_key=exports["SANDBOXKIT_API_KEY"],
                base_url=exports["SANDBOXKIT_BASE_URL"],
                data_plane_scheme="http",
            ) as client:
                sandbox = client.sandbox(
                    sandbox_key=exports["SANDBOXKIT_SANDBOX_KEY"],
                    domain=exports["SANDBOXKIT_SANDBOX_DOMAIN"],
                    access_token=exports["SANDBOXKIT_SANDBOX_TOKEN"],
                )
                await sandbox.files.upload("/home/user/h.txt", b"hello\n")

        asyncio.run(put())
        assert get(host) == (200, b"hello\n")
        other = [line for line in emulator.lines if "sandbox_key:" in line][1].split()[-1]
        status, _ = get(f"{other}.{exports['SANDBOXKIT_SANDBOX_DOMAIN']}")
        assert status in (401, 403, 404)  # the other sandbox: not this one's file
    finally:
        emulator.stop()
