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
    ignore_interrupts,
    signals_interrupt,
    watch_status,
)
from homelab.cli.serve_set_cmd import add_set_arguments, run_serve_set
from homelab.cli.stop_status import register_stop_status, worded, worded_transition
from homelab.cli.vllm_cmd import add_engine_option
from homelab.errors import AlreadyServed, ExitCode, HomelabError, UsageError

if TYPE_CHECKING:
    from homelab.cli.pull_cmd import ProgressBar
    from homelab.serve.events import PullProgress, SessionEvent


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
        nargs="?",
        help="a .gguf file, a preset name (`homelab presets`), or REPO[:QUANT] / REPO/FILE.gguf "
        "(downloaded first when not in the HF cache); with --engine vllm a model folder or cached repo",
    )
    add_set_arguments(serve)
    add_plan_arguments(serve)
    add_rpc_argument(serve)
    add_engine_option(serve)
    from homelab.engine.kinds import DEFAULT_ENGINE, engine_kind

    for action in serve._actions:
        if action.dest == "port":
            action.help = (
                f"the public port: the gate's, or the engine's with --no-gate (default "
                f"{engine_kind(DEFAULT_ENGINE).default_port}, or the next free one; a port given here is never moved)"
            )
    serve.add_argument(
        "--detach",
        action="store_true",
        help="leave the engine and its gate running when homelab exits (`homelab stop` stops them)",
    )
    serve.add_argument(  # serve's keeper itself (`--detach` starts it): not for people
        "--keeper-fd", type=int, default=None, help=argparse.SUPPRESS
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
    serve.add_argument(
        "--prove",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after ready, fill the largest slot once and watch memory before announcing it; "
        "an out-of-memory restarts on a smaller plan (default: on for a GPU plan, off for CPU)",
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


def run_serve(args: argparse.Namespace) -> int:
    """``homelab serve``: a serve session, its events rendered as text."""
    from homelab.cli.plan_cmd import options_from_args
    from homelab.serve.request import ServeRequest
    from homelab.serve.session import ServeSession

    if args.models is not None or args.more_models:
        try:
            return run_serve_set(args)
        except HomelabError as error:
            raise worded(error) from None
    if args.model is None:
        raise UsageError("name a model to serve (or several, or --models)")
    if args.dry_run:
        return _dry_run(args)
    keeper = args.keeper_fd is not None
    if args.detach and not keeper:  # the keeper serves; this returns once it is ready
        import sys

        from homelab.serve.keeper import launch

        return launch(args.words, sys.stdout.buffer, sys.stderr.buffer)
    try:
        if args.start_timeout <= 0:
            raise UsageError("--start-timeout must be positive")
        request = ServeRequest(
            model=args.model,
            options=options_from_args(args),
            detach=args.detach or keeper,
            replace=args.replace,
            start_timeout_s=args.start_timeout,
            gate=gate_choices(args),
            hold=keeper,
        )
        session = ServeSession(request)
    except HomelabError as error:
        raise worded(error) from None
    text = ServeText()
    session.subscribe(text)
    with signals_interrupt():
        try:
            if keeper:
                from homelab.cli.keeper_run import run_keeper

                return run_keeper(session, args.keeper_fd)
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
        except AlreadyServed as served:
            print(served.message, flush=True)
            return int(ExitCode.OK)
        except HomelabError as error:
            raise worded(error) from None
        finally:
            with ignore_interrupts():
                session.end()
            session.close()
            text.finish()


def _dry_run(args: argparse.Namespace) -> int:
    """``serve --dry-run``: the plan serve would start, as ``homelab plan --json`` prints it
    (a preset planned with its workload hint; a model not downloaded yet from its header,
    fetched by llama-server's own ``-hf``, where serve would pull it first)."""
    from homelab.cli.plan_cmd import exit_code, options_from_args, plan_data
    from homelab.engine.kinds import engine_kind
    from homelab.serve.model_ref import named_model
    from homelab.serve.prepare import prepare

    try:
        options = options_from_args(args)
        kind = engine_kind(options.engine.name)
        named = named_model(args.model, kind) if kind.pulls else None
        model = args.model if named is None else named.target
        workload = None if named is None else named.workload
        key = None if named is None or named.preset is None else named.preset.key
        prepared = prepare(model, None, options, default_workload=workload, served_name=key)
    except HomelabError as error:
        raise worded(error) from None
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
    """The serve session's events as the lines ``homelab serve`` prints (the describer's words)."""

    def __init__(self) -> None:
        self._narrator = Narrator()
        self._bar: ProgressBar | None = None

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.finish()
            self._bar = None

    def __call__(self, event: SessionEvent) -> None:
        from homelab.serve import events as ev
        from homelab.serve.describe import describe

        if isinstance(event, ev.PullProgress):
            self._progress(event)
            return
        if isinstance(event, ev.EngineChanged):
            self._narrator(worded_transition(event.transition))
            return
        if isinstance(event, ev.Failed | ev.GateStopped | ev.Replanning | ev.Replanned):
            return  # the error is printed where it is raised; the rest goes unsaid here
        if isinstance(event, ev.Stopped) and event.how in ("failed", "released"):
            return  # said by the error, or by LeftRunning
        if isinstance(event, ev.Healing):  # it says the crash: the narrator does not
            self._narrator.healing()
        elif isinstance(event, ev.Pulled):
            self.finish()
        elif isinstance(event, ev.Planned):
            from homelab.cli.plan_cmd import print_engine_plan

            print_engine_plan(event.plan.plan, list(event.argv))
        elif isinstance(event, ev.LeftRunning) and event.adopted:
            print()  # after the ^C on the terminal
        line = describe(event).line
        if line is not None:
            print(line, flush=True)

    def _progress(self, event: PullProgress) -> None:
        if self._bar is None:
            import sys

            from homelab.cli.pull_cmd import ProgressBar

            self._bar = ProgressBar(sys.stderr)
        self._bar(event.progress)
