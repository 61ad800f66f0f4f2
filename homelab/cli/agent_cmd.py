"""``homelab agent claude|opencode|codex|aider|continue [--print | --check | --json | -- ARGS]``.

Launches the agent pointed at the engine homelab runs (its gate, or the engine served with
``--no-gate``), told the context one request really has there; ``--print`` prints what it
needs instead: ``export`` lines (and the command line when it takes arguments), or
Continue's config block. Warnings go to stderr, so ``eval "$(homelab agent claude
--print)"`` sets the variables in the current shell. The user's own agent config files
are never touched: private files go to homelab's state folder.

Before the hand-off, one short probe of each route the agent speaks checks that the server
answers it with a structured tool call (:mod:`homelab.agents.contract`; ``--no-probe``
skips it), and when one request holds less than the agent accepts, one line says so and
the next offers the plan that gives it enough (:mod:`homelab.agents.shortfall`).
``--check`` runs nothing and exits 0 (the agent will work there), 3 (one request holds
less than it accepts) or 8 (the contract check failed); ``--json`` prints the same as one
object, with the same exit codes. No engine: 6, as everywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from homelab.cli.common import add_snapshot_option
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
        "--check",
        action="store_true",
        help="run nothing: say whether the agent will work there (exit 0), gets less "
        "context than it accepts (3), or fails the contract check (8)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the hand-off as JSON (exit codes of --check)"
    )
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help="skip the contract check (a short tool-call request per route the agent speaks)",
    )
    parser.add_argument(
        "--probe-timeout",
        metavar="S",
        type=float,
        default=None,
        help="seconds each contract probe may take (default 60)",
    )
    parser.add_argument(
        "--vram", metavar="SIZE", help="plan the offered re-plan for a card of this size"
    )
    parser.add_argument("--cpu", action="store_true", help="plan the offered re-plan for RAM")
    add_snapshot_option(parser, help="plan the offered re-plan against a recorded GPU snapshot")
    parser.add_argument(
        "agent_args",
        nargs=argparse.REMAINDER,
        metavar="-- ARGS",
        help="arguments for the agent itself (after --)",
    )
    parser.set_defaults(func=run)


FLAGS = {
    "--print": "print_only",
    "--check": "check",
    "--json": "json",
    "--no-probe": "no_probe",
    "--cpu": "cpu",
}
VALUED = {"--vram": "vram", "--gpu-snapshot": "gpu_snapshot", "--probe-timeout": "probe_timeout"}


def _split(args: argparse.Namespace, rest: list[str]) -> tuple[str, ...]:
    """homelab's own options from what follows the agent's name (set on ``args``), and the
    agent's own arguments.

    argparse hands over everything after the name (a REMAINDER: ``nargs="*"`` would be
    matched empty before ``--``), with a leading ``--`` sometimes already removed: homelab's
    options lead, an optional ``--`` ends them, the rest (from the first word that is not
    one of them) is the agent's.

    Raises:
        UsageError: an option that takes a value ends the line.
    """
    while rest:
        word_ = rest[0]
        if word_ == "--":
            return tuple(rest[1:])
        if word_ in FLAGS:
            setattr(args, FLAGS[word_], True)
            rest = rest[1:]
        elif word_ in VALUED:
            if len(rest) < 2:
                raise UsageError(f"{word_} takes a value")
            value = rest[1]
            setattr(args, VALUED[word_], _value(word_, value))
            rest = rest[2:]
        else:
            break
    return tuple(rest)


def _value(option: str, text: str) -> object:
    """An option's value as argparse would give it (a bad number is checked in :func:`run`)."""
    if option == "--gpu-snapshot":
        return Path(text)
    if option == "--probe-timeout":
        try:
            return float(text)
        except ValueError:
            return float("nan")
    return text


def run(args: argparse.Namespace) -> int:
    """Print the agent's settings (``--print``), judge them (``--check``, ``--json``) or
    replace this process with the agent."""
    from homelab.agents.catalog import agent_kind
    from homelab.agents.engine_target import running_engine
    from homelab.agents.handoff import hand_off
    from homelab.agents.launch import find_program, write_files
    from homelab.paths import state_dir

    kind = agent_kind(args.agent)
    extra = _split(args, list(args.agent_args))
    print_only = args.print_only
    if args.probe_timeout is not None and not 0 < args.probe_timeout < 86_400:
        raise UsageError(
            f"--probe-timeout takes seconds (a number above 0), not {args.probe_timeout}"
        )
    runs_nothing = print_only or args.check or args.json
    if runs_nothing and extra:
        raise UsageError(
            f"--print, --check and --json run nothing, so they take no arguments for the "
            f"agent ({' '.join(extra)})",
            hint=f"drop them, or run `homelab agent {kind.name} -- ARGS` without those",
        )
    try:
        program = None if runs_nothing else find_program(kind)
        record, target = running_engine()
        handed = hand_off(
            kind.name,
            record,
            target,
            _offer_options(args, record),
            probe=not args.no_probe,
            timeout_s=args.probe_timeout,
        )
        state = state_dir()
        write_files(handed.setup, state)
    except HomelabError as error:
        raise worded(error) from None
    if args.json:
        print(json.dumps(handed.to_json(state), indent=2))
        return int(handed.exit_code)
    if args.check:
        print(f"{kind.title} → {target.describe()}")
        for line in report_lines(handed):
            print(line)
        return int(handed.exit_code)
    for line in report_lines(handed):
        print(f"homelab: {line}", file=sys.stderr)
    if program is None:
        return _print_setup(kind.title, handed.setup, state)
    return _launch(kind.title, program, handed.setup, state, extra)


def _offer_options(args: argparse.Namespace, record):
    """The plan options of the offered re-plan: the agent's workload, the card asked."""
    from homelab.agents.catalog import workload_for
    from homelab.cli.plan_cmd import parse_vram
    from homelab.engine.options import plan_options

    return plan_options(
        workload=workload_for(args.agent),
        engine=record.engine,
        vram=parse_vram(args.vram) if args.vram is not None else None,
        cpu=args.cpu,
        gpu_snapshot=args.gpu_snapshot,
        sample_seconds=0.0,
    )


def report_lines(handed) -> list[str]:
    """Warnings, the offer and the contract verdict, one line each."""
    lines = [f"warning: {word(warning)}" for warning in handed.setup.warnings]
    if handed.shortfall is not None:
        lines.append(f"offer: {handed.shortfall.line()}")
    if handed.verdict is not None:
        lines.append(f"agent contract: {handed.verdict.line}")
    return lines


def _print_setup(title: str, setup, state) -> int:
    from homelab.agents.setup import shell_lines

    if setup.config_block is not None:  # it says what it points at in its first line
        print(CONTINUE_NOTE)
        sys.stdout.write(setup.config_block)
        return int(ExitCode.OK)
    print(f"# {title} → {setup.target.describe()}")
    for line in shell_lines(setup, state):
        print(line)
    return int(ExitCode.OK)


def _launch(title: str, program: str, setup, state, extra: tuple[str, ...]) -> int:
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
            title=f"{title} did not start",
        ) from None
    return int(ExitCode.OK)  # pragma: no cover - execve does not return
