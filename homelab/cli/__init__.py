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
from homelab.errors import ExitCode, HomelabError, file_system_error

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
    "worker": "worker_cmd",
    "ui": "ui_cmd",
    "agent": "agent_cmd",
    "bench": "bench_cmd",
}
"""The module that registers each command: ``homelab plan ...`` imports and registers only
``plan_cmd``, not every subcommand's imports (start-up time); anything else builds the tree."""
COMMAND_MODULES = tuple(dict.fromkeys(COMMAND_OWNERS.values()))
"""Subcommand modules in help order; each has ``register(subparsers)``."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command tree, or only ``command``'s branch when one is named."""
    parser = argparse.ArgumentParser(
        prog="homelab",
        description="Run a local LLM well on one home NVIDIA card.",
    )
    parser.add_argument("--version", action="version", version=f"homelab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    owner = COMMAND_OWNERS.get(command or "")
    for name in (owner,) if owner else COMMAND_MODULES:
        importlib.import_module(f"homelab.cli.{name}").register(subparsers)
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
    the TUI. Without it, ``homelab`` alone prints the help (exit 2) as before. The TUI's
    own words (nothing, ``ui ...``, or its options) are parsed by the ``ui`` parser alone,
    without loading every subcommand first: the app's first frame waits for this.
    """
    words = sys.argv[1:] if argv is None else list(argv)
    if open_ui is not None and _opens_ui(words):
        from homelab.cli import ui_cmd

        ui_parser = argparse.ArgumentParser(
            prog="homelab ui", description="Open the TUI (what `homelab` alone does)."
        )
        ui_cmd.add_ui_arguments(ui_parser)
        args = ui_parser.parse_args(words[1:] if words[:1] == ["ui"] else words)
        args.open_ui = open_ui
        return _call(ui_cmd.run, args)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(words)
    args.open_ui = open_ui
    args.words = words  # as typed: `serve --detach` hands them to its keeper
    if not getattr(args, "func", None):
        parser.print_help()
        return int(ExitCode.USAGE)
    return _call(args.func, args)


def _opens_ui(words: list[str]) -> bool:
    """No command, ``ui``, or a leading option that is not ``homelab``'s own."""
    return not words or words[0] == "ui" or (words[0].startswith("-") and words[0] not in _GLOBAL)


def _call(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return int(func(args))
    except HomelabError as error:
        report_error(error)
        return int(error.exit_code)
    except KeyboardInterrupt:
        print("homelab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return int(ExitCode.OK)
    except OSError as error:  # the file system said no (a folder that is a file, a full disk)
        failure = file_system_error(error)
        report_error(failure)
        return int(failure.exit_code)
