"""``homelab serve MODEL``, ``homelab stop``, ``homelab status``: run the plan, manage what runs.

``serve`` prints the plan, starts llama-server with its flags under the
supervisor, says when it is ready (with the URL), shows predicted vs actual
memory and records the measured compute buffer for the next plan, then keeps a
compact live status line until Ctrl-C, which stops the engine cleanly. With
``--detach`` it returns once the engine is ready and leaves it running; the next
``homelab serve`` of the same model adopts it, ``homelab stop`` stops it.

One engine at a time: a running homelab engine is adopted (same model, nobody
else supervising), replaced (``--replace``), or the command refuses and says
what runs where.

Exit codes: 0 when it ran and was stopped (Ctrl-C, ``homelab stop``); a failed
start exits with the failure's code (3 does not fit, 4 bad model file, 6 engine).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from homelab.cli.plan_cmd import add_plan_arguments
from homelab.cli.serve_output import (
    Narrator,
    StatusLine,
    duration,
    ignore_interrupts,
    signals_interrupt,
    watch_status,
)
from homelab.cli.stop_status import register_stop_status
from homelab.cli.vllm_cmd import add_engine_option
from homelab.errors import ExitCode, UsageError

DEFAULT_PORT = 8080
"""llama-server's default, as ``homelab.engine.llamacpp.argv`` has it (not imported: it loads the planner)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve``, ``stop`` and ``status``."""
    serve = subparsers.add_parser(
        "serve",
        help="plan, start and supervise llama-server for a model",
        description="Plan MODEL for this card, start llama-server with those flags, wait until it "
        "answers, and keep it running (restarts after a crash) until Ctrl-C.",
    )
    serve.add_argument(
        "model",
        help="a .gguf file, a preset name (`homelab presets`), or REPO[:QUANT] / REPO/FILE.gguf "
        "(downloaded first when not in the HF cache); with --engine vllm a model folder or cached repo",
    )
    add_plan_arguments(serve)
    add_engine_option(serve)
    serve.set_defaults(port=None)  # None = not pinned: a taken 8080 moves to the next free port
    for action in serve._actions:
        if action.dest == "port":
            action.help = (
                f"listen on this port (default {DEFAULT_PORT}, or the next free one; "
                "a port given here is never moved)"
            )
    serve.add_argument(
        "--detach",
        action="store_true",
        help="leave the engine running when homelab exits (stop it with `homelab stop`)",
    )
    serve.add_argument(
        "--replace",
        action="store_true",
        help="stop a running homelab engine first (instead of adopting or refusing)",
    )
    serve.add_argument(
        "--start-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="give up when it is not ready after S seconds (default 600)",
    )
    serve.set_defaults(func=run_serve)

    register_stop_status(subparsers)


# -- serve -----------------------------------------------------------------------------


def run_serve(args: argparse.Namespace) -> int:
    """``homelab serve``."""
    from homelab.engine.supervision.ownership import decide, stop_engine
    from homelab.engine.supervision.state_file import StateFile

    if args.start_timeout <= 0:
        raise UsageError("--start-timeout must be positive")
    if args.engine == "vllm":
        model_path = Path(args.model)
    else:
        model_path = local_model(args)
    store = StateFile()
    supervisor = plan = model = None
    with signals_interrupt():
        try:
            with store.claim():
                existing = store.live()
                if (
                    existing is not None
                    and decide(existing, str(model_path), replace=args.replace) == "adopt"
                ):
                    supervisor = _adopter(existing, args, store)
                    supervisor.adopt(existing)
                else:
                    if existing is not None:
                        print(
                            f"replacing {existing.engine} pid {existing.pid} "
                            f"({existing.model}) at {existing.url}"
                        )
                        stop_engine(store, existing)
                    if args.engine == "vllm":
                        supervisor = _planned_vllm(args, store)
                    else:
                        supervisor, plan, model = _planned(args, model_path.absolute(), store)
                    supervisor.start()
                    _say_started(supervisor)
            return _serve(supervisor, args, plan, model)
        except KeyboardInterrupt:
            return _interrupted(supervisor)
        finally:
            if (
                supervisor is not None
                and not supervisor.released
                and not supervisor.wait_stopped(0)
            ):
                with ignore_interrupts():
                    supervisor.stop()


def _planned(args: argparse.Namespace, model_path: Path, store):
    """Plan and print the plan; a supervisor ready to start it; (supervisor, plan, model)."""
    from homelab.cli.plan_cmd import plan_from_args, print_plan
    from homelab.engine.llamacpp.diagnose import llama_server_profile
    from homelab.engine.llamacpp.locate import find_llama_server
    from homelab.engine.supervision.ports import LOOPBACK, choose_port
    from homelab.engine.supervision.supervisor import EngineSpec, Supervisor
    from homelab.gguf.model_file import read_model

    binary = find_llama_server()
    pinned = args.port is not None
    choice = choose_port(LOOPBACK, args.port if pinned else DEFAULT_PORT, pinned=pinned)
    args.port = choice.port
    model = read_model(model_path)
    plan, argv = plan_from_args(args, model=model, model_path=str(model_path))
    argv = [str(binary), *argv[1:]]
    print_plan(plan, argv)
    if choice.note():
        print(choice.note())
    spec = EngineSpec(
        argv=tuple(argv),
        model=str(model_path),
        host=LOOPBACK,
        port=choice.port,
        port_pinned=pinned,
        detached=args.detach,
        start_timeout_s=args.start_timeout,
    )
    supervisor = Supervisor(spec, llama_server_profile(plan, model_path.name), state_file=store)
    supervisor.subscribe(Narrator())
    print(f"starting {binary.name}...", flush=True)
    return supervisor, plan, model


def local_model(args: argparse.Namespace) -> Path:
    """The .gguf to serve: a file as given, else a preset or a Hub reference, pulled if needed.

    A preset also brings its workload hint unless ``--workload`` was given.
    """
    from homelab.hub.model_ref import local_or_ref

    if (path := local_or_ref(args.model)) is not None:  # a folder, FIFO, /dev/zero: its error
        return path
    ref = args.model
    if "/" not in ref:
        from homelab.hub.presets import find_preset

        preset = find_preset(ref)
        if preset.engine != "llama.cpp":
            raise UsageError(
                f"preset {preset.key} runs on {preset.engine}",
                hint=f"homelab serve --engine {preset.engine} {preset.repo}",
            )
        if args.workload is None:
            workload = preset.workload
            args.workload = (
                workload.name
                if workload.name in ("agent", "chat")
                else str(workload.tokens_per_slot)
            )
        print(f"preset {preset.key}: {preset.name} ({preset.ref})", flush=True)
        ref = preset.ref
    import sys

    from homelab.cli.pull_cmd import ProgressBar
    from homelab.hub.download import pull

    bar = ProgressBar(sys.stderr)
    try:
        pulled = pull(ref, progress=bar)
    finally:
        bar.finish()
    if pulled.note:
        print(pulled.note)
    return pulled.paths[0]


def _planned_vllm(args: argparse.Namespace, store):
    """Price vLLM, print the plan, and a supervisor ready to start ``vllm serve``."""
    from homelab.cli.vllm_cmd import (
        DEFAULT_VLLM_PORT,
        print_vllm_plan,
        vllm_argv_for,
        vllm_executable,
        vllm_plan_from_args,
    )
    from homelab.engine.supervision.ports import LOOPBACK, choose_port
    from homelab.engine.supervision.supervisor import EngineSpec, Supervisor
    from homelab.engine.vllm.profile import vllm_profile

    plan = vllm_plan_from_args(args)
    executable = vllm_executable()
    pinned = args.port is not None
    choice = choose_port(LOOPBACK, args.port if pinned else DEFAULT_VLLM_PORT, pinned=pinned)
    argv = vllm_argv_for(plan, choice.port, executable)
    print_vllm_plan(plan, argv)
    if choice.note():
        print(choice.note())
    spec = EngineSpec(
        argv=tuple(argv),
        model=str(args.model),
        host=LOOPBACK,
        port=choice.port,
        port_pinned=pinned,
        detached=args.detach,
        start_timeout_s=args.start_timeout,
    )
    profile = vllm_profile()
    if args.gpu is not None:
        # vLLM uses the first visible device: show it only the planned one, numbered as NVML
        # numbers cards (PCI bus order), not CUDA's fastest-first order.
        from dataclasses import replace

        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(args.gpu)}
        profile = replace(profile, env=env)
    supervisor = Supervisor(spec, profile, state_file=store)
    supervisor.subscribe(Narrator())
    print(
        "starting vllm (a first start takes minutes: weights, compile, CUDA graphs)...", flush=True
    )
    return supervisor


def _say_started(supervisor) -> None:
    moved = supervisor.port_choice
    if moved is not None and moved.port != supervisor.spec.port:
        print(f"port {supervisor.spec.port} was taken meanwhile; using port {moved.port} instead")
    print(f"pid {supervisor.pid}, log {supervisor.log_path}", flush=True)


def _adopter(record, args: argparse.Namespace, store):
    """A supervisor for the recorded engine (not yet adopting)."""
    from homelab.engine.llamacpp.diagnose import llama_server_profile
    from homelab.engine.supervision.supervisor import EngineSpec, Supervisor

    spec = EngineSpec(
        argv=record.argv,
        model=record.model,
        host=record.host,
        port=record.port,
        port_pinned=True,
        detached=record.detached,
        start_timeout_s=args.start_timeout,
    )
    supervisor = Supervisor(
        spec, llama_server_profile(None, Path(record.model).name), state_file=store
    )
    supervisor.subscribe(Narrator())
    age = duration(time.time() - record.started_at)
    kind = "detached " if record.detached else ""
    print(
        f"adopting the running {kind}{record.engine} (pid {record.pid}, up {age}) "
        f"serving {record.model}"
    )
    return supervisor


def _serve(supervisor, args: argparse.Namespace, plan, model) -> int:
    """Wait for ready, report, then watch until Ctrl-C, `homelab stop`, or giving up."""
    ready = supervisor.wait_ready()
    print(
        f"ready: {ready.url} ({supervisor.profile.name} pid {ready.pid}; {ready.reason})",
        flush=True,
    )
    if plan is not None:
        _report_actuals(supervisor, plan, model)
    if args.detach:
        supervisor.release()
        print(f"left running (detached); `homelab stop` stops it; log: {supervisor.log_path}")
        return int(ExitCode.OK)
    watch_status(supervisor, kv_unified="-kvu" in supervisor.spec.argv)
    StatusLine.shared().close()
    failure = supervisor.failure
    if failure is not None:
        raise failure.to_error()
    print("the engine was stopped from outside (`homelab stop` or `--replace`)")
    return int(ExitCode.OK)


def _interrupted(supervisor) -> int:
    """Ctrl-C (or SIGTERM/SIGHUP): stop the engine, or leave an adopted detached one running."""
    StatusLine.shared().close()
    if supervisor is None:
        return 130
    if supervisor.spec.detached and supervisor.state.value == "ready":
        supervisor.release()
        print("\nleft the detached engine running; `homelab stop` stops it")
        return int(ExitCode.OK)
    print("\nstopping...", flush=True)
    with ignore_interrupts():
        supervisor.stop()
    print("stopped")
    return int(ExitCode.OK)


def _report_actuals(supervisor, plan, model) -> None:
    """Predicted vs actual memory from the load log; record the measured compute buffer."""
    from homelab.engine.llamacpp.actuals import compare, format_actuals
    from homelab.engine.llamacpp.locate import engine_version
    from homelab.engine.llamacpp.log import parse_load_log
    from homelab.plan.calibration import CalibrationError, record
    from homelab.units import format_bytes

    load_log = parse_load_log("\n".join(supervisor.attempt_lines()))
    print("predicted vs actual (from the engine's load log):")
    print(format_actuals(compare(plan, load_log)))
    try:
        calibration = record(
            plan, load_log, engine_version(Path(supervisor.spec.argv[0])), model=model
        )
    except CalibrationError as error:
        print(f"calibration not recorded: {error.message}")
    else:
        print(
            f"recorded the measured compute buffer ({format_bytes(calibration.compute)}) "
            "for the next plan of these flags"
        )
