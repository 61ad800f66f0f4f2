"""homelab.engine.llamacpp.actuals: the plan's figures next to the real llama-server's log.

The real runs start llama-server (b11312, CPU build) with exactly the argv the planner
made for a CPU plan, on SmolLM2 and on the factory's real-geometry models, and compare.
The CUDA-side tests feed log lines written with llama.cpp's own format strings for a
card this machine does not have (the only stand-in the rules allow: absent hardware).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.engine.llamacpp.actuals import (
    ROW_NAMES,
    actuals_to_dict,
    compare,
    format_actuals,
    is_host_buffer,
    predicted_output_bytes,
    row,
)
from homelab.engine.llamacpp.log import MIB, parse_load_log
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.gpu.report import synthetic_report
from homelab.plan.planner import PlanRequest, make_plan
from homelab.units import MiB
from tests.engine.planned_runs import cpu_plan, run_plan
from tests.factory import ACCEPTANCE_ARCHS, write_gguf
from tests.factory.mib import mib_matches

pytestmark = pytest.mark.engine

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def factory_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("actuals-models")
    return {arch: write_gguf(arch, folder / f"{arch}.gguf") for arch in ACCEPTANCE_ARCHS}


# -- real runs of the planner's argv ---------------------------------------------------


def test_smollm2_cpu_plan_matches_the_real_log(smollm2_gguf: Path, llama_server_bin: Path) -> None:
    plan = cpu_plan(smollm2_gguf, ctx=4096, parallel=2)
    args, log = run_plan(llama_server_bin, plan)
    assert not log.failures and log.ready, log.failures
    assert args[:4] == ["-c", "4096", "-np", "2"] and "-ngl" in args and "--metrics" in args
    rows = compare(plan, log)
    assert [r.name for r in rows] == ["weights", "KV", "compute", "output"]  # no recurrent layers

    weights = row(rows, "weights")
    assert weights.where == "CPU_Mapped" and weights.lines == 1
    assert weights.predicted == plan.weights.total == 96_576_768
    assert weights.consistent and abs(weights.difference) < 0.005 * MIB

    kv = row(rows, "KV")
    (line,) = log.kv_caches
    assert kv.predicted == plan.candidate.allocation.total
    assert mib_matches(kv.predicted, line.size_mib, single_precision=True)
    assert kv.consistent and kv.actual == round(line.size_mib * MIB)

    compute = row(rows, "compute")
    assert compute.where == "CPU" and compute.actual is not None and compute.actual > 0
    assert compute.predicted == plan.candidate.engine.compute_buffer
    assert compute.difference == compute.actual - compute.predicted

    output = row(rows, "output")  # one F32 logits row per slot, 49152-token vocabulary
    assert output.predicted == 4 * 49_152 * 2 and output.consistent


@pytest.mark.parametrize("arch", ACCEPTANCE_ARCHS)
def test_factory_cpu_plans_match_the_real_log(
    arch: str, factory_models: dict[str, Path], llama_server_bin: Path
) -> None:
    plan = cpu_plan(factory_models[arch], ctx=4096, parallel=2)
    _, log = run_plan(llama_server_bin, plan)
    assert not log.failures, [f.line for f in log.failures]
    rows = compare(plan, log)
    alloc = plan.candidate.allocation

    kv = row(rows, "KV")
    assert kv.predicted == alloc.full_bytes + alloc.swa_bytes
    assert kv.lines == len(log.kv_caches) == (2 if plan.geometry.swa_layers else 1)
    assert kv.consistent, (kv, log.kv_caches)

    recurrent = row(rows, "recurrent")
    if alloc.recurrent_bytes:
        assert recurrent is not None and recurrent.consistent, (recurrent, log.recurrent)
    else:
        assert recurrent is None and not log.recurrent

    weights = row(rows, "weights")
    assert weights.predicted == plan.weights.total and weights.consistent, weights
    compute = row(rows, "compute")
    assert compute.actual is not None and compute.actual > 0
    assert row(rows, "output").actual is not None


def test_failed_load_leaves_actuals_unknown_not_zero(smollm2_gguf: Path) -> None:
    plan = cpu_plan(smollm2_gguf)
    log = parse_load_log(
        (FIXTURES / "llama_logs" / "fail-missing-file__c4096.log").read_text("utf-8")
    )
    rows = compare(plan, log)
    assert [r.name for r in rows] == ["weights", "KV", "compute", "output"]
    for r in rows:
        assert r.actual is None and r.difference is None and r.consistent is None and r.lines == 0
        assert r.predicted is not None and r.predicted > 0
    assert "n/a" in format_actuals(rows)


# -- the device side: what a CUDA build logs ------------------------------------------


def _mib(n_bytes: int) -> float:
    return round(n_bytes / MIB, 2)


def _cuda_log(
    *,
    model: dict[str, int],
    kv: dict[str, int],
    compute: dict[str, int],
    output: int,
    size_line: int,
) -> str:
    """Load-log lines as llama.cpp b11312 prints them (format strings of llama-model.cpp,
    llama-context.cpp, llama-kv-cache.cpp), for buffers on CUDA0 and in host memory."""
    lines = [
        f"load_tensors: {dev:>12} model buffer size = {_mib(b):8.2f} MiB"
        for dev, b in model.items()
    ]
    lines.append(f"llama_context: {'CUDA_Host':>10}  output buffer size = {_mib(output):8.2f} MiB")
    lines += [
        f"llama_kv_cache: {dev:>10} KV buffer size = {_mib(b):8.2f} MiB" for dev, b in kv.items()
    ]
    lines.append(
        f"llama_kv_cache: size = {_mib(size_line):7.2f} MiB (  4096 cells,  30 layers,  1/1 seqs), "
        f"K (q8_0): {_mib(size_line // 2):7.2f} MiB, V (q8_0): {_mib(size_line // 2):7.2f} MiB"
    )
    lines += [
        f"sched_reserve: {dev:>10} compute buffer size = {_mib(b):8.2f} MiB"
        for dev, b in compute.items()
    ]
    return "\n".join(lines) + "\n"


def test_gpu_plan_reads_the_cards_buffers_not_the_hosts(smollm2_gguf: Path) -> None:
    report = probe(snapshot=FIXTURES / "gpu" / "rtx3090_headless.json")
    plan = make_plan(
        read_model(smollm2_gguf), str(smollm2_gguf), report, PlanRequest(ctx=4096, parallel=1)
    )
    assert plan.on_gpu and plan.n_gpu_layers is None
    kv_bytes = plan.candidate.allocation.total
    compute = plan.candidate.engine.compute_buffer
    text = _cuda_log(
        model={"CPU_Mapped": 24 * MiB, "CUDA0": plan.weights_on_device},
        kv={"CUDA0": kv_bytes},
        compute={"CUDA0": compute + 3 * MiB, "CUDA_Host": 10 * MiB},
        output=predicted_output_bytes(plan),
        size_line=kv_bytes,
    )
    rows = compare(plan, parse_load_log(text))
    by = {r.name: r for r in rows}
    assert by["weights"].where == "CUDA0" and by["weights"].consistent
    assert by["KV"].where == "CUDA0" and by["KV"].consistent
    assert by["compute"].where == "CUDA0"
    assert by["compute"].actual == round(_mib(compute + 3 * MiB) * MIB)
    assert not by["compute"].consistent and 2.99 * MiB < by["compute"].difference < 3.01 * MiB
    assert by["output"].where == "CUDA_Host" and by["output"].consistent


def test_partial_offload_compares_the_kv_on_the_card(smollm2_gguf: Path) -> None:
    report = synthetic_report(1040 * MiB)
    plan = make_plan(
        read_model(smollm2_gguf), str(smollm2_gguf), report, PlanRequest(ctx=4096, parallel=1)
    )
    assert plan.verdict == "partial" and plan.n_gpu_layers is not None
    on_card = plan.candidate.allocation.total  # the offloaded layers' cache only
    whole = 30 * 4096 * 2 * 192 * 34 // 32  # every layer, as the "size =" line counts it
    text = _cuda_log(
        model={
            "CPU_Mapped": plan.weights.total - plan.weights_on_device,
            "CUDA0": plan.weights_on_device,
        },
        kv={"CUDA0": on_card, "CPU": whole - on_card},
        compute={"CUDA0": plan.candidate.engine.compute_buffer},
        output=predicted_output_bytes(plan),
        size_line=whole,
    )
    kv = row(compare(plan, parse_load_log(text)), "KV")
    assert kv.where == "CUDA0" and kv.predicted == on_card and kv.consistent, kv


def test_host_buffer_names() -> None:
    for name in ("CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host", "AMX"):
        assert is_host_buffer(name)
    for name in ("CUDA0", "CUDA1", "Vulkan0", "ROCm0"):
        assert not is_host_buffer(name)


# -- output for people and for JSON -------------------------------------------------------


def test_table_and_dict_from_a_real_log(smollm2_gguf: Path) -> None:
    plan = cpu_plan(smollm2_gguf, ctx=4096, parallel=1, type_k="q8_0", type_v="q8_0")
    log = parse_load_log(
        (
            FIXTURES / "llama_logs" / "llama__c4096_np1_ctk-q8_0_ctv-q8_0_fa-on_norepack.log"
        ).read_text("utf-8")
    )
    rows = compare(plan, log)  # another model's log: the figures disagree, and the table says so
    table = format_actuals(rows).splitlines()
    assert table[0].split() == ["predicted", "actual", "difference", "where"]
    assert [line.split()[0] for line in table[1:]] == [r.name for r in rows]
    header_at = table[0].index("predicted") + len("predicted")
    for line in table[1:]:  # the predicted column is right-aligned under its heading
        assert line[header_at - 1] != " "
    assert "%" in table[1]  # weights: 20.42 MiB logged vs 92.10 MiB planned, with the share

    data = actuals_to_dict(rows)
    json.dumps(data)
    assert [d["name"] for d in data] == [r.name for r in rows]
    assert set(ROW_NAMES) >= {d["name"] for d in data}
    weights = data[0]
    assert weights["difference"] == weights["actual"] - weights["predicted"] < 0
    assert weights["within_log_rounding"] is False and weights["log_lines"] == 1
