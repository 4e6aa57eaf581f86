"""The test matrix: the whole suite in each kind of environment sandboxkit's users run it in.

`make test` runs every session (after ruff and mypy); `.venv/bin/nox -s neighbours` runs one,
`.venv/bin/nox -l` lists them. Each session builds a fresh environment with uv and runs
`pytest -W error` over the whole suite:

- `tests-3.11`, `tests-3.12`, `tests-3.13`: each Python sandboxkit supports, the newest
  release of every dependency;
- `lowest`: Python 3.11 with every dependency pyproject names (runtime, extras and test
  tools) at the lowest version it allows, so that no lower bound is false;
- `neighbours`: beside what agent frameworks and services bring (openai, anthropic,
  langchain-core, httpx, trio, sniffio) and under uvloop, as uvicorn runs it.

An interpreter that cannot be found fails its session (never a skip), and so does the run.
"""

from __future__ import annotations

import glob
import os

import nox

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["tests", "lowest", "neighbours"]

PYTHONS = ["3.11", "3.12", "3.13"]
# Every extra: the suite tests the CLI, Dask, OpenTelemetry and MCP parts too.
EVERYTHING = ".[test,cli,dask,otel,mcp]"
# What an agent framework's or a web service's process has beside sandboxkit.
NEIGHBOURS = ["openai", "anthropic", "langchain-core", "httpx", "trio", "sniffio", "uvloop"]

# Pythons installed with pyenv (as on CI's machines) are found without activating them. uv
# must never fetch an interpreter of its own: a missing one is an error to see.
os.environ["PATH"] = os.pathsep.join(
    [os.environ.get("PATH", ""), *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/*/bin")))]
)
os.environ["UV_PYTHON_DOWNLOADS"] = "never"
# Compiled at install: a first import that compiles inside a test's running loop is slow
# enough for dev mode's slow-callback note, which tests that read stderr would see.
os.environ["UV_COMPILE_BYTECODE"] = "1"


# What the session's log says it ran on: the interpreter and the versions that differ most.
REPORT = """
import importlib.metadata, platform
names = ["aiohttp", "anyio", "attrs", "cattrs", "pytest-asyncio", "sniffio", "uvloop"]
def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"
print("python", platform.python_version(), *(f"{n} {version(n)}" for n in names))
"""


def run_suite(session: nox.Session, *options: str) -> None:
    session.run("python", "-c", REPORT)
    session.run("python", "-m", "pytest", "-W", "error", "-q", "-p", "no:cacheprovider", *options)


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The whole suite, newest dependencies."""
    session.install("-e", EVERYTHING)
    run_suite(session, *session.posargs)


@nox.session(python="3.11")
def lowest(session: nox.Session) -> None:
    """The whole suite at the lowest version of every dependency that pyproject allows."""
    session.install("--resolution", "lowest-direct", "-e", EVERYTHING)
    run_suite(session, *session.posargs)


@nox.session(python="3.12")
def neighbours(session: nox.Session) -> None:
    """The whole suite beside an agent framework's packages, on uvloop's event loop."""
    session.install("-e", EVERYTHING, *NEIGHBOURS)
    run_suite(session, "--event-loop=uvloop", *session.posargs)
