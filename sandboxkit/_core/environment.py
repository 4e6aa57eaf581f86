"""The names of the environment variables sandboxkit reads, in one place.

Every reader takes its name from here: the client's options (`options.resolve_*`,
`ClientConfig.from_env`), the CLI's `envvar=`s, the MCP server's configuration, and the
emulator, which prints them as `export` lines for the others to read.
`tests/test_structure.py` checks that no other module spells one out. Pure: names only.
"""

from __future__ import annotations

__all__ = [
    "API_KEY",
    "BASE_URL",
    "CA_FILE",
    "DATA_PLANE_SCHEME",
    "MCP_CONFIG",
    "MCP_TOKEN",
    "PREFIX",
    "SANDBOX_DOMAIN",
    "SANDBOX_KEY",
    "SANDBOX_TOKEN",
    "export_line",
]

PREFIX = "SANDBOXKIT_"

# The console: `Client(api_key=, base_url=)`, and the data plane's scheme.
API_KEY = PREFIX + "API_KEY"
BASE_URL = PREFIX + "BASE_URL"
DATA_PLANE_SCHEME = PREFIX + "DATA_PLANE_SCHEME"
# A CA bundle to trust (the CLI's `--ca-file`; the emulator's with `--tls`).
CA_FILE = PREFIX + "CA_FILE"
# One sandbox: `client.sandbox(sandbox_key=, domain=, access_token=)`.
SANDBOX_KEY = PREFIX + "SANDBOX_KEY"
SANDBOX_DOMAIN = PREFIX + "SANDBOX_DOMAIN"
SANDBOX_TOKEN = PREFIX + "SANDBOX_TOKEN"
# `sandboxkit mcp`'s configuration file, and the bearer token its HTTP endpoint requires.
MCP_CONFIG = PREFIX + "MCP_CONFIG"
MCP_TOKEN = PREFIX + "MCP_TOKEN"


def export_line(values: dict[str, str]) -> str:
    """`export NAME=value ...`, the shell line that sets `values` (names from here)."""
    return "export " + " ".join(f"{name}={value}" for name, value in values.items())
