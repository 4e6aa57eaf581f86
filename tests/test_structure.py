"""House rules checked mechanically: downward imports only, pure modules, complete __all__."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import socket
import sys
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit import errors, models

from .ports_support import ephemeral_ports, take_fixed_binds

ROOT = Path(sandboxkit.__file__).parent

# Higher layers may import lower ones and their own, never the reverse (DESIGN section 3).
# A dotted name places one module of a package; the longest matching name decides.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "models", "_version", "_record_decoder", "_read_models"),
    ("_config", "_protocol", "_convert", "_operations", "_proxies"),
    ("_answers", "_retry", "_validation", "_cursors", "_resume", "_events", "_slices", "_bounds"),
    ("_pools", "_circuits", "_cancel", "_translate", "_localhost", "_telemetry", "_ring", "_forks"),
    ("_links", "_connections"),
    ("_bodies", "_forms"),
    ("_lean",),
    ("_host_request",),
    ("_transport",),
    ("_calls",),
    ("resources._common", "resources._plane", "resources._partial", "resources._file_sink"),
    ("resources._download", "resources._upload", "resources._reads"),
    ("resources._inplace",),
    ("resources._ranged",),
    ("resources.files", "resources.templates", "resources.v1_infra", "resources.v1"),
    ("resources.sandbox", "resources.__init__", "resources"),
    ("client", "_client_config"),
    ("batch", "sync", "_sync_loop", "__init__"),
    ("agents",),
    ("emulator", "dask"),
    ("cli", "pytest_plugin"),
]
PURE = LAYERS[0] + LAYERS[1] + LAYERS[2]


def layer_of(module: str) -> int:
    parts = module.split(".")
    for size in range(len(parts), 0, -1):
        name = ".".join(parts[:size])
        for rank, names in enumerate(LAYERS):
            if name in names:
                return rank
    raise AssertionError(f"sandboxkit.{module} has no layer in tests/test_structure.py")


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        found.append((".".join(rel.parts), path))
    return found


def imported_sandboxkit_modules(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                if not node.module:
                    out.update(f"{target}.{a.name}".strip(".") for a in node.names)
                else:
                    out.add(target)
            elif node.module == "sandboxkit":
                out.update(
                    a.name
                    for a in node.names
                    if (ROOT / a.name).is_dir() or (ROOT / f"{a.name}.py").exists()
                )
            elif node.module and node.module.startswith("sandboxkit."):
                out.add(node.module.removeprefix("sandboxkit."))
        elif isinstance(node, ast.Import):
            out.update(
                a.name.removeprefix("sandboxkit.")
                for a in node.names
                if a.name.startswith("sandboxkit.")
            )
    return {m for m in out if m and m != "__init__"}


@pytest.mark.parametrize(("module", "path"), modules(), ids=[m for m, _ in modules()])
def test_imports_point_downward(module: str, path: Path) -> None:
    """No module imports one from a higher layer."""
    if module.endswith("__main__") or module == "__init__":
        return
    own = layer_of(module)
    for target in imported_sandboxkit_modules(module, path):
        assert layer_of(target) <= own, f"{module} imports higher layer {target}"


@pytest.mark.parametrize("name", [n for n in PURE if (ROOT / f"{n}.py").exists()])
def test_pure_modules_never_await_nor_touch_io_libraries(name: str) -> None:
    """The protocol core has no async code and does not import aiohttp, anyio or asyncio."""
    tree = ast.parse((ROOT / f"{name}.py").read_text())
    for node in ast.walk(tree):
        assert not isinstance(node, ast.AsyncFunctionDef | ast.Await), f"{name} awaits"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            assert not any(
                n and n.split(".")[0] in {"aiohttp", "anyio", "asyncio"} for n in names
            ), f"{name} imports an I/O library"


def test_aiohttp_only_at_the_boundary() -> None:
    """aiohttp is imported only by the boundary (_translate, _bodies, _forms, _lean,
    _host_request, _transport, and _localhost: the default resolver is an aiohttp resolver),
    client (the resolver type) and the emulator."""
    allowed = {"_translate", "_bodies", "_forms", "_lean", "_host_request", "_transport"}
    allowed |= {"_connections", "_localhost", "client"}
    for module, path in modules():
        if module.split(".")[0] in {"emulator", "cli", "sync", "dask"} or module in allowed:
            continue
        text = path.read_text()
        assert "import aiohttp" not in text and "from aiohttp" not in text, module


def isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions."""
    if name.isupper() or (name.upper() == name and "_" in name):
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


def test_all_is_sorted_and_complete() -> None:
    """sandboxkit.__all__ is sorted, resolvable, and exports every error and model."""
    names = sandboxkit.__all__
    assert names == sorted(names, key=isort_key)
    for name in names:
        assert hasattr(sandboxkit, name), name
    wanted = (set(errors.__all__) - {"Surface"}) | (set(models.__all__) - {"Resources"})
    wanted -= {"ArtifactState", "BuildTrigger"}
    assert wanted <= set(names), wanted - set(names)


def test_every_private_module_declares_all() -> None:
    """Every module under sandboxkit declares a sorted __all__."""
    for info in pkgutil.walk_packages([str(ROOT)], "sandboxkit."):
        if info.name.endswith("__main__") or ".emulator" in info.name or info.ispkg:
            continue
        module = importlib.import_module(info.name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, info.name
        assert list(exported) == sorted(exported, key=isort_key), info.name


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of other sandboxkit modules (a package stands for its __init__),
    type-checking and function-level imports included."""
    names = {module for module, _ in modules()}

    def node(target: str) -> str | None:
        for candidate in (target, f"{target}.__init__"):
            if candidate in names:
                return candidate
        return None

    graph: dict[str, set[str]] = {}
    for module, path in modules():
        targets = {node(t) for t in imported_sandboxkit_modules(module, path)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def test_no_import_circles() -> None:
    """No chain of imports leads a module back to itself (a circle hides which layer is which)."""
    graph = import_graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


MAX_MODULE_LINES = 450  # STYLE: a module is read in one sitting; split by job past this


@pytest.mark.parametrize(("module", "path"), modules(), ids=[m for m, _ in modules()])
def test_modules_are_small_enough_to_read_in_one_sitting(module: str, path: Path) -> None:
    """No module under sandboxkit/ is longer than MAX_MODULE_LINES lines."""
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES, module


ARCHITECTURE = (ROOT.parent / "ARCHITECTURE.md").read_text()


def test_architecture_names_every_module_and_only_real_ones() -> None:
    """ARCHITECTURE.md's layer map names every module outside the emulator and CLI packages,
    and every `.py` file it names exists."""
    named = set(re.findall(r"[\w/]+\.py", ARCHITECTURE))
    for module, path in modules():
        if module.split(".")[0] in {"emulator", "cli"} or path.name == "__main__.py":
            continue
        if module == "resources.__init__":
            continue  # the package marker: it defines nothing
        rel = path.relative_to(ROOT).as_posix()
        short = rel.removeprefix("resources/")
        assert rel in named or short in named or path.name in named, rel
    for name in named:
        if name.startswith("tests/"):
            assert (ROOT.parent / name).exists(), name
            continue
        candidates = [ROOT / name, ROOT / "resources" / name, ROOT / "agents" / name]
        assert any(c.exists() for c in candidates), name


TESTS = Path(__file__).parent


def fixtures_defined_in(path: Path) -> list[str]:
    """The names of the pytest fixtures a file under tests/ defines (`name=` wins if given)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            if ast.unparse(call.func if call else decorator) not in {"pytest.fixture", "fixture"}:
                continue
            given = [
                k.value.value
                for k in (call.keywords if call else [])
                if k.arg == "name" and isinstance(k.value, ast.Constant)
            ]
            names.append(str(given[0]) if given else node.name)
    return names


def test_each_fixture_name_is_defined_once() -> None:
    """No two fixtures under tests/ share a name, so a fixture name means one thing everywhere
    (shared ones live in tests/conftest.py; a variant gets a name of its own)."""
    where: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        for name in fixtures_defined_in(path):
            where.setdefault(name, []).append(path.relative_to(TESTS).as_posix())
    assert {name: files for name, files in where.items() if len(files) > 1} == {}


def test_no_file_under_tests_imports_a_fixture() -> None:
    """Fixtures reach tests through conftest.py, never by importing one from another module
    (an imported fixture is silently registered a second time in the importing module)."""
    fixtures = {name for path in TESTS.rglob("*.py") for name in fixtures_defined_in(path)}
    imported = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 0 and not (node.module or "").startswith("tests"):
                continue  # not one of our modules: sandboxkit, pytest, aiohttp...
            rel = path.relative_to(TESTS).as_posix()
            imported += [f"{rel}: {a.name}" for a in node.names if a.name in fixtures]
    assert imported == []


def test_a_bind_to_a_fixed_port_is_recorded_for_no_fixed_port() -> None:
    """What the no_fixed_port fixture fails a test for: a bind to a port neither 0 nor
    ephemeral, in either family; a real bind to port 0 and a rebind of an ephemeral port
    are fine."""
    ports = ephemeral_ports()
    if ports is None:
        pytest.skip("the ephemeral range is known on Linux only")
    # The events sock.bind() raises before it binds: the test takes no fixed port itself.
    with socket.socket() as v4, socket.socket(socket.AF_INET6) as v6:
        sys.audit("socket.bind", v4, ("127.0.0.1", 8787))
        sys.audit("socket.bind", v4, ("127.0.0.1", ports[0]))
        sys.audit("socket.bind", v6, ("::1", ports[-1], 0, 0))
        sys.audit("socket.bind", v6, ("::1", 8000, 0, 0))
        v4.bind(("127.0.0.1", 0))
    assert take_fixed_binds() == [("127.0.0.1", 8787), ("::1", 8000)]
