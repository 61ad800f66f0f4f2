"""``homelab agent claude|opencode|codex|aider|continue [--print | -- ARGS]``.

Launches the agent pointed at the engine homelab runs (its gate, or the engine served with
``--no-gate``), told the context one request really has there; ``--print`` prints what it
needs instead: ``export`` lines (and the command line when it takes arguments), or
Continue's config block. Warnings go to stderr, so ``eval "$(homelab agent claude
--print)"`` sets the variables in the current shell. The user's own agent config files
are never touched: private files go to homelab's state folder.
"""

from __future__ import annotations

import argparse
import os
import sys

from homelab.cli.stop_status import word, worded
from homelab.errors import ExitCode, HomelabError, UsageError

CONTINUE_NOTE = (
    "# Paste the model into your Continue config.yaml, or save this as "
    ".continue/models/homelab.yaml;\n# `homelab agent continue` runs the `cn` CLI with it."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``agent``."""
    from homelab.agents.catalog import AGENTS

    names = list(AGENTS)
    parser = subparsers.add_parser(
        "agent",
        help="launch a coding agent on the engine, told the context it really has",
        description="Launch Claude Code, OpenCode, Codex, Aider or Continue's CLI pointed at "
        "the engine homelab runs (through its gate), with the context one request can use "
        "there: the per-slot share, or the gate's ceiling for a unified pool. Nothing is "
        "written to the agent's own configuration.",
    )
    parser.add_argument("agent", choices=names, metavar="AGENT", help=", ".join(names))
    parser.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="print the environment / config the agent needs instead of launching it",
    )
    parser.add_argument(
        "agent_args",
        nargs=argparse.REMAINDER,
        metavar="-- ARGS",
        help="arguments for the agent itself (after --)",
    )
    parser.set_defaults(func=run)


def _split(print_only: bool, rest: list[str]) -> tuple[bool, tuple[str, ...]]:
    """``--print`` and the agent's own arguments from what follows the agent's name.

    argparse hands over everything after the name (a REMAINDER: ``nargs="*"`` would be
    matched empty before ``--``), with a leading ``--`` sometimes already removed: a first
    ``--print`` is homelab's, an optional ``--`` ends homelab's words, the rest is the
    agent's.
    """
    if rest[:1] == ["--print"]:
        print_only, rest = True, rest[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return print_only, tuple(rest)


def run(args: argparse.Namespace) -> int:
    """Print the agent's settings (``--print``) or replace this process with the agent."""
    from homelab.agents.catalog import agent_kind, prepare
    from homelab.agents.engine_target import running_target
    from homelab.agents.launch import find_program, write_files
    from homelab.agents.setup import shell_lines
    from homelab.paths import state_dir

    kind = agent_kind(args.agent)
    print_only, extra = _split(args.print_only, list(args.agent_args))
    if print_only and extra:
        raise UsageError(
            f"--print runs nothing, so it takes no arguments for the agent ({' '.join(extra)})",
            hint=f"drop them, or run `homelab agent {kind.name} -- ARGS` without --print",
        )
    try:
        program = None if print_only else find_program(kind)
        target = running_target()
        setup = prepare(kind.name, target)
        state = state_dir()
        write_files(setup, state)
    except HomelabError as error:
        raise worded(error) from None
    for warning in setup.warnings:
        print(f"homelab: warning: {word(warning)}", file=sys.stderr)
    if program is None:
        if setup.config_block is not None:  # it says what it points at in its first line
            print(CONTINUE_NOTE)
            sys.stdout.write(setup.config_block)
            return int(ExitCode.OK)
        print(f"# {kind.title} → {target.describe()}")
        for line in shell_lines(setup, state):
            print(line)
        return int(ExitCode.OK)
    argv = setup.argv(state, extra)
    env = setup.environment(dict(os.environ))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(program, argv, env)
    except OSError as error:
        raise HomelabError(
            f"cannot start {program}: {error.strerror or error}",
            hint=f"check that {program} runs on its own",
            title=f"{kind.title} did not start",
        ) from None
    return int(ExitCode.OK)  # pragma: no cover - execve does not return
