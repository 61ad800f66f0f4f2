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
from collections.abc import Callable, Sequence

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
    "ui_cmd",
)
"""Subcommand modules in help order; each has ``register(subparsers)``."""


def _command_modules() -> list[object]:
    modules = []
    for name in COMMAND_MODULES:
        qualified = f"homelab.cli.{name}"
        try:
            modules.append(importlib.import_module(qualified))
        except ModuleNotFoundError as error:
            if error.name != qualified:  # a real import error inside the module: surface it
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    parser = argparse.ArgumentParser(
        prog="homelab",
        description="Run a local LLM well on one home NVIDIA card.",
    )
    parser.add_argument("--version", action="version", version=f"homelab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        module.register(subparsers)  # type: ignore[attr-defined]
    return parser


_GLOBAL = ("-h", "--help", "--version")
"""Options of ``homelab`` itself; any other leading option belongs to the TUI (``ui``)."""


def report_error(error: HomelabError) -> None:
    """Print an error for a person: title, message, hint; on stderr."""
    print(f"homelab: {error.title}: {error.message}", file=sys.stderr)
    if error.hint:
        print(f"  {error.hint}", file=sys.stderr)


def main(argv: Sequence[str] | None = None, *, open_ui: Callable[..., int] | None = None) -> int:
    """The command line; ``homelab`` alone opens the TUI through ``open_ui``.

    ``open_ui`` comes from the console entry (``homelab.entry``): the CLI never imports
    the TUI. Without it, ``homelab`` alone prints the help (exit 2) as before.
    """
    parser = build_parser()
    words = sys.argv[1:] if argv is None else list(argv)
    if open_ui is not None and words and words[0].startswith("-") and words[0] not in _GLOBAL:
        words = ["ui", *words]  # `homelab --gpu-snapshot F` is `homelab ui --gpu-snapshot F`
    args = parser.parse_args(words)
    args.open_ui = open_ui
    if not getattr(args, "func", None):
        if open_ui is None:
            parser.print_help()
            return int(ExitCode.USAGE)
        args = parser.parse_args(["ui"])
        args.open_ui = open_ui
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
