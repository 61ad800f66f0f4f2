"""``homelab gpu``: what the card(s) hold now and at the worst moment of a short window.

Human output by default, one JSON object with ``--json`` (sizes in bytes), a refresh
every second with ``--watch`` (the telemetry poller's sliding window), and ``--record FILE`` to save what NVML says as a
replayable snapshot. Exit 0 when a report was made (the CPU fallback included), 5 when
the probe failed (see ``homelab.errors``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from homelab.cli.common import add_gpu_options, print_json
from homelab.errors import ExitCode, HomelabError
from homelab.gpu.nvml import RealNvml
from homelab.gpu.probe import probe
from homelab.gpu.record import record_snapshot, write_snapshot
from homelab.gpu.replay import ReplayNvml
from homelab.gpu.report import GpuDevice, GpuReport
from homelab.gpu.telemetry import TelemetryPoller
from homelab.plan.budget import device_budget
from homelab.plan.vocabulary import FREE, USABLE
from homelab.units import format_bytes

INTERVAL_S = 0.25
"""Seconds between samples inside the window."""
WATCH_PERIOD_S = 1.0


def register(subparsers: Any) -> None:
    """Add ``homelab gpu`` to the command tree."""
    parser = subparsers.add_parser(
        "gpu",
        help="show the NVIDIA card(s): memory, desktop share, processes",
        description="Watch the NVIDIA card(s) for a short window and show the worst moment: "
        "lowest free memory and highest desktop share.",
    )
    add_gpu_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object (bytes)")
    parser.add_argument(
        "--watch",
        action="store_true",
        help="refresh every second until Ctrl-C (with --json: one line each)",
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        type=Path,
        help="save what NVML reports as a snapshot for --gpu-snapshot (fixtures, bug reports)",
    )
    parser.add_argument("--iterations", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``homelab gpu`` (an error is reported by :func:`homelab.cli.main`)."""
    if args.record is not None:
        return _record(args)
    if args.watch:
        return _watch(args)
    report = probe(
        snapshot=args.gpu_snapshot, window_s=max(args.sample_seconds, 0.0), interval_s=INTERVAL_S
    )
    _show(report, as_json=args.json)
    return int(ExitCode.OK)


def report_dict(report: GpuReport) -> dict[str, Any]:
    """The report as plain JSON values (all sizes in bytes)."""
    data = dataclasses.asdict(report)
    for device, raw in zip(data["devices"], report.devices, strict=True):
        device["homelab_bytes"] = raw.homelab_bytes
        device["usable_bytes"] = device_budget(report, raw.index).usable
    return data


def render(report: GpuReport) -> str:
    """The report for a person."""
    lines: list[str] = []
    if report.source == "cpu":
        lines.append("No usable NVIDIA GPU: planning against system RAM.")
        if report.cpu is not None:
            lines.append(
                f"  RAM total {format_bytes(report.cpu.total)}, "
                f"available {format_bytes(report.cpu.available)}"
            )
    else:
        versions = [f"driver {report.driver or 'n/a'}", f"CUDA {report.cuda_driver or 'n/a'}"]
        lines.append(f"source: {report.source}, " + ", ".join(versions))
    for device in report.devices:
        lines.extend(_render_device(report, device))
    lines.extend(f"warning: {w}" for w in report.warnings)
    if report.note:
        lines.append(f"note: {report.note}")
    return "\n".join(lines)


def _render_device(report: GpuReport, device: GpuDevice) -> list[str]:
    size = format_bytes
    display = {True: "active", False: "inactive", None: "n/a"}[device.display_active]
    budget = device_budget(report, device.index)
    samples = f"{device.samples} sample{'' if device.samples == 1 else 's'}"
    lines = [
        "",
        f"GPU {device.index}: {device.name}" + (f"  ({device.uuid})" if device.uuid else ""),
        f"  total     {size(device.total)}",
        f"  reserved  {size(device.reserved)}",
        f"  used      {size(device.used)}",
        f"  free      {size(device.free)}  ({FREE} now, as the driver reports it)",
        f"  free_min  {size(device.free_min)}  (lowest of {samples} over {report.window_s:g} s)",
        f"  usable    {size(budget.usable)}  ({USABLE}: what a plan may use, the desktop's peak"
        f" and other programs out, {size(budget.headroom)} kept free)",
        f"  desktop   now {size(device.desktop_now)}, peak {size(device.desktop_peak)}",
        f"  display   {display}",
    ]
    if device.processes is None:
        lines.append("  processes n/a")
    elif not device.processes:
        lines.append("  processes none")
    else:
        rows = [("PID", "NAME", "CLASS", "KIND", "MEMORY")] + [
            (str(p.pid), _short(p.name), p.klass, p.kinds, size(p.used_bytes))
            for p in device.processes
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:4])]
            lines.append("    " + "  ".join(cells) + "  " + row[4].rjust(10))
    lines.extend(f"  warning: {w}" for w in device.warnings)
    return lines


def _short(name: str | None, width: int = 40) -> str:
    """A process name that fits a table cell (full names are in ``--json``)."""
    if name is None:
        return "n/a"
    return name if len(name) <= width else name[: width - 3] + "..."


def _show(report: GpuReport, *, as_json: bool, compact: bool = False) -> None:
    if as_json and compact:
        print(json.dumps(report_dict(report)), flush=True)
    elif as_json:
        print_json(report_dict(report))
    else:
        print(render(report), flush=True)


def _watch(args: argparse.Namespace) -> int:
    """Show the telemetry poller's window every second (NVML stays open all along), until
    Ctrl-C or ``--iterations`` rounds. The first round waits for a full window (a replay:
    for its recording). With ``--json``: one line per round."""
    clear = sys.stdout.isatty() and not args.json
    poller = TelemetryPoller(
        snapshot=args.gpu_snapshot,
        interval_s=INTERVAL_S,
        window_s=max(args.sample_seconds, 0.0),
    )
    done = 0
    try:
        poller.start()
        poller.wait(lambda sample: sample.at >= poller.window_s)
        while args.iterations is None or done < args.iterations:
            started = time.monotonic()
            sample = poller.latest
            if poller.failure is not None:
                raise poller.failure
            assert sample is not None
            if clear:
                sys.stdout.write("\x1b[2J\x1b[H")
            _show(sample.report, as_json=args.json, compact=True)
            done += 1
            if args.iterations is None or done < args.iterations:
                time.sleep(max(0.0, WATCH_PERIOD_S - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        poller.stop()
    return int(ExitCode.OK)


def _record(args: argparse.Namespace) -> int:
    backend = ReplayNvml(args.gpu_snapshot) if args.gpu_snapshot else RealNvml()
    snapshot = record_snapshot(backend, max(args.sample_seconds, 0.0), INTERVAL_S)
    try:
        write_snapshot(snapshot, args.record)
    except OSError as error:
        raise HomelabError(
            f"Cannot write the snapshot to {args.record}: {error.strerror or error}.",
            hint="Choose a path in a directory you can write to.",
            title="Cannot record",
        ) from None
    devices = snapshot.get("devices", [])
    init_error = snapshot["init"]["error"]
    what = (
        f"NVML failed to start ({init_error})"
        if init_error
        else f"{len(devices)} GPU(s), {_samples(devices)} sample(s)"
    )
    print(f"Recorded {what} to {args.record}.")
    return int(ExitCode.OK)


def _samples(devices: list[dict[str, Any]]) -> int:
    counts = [len(d["memory_v2"]) for d in devices if isinstance(d.get("memory_v2"), list)]
    return max(counts, default=0)
