"""`sandboxkit mcp`'s configuration: the file and the environment, never the model.

Every bad file is one line naming the file and the key, exit 2 from the command, and never
shows a token; a good one gives frozen values whose repr hides the tokens.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import re
import site
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import sandboxkit
from sandboxkit.agents import CopyHandles, ToolLimits
from sandboxkit.agents._mcp_config import ConfigError, McpConfig, load_config, toolkit_from_config
from sandboxkit.cli import cli
from sandboxkit.cli._mcp import is_loopback, meets, start_line

SECRET = "tok-7f3a9c1e-do-not-show"
ENV = {"DEV_TOKEN": SECRET}


def write(tmp_path: Path, text: str) -> Path:
    file = tmp_path / "mcp.toml"
    file.write_text(textwrap.dedent(text))
    file.chmod(0o600)
    return file


GOOD = """
    templates = false
    workspace = "ws"
    root = "/home/user/project"
    data_plane_scheme = "http"

    [limits]
    max_read = 4096
    read_page = 1024
    max_wait = 2.5

    [sandboxes.dev]
    sandbox_key = "sbx-dev"
    domain = "localhost:4321"
    access_token_env = "DEV_TOKEN"

    [sandboxes.ci]
    sandbox_key = "sbx-ci"
    domain = "eu.example.com"
    access_token = "inline-ci-token"
"""


def test_a_good_file_gives_frozen_values_that_hide_tokens(tmp_path: Path) -> None:
    """Sandboxes keep the file's order, the workspace is read from the file's directory,
    limits become ToolLimits, and no repr shows a token."""
    (tmp_path / "ws").mkdir()
    config = load_config(write(tmp_path, GOOD), ENV)
    assert list(config.sandboxes) == ["dev", "ci"]
    assert [ref.access_token for ref in config.sandboxes.values()] == [SECRET, "inline-ci-token"]
    assert all(type(ref) is sandboxkit.SandboxRef for ref in config.sandboxes.values())
    assert config.workspace == (tmp_path / "ws").resolve()
    assert config.root == "/home/user/project"
    assert config.data_plane_scheme == "http"
    assert config.limits == ToolLimits(max_read=4096, read_page=1024, max_wait=2.5)
    assert (config.templates, config.base_url, config.api_key) == (False, None, None)
    assert config.warnings == ()
    assert SECRET not in repr(config) and "inline-ci-token" not in repr(config)
    with pytest.raises(AttributeError):
        config.root = "/"  # type: ignore[misc]


def test_an_inline_token_in_a_readable_file_is_warned_about(tmp_path: Path) -> None:
    """A file holding an inline token that others may read gets a chmod warning."""
    (tmp_path / "ws").mkdir()
    file = write(tmp_path, GOOD)
    file.chmod(0o644)
    [note] = load_config(file, ENV).warnings
    assert "chmod 600" in note and "inline-ci-token" not in note


def test_templates_take_the_key_and_url_from_the_environment(tmp_path: Path) -> None:
    """With templates on, the API key and base URL come from the file's api_key_env, the
    command line, or SANDBOXKIT_API_KEY / SANDBOXKIT_BASE_URL, in that order."""
    file = write(
        tmp_path,
        """
        [sandboxes.dev]
        sandbox_key = "sbx-dev"
        domain = "localhost:4321"
        access_token_env = "DEV_TOKEN"
        """,
    )
    env = {**ENV, "SANDBOXKIT_API_KEY": "env-key", "SANDBOXKIT_BASE_URL": "http://env:1"}
    config = load_config(file, env)
    assert (config.api_key, config.base_url, config.templates) == ("env-key", "http://env:1", True)
    config = load_config(file, env, api_key="flag-key", base_url="http://flag:1")
    assert (config.api_key, config.base_url) == ("flag-key", "http://flag:1")
    assert "env-key" not in repr(config)


def test_no_file_serves_the_sandbox_the_environment_names(tmp_path: Path) -> None:
    """Without --config or SANDBOXKIT_MCP_CONFIG, SANDBOXKIT_SANDBOX_KEY/_DOMAIN/_TOKEN (what
    `sandboxkit emulator` exports) make one sandbox named `default`."""
    env = {
        "SANDBOXKIT_SANDBOX_KEY": "sbx-1",
        "SANDBOXKIT_SANDBOX_DOMAIN": "localhost:9",
        "SANDBOXKIT_SANDBOX_TOKEN": SECRET,
        "SANDBOXKIT_API_KEY": "k",
        "SANDBOXKIT_BASE_URL": "http://127.0.0.1:1",
    }
    config = load_config(None, env)
    assert config.sandboxes == {"default": sandboxkit.SandboxRef("sbx-1", "localhost:9", SECRET)}
    file = write(tmp_path, GOOD.replace('workspace = "ws"', ""))
    from_env = load_config(None, {**ENV, "SANDBOXKIT_MCP_CONFIG": str(file)})
    assert list(from_env.sandboxes) == ["dev", "ci"]


SANDBOX = """
    [sandboxes.dev]
    sandbox_key = "sbx-dev"
    domain = "localhost:4321"
    access_token_env = "DEV_TOKEN"
"""

# A sandbox table missing only its token, for the cases about the token.
DEV = 'templates = false\n[sandboxes.dev]\nsandbox_key = "k"\ndomain = "d"\n'

BAD = [
    (f'templates = false\nextra = "{SECRET}"\n' + SANDBOX, "unknown key 'extra'"),
    (DEV + f'token = "{SECRET}"', "unknown key 'sandboxes.dev.token'"),
    (DEV + f"access_token = {SECRET}", "not valid TOML"),
    (DEV + f'access_token = "{SECRET}"\naccess_token_env = "DEV_TOKEN"',
     "exactly one of access_token"),
    (DEV + 'access_token_env = "MISSING_TOKEN"', "MISSING_TOKEN is not set"),
    (DEV + "access_token = 5", "access_token must be a non-empty string"),
    ('templates = false\n[sandboxes."bad name"]\nsandbox_key = "k"\ndomain = "d"\n'
     'access_token_env = "DEV_TOKEN"', "sandbox name 'bad name'"),
    ("templates = false\n", "no sandboxes"),
    ('templates = "yes"\n' + SANDBOX, "templates must be true or false"),
    (SANDBOX, "the template tools need a base URL"),
    ('templates = false\nworkspace = "missing-dir"\n' + SANDBOX, "is not a directory"),
    ('templates = false\ndata_plane_scheme = "ftp"\n' + SANDBOX, "data_plane_scheme"),
    ("templates = false\n[limits]\nmax_reads = 1\n" + SANDBOX, "unknown key 'limits.max_reads'"),
    ("templates = false\n[limits]\nmax_read = true\n" + SANDBOX, "limits.max_read must be"),
    ("templates = false\n[limits]\nmax_read = 10\nread_page = 20\n" + SANDBOX,
     "read_page must not exceed max_read"),
    ('templates = false\napi_key_env = "bad name"\n' + SANDBOX, "api_key_env must name"),
    ("templates = false\n[copies]\nmax_runs = 2\n" + SANDBOX, "unknown key 'copies.max_runs'"),
    (f'templates = false\n[copies]\nkeep_for = "{SECRET}"\n' + SANDBOX,
     "copies.keep_for must be a number"),
    ("templates = false\n[copies]\nmax_running = 2.5\n" + SANDBOX,
     "max_running=2.5: must be an integer >= 1"),
    ("templates = false\n[copies]\nanswer_within = 0\n" + SANDBOX,
     "answer_within=0: must be a positive number"),
    ("templates = false\ncopies = 3\n" + SANDBOX, "copies must be a table"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[e for _, e in BAD])
def test_a_bad_file_is_one_line_naming_the_key_never_the_token(
    tmp_path: Path, text: str, expected: str
) -> None:
    """Each mistake is a ConfigError of one line with the file's path and the key at fault,
    and no token from the file or the environment."""
    file = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(file, ENV)
    message = str(caught.value)
    assert expected in message
    assert message.startswith(str(file)) and "\n" not in message
    assert SECRET not in message


def test_an_unreadable_path_is_one_line(tmp_path: Path) -> None:
    """A missing file and a directory are named as such."""
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.toml", ENV)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path, ENV)
    with pytest.raises(ConfigError, match="--config FILE or set SANDBOXKIT_MCP_CONFIG"):
        load_config(None, {})


def test_a_wait_ends_before_an_mcp_client_gives_up(tmp_path: Path) -> None:
    """MCP clients end a call idle for 300 s: without [limits], wait_for_build waits at most
    240 s; a file that allows longer gets it, with a warning for the operator."""
    plain = load_config(write(tmp_path, "templates = false\n" + SANDBOX), ENV)
    assert plain.limits.max_wait == 240 and plain.warnings == ()
    longer = load_config(
        write(tmp_path, "templates = false\n[limits]\nmax_wait = 600\n" + SANDBOX), ENV
    )
    assert longer.limits.max_wait == 600
    [note] = longer.warnings
    assert note.startswith("limits.max_wait=600: MCP clients end a call idle for 300 s")


def test_copies_take_their_settings_from_the_file_and_reach_the_toolkit(tmp_path: Path) -> None:
    """`[copies]` sets the toolkit's `CopyHandles`; without it, the defaults."""
    plain = load_config(write(tmp_path, "templates = false\n" + SANDBOX), ENV)
    assert plain.copies == CopyHandles()
    text = 'templates = false\nworkspace = "."\n[copies]\nanswer_within = 5\nmax_running = 2\n'
    config = load_config(write(tmp_path, text + SANDBOX), ENV)
    assert config.copies == CopyHandles(answer_within=5, max_running=2)
    client, kit = toolkit_from_config(config)
    assert kit._copies is not None and kit._copies.options == config.copies
    asyncio.run(client.aclose())


def test_a_sandbox_the_sdk_refuses_is_a_config_error(tmp_path: Path) -> None:
    """A domain the SDK refuses fails before serving, naming the sandbox, not the token."""
    bad = McpConfig(
        sandboxes={"dev": sandboxkit.SandboxRef("sbx/dev", "example.com", SECRET)},
        base_url=None,
        api_key=None,
        data_plane_scheme=None,
        workspace=None,
        root="/home/user",
        templates=False,
        limits=ToolLimits(),
    )
    with pytest.raises(ConfigError) as caught:
        toolkit_from_config(bad)
    assert str(caught.value).startswith("sandboxes.dev:") and SECRET not in str(caught.value)


def test_the_command_exits_2_with_one_line_for_a_bad_file(tmp_path: Path) -> None:
    """`sandboxkit mcp --config bad.toml` prints one `error:` line, exits 2, echoes no token,
    and writes nothing on stdout (the protocol's channel)."""
    file = write(tmp_path, BAD[0][0])
    result = CliRunner().invoke(cli, ["mcp", "--config", str(file)], env=ENV)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {file}: unknown key 'extra'")
    assert SECRET not in result.stderr


ROOT = Path(__file__).resolve().parents[2]
# `sandboxkit mcp` as its console script runs it, in a child process.
RUN_COMMAND = (
    "import sys\nsys.argv = ['sandboxkit', 'mcp']\nfrom sandboxkit.cli import main\nmain()"
)
# mcp's modules and their metadata (mcp_types comes with mcp 2).
MCP_ENTRY = re.compile(r"mcp(_types)?(-[^-]+\.dist-info)?", re.IGNORECASE)


def run_command(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python ARGS` with `env` added to this environment, less any SANDBOXKIT_ variable."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXKIT_")}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env={**base, **env}, timeout=120
    )


def test_without_mcp_the_command_says_to_install_the_extra(tmp_path: Path) -> None:
    """With `mcp` not installed (neither modules nor metadata), `sandboxkit mcp` prints the
    pip line and exits 2."""
    # This environment's site-packages as links, less mcp's entries, and only that.
    view = tmp_path / "site-packages"
    view.mkdir()
    for packages in map(Path, site.getsitepackages()):
        for entry in packages.iterdir():
            if not MCP_ENTRY.fullmatch(entry.name) and not (view / entry.name).exists():
                (view / entry.name).symlink_to(entry)
    assert not (view / "mcp").exists() and (view / "click").exists()
    done = run_command("-S", "-c", f"import site\nsite.addsitedir({str(view)!r})\n{RUN_COMMAND}")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: sandboxkit mcp needs the mcp extra: pip install 'sandboxkit-sdk[mcp]'"
    ]


def fake_mcp(tmp_path: Path, version: str) -> Path:
    """A directory holding an `mcp` package with none of the modules the server imports,
    and the metadata of `mcp` `version`: first on the path, it is the `mcp` installed."""
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("")
    (tmp_path / f"mcp-{version}.dist-info").mkdir()
    metadata = f"Metadata-Version: 2.1\nName: mcp\nVersion: {version}\n"
    (tmp_path / f"mcp-{version}.dist-info" / "METADATA").write_text(metadata)
    return tmp_path


def test_an_old_mcp_is_one_line_naming_both_versions_and_the_ways_out(tmp_path: Path) -> None:
    """An `mcp` older than the extra's (another package held it back): one line with the
    installed and the required version, the upgrade, and the environment of its own; the
    required one is the extra's in pyproject.toml, read from the installed metadata."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [required] = [r for r in extra["optional-dependencies"]["mcp"] if r.startswith("mcp")]
    required = required.replace(" ", "")
    done = run_command("-c", RUN_COMMAND, PYTHONPATH=str(fake_mcp(tmp_path, "1.26.0")))
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: sandboxkit mcp needs {required} (installed: 1.26.0): pip install -U "
        f"'{required}', or run it from an environment of its own: "
        "uvx --from 'sandboxkit-sdk[mcp]' sandboxkit mcp"
    ]


def test_an_mcp_of_the_right_version_that_fails_to_import_shows_the_error(
    tmp_path: Path,
) -> None:
    """A broken `mcp` whose version is the extra's: the pip line and the import's error,
    never a claim that the version is wrong."""
    installed = importlib.metadata.version("mcp")
    done = run_command("-c", RUN_COMMAND, PYTHONPATH=str(fake_mcp(tmp_path, installed)))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: sandboxkit mcp needs the mcp extra: pip install 'sandboxkit-sdk[mcp]' "
        "(No module named 'mcp.server')"
    ]


@pytest.mark.parametrize(
    ("version", "requirement", "met"),
    [
        ("1.26.0", "mcp>=2.3", False),
        ("2.3", "mcp>=2.3", True),
        ("2.3.0", "mcp>=2.3", True),
        ("2.10.1", "mcp>=2.3", True),
        ("2.3.0rc1", "mcp>=2.3", True),  # a pre-release counts as its release
        ("3.0.0", "mcp<3,>=2.3", False),
        ("2.9", "mcp[cli]<3,>=2.3", True),
        ("2.4", "mcp~=2.3", True),  # not understood: the import decides
    ],
)
def test_meets_compares_release_numbers(version: str, requirement: str, met: bool) -> None:
    assert meets(version, requirement) is met


def test_importing_sandboxkit_and_its_agents_never_imports_mcp() -> None:
    """`import sandboxkit` and `import sandboxkit.agents` (and the CLI) leave `mcp` unloaded."""
    code = (
        "import sys, sandboxkit, sandboxkit.agents, sandboxkit.cli\n"
        "sandboxkit.agents.Toolkit\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_only_loopback_hosts_go_without_a_warning(host: str, loopback: bool) -> None:
    """`--host` is loopback (no warning) only for localhost, 127.0.0.0/8 and ::1."""
    assert is_loopback(host) is loopback


BEARER = "b" * 40


def test_the_bearer_token_comes_from_the_named_variable_or_the_default_one(
    tmp_path: Path,
) -> None:
    """http_token_env names the variable holding the HTTP bearer token; without it
    SANDBOXKIT_MCP_TOKEN is read; no repr shows it and secrets() names it (for scrubbing)."""
    (tmp_path / "ws").mkdir()
    named = write(tmp_path, 'http_token_env = "MY_BEARER"\n' + GOOD)
    config = load_config(named, {**ENV, "MY_BEARER": BEARER, "SANDBOXKIT_MCP_TOKEN": "x" * 40})
    assert config.http_token == BEARER
    assert BEARER not in repr(config) and BEARER in config.secrets()
    plain = write(tmp_path, GOOD)
    assert load_config(plain, {**ENV, "SANDBOXKIT_MCP_TOKEN": BEARER}).http_token == BEARER
    assert load_config(plain, ENV).http_token is None


@pytest.mark.parametrize(
    ("text", "environ", "says"),
    [
        ('http_token_env = "MY_BEARER"\n', {}, "MY_BEARER is not set"),
        ("", {"SANDBOXKIT_MCP_TOKEN": "short-token"}, "at least 32 printable ASCII"),
        ('http_token_env = "T"\n', {"T": "é" * 40}, "at least 32 printable ASCII"),
    ],
)
def test_a_missing_or_weak_bearer_token_is_one_line_that_never_shows_it(
    tmp_path: Path, text: str, environ: dict[str, str], says: str
) -> None:
    """A token variable named but unset, or a token too short or not ASCII, is refused in
    one line that does not echo it."""
    (tmp_path / "ws").mkdir()
    file = write(tmp_path, text + GOOD)
    with pytest.raises(ConfigError) as caught:
        load_config(file, {**ENV, **environ})
    message = str(caught.value)
    assert says in message and "\n" not in message
    assert all(value not in message for value in environ.values())


def test_http_on_a_non_loopback_host_without_a_token_does_not_start(tmp_path: Path) -> None:
    """`--transport http --host 0.0.0.0` with no bearer token exits 2 with one line saying
    how to set one, before anything listens."""
    (tmp_path / "ws").mkdir()
    file = write(tmp_path, GOOD)
    args = ["mcp", "--config", str(file), "--transport", "http", "--host", "0.0.0.0"]
    result = CliRunner().invoke(cli, args, env=ENV)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: --host 0.0.0.0 is not loopback: set SANDBOXKIT_MCP_TOKEN")


def test_the_start_line_names_the_tools_served_and_those_off_with_why(tmp_path: Path) -> None:
    """Without a workspace and with templates off, the start line lists the tools served and
    each absent one under its reason."""
    file = write(tmp_path, GOOD.replace('workspace = "ws"\n', ""))
    config = load_config(file, ENV)
    _, toolkit = toolkit_from_config(config)
    served = [tool.name for tool in toolkit.tools]
    line = start_line(served, toolkit.absent, "stdio", "dev, ci")
    assert line == (
        "serving 4 tools on stdio for sandboxes dev, ci: list_sandboxes, read_file, "
        "write_file, edit_file; off: upload_file, download_file, copy_status, cancel_copy "
        "(no workspace configured); create_template, list_builds, get_build, read_build_logs, "
        "wait_for_build (template tools off)"
    )
