"""vLLM's engine kind, as :class:`~homelab.engine.kinds.EngineKind` asks.

The kinds' shared types are imported where used: the registry imports this module.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from homelab.engine.supervision.facts import PlanFacts
from homelab.errors import EngineError, UsageError

if TYPE_CHECKING:
    from homelab.engine.kinds import Measured, OomReading, ServePlan
    from homelab.engine.supervision.readiness import EngineProfile
    from homelab.plan.judge import Fit


class Vllm:
    """vLLM: a model folder (or cached repo), priced before its four-minute boot."""

    name = "vllm"
    program = "vllm"
    default_port = 8000
    pulls = False
    default_cache_type = "auto"
    takes_rpc_workers = False
    keeps_experts_in_ram = True
    """As ``--cpu-offload-gb`` with ``--cpu-offload-params experts`` (homelab.plan.vllm.offload)."""
    loads_gguf = False
    fails_past_pool = False
    benched = False
    restarts_in_place = False
    start_cost: str | None = "a first start takes minutes: weights, compile, CUDA graphs"
    oom: OomReading | None = None

    def verdict(self, model, label, report, options, **_: Any) -> Fit:
        """vLLM serves a Hub repo's weights, not a GGUF file: it judges no header (the menu,
        presets and quants are judged by :func:`~homelab.engine.kinds.gguf_kind`)."""
        raise UsageError(
            f"vLLM does not judge GGUF headers ({label}).",
            hint="Judge GGUF models with llama.cpp's kind; plan vLLM with `--engine vllm`.",
        )

    def plan(self, model, report, options, *, default_workload=None) -> ServePlan:
        from homelab.engine.kinds import ServePlan
        from homelab.plan.vllm.plan import plan_vllm

        if options.workload.per_slot is None and default_workload is not None:
            options = replace(
                options, workload=replace(options.workload, per_slot=default_workload)
            )
        plan = plan_vllm(model, report, options)
        facts = PlanFacts(
            slots=plan.max_num_seqs,
            ctx_total=plan.max_model_len,
            ctx_per_slot=plan.max_model_len,
            kv_tokens=plan.predicted_kv_tokens,
            unified=True,
            cache_type_k=plan.kv_cache_dtype,
            cache_type_v=plan.kv_cache_dtype,
        )
        env: dict[str, str] = {}
        if plan.backend == "cpu" and os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            raise UsageError(
                f"VLLM_CPU_KVCACHE_SPACE is set ({os.environ['VLLM_CPU_KVCACHE_SPACE']} GiB): vLLM's CPU "
                "backend would take it over the KV pool homelab priced",
                hint="Unset VLLM_CPU_KVCACHE_SPACE and use the KV cache memory setting instead.",
            )
        if options.card.gpu is not None:
            # vLLM uses the first visible device: show it only the planned one, numbered as
            # NVML numbers cards (PCI bus order), not CUDA's fastest-first order.
            cards = ",".join(str(i) for i in options.card.gpus or ())
            env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": cards}
        return ServePlan(self.name, plan, str(model), facts, env=env)

    def executable(self) -> str:
        from homelab.engine.vllm.locate import find_vllm

        return find_vllm().executable

    def argv(self, plan: ServePlan, port: int, executable: str | None) -> list[str]:
        from homelab.engine.vllm.argv import vllm_argv
        from homelab.engine.vllm.locate import find_vllm

        if executable is None:  # as shown: the vLLM found here, ``vllm`` when none is
            try:
                executable = find_vllm().executable
            except EngineError:
                executable = "vllm"
        return vllm_argv(plan.plan, port=port, executable=executable, served=plan.served_name)

    def profile(self, plan: ServePlan | None, model: str) -> EngineProfile:
        from homelab.engine.vllm.profile import vllm_profile

        profile = vllm_profile()
        return profile if plan is None or not plan.env else replace(profile, env=plan.env)

    def status_client(self, url: str, timeout_s: float, api_key: str | None = None) -> Any:
        return None  # vLLM's live status is not read yet

    def measure(self, plan: ServePlan, lines: Sequence[str], executable: str) -> Measured | None:
        return None  # its start-up figures are in the log; not compared yet

    def logged_kv_tokens(self, lines: Sequence[str]) -> int | None:
        from homelab.engine.vllm.log import last_kv_tokens

        return last_kv_tokens(lines)

    def backend(self, executable: str) -> str | None:
        return None  # torch picks the device in the engine; its log says which

    def served_facts(self, facts: PlanFacts | None, lines: Sequence[str]) -> PlanFacts | None:
        logged = self.logged_kv_tokens(lines)
        return facts if facts is None or logged is None else replace(facts, kv_tokens=logged)
