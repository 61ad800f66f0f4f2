"""``homelab serve A B C`` and ``homelab serve --models [FILE]``: a set of models behind one
gate URL, the request's ``model`` picking the model (docs/model-set.md)."""

from __future__ import annotations

import argparse
import threading
from typing import TYPE_CHECKING

from homelab.errors import AlreadyServed, ExitCode, UsageError

if TYPE_CHECKING:
    from homelab.gate.settings import GateSettings
    from homelab.serve.model_set import PlannedSet

SET_FLAGS = ("replace", "no_gate", "prove", "dry_run")


def add_set_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "more_models",
        nargs="*",
        metavar="MODEL",
        help="more models: serve the set behind one URL, the request's model picks it "
        "(first listed: most wanted)",
    )
    serve.add_argument(
        "--models",
        nargs="?",
        const="",
        metavar="FILE",
        help="serve the set of models a models list names (default: models.toml in "
        "homelab's config folder) behind one URL",
    )
    serve.add_argument(
        "--models-ttl",
        type=float,
        metavar="S",
        help="a set's model idle for S seconds is unloaded (default: kept until another "
        "model needs its memory)",
    )


def run_serve_set(args: argparse.Namespace) -> int:
    """Plan and place the set, start the gate and the residents, keep them until Ctrl-C (or,
    with ``--detach``, hand them to homelab's keeper and return once they are ready)."""
    from homelab.cli.plan_cmd import options_from_args
    from homelab.cli.plan_set_cmd import _entries, set_lines
    from homelab.cli.serve_cmd import gate_choices
    from homelab.cli.serve_output import signals_interrupt
    from homelab.gate.config_file import resolve_gate
    from homelab.serve.model_set import plan_set
    from homelab.serve.set_serve import served_already

    given = [f"--{f.replace('_', '-')}" for f in SET_FLAGS if getattr(args, f, None)]
    if given:
        raise UsageError(
            f"{', '.join(given)} is one model's serve; a set is started anew (`homelab stop` first)"
        )
    if args.models_ttl is not None and args.models_ttl <= 0:
        raise UsageError("--models-ttl must be positive")
    if args.detach and args.keeper_fd is None:  # the keeper serves; this returns once ready
        import sys

        from homelab.serve.keeper import launch

        return launch(args.words, sys.stdout.buffer, sys.stderr.buffer)
    entries, where = _entries(args)
    options = options_from_args(args)
    planned = plan_set(entries, options, where=where)
    for line in set_lines(planned):
        print(line)
    if not planned.first_fits:
        return int(ExitCode.DOES_NOT_FIT)
    try:
        served_already(planned)
    except AlreadyServed as served:
        print(served.message, flush=True)
        return int(ExitCode.OK)
    choices = gate_choices(args)
    assert choices is not None  # --no-gate refused above
    port = 8080 if options.engine.port is None else options.engine.port
    settings = resolve_gate(choices, port).settings
    if args.keeper_fd is not None:
        return _keep_set(planned, settings, args)
    from homelab.serve.set_serve import start_set

    with signals_interrupt():
        running = None
        try:
            running = start_set(
                planned, settings, idle_ttl_s=args.models_ttl, start_timeout_s=args.start_timeout
            )
            print(
                f"serving {len(planned.models)} models at {running.url}/v1 "
                f"(loaded: {', '.join(running.residents)}); Ctrl-C stops them"
            )
            threading.Event().wait()
        except KeyboardInterrupt:
            print("stopping the models …")
        finally:
            if running is not None:
                running.stop()
    return int(ExitCode.OK)


def _keep_set(planned: PlannedSet, settings: GateSettings, args: argparse.Namespace) -> int:
    """The keeper of a detached set: start it, announce it, keep it until ``homelab stop``."""
    import os

    from homelab.cli.serve_output import ignore_interrupts, signals_interrupt
    from homelab.engine.supervision.attempt_log import new_log_path
    from homelab.paths import state_dir
    from homelab.serve.keeper import SetKeeper, go_quiet
    from homelab.serve.set_serve import start_set

    keeper = SetKeeper()
    with signals_interrupt():
        running = start_set(
            planned,
            settings,
            idle_ttl_s=args.models_ttl,
            start_timeout_s=args.start_timeout,
            kept=True,
            on_crash=keeper.crashed,
        )
    keeper.noted = running.note_restarts
    log_path = new_log_path(state_dir() / "logs", "keeper")
    print(
        f"serving {len(planned.models)} models at {running.url}/v1 "
        f"(loaded: {', '.join(running.residents)}), left running (detached), kept by "
        f"homelab's keeper (pid {os.getpid()}): its engines are restarted when they die; "
        f"`homelab stop` stops them; log: {log_path}",
        flush=True,
    )
    try:
        go_quiet(args.keeper_fd, log_path, f"{running.url}/v1", keeper.stop_asked)
        return keeper.keep(running.serving, running.stop)
    finally:
        with ignore_interrupts():
            running.stop()
