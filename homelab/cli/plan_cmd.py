"""``homelab plan MODEL``: the fit, the working and the llama-server flags."""

from __future__ import annotations

import argparse
import shlex

from homelab.cli.common import add_gpu_options, parse_gpus, print_json
from homelab.cli.vllm_cmd import add_engine_option, vllm_options_from_args
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
        nargs="?",
        help="a .gguf file (any part of a split model), a preset name (`homelab presets`), "
        "or a Hugging Face REPO[:QUANT] / REPO/FILE.gguf, planned from its header without "
        "downloading (a preset from its own facts while the Hub cannot be reached)",
    )
    parser.add_argument(
        "more_models",
        nargs="*",
        metavar="MODEL",
        help="more models: the set is placed on the card together (first listed: most wanted)",
    )
    parser.add_argument(
        "--models",
        nargs="?",
        const="",
        metavar="FILE",
        help="place the set of models a models list names (default: models.toml in "
        "homelab's config folder) on the card together: which stay loaded, which swap",
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
        "--cpu",
        action="store_true",
        help="plan for system RAM and run on the CPU, even where an NVIDIA card is",
    )
    parser.add_argument(
        "--n-cpu-moe",
        type=_whole(0),
        metavar="N",
        help="keep the routed experts of the first N layers in system RAM (MoE models); "
        "attention and the KV cache stay on the card",
    )
    parser.add_argument(
        "--cpu-moe",
        action="store_true",
        help="keep the routed experts of every layer in system RAM (--n-cpu-moe with all layers)",
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
        help="agent (~100k tokens per slot), chat (~8k), fim (~4k, autocomplete) or a token count",
    )
    parser.add_argument(
        "--for",
        dest="for_agent",
        metavar="AGENT",
        choices=_agent_names(),
        help="plan each slot for what this coding agent accepts (claude: 100,000 tokens; "
        f"{', '.join(_agent_names()[1:])}: the agent workload)",
    )
    parser.add_argument(
        "--ctx", type=_whole(1), metavar="N", help="total context (-c) instead of the workload's"
    )
    parser.add_argument(
        "--parallel", type=_whole(1), metavar="N", help="slots (-np) instead of as many as fit"
    )
    parser.add_argument(
        "--cache-type",
        metavar="T",
        help="K and V cache type (default q8_0; a plan for system RAM takes the faster one RAM allows)",
    )
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
        default=None,
        help="port for the argv (default: the engine's, 8080 for llama-server)",
    )
    add_gpu_options(parser)
    parser.add_argument(  # every command that plans takes it: a plan's miss is kept per limit
        "--engine-memory-limit",
        metavar="SIZE",
        help="cap the engine's memory (address space), e.g. 12GiB, so it cannot swap the "
        "desktop; an allocation past it fails in the engine and serve heals to a smaller plan",
    )
    parser.add_argument(
        "--cache-ram",
        metavar="SIZE",
        help="llama-server's host-RAM prompt cache, e.g. 2GiB, 0 for off (default: sized "
        "under --engine-memory-limit when one is set, else llama-server's 8 GiB)",
    )


def _agent_names() -> list[str]:
    from homelab.agents.catalog import AGENTS

    return list(AGENTS)


def _workload_of(args: argparse.Namespace):
    """``--workload``, or ``--for AGENT``'s (not both).

    Raises:
        UsageError: both are given.
    """
    agent = getattr(args, "for_agent", None)
    if agent is None:
        return args.workload
    if args.workload is not None:
        raise UsageError(
            f"--for {agent} is a workload: give it or --workload, not both",
            hint=f"--for {agent} plans each slot for what that agent accepts",
        )
    from homelab.agents.catalog import workload_for

    return workload_for(agent)


def _size_of(args: argparse.Namespace, name: str) -> int | None:
    """The size option ``name`` (``--engine-memory-limit``, ``--cache-ram``) in bytes; None
    when not given.

    Raises:
        UsageError: it is not a size.
    """
    text = getattr(args, name, None)
    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as error:
        flag = "--" + name.replace("_", "-")
        raise UsageError(f"{flag}: {error}") from None


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
        workload=_workload_of(args),
        ctx=args.ctx,
        slots=args.parallel,
        cache_type=args.cache_type,
        cache_type_k=args.cache_type_k,
        cache_type_v=args.cache_type_v,
        ubatch=args.ubatch,
        unified=args.kv_unified,
        gpu=args.gpu,
        vram=vram,
        cpu=args.cpu,
        n_cpu_moe=args.n_cpu_moe,
        cpu_moe=args.cpu_moe,
        gpu_snapshot=args.gpu_snapshot,
        sample_seconds=args.sample_seconds,
        engine=getattr(args, "engine", DEFAULT_ENGINE),
        port=args.port,
        engine_memory_limit=_size_of(args, "engine_memory_limit"),
        cache_ram=_size_of(args, "cache_ram"),
        **vllm_options_from_args(args),
        rpc=(args.rpc,) if getattr(args, "rpc", None) else (),
        prove=getattr(args, "prove", None),
    )


def prepared_from_args(args: argparse.Namespace):
    """The :class:`~homelab.serve.prepare.Prepared` plan of ``args.model`` as the shared plan
    options describe (a Hub reference is planned from its header, nothing downloaded)."""
    from homelab.serve.prepare import prepare

    return prepare(args.model, None, options_from_args(args))


def plan_data(prepared) -> dict:
    """The plan as ``--json`` prints it (sizes in bytes): the engine's plan, its working and
    command line, and what a stored ``homelab bench`` measured of it."""
    from homelab.cli.vllm_cmd import vllm_plan_dict
    from homelab.plan.planner import Plan
    from homelab.plan.serialize import plan_to_dict

    plan, argv = prepared.plan.plan, list(prepared.argv)
    if not isinstance(plan, Plan):
        return vllm_plan_dict(plan, argv)
    plan, measured = _measured(prepared)
    data = plan_to_dict(plan, argv)
    if measured:
        data["measured"] = measured
    return data


def _measured(prepared) -> tuple:
    """The plan as shown, with what a stored ``homelab bench`` measured of it (llama.cpp
    plans only): its decode estimate replaced by the measured rate, and one line a bench."""
    from homelab.measure.summary import measured_line
    from homelab.plan.planner import Plan
    from homelab.serve.judge import with_bench

    plan = prepared.plan.plan
    if not isinstance(plan, Plan):
        return plan, []
    plan, records = with_bench(plan, prepared.plan.model)
    return plan, [measured_line(r, plan.settings.n_seq) for r in records]


def print_engine_plan(plan, argv: list[str]) -> None:
    """Whichever engine's plan it is, for a person: the working, the warnings, the verdict
    (llama.cpp plans; a vLLM plan that was made fits) and the command line."""
    from homelab.plan.planner import Plan
    from homelab.plan.working import render_steps

    for line in render_steps(plan.steps):
        print(line)
    for warning in plan.warnings:
        print(f"! {warning}")
    if isinstance(plan, Plan):
        verdict = {
            "fits": "Fits.",
            "partial": "Does not fit on the card as a whole: partial offload below.",
            "does_not_fit": "Does not fit.",
        }[plan.verdict]
        from homelab.plan.vocabulary import summary_words

        kv = format_bytes(plan.candidate.allocation.total)
        print(f"{verdict} {summary_words(plan)}, KV {kv}")
    print(shlex.join(argv))


def named_preset(model: str, engine: str):
    """The preset ``model`` names, or None when it names a file or a Hub reference (as
    ``homelab serve`` reads its argument: :func:`~homelab.serve.model_ref.named_model`).

    Raises:
        HomelabError: a path that cannot be a model, an unknown preset, or one for another
            engine.
    """
    from homelab.engine.kinds import engine_kind
    from homelab.serve.model_ref import named_model

    kind = engine_kind(engine)
    return named_model(model, kind).preset if kind.pulls else None


def run(args: argparse.Namespace) -> int:
    from homelab.cli import plan_set_cmd
    from homelab.engine.kinds import DEFAULT_ENGINE

    if plan_set_cmd.wants_set(args):
        return plan_set_cmd.run(args)
    if args.model is None:
        raise UsageError(
            "plan what? Give a model, several, or --models",
            hint="e.g. homelab plan qwen3-8b, or homelab plan --models models.toml",
        )
    preset = named_preset(args.model, getattr(args, "engine", DEFAULT_ENGINE))
    if preset is not None:
        return _run_preset(args, preset)
    prepared = prepared_from_args(args)
    if args.json:
        print_json(plan_data(prepared))
    else:
        plan, measured = _measured(prepared)
        print_engine_plan(plan, list(prepared.argv))
        for line in measured:
            print(line)
    return exit_code(prepared)


def exit_code(prepared) -> int:
    """0 when everything fits on the device, 3 otherwise (partial offload included); a vLLM
    plan that was made fits (one that does not is an error)."""
    verdict = getattr(prepared.plan.plan, "verdict", "fits")
    return int(ExitCode.OK if verdict == "fits" else ExitCode.DOES_NOT_FIT)


def _run_preset(args: argparse.Namespace, preset) -> int:
    """``homelab plan PRESET``: as ``serve PRESET --dry-run`` plans it (its workload hint,
    served by its name), from the preset's own facts while the Hub cannot be reached."""
    from homelab.plan.serialize import plan_to_dict
    from homelab.serve.preset_plan import plan_preset

    planned = plan_preset(preset, None, options_from_args(args))
    offline = planned.offline
    if args.json:
        if planned.prepared is not None:
            data = plan_data(planned.prepared)
        else:
            data = plan_to_dict(planned.plan, list(planned.argv))
        data["preset"] = preset.key
        data["planned_from"] = "header" if offline is None else "preset facts"
        data["offline"] = offline
        print_json(data)
    else:
        if offline is not None:
            print(
                f"! Planned from the preset's own facts: the Hub cannot be reached ({offline}). "
                "A header read online replaces them."
            )
        print_engine_plan(planned.plan, list(planned.argv))
    return int(ExitCode.OK if planned.plan.verdict == "fits" else ExitCode.DOES_NOT_FIT)
