"""The `sandboxkit` console script: templates, builds, files, the emulator, and the demo.

Needs the `cli` extra (`pip install 'sandboxkit-sdk[cli]'`: click and rich). Built on the public
API only (`sandboxkit`, `sandboxkit.rules`, `sandboxkit.emulator`), and the names of the
environment variables it reads (`sandboxkit._core.environment`). Its options are the SDK's
parameter names (`_core/vocabulary.py`); a former spelling is a hidden alias (`_app.Renamed`).
"""

from __future__ import annotations

import sys

try:
    import click as _click  # noqa: F401  (only probing that the extra is installed)
    import rich as _rich  # noqa: F401
except ImportError as _missing:  # pragma: no cover - depends on the installation
    _REASON = str(_missing)

    def main() -> None:
        """Explain how to install the CLI's dependencies."""
        sys.exit(
            f"the sandboxkit CLI needs its extra: pip install 'sandboxkit-sdk[cli]' ({_REASON})"
        )

else:
    from ._app import cli, main
    from ._commands import builds, emulator, templates
    from ._demo import demo
    from ._files import files
    from ._mcp import mcp

    for _command in (templates, builds, files, emulator, demo, mcp):
        cli.add_command(_command)

__all__ = ["cli", "main"]
