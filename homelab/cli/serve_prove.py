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


def add_memory_limit_argument(parser: argparse.ArgumentParser) -> None:
    """``--engine-memory-limit SIZE`` (every command that plans: a miss is kept per limit)
    and ``--cache-ram SIZE`` (the prompt cache a limit leaves room for, or the person's)."""
    parser.add_argument(
        "--engine-memory-limit",
        metavar="SIZE",
        help="cap the engine's memory (address space), e.g. 12GiB, so it cannot swap the "
        "desktop; an allocation past it fails in the engine and serve heals to a smaller plan",
    )

    parser.add_argument(
        "--cache-ram",
        metavar="SIZE",
        help="llama-server's host-RAM prompt cache, e.g. 2GiB, 0 for off (default: sized "
        "under --engine-memory-limit when one is set, else llama-server's 8 GiB)",
    )


def memory_limit_of(args: argparse.Namespace) -> int | None:
    """``--engine-memory-limit`` in bytes; None when not given.

    Raises:
        UsageError: it is not a size.
    """
    return _size_of(args, "engine_memory_limit")


def cache_ram_of(args: argparse.Namespace) -> int | None:
    """``--cache-ram`` in bytes; None when not given.

    Raises:
        UsageError: it is not a size.
    """
    return _size_of(args, "cache_ram")


def _size_of(args: argparse.Namespace, name: str) -> int | None:
    from homelab.errors import UsageError
    from homelab.units import parse_size

    text = getattr(args, name, None)
    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as error:
        flag = "--" + name.replace("_", "-")
        raise UsageError(f"{flag}: {error}") from None
