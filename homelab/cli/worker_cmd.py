"""``homelab worker``: lend this machine to a llama-server elsewhere (llama.cpp's rpc-server).

Runs the rpc-server ``homelab engine build`` built, supervised like the engine (restarted
after a crash; Ctrl-C, SIGTERM or SIGHUP stop it and its process group), on loopback unless
``--host`` says otherwise. Once it answers it prints the endpoint and the memory it offers,
and the main machine's command that uses it (``homelab serve MODEL --rpc HOST:PORT``).

Exit codes: 0 when stopped; 6 when it could not start or kept failing.
"""

from __future__ import annotations

import argparse
import sys

from homelab.errors import EngineError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``worker``."""
    from homelab.engine.llamacpp.rpc_worker import DEFAULT_PORT

    parser = subparsers.add_parser(
        "worker",
        help="lend this machine's memory to a llama-server on another (llama.cpp RPC)",
        description="Run llama.cpp's rpc-server so that `homelab serve --rpc HOST:PORT` on "
        "another machine can place layers here. llama.cpp's RPC has no authentication: "
        "bind a LAN address only on a trusted network.",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; a LAN address "
        "lets the main machine in, and anyone else on that network)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}); never moved",
    )
    parser.add_argument(
        "--threads", type=int, metavar="N", help="CPU threads (default: half the CPUs)"
    )
    parser.add_argument(
        "--device",
        metavar="DEV[,DEV]",
        help="devices to offer, as llama.cpp names them (e.g. CUDA0; default: every GPU, "
        "else the CPU)",
    )
    parser.add_argument(
        "--cache",
        action="store_true",
        help="keep received weights on this disk, so the next load does not send them again",
    )
    parser.set_defaults(func=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    """Start the worker, say where it is and what it offers, supervise it until stopped."""
    from homelab.cli.serve_output import Narrator, ignore_interrupts, signals_interrupt
    from homelab.engine.llamacpp.locate import locate_rpc_server
    from homelab.engine.llamacpp.rpc_query import ask_worker
    from homelab.engine.llamacpp.rpc_worker import WorkerSettings, worker_profile, worker_spec
    from homelab.engine.supervision.supervisor import Supervisor
    from homelab.units import format_bytes

    devices = tuple(d.strip() for d in args.device.split(",") if d.strip()) if args.device else ()
    settings = WorkerSettings(
        host=args.host, port=args.port, threads=args.threads, devices=devices, cache=args.cache
    )
    warning = settings.warning()
    if warning:
        print(f"WARNING: {warning}", file=sys.stderr, flush=True)
    located = locate_rpc_server()
    supervisor = Supervisor(worker_spec(settings, located.path), worker_profile())
    supervisor.subscribe(Narrator())
    with signals_interrupt():
        try:
            print(f"starting rpc-server ({located.path})...", flush=True)
            supervisor.start()
            print(f"pid {supervisor.pid}, log {supervisor.log_path}", flush=True)
            supervisor.wait_ready()
            offered = ask_worker(settings.endpoint)
            for index, (free, total) in enumerate(offered):
                print(f"offers device {index}: {format_bytes(free)} free of {format_bytes(total)}")
            print(
                f"ready: RPC worker at {settings.endpoint}; on the main machine: "
                f"homelab serve MODEL --rpc {settings.endpoint}",
                flush=True,
            )
            while not supervisor.wait_stopped(1.0):
                pass
            failure = supervisor.failure
            if failure is not None:
                raise failure.to_error()
            raise EngineError("rpc-server stopped")
        except KeyboardInterrupt:
            with ignore_interrupts():
                print("\nstopping...", flush=True)
                supervisor.stop()
            print("stopped")
            return 0
        finally:
            with ignore_interrupts():
                supervisor.stop()
