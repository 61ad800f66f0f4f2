"""``homelab plan MODEL``: the fit, the working and the llama-server flags."""

from __future__ import annotations

import argparse
import shlex

from homelab.cli.common import add_gpu_options, parse_gpus, print_json
from homelab.cli.serve_prove import add_memory_limit_argument, cache_ram_of, memory_limit_of
from homelab.cli.vllm_cmd import add_engine_option, vllm_options_from_args
from homelab.engine.kinds import DEFAULT_PORT
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
    add_rpc_argument(parser)
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
        metavar="N[,M...]",
        type=parse_gpus,
        help="plan on GPU N, or split over the cards listed (default: the card with most "
        "free memory, or every card when the model needs more than one)",
    )
    parser.add_argument(
        "--workload",
        default=None,
        help="agent (~100k tokens per slot), chat (~8k) or a token count",
    )
    parser.add_argument(
        "--ctx", type=_whole(1), metavar="N", help="total context (-c) instead of the workload's"
    )
    parser.add_argument(
        "--parallel", type=_whole(1), metavar="N", help="slots (-np) instead of as many as fit"
    )
    parser.add_argument("--cache-type", metavar="T", help="K and V cache type (default q8_0)")
    parser.add_argument("--cache-type-k", metavar="T", help="K cache type")
    parser.add_argument("--cache-type-v", metavar="T", help="V cache type")
    parser.add_argument(
        "--ubatch", type=_whole(1), default=512, metavar="N", help="micro-batch (-ub), default 512"
    )
    parser.add_argument(
        "--kv-unified", action="store_true", help="one KV pool shared by all slots (-kvu)"
    )
    parser.add_argument(
        "--port",
        type=_whole(1, 65535),
        default=DEFAULT_PORT,
        help=f"port for the argv (default {DEFAULT_PORT})",
    )
    add_gpu_options(parser)
    add_memory_limit_argument(parser)


def add_rpc_argument(parser: argparse.ArgumentParser) -> None:
    """``--rpc HOST:PORT[,...]``: llama.cpp RPC workers to plan (and serve) over."""
    parser.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        help="llama.cpp RPC workers (`homelab worker` on other machines) to spread layers over",
    )


def _whole(low: int, high: int | None = None):
    """An argparse type: a whole number written in ASCII digits, ``low`` to ``high``."""

    def parse(text: str) -> int:
        digits = text.strip()
        body = digits[1:] if digits[:1] in "+-" else digits
        if not (body.isascii() and body.isdigit()) or len(body) > 12:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
        value = int(digits)
        if value < low or (high is not None and value > high):
            span = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {span}, not {value}")
        return value

    return parse


def parse_vram(text: str) -> int:
    """``--vram``'s text in bytes.

    Raises:
        UsageError: not a size, or not one a card has (zero, or beyond 1 PiB).
    """
    shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text)} characters)"
    try:
        vram = parse_size(text)
    except (ValueError, OverflowError):
        raise UsageError(f"not a size: {shown!r} (try e.g. 16GiB, 24GB, 512MiB)") from None
    from homelab.plan.options import MAX_VRAM

    if not 0 < vram <= MAX_VRAM:
        raise UsageError(f"a card of {shown} is not one homelab plans for (1 B to 1 PiB)")
    return vram


def options_from_args(args: argparse.Namespace):
    """The :class:`~homelab.plan.options.PlanOptions` the shared plan options describe."""
    from homelab.engine.kinds import DEFAULT_ENGINE
    from homelab.engine.options import plan_options

    vram = parse_vram(args.vram) if args.vram is not None else None
    return plan_options(
        workload=args.workload,
        ctx=args.ctx,
        slots=args.parallel,
        cache_type=args.cache_type,
        cache_type_k=args.cache_type_k,
        cache_type_v=args.cache_type_v,
        ubatch=args.ubatch,
        unified=args.kv_unified,
        gpu=args.gpu,
        vram=vram,
        gpu_snapshot=args.gpu_snapshot,
        sample_seconds=args.sample_seconds,
        engine=getattr(args, "engine", DEFAULT_ENGINE),
        port=args.port,
        engine_memory_limit=memory_limit_of(args),
        cache_ram=cache_ram_of(args),
        **vllm_options_from_args(args),
        rpc=(args.rpc,) if getattr(args, "rpc", None) else (),
        prove=getattr(args, "prove", None),
    )


def plan_from_args(args: argparse.Namespace, model=None, model_path: str | None = None):
    """Read the model (unless given), probe the card and make the plan; returns (plan, argv)."""
    plan, argv, _model = _plan_and_model(args, model, model_path)
    return plan, argv


def _plan_and_model(args: argparse.Namespace, model=None, model_path: str | None = None):
    """:func:`plan_from_args` and the model header it planned."""
    from homelab.engine.llamacpp.argv import llama_server_argv
    from homelab.engine.llamacpp.calibrate import current_engine_version
    from homelab.engine.llamacpp.rpc_query import query_workers
    from homelab.gguf.local_path import local_or_ref
    from homelab.gguf.model_file import read_model
    from homelab.plan.card import card_for
    from homelab.plan.judge import judge

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
    fit = judge(
        model,
        model_path or str(args.model),
        card_for(options),
        options,
        engine_version=current_engine_version,
        remote=query_workers(options.card.rpc) if options.card.rpc else (),
    )
    if fit.plan is None:  # does not fit / cannot be planned: that error is the command's
        assert fit.error is not None  # the judge keeps the error of every verdict without a plan
        raise fit.error
    from homelab.engine.llamacpp.cache_ram import sized_cache_ram

    plan, cache_ram = sized_cache_ram(fit.plan, options)  # serve's --cache-ram, and its working
    port = args.port or DEFAULT_PORT
    argv = llama_server_argv(plan, port=port, model_args=model_args, cache_ram_mib=cache_ram)
    return plan, argv, model


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
    from homelab.plan.working import render_steps

    for line in render_steps(plan.steps):
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

    if options_from_args(args).engine.name == "vllm":
        return _run_vllm(args)
    from homelab.engine.llamacpp.calibrate import current_engine_version
    from homelab.measure.summary import measured_lines

    plan, argv, model = _plan_and_model(args)
    measured = measured_lines(plan, model, current_engine_version)  # a stored `homelab bench`
    if args.json:
        data = plan_to_dict(plan, argv)
        if measured:
            data["measured"] = measured
        print_json(data)
    else:
        print_plan(plan, argv)
        for line in measured:
            print(line)
    return exit_code(plan)


def _run_vllm(args: argparse.Namespace) -> int:
    from homelab.cli.vllm_cmd import (
        print_vllm_plan,
        vllm_argv_for,
        vllm_plan_dict,
        vllm_plan_from_args,
    )

    plan = vllm_plan_from_args(args)
    argv = vllm_argv_for(plan, args.port if args.port != DEFAULT_PORT else None)
    if args.json:
        print_json(vllm_plan_dict(plan, argv))
    else:
        print_vllm_plan(plan, argv)
    return int(ExitCode.OK)
