"""``homelab ui`` (and ``homelab`` alone): open the TUI.

The CLI and the TUI are independent front-ends (an import-linter contract): this module
never imports ``homelab.ui``. The console entry (:mod:`homelab.entry`, the composition
root) hands :func:`homelab.cli.main` an ``open_ui`` callable; this command parses the
TUI's options and calls it. Without one (``homelab.cli.main`` called directly), the
command says how to open the TUI instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from homelab.errors import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ui",
        help="open the TUI (also what `homelab` alone does)",
        description="See the card, pick a model from a menu, know why it fits, start / stop / "
        "switch it, watch VRAM headroom live.",
    )
    add_ui_arguments(parser)
    parser.set_defaults(func=run)


def add_ui_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpu-snapshot",
        type=Path,
        metavar="FILE",
        help="replay a recorded GPU snapshot instead of probing the card",
    )
    parser.add_argument(
        "--vram", metavar="SIZE", help="plan for a card of this size with nothing else on it"
    )
    parser.add_argument(
        "--models-dir",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also list the GGUFs in this folder (repeatable)",
    )
    parser.add_argument("--port", type=int, metavar="P", help="the engine listens on this port")


def run(args: argparse.Namespace) -> int:
    open_ui = getattr(args, "open_ui", None)
    if open_ui is None:
        raise UsageError(
            "the TUI opens from the `homelab` command (homelab.entry), not from homelab.cli alone",
            hint="Run `homelab` or `python -m homelab`.",
        )
    if args.port is not None and not 1 <= args.port <= 65535:
        raise UsageError(f"The port must be between 1 and 65535, not {args.port}.")
    return int(
        open_ui(
            gpu_snapshot=args.gpu_snapshot,
            vram=args.vram,
            models_dirs=tuple(args.models_dir),
            port=args.port,
        )
    )
