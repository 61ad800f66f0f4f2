"""The ``homelab`` command line: argparse subcommands, human output or ``--json``.

Each subcommand lives in its own module with ``register(subparsers)``, which adds
its parser and sets ``func`` to a ``run(args) -> int``. Domain errors are
``HomelabError``s: printed to stderr as one titled paragraph, never a traceback,
and turned into the exit code the error class names (see ``homelab.errors``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from homelab import __version__
from homelab.errors import ExitCode, HomelabError

COMMAND_MODULES = (
    "gpu_cmd",
    "plan_cmd",
    "quants_cmd",
    "pull_cmd",
    "presets_cmd",
    "serve_cmd",
    "engine_cmd",
)
"""Subcommand modules in help order; each has ``register(subparsers)``."""

COMMAND_OWNERS = {
    "gpu": "gpu_cmd",
    "plan": "plan_cmd",
    "quants": "quants_cmd",
    "pull": "pull_cmd",
    "presets": "presets_cmd",
    "serve": "serve_cmd",
    "stop": "serve_cmd",
    "status": "serve_cmd",
    "engine": "engine_cmd",
}
"""The module that registers each command: ``homelab plan ...`` imports and registers only
``plan_cmd``, not every subcommand's imports (start-up time); anything else builds the tree."""


def _command_modules(names: Sequence[str] = COMMAND_MODULES) -> list[object]:
    modules: list[object] = []
    for name in names:
        qualified = f"homelab.cli.{name}"
        try:
            modules.append(importlib.import_module(qualified))
        except ModuleNotFoundError as error:
            if error.name != qualified:  # a real import error inside the module: surface it
                raise
    return modules


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command tree, or only ``command``'s branch when one is named."""
    parser = argparse.ArgumentParser(
        prog="homelab",
        description="Run a local LLM well on one home NVIDIA card.",
    )
    parser.add_argument("--version", action="version", version=f"homelab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    owner = COMMAND_OWNERS.get(command or "")
    for module in _command_modules((owner,) if owner else COMMAND_MODULES):
        module.register(subparsers)  # type: ignore[attr-defined]
    return parser


def report_error(error: HomelabError) -> None:
    """Print an error for a person: title, message, hint; on stderr."""
    print(f"homelab: {error.title}: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"  {error.hint}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``homelab`` console script."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help()
        return int(ExitCode.USAGE)
    try:
        return int(args.func(args))
    except HomelabError as error:
        report_error(error)
        return int(error.exit_code)
    except KeyboardInterrupt:
        print("homelab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return int(ExitCode.OK)
