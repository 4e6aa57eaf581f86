"""The wheel a user installs (issue 30): its distribution name is `sandboxkit-sdk` (the
index's `sandboxkit` is another project), its extras are there, and from a fresh virtual
environment `import sandboxkit`, `python -m sandboxkit` and the `sandboxkit` command work.

The wheel is built from this checkout by the build backend the `test` extra installs (no
download, and no pip needed in the testing environment); the fresh environment borrows the
dependencies of this one through a path file, never this checkout's own `sandboxkit`.
"""

from __future__ import annotations

import email
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from sandboxkit._version import __version__

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # The backend's PEP 517 hook, called in the checkout as a build frontend calls it: no pip
    # (an environment made by uv has none) and no download.
    hook = "import sys, hatchling.build; hatchling.build.build_wheel(sys.argv[1])"
    subprocess.run(
        [sys.executable, "-c", hook, str(out)],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )
    [built] = out.glob("*.whl")
    return built


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_the_wheel_is_sandboxkit_sdk_with_its_extras_and_license(wheel: Path) -> None:
    meta = metadata(wheel)
    assert wheel.name.startswith(f"sandboxkit_sdk-{__version__}-")
    assert (meta["Name"], meta["Version"]) == ("sandboxkit-sdk", __version__)
    assert {"cli", "dask", "otel", "test", "bench"} <= set(meta.get_all("Provides-Extra"))
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("click") and "extra == 'cli'" in r.replace('"', "'") for r in requires)
    assert any(r.startswith("aiohttp") and "extra" not in r for r in requires)
    assert meta["License-Expression"] == "MIT" and meta["License-File"] == "LICENSE"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "sandboxkit/py.typed" in names and "sandboxkit/__main__.py" in names
    assert not [n for n in names if n.startswith("tests/")]


def test_a_fresh_environment_imports_and_runs_it(wheel: Path, tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    # The dependencies (aiohttp, click...) from this environment, appended after the fresh
    # one's own site-packages; a plain path line, so this checkout's editable hook is not run.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = (
        "import importlib.metadata as m, sandboxkit; "
        "print(sandboxkit.__file__); print(m.version('sandboxkit-sdk')); "
        "print(sorted(m.metadata('sandboxkit-sdk').get_all('Provides-Extra')))"
    )
    shown = subprocess.run(
        [str(python), "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,  # not this checkout, whose `sandboxkit` would come first
    ).stdout.splitlines()
    assert shown[0].startswith(site) and shown[1] == __version__
    assert "cli" in shown[2]
    for command in ([str(python), "-m", "sandboxkit"], [str(env / "bin" / "sandboxkit")]):
        done = subprocess.run(
            [*command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        assert "emulator" in done.stdout and "demo" in done.stdout
