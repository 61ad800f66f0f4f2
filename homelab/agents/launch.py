"""Running an agent: its program on PATH, and its private files in homelab's state folder.

Files go to ``state_dir()/agents/`` (mode 0600: a config may hold the gate's key), written
atomically and rewritten at each launch; nothing is written where the agent keeps its
own configuration.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from homelab.agents.catalog import AgentKind
from homelab.agents.setup import AgentSetup
from homelab.errors import ExitCode, HomelabError


class AgentNotInstalledError(HomelabError):
    """The agent's program is not on PATH."""

    title = "Agent not installed"
    exit_code = ExitCode.FAILURE


def find_program(kind: AgentKind) -> str:
    """The full path of ``kind``'s program.

    Raises:
        AgentNotInstalledError: it is not on PATH.
    """
    found = shutil.which(kind.program)
    if found is None:
        raise AgentNotInstalledError(
            f"{kind.title} is not installed here: no `{kind.program}` command on PATH",
            hint=f"install it ({kind.install}), or print what it needs with "
            f"`homelab agent {kind.name} --print`",
        )
    return found


def write_files(setup: AgentSetup, state: Path) -> list[Path]:
    """Write the setup's private files under ``state``; their paths."""
    written = []
    for file in setup.files:
        path = state / file.relative
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(file.text)
            os.replace(temp, path)
        except OSError as error:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise HomelabError(
                f"cannot write {path}: {error.strerror or error}",
                hint=f"homelab keeps agent files in {state}; check it is writable",
                title="Cannot write agent files",
            ) from None
        written.append(path)
    return written
