"""House rules checked mechanically: downward imports only, pure modules, complete __all__."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import sandboxkit
from sandboxkit import errors, models

from .ports_support import ephemeral_ports, take_fixed_binds

ROOT = Path(sandboxkit.__file__).parent

# Each layer is a folder (or a few top-level modules), listed bottom up: a module may import
# its own layer and those below it, never one above (see ARCHITECTURE.md). A dotted name
# places a folder or one module; the longest matching name decides.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "models", "rules", "_version"),
    ("_core",),  # pure: never awaits, imports no I/O library
    ("_http",),  # the only aiohttp boundary
    ("_transfer",),  # the engines over one sandbox's data plane
    ("resources",),  # the public resources
    ("client", "_client_config"),
    ("batch", "sync", "__init__"),
    ("agents",),
    ("emulator", "dask"),
    ("cli", "pytest_plugin"),
]
# Pure: the models and errors, and every module of _core.
PURE = LAYERS[0] + LAYERS[1]
# Importers of aiohttp: the boundary, the client (its resolver type), and the programs that
# serve or drive the wire themselves.
AIOHTTP = {"_http", "client", "emulator", "cli", "sync", "dask"}


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


def pure_modules() -> list[str]:
    return [m for m, _ in modules() if m.split(".")[0] in PURE]


@pytest.mark.parametrize("module", pure_modules())
def test_pure_modules_never_await_nor_touch_io_libraries(module: str) -> None:
    """The pure layers (models, errors, `_core/`) have no async code and import neither
    aiohttp, anyio nor asyncio."""
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        assert not isinstance(node, ast.AsyncFunctionDef | ast.Await), f"{module} awaits"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            assert not any(
                n and n.split(".")[0] in {"aiohttp", "anyio", "asyncio"} for n in names
            ), f"{module} imports an I/O library"


def test_every_core_module_is_pure() -> None:
    """The purity test above sees every module of `_core/` (a new one is checked too)."""
    core = sorted(p.stem for p in (ROOT / "_core").glob("*.py") if p.stem != "__init__")
    assert len(core) >= 14
    assert {f"_core.{name}" for name in core} <= set(pure_modules())


def test_aiohttp_only_at_the_boundary() -> None:
    """aiohttp is imported only in `_http/` (the boundary), by `client` (the resolver type),
    and by the emulator, the CLI, the sync facade and the Dask helper."""
    for module, path in modules():
        if module.split(".")[0] in AIOHTTP:
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


ARCHITECTURE = (ROOT.parent / "ARCHITECTURE.md").read_text()


def test_architecture_names_every_layer_and_only_real_files() -> None:
    """ARCHITECTURE.md names every folder of the package (each one a layer, or a program) and
    every top-level module, and every `.py` file it names exists (a bare name: in some
    folder of the package)."""
    named = set(re.findall(r"[\w/]+\.py", ARCHITECTURE))
    folders = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    for folder in folders:
        assert f"{folder}/" in ARCHITECTURE, folder
    for path in ROOT.glob("*.py"):
        if path.name not in {"__main__.py", "__init__.py"}:
            assert path.name in named, path.name
    for name in named:
        if name.startswith("tests/"):
            assert (ROOT.parent / name).exists(), name
            continue
        candidates = [ROOT / name, *(ROOT / folder / name for folder in folders)]
        assert any(c.exists() for c in candidates), name


DESIGN_DOC = ROOT.parent / "docs" / "design.md"
# A citation of the design rules: "docs/design.md section 6", "... sections 5 and 7",
# "... section 6, item 9", wrapped across comment or docstring lines or not.
_GAP = r"(?:\s|#)+"
CITATION = re.compile(
    rf"docs/design\.md{_GAP}sections?{_GAP}(\d+(?:(?:,{_GAP}|{_GAP}and{_GAP})\d+)*)"
    rf"(?:,{_GAP}item{_GAP}(\d+))?"
)
# The documents the code used to cite, which a reader of the repository cannot open (the
# brackets keep this line from matching itself).
GONE = re.compile(r"\b(?:[D]ESIGN|[S]TYLE)(?:\.md)?\b|\.\./[s]hared\b")


def citing_files() -> list[Path]:
    """Every file that may cite the design rules: code, tests, benchmarks, examples, and the
    Markdown at the project's root."""
    top = ROOT.parent
    files = [*top.glob("*.md"), top / "noxfile.py"]
    for folder in (ROOT, top / "tests", top / "benchmarks", top / "examples"):
        files += [p for p in folder.rglob("*") if p.suffix in {".py", ".md"}]
    return sorted(files)


def design_sections() -> dict[int, set[int]]:
    """docs/design.md's numbered sections (`## 5. Retries`), each with its numbered items."""
    assert DESIGN_DOC.is_file(), "docs/design.md, the rules the code cites, is missing"
    sections: dict[int, set[int]] = {}
    current: set[int] | None = None
    for line in DESIGN_DOC.read_text().splitlines():
        if line.startswith("## "):
            heading = re.match(r"## (\d+)\. \S", line)
            current = None
            if heading:
                number = int(heading[1])
                assert number not in sections, f"docs/design.md has two sections {number}"
                current = sections[number] = set()
        elif current is not None and (item := re.match(r"(\d+)\. \S", line)):
            current.add(int(item[1]))
    return sections


def place(path: Path, text: str, match: re.Match[str]) -> str:
    """Where a match sits, for a failure message: file, line and the text matched."""
    line = text.count("\n", 0, match.start()) + 1
    return f"{path.relative_to(ROOT.parent).as_posix()}:{line}: {match[0]!r}"


def test_every_design_citation_names_a_section_of_docs_design_md() -> None:
    """Each "docs/design.md section N" (and "item M") cited in the code, tests, benchmarks,
    examples or root Markdown names a section (and item) docs/design.md has, and nothing
    cites the design or style documents that live outside the repository."""
    sections = design_sections()
    assert sections, "docs/design.md has no numbered section"
    wrong, gone, cited = [], [], 0
    for path in citing_files():
        text = path.read_text()
        gone += [place(path, text, match) for match in GONE.finditer(text)]
        for match in CITATION.finditer(text):
            cited += 1
            item = int(match[2]) if match[2] else None
            for section in map(int, re.findall(r"\d+", match[1])):
                if section not in sections or (item and item not in sections[section]):
                    wrong.append(place(path, text, match))
    assert gone == []
    assert wrong == []
    assert cited >= 25  # the rules are cited; a pattern that found none would prove nothing


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


def _code_strings(tree: ast.AST) -> list[str]:
    """The string constants of a module that are not docstrings (f-strings' pieces
    included)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_environment_variable_names_live_in_one_module() -> None:
    """No module but `_core/environment.py` spells out a `SANDBOXKIT_` variable in its
    code (docstrings may name them); and every name mentioned anywhere (docstrings, the
    README) is one it defines."""
    from sandboxkit._core import environment

    spelled = [
        module
        for module, path in modules()
        if module != "_core.environment"
        and any(environment.PREFIX in text for text in _code_strings(ast.parse(path.read_text())))
    ]
    assert spelled == []
    defined = {getattr(environment, name) for name in environment.__all__ if name.isupper()} - {
        environment.PREFIX
    }
    texts = [path.read_text() for _, path in modules()] + [(ROOT.parent / "README.md").read_text()]
    mentioned = {m for text in texts for m in re.findall(r"\bSANDBOXKIT_[A-Z_]*[A-Z]\b", text)}
    test_suites = {"SANDBOXKIT_RUN_SLOW", "SANDBOXKIT_TEST_LOOP"}  # tests/conftest.py's
    assert mentioned - test_suites <= defined, mentioned - test_suites - defined
    assert len(defined) == 9


def test_the_cli_reaches_no_private_layer_but_the_environment_names() -> None:
    """The CLI imports nothing of `sandboxkit._core`, `_http` or `_transfer` (it is built on
    the public API) but the names of the environment variables it reads."""
    for path in sorted((ROOT / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found = [node.module] if node.module != "sandboxkit._core" else []
                found += [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            private = {n for n in found if n.startswith("sandboxkit._")}
            assert private <= {"sandboxkit._core.environment"}, (path.name, private)


def test_one_default_download_walks_at_most_twelve_modules() -> None:
    """A reader following one `files.download(remote, dest)` with the defaults meets at most
    12 of sandboxkit's modules once the client is warm (issue 39: 22 before the layers were
    folders of one concept each). Counted by `benchmarks/walk.py` (a profile hook recording the
    file of every sandboxkit frame entered, on any thread), in a process of its own."""
    done = subprocess.run(
        [sys.executable, str(ROOT.parent / "benchmarks" / "walk.py"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    warm = json.loads(done.stdout)["warm"]
    assert len(warm) <= 12, warm
    assert "_transfer/download.py" in warm and "resources/files.py" in warm  # it counted
