"""Run the emulator: ``python -m sandboxkit.emulator [--port N] [--data-port N] [--host H]``."""

from sandboxkit.emulator._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
