"""An agent's file tool over one sandbox: write a task, read results back, stream a log.

Run it against the standalone emulator, which prints the variables it reads::

    sandboxkit emulator            # in another shell; paste its export lines here
    python examples/agent_tool.py

It needs SANDBOXKIT_BASE_URL, SANDBOXKIT_API_KEY and SANDBOXKIT_DATA_PLANE_SCHEME (the
client reads them) and the sandbox's SANDBOXKIT_SANDBOX_KEY, SANDBOXKIT_SANDBOX_DOMAIN and
SANDBOXKIT_SANDBOX_TOKEN (a create answer's `sandbox_key`, `domain` and
`sandbox_access_token`).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import sandboxkit


async def file_tool(sbx: sandboxkit.Sandbox, workdir: Path) -> str:
    """What an agent framework would register as a tool: every path is checked before any
    request, so a path a model made up fails with ValidationError, never on the server."""
    await sbx.files.upload("/home/user/task.py", b"print('hello')\n")
    await sbx.files.upload("/home/user/log.txt", b"step 1 done\nstep 2 done\n")
    saved = await sbx.files.download("/home/user/task.py", workdir / "task.py")
    log = b""
    async for chunk in sbx.files.iter_bytes("/home/user/log.txt"):
        log += chunk  # a real tool would forward each chunk as it arrives
    task = (await sbx.files.read_bytes("/home/user/task.py")).decode()
    try:
        await sbx.files.read_bytes("../etc/passwd")
    except sandboxkit.ValidationError as refused:
        print("refused before sending:", refused)
    return f"task={task.strip()!r} saved={saved.size}B sha256={saved.sha256[:12]} log={log!r}"


async def main() -> None:
    async with sandboxkit.Client() as client:  # the SANDBOXKIT_* environment
        sbx = client.sandbox(
            sandbox_key=os.environ["SANDBOXKIT_SANDBOX_KEY"],
            domain=os.environ["SANDBOXKIT_SANDBOX_DOMAIN"],
            access_token=os.environ["SANDBOXKIT_SANDBOX_TOKEN"],
        )
        with tempfile.TemporaryDirectory() as workdir:
            print(await file_tool(sbx, Path(workdir)))


if __name__ == "__main__":
    asyncio.run(main())
