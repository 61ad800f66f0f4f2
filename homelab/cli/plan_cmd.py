"""``homelab plan MODEL``: the fit, the working and the llama-server flags."""

from __future__ import annotations

import argparse
import shlex

from homelab.cli.common import add_gpu_options, print_json
from homelab.cli.vllm_cmd import add_engine_option
from homelab.errors import ExitCode, UsageError
from homelab.units import format_bytes, parse_size


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="work out how a model fits this card and the llama-server flags",
        description="Read MODEL's GGUF header and the card, and show the plan with its working.",
    )
    parser.add_argument(
        "model",
        help="a .gguf file (any part of a split model), or a Hugging Face "
        "REPO[:QUANT] / REPO/FILE.gguf, planned from its header without downloading",
    )
    add_plan_arguments(parser)
    add_engine_option(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object, sizes in bytes")
    parser.set_defaults(func=run)


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every planning command shares (plan, serve, quants, presets)."""
    parser.add_argument(
        "--vram",
        metavar="SIZE",
        help="plan for a card of this total with nothing else on it (e.g. 16GiB)",
    )
    parser.add_argument(
        "--gpu",
        metavar="N",
        type=int,
        help="plan on GPU N (default: the one with most free memory)",
    )
    parser.add_argument(
        "--workload",
        default=None,
        help="agent (~100k tokens per slot), chat (~8k) or a token count",
    )
    parser.add_argument(
        "--ctx", type=int, metavar="N", help="total context (-c) instead of the workload's"
    )
    parser.add_argument(
        "--parallel", type=int, metavar="N", help="slots (-np) instead of as many as fit"
    )
    parser.add_argument("--cache-type", metavar="T", help="K and V cache type (default q8_0)")
    parser.add_argument("--cache-type-k", metavar="T", help="K cache type")
    parser.add_argument("--cache-type-v", metavar="T", help="V cache type")
    parser.add_argument(
        "--ubatch", type=int, default=512, metavar="N", help="micro-batch (-ub), default 512"
    )
    parser.add_argument(
        "--kv-unified", action="store_true", help="one KV pool shared by all slots (-kvu)"
    )
    parser.add_argument("--port", type=int, default=8080, help="port for the argv (default 8080)")
    add_gpu_options(parser)


def options_from_args(args: argparse.Namespace):
    """The :class:`~homelab.plan.options.PlanOptions` the shared plan options describe."""
    from homelab.plan.options import PlanOptions
    from homelab.plan.workload import parse_workload

    vram = None
    if args.vram is not None:
        try:
            vram = parse_size(args.vram)
        except ValueError as error:
            raise UsageError(str(error)) from None
    base = args.cache_type
    return PlanOptions(
        workload=parse_workload(args.workload) if args.workload else None,
        ctx=args.ctx,
        slots=args.parallel,
        cache_type_k=args.cache_type_k or base,
        cache_type_v=args.cache_type_v or base,
        ubatch=args.ubatch,
        unified=args.kv_unified,
        gpu=args.gpu,
        vram=vram,
        gpu_snapshot=args.gpu_snapshot,
        sample_seconds=args.sample_seconds,
        engine=getattr(args, "engine", "llama.cpp"),
        port=args.port,
    )


def request_from_args(args: argparse.Namespace):
    """The PlanRequest the shared plan options describe."""
    return options_from_args(args).request()


def report_from_args(args: argparse.Namespace):
    """The card to plan on: ``--vram`` (synthetic), ``--gpu-snapshot`` (replay) or the live probe."""
    from homelab.plan.card import card_for

    return card_for(options_from_args(args))


def plan_from_args(args: argparse.Namespace, model=None, model_path: str | None = None):
    """Read the model (unless given), probe the card and make the plan; returns (plan, argv)."""
    from homelab.engine.llamacpp.argv import llama_server_argv
    from homelab.gguf.model_file import read_model
    from homelab.hub.model_ref import local_or_ref
    from homelab.plan.card import card_for
    from homelab.plan.pipeline import plan_model

    options = options_from_args(args)
    model_args = None
    if model is None and (local := local_or_ref(args.model)) is not None:
        model = read_model(local)
    elif model is None:  # REPO:QUANT or REPO/FILE.gguf: headers read remotely, nothing downloaded
        from homelab.hub.model_ref import resolve_model_ref

        resolved = resolve_model_ref(args.model)
        model, model_path = resolved.model, model_path or resolved.display
        if not resolved.is_downloaded:
            model_args = hf_model_args(resolved)
    plan = plan_model(model, model_path or str(args.model), card_for(options), options)
    return plan, llama_server_argv(plan, port=args.port or 8080, model_args=model_args)


def hf_model_args(resolved) -> list[str]:
    """How llama-server itself fetches a model not downloaded yet: ``-hf REPO:QUANT``
    (into the same HF cache), or ``-hfr REPO -hff FILE`` when the file has no quant tag."""
    ref = resolved.ref
    choice = resolved.choice
    if choice is not None and choice.tag:
        return ["-hf", f"{ref.repo}:{choice.tag}"]
    filename = choice.primary.path if choice is not None else ref.filename
    return ["-hfr", str(ref.repo), "-hff", str(filename)]


def print_plan(plan, argv: list[str]) -> None:
    """The working, the warnings, the verdict and the command line, for a person."""
    for line in plan.steps:
        print(line)
    for warning in plan.warnings:
        print(f"! {warning}")
    verdict = {
        "fits": "Fits.",
        "partial": "Does not fit on the card as a whole: partial offload below.",
        "does_not_fit": "Does not fit.",
    }[plan.verdict]
    alloc = plan.candidate.allocation
    print(
        f"{verdict} {plan.settings.n_seq} slot(s) × {alloc.ctx_per_slot:,} tokens, "
        f"KV {format_bytes(alloc.total)}"
    )
    print(shlex.join(argv))


def exit_code(plan) -> int:
    """0 when everything fits on the device, 3 otherwise (partial offload included)."""
    return int(ExitCode.OK if plan.verdict == "fits" else ExitCode.DOES_NOT_FIT)


def run(args: argparse.Namespace) -> int:
    from homelab.plan.serialize import plan_to_dict

    if args.engine == "vllm":
        return _run_vllm(args)
    plan, argv = plan_from_args(args)
    if args.json:
        print_json(plan_to_dict(plan, argv))
    else:
        print_plan(plan, argv)
    return exit_code(plan)


def _run_vllm(args: argparse.Namespace) -> int:
    from homelab.cli.vllm_cmd import (
        print_vllm_plan,
        vllm_argv_for,
        vllm_plan_dict,
        vllm_plan_from_args,
    )

    plan = vllm_plan_from_args(args)
    argv = vllm_argv_for(plan, args.port if args.port != 8080 else None)
    if args.json:
        print_json(vllm_plan_dict(plan, argv))
    else:
        print_vllm_plan(plan, argv)
    return int(ExitCode.OK)
