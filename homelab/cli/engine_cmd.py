"""``homelab engine build|path|version``: build, find and identify llama-server."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import TextIO

from homelab.errors import EngineError


class ProgressPrinter:
    """Build progress on a stream: one line rewritten in place on a terminal, plain lines
    otherwise (logs, CI)."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._open = False

    def __call__(self, fraction: float | None, line: str) -> None:
        text = (
            line
            if fraction is None or line.startswith("[")
            else (f"[{fraction * 100:3.0f}%] {line}")
        )
        if not self.tty:
            print(text, file=self.stream, flush=True)
            return
        width = max(shutil.get_terminal_size((80, 20)).columns - 1, 20)
        if len(text) > width:
            text = text[: width - 1] + "…"
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self._open = True

    def close(self) -> None:
        """End the in-place line so what follows starts on a fresh one."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``engine`` and its subcommands."""
    parser = subparsers.add_parser(
        "engine",
        help="build, find or identify llama-server",
        description="Build, find or identify llama-server.",
    )
    commands = parser.add_subparsers(dest="engine_command", metavar="SUBCOMMAND")
    parser.set_defaults(func=lambda args: _usage(parser))

    build = commands.add_parser(
        "build",
        help="build llama-server from pinned source (once; cached by version)",
        description="Build the pinned llama.cpp llama-server from source and cache it. "
        "Does nothing when that build already exists (unless --force).",
    )
    which = build.add_mutually_exclusive_group()
    which.add_argument(
        "--cuda",
        dest="variant",
        action="store_const",
        const="cuda",
        help="build with CUDA (needs nvcc)",
    )
    which.add_argument(
        "--cpu", dest="variant", action="store_const", const="cpu", help="build for CPU only"
    )
    build.add_argument(
        "--jobs",
        "-j",
        type=_positive_int,
        metavar="N",
        help="parallel compile jobs (default: number of CPUs)",
    )
    build.add_argument("--force", action="store_true", help="rebuild even if already built")
    build.set_defaults(func=run_build, variant=None)

    path = commands.add_parser(
        "path",
        help="print the llama-server homelab would run",
        description="Print the path of the llama-server homelab runs.",
    )
    path.set_defaults(func=run_path)

    version = commands.add_parser(
        "version",
        help="print that llama-server's version",
        description="Print the llama.cpp release (bNNNN-commit) of the llama-server homelab runs.",
    )
    version.set_defaults(func=run_version_cmd)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_build(args: argparse.Namespace) -> int:
    """``homelab engine build``: progress on stderr, the binary's path on stdout."""
    from homelab.engine.llamacpp.build import build_llama_server

    printer = ProgressPrinter(sys.stderr)
    try:
        path = build_llama_server(
            variant=args.variant, jobs=args.jobs, progress=printer, force=args.force
        )
    finally:
        printer.close()
    print(path)
    return 0


def run_path(args: argparse.Namespace) -> int:
    """``homelab engine path``: the binary's path, or exit 6 with a hint."""
    from homelab.engine.llamacpp.locate import find_llama_server

    print(find_llama_server())
    return 0


def run_version_cmd(args: argparse.Namespace) -> int:
    """``homelab engine version``: e.g. ``b11312-0c1e57098``."""
    from homelab.engine.llamacpp.locate import engine_version, find_llama_server

    path = find_llama_server()
    version = engine_version(path)
    if version is None:
        raise EngineError(
            f"could not read a version from `{path} --version`",
            hint="check that this llama-server runs on this machine",
        )
    print(version)
    return 0
