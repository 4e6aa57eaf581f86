"""The configuration of `sandboxkit mcp`: a TOML file the operator writes, never the model.

The file names the sandboxes the model may use (each: `sandbox_key`, `domain`, and its access
token, inline as `access_token` or, better, `access_token_env` naming an environment
variable), the local `workspace` for copies, the sandbox `root`, `templates` on or off,
`data_plane_scheme`, the console (`base_url`, and `api_key_env` naming the variable that holds
the API key), `http_token_env` naming the variable that holds the bearer token the HTTP
transport requires, `[limits]` (`ToolLimits` fields) and `[copies]` (`CopyHandles` fields:
how long a copy call waits before it answers a handle, and how many run and are kept). What
the file leaves out comes from the environment (`SANDBOXKIT_API_KEY`, `SANDBOXKIT_BASE_URL`,
`SANDBOXKIT_DATA_PLANE_SCHEME`, `SANDBOXKIT_MCP_TOKEN`). The bearer token is read only from
the environment, never from the command line, whose arguments every local user can read
(`ps`, `/proc/PID/cmdline`) and shells keep in their history.

Example::

    workspace = "~/agent-files"      # relative paths are read from the file's directory
    templates = false

    [sandboxes.main]
    sandbox_key = "sbx-1f2e"
    domain = "eu-1.sandbox.example.com"
    access_token_env = "MAIN_SANDBOX_TOKEN"

Every problem is a `ConfigError` whose message is one line naming the file and the key, never
a value: a token in the wrong place is not echoed back.
"""

from __future__ import annotations

import os
import re
import ssl as ssl_module
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from sandboxkit import SandboxRef
from sandboxkit._core import environment as env
from sandboxkit.client import Client
from sandboxkit.errors import ValidationError

from . import CopyHandles, Toolkit, ToolLimits

__all__ = [
    "ConfigError",
    "McpConfig",
    "load_config",
    "toolkit_from_config",
]

_TOP_KEYS = (
    "api_key_env",
    "base_url",
    "data_plane_scheme",
    "http_token_env",
    "copies",
    "limits",
    "root",
    "sandboxes",
    "templates",
    "workspace",
)
_SANDBOX_KEYS = ("access_token", "access_token_env", "domain", "sandbox_key")
# A sandbox's name is what the model types: short, plain, no room for a path or a prompt.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# With the template tools off nothing goes to the console, but a Client needs both; `.invalid`
# is reserved (RFC 2606), so this address can never reach a host.
_UNUSED_BASE_URL = "https://console.invalid"
_UNUSED_API_KEY = "unused-without-template-tools"
# A bearer token anyone may try over the network should not be guessable: 32 characters of
# `secrets.token_urlsafe` hold 192 bits.
MIN_TOKEN_LENGTH = 32


class ConfigError(Exception):
    """The configuration cannot be used; the message is one line and shows no secret."""


# MCP clients end a call idle for 300 s, progress or not (issue 40): `wait_for_build` answers
# well before that unless the operator's file says otherwise (with a warning).
MCP_MAX_WAIT = 240.0


@attrs.frozen
class McpConfig:
    """What `sandboxkit mcp` serves, resolved from the file and the environment.

    Args:
        sandboxes: each sandbox's address (`SandboxRef`, the SDK's one address type) under
            the name tools take (`sandbox` argument), in the file's order.
        base_url: the console's URL; None: the control plane is unused (templates off).
        api_key: the console's key (never shown in a repr); None as for `base_url`.
        data_plane_scheme: "http" or "https"; None: the SDK's default and environment.
        workspace: the local directory for copies; None: no copy tools.
        root: the sandbox directory paths resolve under.
        templates: whether the template and build tools are offered.
        limits: the tools' bounds.
        warnings: one-line notes for the operator (e.g. an inline token in a readable file).
        http_token: the bearer token the HTTP transport requires (never shown in a repr);
            None: none configured.
        copies: how copies that take long answer with a handle (`[copies]`).
    """

    sandboxes: Mapping[str, SandboxRef]
    base_url: str | None
    api_key: str | None = attrs.field(repr=False)
    data_plane_scheme: str | None
    workspace: Path | None
    root: str
    templates: bool
    limits: ToolLimits
    warnings: tuple[str, ...] = ()
    http_token: str | None = attrs.field(default=None, repr=False)
    copies: CopyHandles = attrs.field(factory=CopyHandles)

    def secrets(self) -> tuple[str, ...]:
        """Every credential held, for scrubbing text that leaves the process."""
        found = [ref.access_token for ref in self.sandboxes.values()]
        if self.api_key:
            found.append(self.api_key)
        if self.http_token:
            found.append(self.http_token)
        return tuple(found)


def load_config(
    path: str | os.PathLike[str] | None,
    environ: Mapping[str, str],
    *,
    api_key: str | None = None,
    base_url: str | None = None,
) -> McpConfig:
    """Read and check the configuration.

    Args:
        path: the TOML file; None: `$SANDBOXKIT_MCP_CONFIG`, else no file (then the only
            sandbox is the one `SANDBOXKIT_SANDBOX_KEY`/`_DOMAIN`/`_TOKEN` name, if set).
        environ: the environment to read token variables and fallbacks from.
        api_key: the key given on the command line (`--api-key`), used when the file names
            no `api_key_env`.
        base_url: the console given on the command line, used when the file has none.

    Raises:
        ConfigError: an unreadable or invalid file, a missing variable, no sandbox.
    """
    if path is None:
        path = environ.get(env.MCP_CONFIG) or None
    if path is None:
        table: dict[str, Any] = {"sandboxes": _sandbox_from_env(environ)}
        return _Reader("the environment", environ).config(table, None, api_key, base_url)
    file = Path(path).expanduser()
    return _Reader(str(file), environ).config(_read(file), file, api_key, base_url)


def _read(file: Path) -> dict[str, Any]:
    try:
        with file.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{file}: is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        # The decoder's message names a line and column, never the text found there.
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None


def _sandbox_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """The sandbox `sandboxkit emulator` exports, as `default`, when no file is given."""
    names = (env.SANDBOX_KEY, env.SANDBOX_DOMAIN, env.SANDBOX_TOKEN)
    if not all(environ.get(n) for n in names):
        raise ConfigError(
            f"no configuration: pass --config FILE or set {env.MCP_CONFIG} "
            f"(or {env.SANDBOX_KEY}, _DOMAIN and _TOKEN for one sandbox)"
        )
    return {
        "default": {
            "sandbox_key": environ[names[0]],
            "domain": environ[names[1]],
            "access_token_env": names[2],
        }
    }


class _Reader:
    """Checks one table after another, each error naming `where` and the key."""

    def __init__(self, where: str, environ: Mapping[str, str]) -> None:
        self.where = where
        self.environ = environ
        self.notes: list[str] = []
        self.inline = False  # whether a token is written in the file itself

    def fail(self, what: str) -> ConfigError:
        return ConfigError(f"{self.where}: {what}")

    def config(
        self, table: Mapping[str, Any], file: Path | None, api_key: str | None, base_url: str | None
    ) -> McpConfig:
        self.known(table, _TOP_KEYS, "")
        templates = self.boolean(table, "templates", default=True)
        url = self.text(table, "base_url") or base_url or self.environ.get(env.BASE_URL) or None
        key = self.api_key(table, api_key)
        if templates and not (url and key):
            missing = "an API key" if url else "a base URL"
            raise self.fail(
                f"the template tools need {missing}: set {env.API_KEY} and {env.BASE_URL} "
                "(or api_key_env and base_url in the file), or templates = false"
            )
        scheme = self.text(table, "data_plane_scheme")
        if scheme is not None and scheme not in ("http", "https"):
            raise self.fail("data_plane_scheme must be 'http' or 'https'")
        sandboxes = self.sandboxes(table.get("sandboxes"))
        if file is not None and self.inline:
            self.check_private(file)
        return McpConfig(
            sandboxes=sandboxes,
            base_url=url if templates else None,
            api_key=key if templates else None,
            data_plane_scheme=scheme,
            workspace=self.workspace(table, file.parent if file is not None else Path.cwd()),
            root=self.text(table, "root") or "/home/user",
            templates=templates,
            limits=self.limits(table.get("limits")),
            warnings=tuple(self.notes),
            http_token=self.http_token(table),
            copies=self.copies(table.get("copies")),
        )

    def known(self, table: Mapping[str, Any], keys: tuple[str, ...], at: str) -> None:
        for name in table:
            if name not in keys:
                raise self.fail(f"unknown key '{at}{name}' (known: {', '.join(keys)})")

    def text(self, table: Mapping[str, Any], name: str, at: str = "") -> str | None:
        value = table.get(name)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"{at}{name} must be a non-empty string")
        return value.strip()

    def boolean(self, table: Mapping[str, Any], name: str, *, default: bool) -> bool:
        value = table.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(f"{name} must be true or false")
        return value

    def variable(self, name: str, at: str) -> str:
        if not _ENV_NAME.match(name):
            raise self.fail(f"{at} must name an environment variable")
        value = self.environ.get(name, "").strip()
        if not value:
            raise self.fail(f"{at}: environment variable {name} is not set")
        return value

    def api_key(self, table: Mapping[str, Any], given: str | None) -> str | None:
        name = self.text(table, "api_key_env")
        if name is not None:
            return self.variable(name, "api_key_env")
        return given or self.environ.get(env.API_KEY) or None

    def http_token(self, table: Mapping[str, Any]) -> str | None:
        name = self.text(table, "http_token_env")
        token: str | None
        if name is not None:
            token = self.variable(name, "http_token_env")
            at = f"environment variable {name}"
        else:
            token = self.environ.get(env.MCP_TOKEN, "").strip() or None
            at = env.MCP_TOKEN
        if token is not None and (
            len(token) < MIN_TOKEN_LENGTH or not token.isascii() or not token.isprintable()
        ):
            raise self.fail(
                f"{at}: the bearer token must be at least {MIN_TOKEN_LENGTH} printable ASCII "
                "characters (python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return token

    def sandboxes(self, raw: object) -> dict[str, SandboxRef]:
        if raw is None or raw == {}:
            raise self.fail("no sandboxes: add a [sandboxes.NAME] table")
        if not isinstance(raw, Mapping):
            raise self.fail("sandboxes must be tables: [sandboxes.NAME]")
        return {name: self.sandbox(name, entry) for name, entry in raw.items()}

    def sandbox(self, name: str, entry: object) -> SandboxRef:
        at = f"sandboxes.{name}"
        if not _NAME.match(name):
            raise self.fail(f"sandbox name {name!r}: letters, digits, '_', '.', '-' (<= 64)")
        if not isinstance(entry, Mapping):
            raise self.fail(f"{at} must be a table")
        self.known(entry, _SANDBOX_KEYS, f"{at}.")
        key, domain = (
            self.text(entry, "sandbox_key", f"{at}."),
            self.text(entry, "domain", f"{at}."),
        )
        if key is None or domain is None:
            raise self.fail(f"{at} needs sandbox_key and domain")
        inline, env = entry.get("access_token"), self.text(entry, "access_token_env", f"{at}.")
        if (inline is None) == (env is None):
            raise self.fail(f"{at} needs exactly one of access_token and access_token_env")
        if env is not None:
            token = self.variable(env, f"{at}.access_token_env")
        elif isinstance(inline, str) and inline.strip():
            token, self.inline = inline.strip(), True
        else:
            raise self.fail(f"{at}.access_token must be a non-empty string")
        return SandboxRef(sandbox_key=key, domain=domain, access_token=token)

    def workspace(self, table: Mapping[str, Any], base: Path) -> Path | None:
        value = self.text(table, "workspace")
        if value is None:
            return None
        folder = (base / Path(value).expanduser()).resolve()
        if not folder.is_dir():
            raise self.fail(f"workspace {folder} is not a directory")
        return folder

    def limits(self, raw: object) -> ToolLimits:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise self.fail("limits must be a table: [limits]")
        fields = tuple(sorted(f.name for f in attrs.fields(ToolLimits)))
        self.known(raw, fields, "limits.")
        for name, value in raw.items():
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise self.fail(f"limits.{name} must be a number")
        given = dict(raw)
        given.setdefault("max_wait", MCP_MAX_WAIT)
        if given["max_wait"] > MCP_MAX_WAIT:
            self.notes.append(
                f"limits.max_wait={given['max_wait']:g}: MCP clients end a call idle for "
                f"300 s, so a wait_for_build past about {MCP_MAX_WAIT:g} s may be cut off"
            )
        try:
            return ToolLimits(**given)
        except (ValidationError, ValueError, TypeError) as exc:
            # ToolLimits' own checks name the field and the bound; the values are numbers.
            raise self.fail(f"limits: {' '.join(str(exc).split())}") from None

    def copies(self, raw: object) -> CopyHandles:
        if raw is None:
            return CopyHandles()
        if not isinstance(raw, Mapping):
            raise self.fail("copies must be a table: [copies]")
        self.known(raw, tuple(sorted(f.name for f in attrs.fields(CopyHandles))), "copies.")
        for name, value in raw.items():
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise self.fail(f"copies.{name} must be a number")
        try:
            return CopyHandles(**raw)
        except ValidationError as exc:
            # Its checks name the field and the rule; the values are numbers, never secrets.
            raise self.fail(f"copies: {' '.join(str(exc).split())}") from None

    def check_private(self, file: Path) -> None:
        try:
            mode = file.stat().st_mode
        except OSError:
            return
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            self.notes.append(
                f"{file} holds an access token and others may read it: chmod 600 it, or "
                "use access_token_env"
            )


def toolkit_from_config(
    config: McpConfig, *, ssl: ssl_module.SSLContext | bool = True
) -> tuple[Client, Toolkit]:
    """A new `Client` and the `Toolkit` the configuration describes over it (copies answer
    a handle when they take long: `CopyHandles`); the caller closes both (`async with`).

    Args:
        config: from `load_config`.
        ssl: the client's `ssl=` (a context trusting an extra CA, as `--ca-file` gives).

    Raises:
        ConfigError: a value the SDK refuses (a sandbox key or domain that is not a host
            name part, a base URL that is not http(s)).
    """
    try:
        client = Client(
            api_key=config.api_key or _UNUSED_API_KEY,
            base_url=config.base_url or _UNUSED_BASE_URL,
            data_plane_scheme=config.data_plane_scheme,
            ssl=ssl,
        )
    except ValidationError as exc:
        raise ConfigError(f"configuration: {_one_line(exc, config)}") from None
    sandboxes = {}
    for name, ref in config.sandboxes.items():
        try:
            sandboxes[name] = client.sandbox(ref)
        except ValidationError as exc:
            raise ConfigError(f"sandboxes.{name}: {_one_line(exc, config)}") from None
    try:
        toolkit = Toolkit(
            client,
            sandboxes,
            workspace=config.workspace,
            root=config.root,
            limits=config.limits,
            templates=config.templates,
            copy_handles=config.copies,
        )
    except ValidationError as exc:
        raise ConfigError(f"configuration: {_one_line(exc, config)}") from None
    return client, toolkit


def _one_line(exc: BaseException, config: McpConfig) -> str:
    """`exc` as one line with every credential of `config` masked (the SDK shows none; this
    keeps it so whatever a message quotes)."""
    text = " ".join(str(exc).split())
    for secret in config.secrets():
        text = text.replace(secret, "***")
    return text
