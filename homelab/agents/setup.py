"""What one agent gets: environment, arguments, private files, a config block, warnings.

An :class:`AgentSetup` is computed from an :class:`~homelab.agents.target.AgentTarget` by
the agent's module and holds no I/O: :mod:`homelab.agents.launch` writes its files (into
homelab's state folder, never the user's agent config) and the front-end prints it
(:func:`shell_lines`) or runs the program with it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from homelab.agents.target import AgentTarget


@dataclass(frozen=True, slots=True)
class PrivateFile:
    """A file homelab writes for the agent in its own state folder (``relative`` to it)."""

    relative: str
    text: str


@dataclass(frozen=True, slots=True)
class AgentSetup:
    """How to run one agent against a target."""

    agent: str
    """The agent's name in ``homelab agent NAME``."""
    program: str
    """The command to run (looked up on PATH)."""
    target: AgentTarget
    env: dict[str, str] = field(default_factory=dict)
    """Variables set for the agent (only its own process)."""
    unset: tuple[str, ...] = ()
    """Variables removed from the agent's environment (they would override ``env``)."""
    args: tuple[str, ...] = ()
    """Arguments before the person's own; ``{state}`` stands for homelab's state folder."""
    files: tuple[PrivateFile, ...] = ()
    config_block: str | None = None
    """A block the person pastes into their own config (Continue); printed, never written there."""
    warnings: tuple[str, ...] = ()
    """Why the context may be too small for this agent; hints name settings in backquotes."""

    def argv(self, state: Path, extra: tuple[str, ...] = ()) -> list[str]:
        """The command line: program, homelab's arguments (paths resolved), then ``extra``."""
        return [self.program, *(a.replace("{state}", str(state)) for a in self.args), *extra]

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` (the caller's environment) with ``unset`` removed and ``env`` set."""
        env = {k: v for k, v in base.items() if k not in self.unset}
        env.update(self.env)
        return env


def quoted(text: str) -> str:
    """``text`` as a JSON string: also a TOML basic string (Codex's ``-c`` values) and a YAML
    double-quoted scalar (Continue's config), since JSON's escapes are valid in both."""
    return json.dumps(text, ensure_ascii=False)


def shell_lines(setup: AgentSetup, state: Path) -> list[str]:
    """The setup as POSIX shell text: ``unset``/``export`` lines, then the command line when
    the agent needs arguments (``eval "$(homelab agent claude --print)"`` sets the variables)."""
    lines = [f"unset {name}" for name in setup.unset]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in setup.env.items()]
    if setup.args:
        lines.append(shlex.join(setup.argv(state)))
    return lines
