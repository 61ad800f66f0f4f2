"""``homelab engine build|path|version``: build, find and identify llama-server."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from homelab.cli.common import add_snapshot_option
from homelab.errors import EngineError

if TYPE_CHECKING:
    from homelab.gpu.report import GpuReport


class ProgressPrinter:
    """Build progress on a stream: one line rewritten in place on a terminal, plain lines
    otherwise (logs, CI)."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._open = False
        self._last: str | None = None

    def __call__(self, fraction: float | None, line: str) -> None:
        text = (
            line
            if fraction is None or line.startswith("[")
            else (f"[{fraction * 100:3.0f}%] {line}")
        )
        if text == self._last:  # said again (a wait for another build's lock): said once
            return
        self._last = text
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


CARDS_FROM_SNAPSHOT = "the machine's cards from a recorded GPU snapshot instead of the live driver"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``engine`` and its subcommands."""
    parser = subparsers.add_parser(
        "engine",
        help="build, fetch, find or identify llama-server",
        description="Build, fetch, find or identify llama-server.",
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
        help="build with CUDA (the system's toolkit, else NVIDIA's toolkit wheels, ~1.1 GB "
        "once); the default where an NVIDIA driver is",
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
    add_snapshot_option(build, CARDS_FROM_SNAPSHOT)
    build.set_defaults(func=run_build, variant=None)

    fetch = commands.add_parser(
        "fetch",
        help="fetch llama.cpp's official prebuilt release of the pinned build (seconds)",
        description="Download the official prebuilt llama-server of the pinned llama.cpp "
        "release (CUDA 13, CUDA 12 or Vulkan, by the driver), check its sha256, and keep it "
        "beside homelab's own builds.",
    )
    fetch.add_argument(
        "--flavour",
        choices=("cuda-13.4", "cuda-12.8", "vulkan"),
        help="which archive (default: the newest CUDA this driver runs, else Vulkan)",
    )
    fetch.add_argument("--force", action="store_true", help="install again even if there")
    add_snapshot_option(fetch, CARDS_FROM_SNAPSHOT)
    fetch.set_defaults(func=run_fetch)

    path = commands.add_parser(
        "path",
        help="print the llama-server homelab would run (and its backend, on stderr)",
        description="Print the path of the llama-server homelab runs; what it computes on "
        "(CUDA, Vulkan or the CPU, from its own --list-devices) goes to stderr.",
    )
    path.set_defaults(func=run_path)

    version = commands.add_parser(
        "version",
        help="print that llama-server's version",
        description="Print the llama.cpp release (bNNNN-commit) of the llama-server homelab runs.",
    )
    version.set_defaults(func=run_version_cmd)


def _card(snapshot: Path | None) -> GpuReport | None:
    """The machine's cards (one quick look), or None where NVML cannot say."""
    from homelab.errors import GpuProbeError
    from homelab.gpu.probe import probe

    try:
        return probe(snapshot=snapshot, window_s=0.0)
    except GpuProbeError:
        if snapshot is not None:
            raise
        return None


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
        card = _card(args.gpu_snapshot) if args.gpu_snapshot is not None else None
        path = build_llama_server(
            variant=args.variant, jobs=args.jobs, progress=printer, force=args.force, card=card
        )
    finally:
        printer.close()
    print(path)
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    """``homelab engine fetch``: progress on stderr, the binary's path on stdout."""
    from homelab.engine.llamacpp.release import fetch_release

    card = _card(args.gpu_snapshot)
    printer = ProgressPrinter(sys.stderr)
    try:
        path = fetch_release(
            flavour=args.flavour,
            cuda_driver=None if card is None else card.cuda_driver,
            has_card=card is not None and bool(card.devices),
            progress=printer,
            force=args.force,
        )
    finally:
        printer.close()
    print(path)
    return 0


def run_path(args: argparse.Namespace) -> int:
    """``homelab engine path``: the binary's path, or exit 6 with a hint."""
    from homelab.engine.llamacpp.backend import backend_of
    from homelab.engine.llamacpp.locate import find_llama_server

    path = find_llama_server()
    print(path)
    found = backend_of(path)
    print(
        f"backend: {found.describe() if found else 'unknown (it did not list its devices)'}",
        file=sys.stderr,
    )
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
