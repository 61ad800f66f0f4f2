"""Options and helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_snapshot_option(
    parser: argparse.ArgumentParser,
    help: str = "plan against a recorded GPU snapshot (JSON) instead of the live card",
) -> None:
    """``--gpu-snapshot FILE``: the machine's cards from a recorded snapshot (replayed)."""
    parser.add_argument("--gpu-snapshot", metavar="FILE", type=Path, help=help)


def add_gpu_options(parser: argparse.ArgumentParser) -> None:
    """``--gpu-snapshot FILE`` (replay a recorded card) and ``--sample-seconds S``."""
    add_snapshot_option(parser)
    parser.add_argument(
        "--sample-seconds",
        metavar="S",
        type=float,
        default=2.0,
        help="watch the card this long and plan on the worst moment (default 2)",
    )


def parse_gpus(text: str) -> int | tuple[int, ...]:
    """``--gpu``'s value: one card index (``1``) or a set of them (``0,1``)."""
    parts = [part.strip() for part in text.split(",")]
    for part in parts:
        body = part[1:] if part[:1] in "+-" else part
        if not (body.isascii() and body.isdigit()) or len(body) > 4:
            raise argparse.ArgumentTypeError(
                f"not a card index or a list of them (e.g. 0,1): {text!r}"
            )
        if int(part) < 0:
            raise argparse.ArgumentTypeError(f"must be at least 0, not {int(part)}")
    indices = [int(part) for part in parts]
    if len(set(indices)) != len(indices):
        raise argparse.ArgumentTypeError(f"a card is listed twice: {text!r}")
    return indices[0] if len(indices) == 1 else tuple(indices)


def print_json(value: Any) -> None:
    """One JSON object on stdout."""
    json.dump(value, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
