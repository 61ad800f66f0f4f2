"""``homelab bench``: measure what the running engine really serves (the recipe's step 5).

Loads the engine (and the gate in front of it, when one runs) with more and more
requests at once, watching the first token; prints each level's figures, the verdict
(where compute runs out before memory) and the recommended ``max_concurrent`` / slots,
and stores the result for ``homelab plan`` to show. Ctrl-C stops it and prints what
completed (exit 130).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from homelab.cli.common import print_json
from homelab.errors import ExitCode, HomelabError, UsageError

INTERRUPTED = 130
SETTING_FLAGS = {
    "`prompt_tokens`": "--prompt-tokens",
    "`max_tokens`": "--max-tokens",
    "`turns`": "--turns",
    "`concurrency`": "--concurrency",
    "`time_limit`": "--time-limit",
    "`url`": "--url",
    "`serve`": "`homelab serve`",
    "`status`": "`homelab status`",
    "`ctx`": "--ctx",
    "`slots`": "--parallel",
    "`engine`": "--engine",
}
"""How this CLI words the settings and commands the domain's messages name in backquotes."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure the running engine: TTFT and tokens/s as concurrency grows",
        description="Load the engine homelab runs (or --url) with independent prompts or "
        "agent sessions at growing concurrency, and say where compute runs out.",
    )
    parser.add_argument("--url", help="a llama-server on this machine (default: homelab's engine)")
    parser.add_argument("--workload", choices=("agent", "chat"), default="agent",
                        help="agent sessions (shared system prompt, growing history; default) "
                        "or independent chat prompts (no shared prefix)")  # fmt: skip
    parser.add_argument("--prompt-tokens", type=_positive, metavar="N",
                        help="tokens per prompt (agent: of the shared system prompt); "
                        "default: what one slot holds, up to 1024")  # fmt: skip
    parser.add_argument("--max-tokens", type=_positive, default=32, metavar="M",
                        help="tokens generated per request (default 32)")  # fmt: skip
    parser.add_argument("--concurrency", type=_levels, metavar="1,2,4",
                        help="levels of requests at once (default 1, 2, 4, … up to the slots)")  # fmt: skip
    parser.add_argument("--turns", type=_positive, default=3, metavar="T",
                        help="requests per client at each level (agent turns; default 3)")  # fmt: skip
    parser.add_argument("--time-limit", type=_seconds, default=300.0, metavar="S",
                        help="stop after this many seconds with what completed (default 300)")  # fmt: skip
    parser.add_argument("--svg", type=Path, metavar="FILE",
                        help="also draw TTFT and tokens/s against concurrency into FILE")  # fmt: skip
    parser.add_argument("--no-store", action="store_true", help="do not keep the result")
    parser.add_argument("--ram-bandwidth", action="store_true",
                        help="only measure system RAM's read bandwidth (a few seconds, no "
                        "engine needed) and keep it for the plans' decode estimate")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object (seconds, tokens/s)")
    parser.set_defaults(func=run)


def _positive(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a whole number of at least 1: {text!r}")
    return int(text)


def _levels(text: str) -> tuple[int, ...]:
    return tuple(_positive(part) for part in text.split(",") if part.strip())


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _progress(event: Any) -> None:
    from homelab.measure.progress import BenchStarted, LevelDone, LevelStarted, RequestDone
    from homelab.measure.summary import seconds

    if isinstance(event, BenchStarted):
        via = f" and through the gate at {event.gate_url}" if event.gate_url else ""
        levels = ", ".join(map(str, event.levels))
        print(f"bench: {event.engine_url}{via}; levels {levels}; at most {event.time_limit_s:g} s",
              file=sys.stderr)  # fmt: skip
    elif isinstance(event, LevelStarted):
        print(f"  {event.concurrency} at once ({event.via}): {event.planned} requests",
              file=sys.stderr)  # fmt: skip
    elif isinstance(event, RequestDone):
        print(
            f"    {event.done}/{event.planned} done, TTFT {seconds(event.ttft_s)}", file=sys.stderr
        )
    elif isinstance(event, LevelDone) and not event.result.complete:
        print(f"  {event.result.concurrency} at once: cut short", file=sys.stderr)
    sys.stderr.flush()


def _measure(settings: Any) -> tuple[Any, HomelabError | None, bool]:
    """Run the bench on a worker thread; Ctrl-C here cancels it. Returns (report or None,
    the error it raised or None, interrupted)."""
    from homelab.measure.runner import run_bench

    cancel = threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["report"] = run_bench(settings, on_event=_progress, cancel=cancel)
        except HomelabError as error:
            outcome["error"] = error
        except Exception as error:  # a bug must not hang the CLI: shown, not traced
            outcome["error"] = HomelabError(
                f"{type(error).__name__}: {error}", title="Bench failed"
            )

    interrupted = threading.Event()

    def on_sigint(_signum: int, _frame: object) -> None:
        if interrupted.is_set():  # a second Ctrl-C: leave now
            raise KeyboardInterrupt
        interrupted.set()
        cancel.set()
        print(
            "bench: stopping; keeping what completed (Ctrl-C again to leave now)", file=sys.stderr
        )

    worker = threading.Thread(target=work, name="homelab-bench", daemon=True)
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(0.2)
    finally:
        signal.signal(signal.SIGINT, previous)
    error = outcome.get("error")
    report = outcome.get("report") or getattr(error, "partial", None)
    return report, error, interrupted.is_set()


def _store(target: Any, report: Any) -> str | None:
    """Keep a bench whose levels completed, under its engine's key; the file, or None."""
    from homelab.measure.key import key_for_engine
    from homelab.measure.store import save

    if target.record is None or report.stopped == "cancelled":
        return None
    if not any(level.complete for level in report.levels):
        return None
    key = key_for_engine(target.record, report.engine_version, report.model_path)
    return None if key is None else str(save(key, report.to_dict()))


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except HomelabError as error:  # the domain names settings in backquotes; say flags
        for setting, flag in SETTING_FLAGS.items():
            error.message = error.message.replace(setting, flag)
            error.hint = error.hint and error.hint.replace(setting, flag)
        raise


def _ram_bandwidth(args: argparse.Namespace, *, again: bool) -> None:
    """Measure system RAM's bandwidth and keep it (``again``: even when one is kept)."""
    from homelab.gpu import ram_bandwidth
    from homelab.plan.decode_bound import gb_per_s

    if not again and ram_bandwidth.load() is not None:
        return
    print("bench: measuring system RAM's read bandwidth (a few seconds)…", file=sys.stderr)
    try:
        measured = ram_bandwidth.measure()
        path = ram_bandwidth.save(measured)
    except ram_bandwidth.RamBandwidthError as error:
        if again:
            raise
        print(f"bench: {error.message}; the plans' decode estimate stays unknown in RAM",
              file=sys.stderr)  # fmt: skip
        return
    if args.json and again:
        print_json({"ram_bandwidth": measured.bytes_per_s, "method": measured.method,
                    "stored": str(path)})  # fmt: skip
    else:
        print(f"bench: system RAM reads {gb_per_s(measured.bytes_per_s)} ({measured.method}); "
              f"kept in {path}", file=sys.stderr if not again else sys.stdout)  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    from homelab.measure.settings import BenchSettings
    from homelab.measure.shapes import Workload
    from homelab.measure.target import find_target

    if args.ram_bandwidth:
        _ram_bandwidth(args, again=True)
        return int(ExitCode.OK)
    target = find_target(args.url)
    if not args.no_store and target.record is not None:  # once, with the first stored bench:
        # what the plans' decode estimate divides the bytes read from RAM by
        _ram_bandwidth(args, again=False)
    settings = BenchSettings(
        engine_url=target.engine_url,
        gate_url=target.gate_url,
        api_key=target.api_key,
        engine_key=target.engine_key,
        workload=Workload(args.workload),
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        concurrency=args.concurrency,
        turns=args.turns,
        time_limit_s=args.time_limit,
    )
    report, error, interrupted = _measure(settings)
    stored = (
        None if error is not None or args.no_store or report is None else _store(target, report)
    )
    if report is not None:
        data = report.to_dict()
        data["stored"] = stored
        if args.svg is not None:
            _write_svg(args.svg, data)
        if args.json:
            print_json(data)
        else:
            from homelab.cli.bench_output import print_report

            print_report(report, data, stored)
    if error is not None:
        raise error
    return INTERRUPTED if interrupted else int(ExitCode.OK)


def _write_svg(path: Path, data: dict[str, Any]) -> None:
    from homelab.measure.svg import bench_svg

    try:
        path.write_text(bench_svg(data), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write the picture to {path}: {error.strerror or error}") from None
