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

The admission gate takes the public port (``--port``, default 8080) and the engine an
internal loopback port; ``--no-gate`` serves the engine directly on the public port. Its
settings: the ``--gate-*`` flags over ``gate.toml`` in homelab's config folder. With
``--detach`` the gate runs in a detached process of its own, beside the engine.

Exit codes: 0 when it ran and was stopped (Ctrl-C, ``homelab stop``); a failed
start exits with the failure's code (3 does not fit, 4 bad model file, 6 engine).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from homelab.cli.common import print_json
from homelab.cli.plan_cmd import add_plan_arguments, add_rpc_argument
from homelab.cli.serve_output import (
    Narrator,
    StatusLine,
    duration,
    ignore_interrupts,
    signals_interrupt,
    watch_status,
)
from homelab.cli.serve_prove import add_prove_arguments, print_prove_event, prove_options
from homelab.cli.stop_status import register_stop_status, worded, worded_transition
from homelab.cli.vllm_cmd import add_engine_option
from homelab.errors import ExitCode, HomelabError, UsageError

if TYPE_CHECKING:
    from homelab.cli.pull_cmd import ProgressBar

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
    add_rpc_argument(serve)
    add_engine_option(serve)
    for action in serve._actions:
        if action.dest == "port":
            action.help = (
                f"the public port: the gate's, or the engine's with --no-gate (default "
                f"{DEFAULT_PORT}, or the next free one; a port given here is never moved)"
            )
    serve.add_argument(
        "--detach",
        action="store_true",
        help="leave the engine and its gate running when homelab exits (`homelab stop` stops them)",
    )
    serve.add_argument(
        "--replace",
        action="store_true",
        help="stop a running homelab engine first (instead of adopting or refusing)",
    )
    serve.add_argument(
        "--dry-run",
        action="store_true",
        help="plan only: print the plan as `homelab plan --json` does, start nothing",
    )
    add_gate_arguments(serve)
    add_prove_arguments(serve)
    serve.add_argument(
        "--start-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="give up when it is not ready after S seconds (default 600)",
    )
    serve.set_defaults(func=run_serve)

    register_stop_status(subparsers)


def add_gate_arguments(serve: argparse.ArgumentParser) -> None:
    """``--no-gate`` and the gate's ``--gate-*`` settings (over gate.toml)."""
    group = serve.add_argument_group(
        "admission gate", "a token budget and a queue on the public port, in front of the engine"
    )
    group.add_argument(
        "--no-gate",
        action="store_true",
        help="serve the engine directly on the public port (no admission gate)",
    )
    group.add_argument(
        "--gate-max-concurrent",
        type=int,
        metavar="N",
        help="requests let through at once (default: the engine's slots)",
    )
    group.add_argument(
        "--gate-budget",
        type=int,
        metavar="TOKENS",
        help="tokens (prompt + output) admitted at once (default: from the engine's KV cache)",
    )
    group.add_argument(
        "--gate-queue-timeout",
        type=float,
        metavar="S",
        help="a queued request waits at most S seconds, then gets 503 (default 300)",
    )
    group.add_argument(
        "--gate-host",
        metavar="ADDR",
        help="the gate's address (default 127.0.0.1; any other needs the API key, made once)",
    )


def gate_choices(args: argparse.Namespace):
    """The gate settings the flags give (None with --no-gate).

    Raises:
        UsageError: a --gate-* flag together with --no-gate.
    """
    from homelab.gate.config_file import GateChoices

    given = {
        "host": args.gate_host,
        "max_concurrent": args.gate_max_concurrent,
        "token_budget": args.gate_budget,
        "queue_timeout_s": args.gate_queue_timeout,
    }
    if args.no_gate:
        flags = [
            f"--gate-{n}" for n, v in zip(GATE_FLAGS, given.values(), strict=True) if v is not None
        ]
        if flags:
            raise UsageError(
                f"{', '.join(flags)} set(s) the gate, but --no-gate serves without one",
                hint="drop --no-gate to use the gate, or drop the gate settings",
            )
        return None
    return GateChoices(**given)


GATE_FLAGS = ("host", "max-concurrent", "budget", "queue-timeout")


# -- serve -----------------------------------------------------------------------------


def run_serve(args: argparse.Namespace) -> int:
    """``homelab serve``: a serve session, its events rendered as text."""
    from homelab.cli.plan_cmd import options_from_args
    from homelab.serve.request import ServeRequest
    from homelab.serve.session import ServeSession

    if args.dry_run:
        return _dry_run(args)
    try:
        if args.start_timeout <= 0:
            raise UsageError("--start-timeout must be positive")
        request = ServeRequest(
            model=args.model,
            options=prove_options(args, options_from_args(args)),
            detach=args.detach,
            replace=args.replace,
            start_timeout_s=args.start_timeout,
            gate=gate_choices(args),
        )
        session = ServeSession(request)
    except HomelabError as error:
        raise worded(error) from None
    text = ServeText()
    session.subscribe(text)
    with signals_interrupt():
        try:
            session.start()
            session.wait_ready()
            if args.detach:
                return int(ExitCode.OK)
            session.bus.flush()
            supervisor = session.supervisor
            if supervisor is None:  # wait_ready returned: a supervisor exists
                raise RuntimeError("serve session ready without a supervisor")
            facts = supervisor.spec.facts
            watch_status(supervisor, kv_unified=facts is not None and facts.unified)
            StatusLine.shared().close()
            session.finish()
            return int(ExitCode.OK)
        except KeyboardInterrupt:
            return _interrupted(session)
        except HomelabError as error:
            raise worded(error) from None
        finally:
            with ignore_interrupts():
                session.end()
            session.close()
            text.finish()


def _dry_run(args: argparse.Namespace) -> int:
    """``serve --dry-run``: the plan serve would start, as ``homelab plan --json`` prints it."""
    from homelab.cli.plan_cmd import exit_code, plan_data, prepared_from_args

    prepared = prepared_from_args(args)
    print_json(plan_data(prepared))
    return exit_code(prepared)


def _interrupted(session) -> int:
    """Ctrl-C (or SIGTERM/SIGHUP): stop the engine, or leave an adopted detached one running."""
    session.bus.flush()
    StatusLine.shared().close()
    if session.supervisor is None:
        return 130
    with ignore_interrupts():
        if not session.let_go():
            print("\nstopping...", flush=True)
            session.stop()
    return int(ExitCode.OK)


class ServeText:
    """The serve session's events as the lines ``homelab serve`` prints."""

    def __init__(self) -> None:
        self._narrator = Narrator()
        self._bar: ProgressBar | None = None

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.finish()
            self._bar = None

    def __call__(self, event) -> None:
        from homelab.serve import events as ev

        if print_prove_event(event):
            if isinstance(event, ev.Healing):  # it said the crash: the narrator does not
                self._narrator.healing()
            return
        if isinstance(event, ev.PresetChosen):
            print(f"preset {event.key}: {event.name} ({event.ref})", flush=True)
        elif isinstance(event, ev.PullProgress):
            if self._bar is None:
                import sys

                from homelab.cli.pull_cmd import ProgressBar

                self._bar = ProgressBar(sys.stderr)
            self._bar(event.progress)
        elif isinstance(event, ev.Pulled):
            self.finish()
            if event.note:
                print(event.note)
        elif isinstance(event, ev.SetAsideNotice):
            print(f"homelab: {event.set_aside.describe()}", flush=True)
        elif isinstance(event, ev.Planned):
            PLAN_PRINTERS[event.plan.kind](event.plan.plan, list(event.argv))
            if event.port_note:
                print(event.port_note)
        elif isinstance(event, ev.Starting):
            print(STARTING.get(event.kind, f"starting {event.program}..."), flush=True)
        elif isinstance(event, ev.Started):
            if event.port != event.wanted_port:
                print(
                    f"port {event.wanted_port} was taken meanwhile; using port {event.port} instead"
                )
            print(f"pid {event.pid}, log {event.log_path}", flush=True)
        elif isinstance(event, ev.Adopting):
            record = event.record
            kind = "detached " if record.detached else ""
            print(
                f"adopting the running {kind}{event.program} (pid {record.pid}, "
                f"up {duration(event.age_s)}) serving {record.model}"
            )
        elif isinstance(event, ev.Replacing):
            what = f" ({event.model})" if event.model else " (no record)"
            where = f" at {event.url}" if event.url else ""
            print(f"replacing {event.program} pid {event.pid}{what}{where}")
        elif isinstance(event, ev.EngineChanged):
            self._narrator(worded_transition(event.transition))
        elif isinstance(event, ev.Ready):
            print(
                f"ready: {event.url} ({event.program} pid {event.pid}; {event.reason})", flush=True
            )
        elif isinstance(event, ev.Actuals):
            _print_actuals(event.measured)
        elif isinstance(event, ev.LeftRunning):
            if event.adopted:
                print("\nleft the detached engine running; `homelab stop` stops it")
            else:
                print(f"left running (detached); `homelab stop` stops it; log: {event.log_path}")
        elif isinstance(event, ev.GateKeyCreated):
            print(
                f"made the gate's API key (shown this once; it stays in {event.path}): {event.key}",
                flush=True,
            )
        elif isinstance(event, ev.GateStarted):
            print(f"gate: {event.url} in front of the engine at {event.engine_url}", flush=True)
            limits = _gate_limits(event.budget, event.ceiling, event.max_concurrent)
            print(f"  {limits}; clients use {event.url}", flush=True)
        elif isinstance(event, ev.GateRetargeted):  # a heal or a re-plan under the gate
            limits = _gate_limits(event.budget_tokens, event.ceiling, event.max_concurrent)
            print(f"gate: new plan, {limits}; queued requests keep their place", flush=True)
        elif isinstance(event, ev.GateAdopted):
            print(f"adopting its gate: {event.url} ({_gate_limits(None, event.ceiling, None)})")
        elif isinstance(event, ev.GateMissing):
            print(
                f"no gate: the running engine has none ({event.reason}); "
                "--replace restarts it behind the gate"
            )
        elif isinstance(event, ev.Stopped):
            if event.how == "outside":
                print("the engine was stopped from outside (`homelab stop` or `--replace`)")
            elif event.how == "stopped":
                print("stopped")


def _gate_limits(budget: int | None, ceiling: int | None, max_concurrent: int | None) -> str:
    words = []
    if budget:
        words.append(f"admits {budget} tokens at once")
    if ceiling:
        words.append(f"up to {ceiling} per request")
    if max_concurrent:
        words.append(f"{max_concurrent} request{'s' if max_concurrent != 1 else ''} at once")
    return ", ".join(words) or "limits from the engine once it says"


def _print_actuals(measured) -> None:
    from homelab.engine.llamacpp.actuals import format_actuals
    from homelab.units import format_bytes

    print("predicted vs actual (from the engine's load log):")
    print(format_actuals(measured.rows))
    if measured.recorded_compute is None:
        print(f"calibration not recorded: {measured.not_recorded}")
    else:
        print(
            f"recorded the measured compute buffer ({format_bytes(measured.recorded_compute)}) "
            "for the next plan of these flags"
        )


def _print_llama_plan(plan, argv) -> None:
    from homelab.cli.plan_cmd import print_plan

    print_plan(plan, argv)


def _print_vllm_plan(plan, argv) -> None:
    from homelab.cli.vllm_cmd import print_vllm_plan

    print_vllm_plan(plan, argv)


PLAN_PRINTERS = {"llama.cpp": _print_llama_plan, "vllm": _print_vllm_plan}
"""How each engine kind's plan is printed (by the kind's name)."""
STARTING = {
    "llama.cpp": "starting llama-server...",
    "vllm": "starting vllm (a first start takes minutes: weights, compile, CUDA graphs)...",
}
