"""``homelab serve``'s launch proof and heal: their flags (``--prove``, the memory limit, the
prompt cache)."""

from __future__ import annotations

import argparse


def add_prove_arguments(serve: argparse.ArgumentParser) -> None:
    """``--prove/--no-prove`` (``serve`` only)."""
    serve.add_argument(
        "--prove",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after ready, fill the largest slot once and watch memory before announcing it; "
        "an out-of-memory restarts on a smaller plan (default: on for a GPU plan, off for CPU)",
    )
