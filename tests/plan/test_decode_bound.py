"""The decode bound: bytes read per generated token on each side, checked against the
tensor table's own sums (written out here from the tensor names, not through the planner's
placement), on generated MoE and dense GGUFs; its bandwidths from the replayed NVML card
and a stored RAM measurement; and what it says when any of it is unknown."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.gguf.header import GgufModel
from homelab.gguf.model_file import read_model
from homelab.gpu import ram_bandwidth
from homelab.gpu.probe import probe
from homelab.gpu.ram_bandwidth import RamBandwidth
from homelab.gpu.report import GpuReport
from homelab.plan.decode_bound import decode_bound, with_decode_bound, with_measured
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.serialize import plan_to_dict
from homelab.plan.working import render_steps
from tests.factory import write_gguf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
BLOCK = re.compile(r"^blk\.(\d+)\.")
RTX3090 = 384 // 8 * 9751 * 1_000_000 * 2  # the fixture's bus and clock: 936 GB/s
RAM = RamBandwidth(20_000_000_000, "2026-12-01T10:00:00+0000", "a test's figure", "")
REQUEST = PlanRequest(ctx=4096, parallel=1)


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> GgufModel:
    path = tmp_path_factory.mktemp("moe") / "q3moe.gguf"
    return read_model(str(write_gguf("qwen3moe", path, n_layer=8, n_expert=8, n_ff_exp=512)))


@pytest.fixture(scope="module")
def card() -> GpuReport:
    return probe(snapshot=FIXTURES / "rtx3090_headless.json")


def table_sums(
    model: GgufModel, on_card: range, n_cpu_moe: int, used: int, count: int
) -> tuple[int, int]:
    """(card, RAM) bytes per token from the tensor table: blocks in ``on_card`` and the
    output layer on the card, the active share of each routed expert, one embedding row."""
    card = ram = 0
    tied = not any(t.name == "output.weight" for t in model.tensors)
    for t in model.tensors:
        size = t.n_bytes or 0
        if t.name.startswith("token_embd."):
            ram += size // t.shape[1]
            card += size if tied else 0
            continue
        match = BLOCK.match(t.name)
        if match is None:
            card += size
            continue
        block = int(match.group(1))
        here = block in on_card
        if EXPERTS.search(t.name):
            size = size * used // count
            here = here and block >= n_cpu_moe
        if here:
            card += size
        else:
            ram += size
    return card, ram


def _bound(plan: Plan, model: GgufModel, report: GpuReport, ram: RamBandwidth | None = RAM):
    return decode_bound(plan, model, report, ram)


@pytest.mark.parametrize("n_cpu_moe", [0, 3, 8])
def test_moe_reads_the_active_experts_where_they_are(
    moe: GgufModel, card: GpuReport, n_cpu_moe: int
) -> None:
    plan = make_plan(moe, "q3moe", card, replace(REQUEST, n_cpu_moe=n_cpu_moe))
    bound = _bound(plan, moe, card)
    gpu, ram = bound.sides
    assert (gpu.weights, ram.weights) == table_sums(moe, range(8), n_cpu_moe, 2, 8)
    assert gpu.bandwidth == RTX3090 and ram.bandwidth == RAM.bytes_per_s
    # every active byte is read once, on one side or the other
    experts = sum(t.n_bytes or 0 for t in moe.tensors if EXPERTS.search(t.name))
    embd = next(t for t in moe.tensors if t.name.startswith("token_embd."))
    rest = sum(t.n_bytes or 0 for t in moe.tensors) - experts - (embd.n_bytes or 0)
    row = (embd.n_bytes or 0) // embd.shape[1]
    assert abs(gpu.weights + ram.weights - (rest + experts * 2 // 8 + row)) < 8 * 3
    expected = 1 / (gpu.weights / RTX3090 + ram.weights / RAM.bytes_per_s)
    assert bound.tokens_per_s(0) == pytest.approx(expected)
    # the KV of every layer is on the card: a full slot is slower than an empty one
    assert gpu.kv_per_cell == plan.candidate.allocation.bytes_per_token > 0
    assert ram.kv_per_cell == 0
    assert bound.tokens_per_s(bound.ctx) < bound.tokens_per_s(0)


def test_experts_in_ram_are_slower_than_on_the_card(moe: GgufModel, card: GpuReport) -> None:
    rates = [
        _bound(make_plan(moe, "q3moe", card, replace(REQUEST, n_cpu_moe=n)), moe, card)
        for n in (0, 4, 8)
    ]
    speeds = [b.tokens_per_s(0) for b in rates]
    assert speeds[0] > speeds[1] > speeds[2]  # type: ignore[operator]


def _small_card(report: GpuReport, total: int) -> GpuReport:
    device = report.devices[0]
    small = replace(
        device, total=total, free=total - device.reserved, free_min=total - device.reserved
    )  # type: ignore[operator]
    return replace(report, devices=(small,))


def test_whole_layers_off_the_card_are_read_from_ram(tmp_path: Path, card: GpuReport) -> None:
    model = read_model(
        str(write_gguf("llama", tmp_path / "dense.gguf", n_layer=16, n_embd=1024, n_ff=4096))
    )
    whole = make_plan(model, "dense", card, REQUEST)
    engine, kv = whole.candidate.engine.total, whole.candidate.allocation.total
    spare = whole.budget.usable - whole.weights_on_device - engine - kv
    total = card.devices[0].total - spare - whole.weights_on_device // 2  # half the weights short
    partial = make_plan(model, "dense", _small_card(card, total), REQUEST)
    assert partial is not None and partial.n_gpu_layers is not None
    n_blocks = len(partial.weights.per_block)
    first = n_blocks - (partial.n_gpu_layers - 1)
    bound = _bound(partial, model, card)
    gpu, ram = bound.sides
    assert (gpu.weights, ram.weights) == table_sums(model, range(first, n_blocks), 0, 1, 1)
    assert ram.kv_per_cell > 0 and gpu.kv_per_cell > 0  # a layer's KV lives with the layer
    assert bound.tokens_per_s(0) < _bound(whole, model, card).tokens_per_s(0)  # type: ignore[operator]


def test_dense_and_tied_models_and_a_cpu_plan(tmp_path: Path, card: GpuReport) -> None:
    dense = read_model(str(write_gguf("llama", tmp_path / "dense.gguf")))
    gpu, ram = _bound(make_plan(dense, "dense", card, REQUEST), dense, card).sides
    assert (gpu.weights, ram.weights) == table_sums(dense, range(99), 0, 1, 1)
    tied = read_model(str(write_gguf("gemma3", tmp_path / "tied.gguf")))
    assert not any(t.name == "output.weight" for t in tied.tensors)
    gpu, ram = _bound(make_plan(tied, "tied", card, REQUEST), tied, card).sides
    assert (gpu.weights, ram.weights) == table_sums(tied, range(99), 0, 1, 1)
    cpu = probe(snapshot=FIXTURES / "no_gpu.json")
    bound = _bound(make_plan(dense, "dense", cpu, REQUEST), dense, cpu)
    (only,) = bound.sides
    assert only.where == "system RAM"
    assert only.weights == sum(table_sums(dense, range(0), 0, 1, 1))
    assert bound.tokens_per_s(0) == pytest.approx(RAM.bytes_per_s / only.weights)


def test_the_working_and_the_json_say_it_is_an_estimate(moe: GgufModel, card: GpuReport) -> None:
    plan = make_plan(moe, "q3moe", card, replace(REQUEST, n_cpu_moe=3))
    priced = with_decode_bound(plan, moe, card, RAM)
    text = "\n".join(render_steps(priced.steps))
    assert "Decode speed, estimate" in text and "≤ " in text and "936.1 GB/s" in text
    assert "20.0 GB/s" in text and "384-bit bus × 9,751 MHz × 2" in text
    data = plan_to_dict(priced, [])["decode"]
    assert (
        data["estimate"] is True and data["tokens_per_s_max"] > data["tokens_per_s_max_full_slot"]
    )
    sides = data["sides"]
    assert [s["bandwidth"] for s in sides] == [RTX3090, RAM.bytes_per_s]
    assert sides[1]["weights_bytes_per_token"] == priced.decode.sides[1].weights  # type: ignore[union-attr]
    measured = with_measured(priced, 12.5, "homelab bench, one request at a time")
    text = "\n".join(render_steps(measured.steps))
    assert "Decode speed: 12.5 tok/s measured (homelab bench" in text
    assert "the estimate was ≤" in text and "measured:" not in text  # not a bench's line
    assert "Decode speed, estimate" not in text
    assert plan_to_dict(measured, [])["decode"]["estimate"] is False
    for bad in (None, 0.0, -3.0, float("nan")):  # nothing measured: the estimate stays
        assert with_measured(priced, bad, "x").steps == priced.steps


# -- unknown is unknown ---------------------------------------------------------------------


def test_an_old_snapshot_without_the_bus_leaves_the_bound_unknown(moe: GgufModel) -> None:
    old = probe(snapshot=FIXTURES / "constructed_one_card_busy.json")
    assert old.devices[0].memory_bandwidth is None
    plan = with_decode_bound(make_plan(moe, "q3moe", old, REQUEST), moe, old, RAM)
    assert plan.decode is not None and plan.decode.tokens_per_s(0) is None
    assert "NVML did not report" in (plan.decode.unknown or "")
    assert "Decode speed: unknown" in "\n".join(render_steps(plan.steps))
    data = plan_to_dict(plan, [])["decode"]
    assert data["tokens_per_s_max"] is None and data["sides"][0]["bandwidth"] is None


def test_ram_unknown_counts_only_where_ram_is_read(moe: GgufModel, card: GpuReport) -> None:
    on_card = _bound(make_plan(moe, "q3moe", card, REQUEST), moe, card, None)
    assert on_card.tokens_per_s(0) is not None  # RAM reads the embedding's row only: left out
    assert "left out" in "\n".join(render_steps(with_decode_bound(
        make_plan(moe, "q3moe", card, REQUEST), moe, card, None).steps))  # fmt: skip
    in_ram = _bound(make_plan(moe, "q3moe", card, replace(REQUEST, n_cpu_moe=2)), moe, card, None)
    assert in_ram.tokens_per_s(0) is None and "system RAM" in (in_ram.unknown or "")


def _snapshot_with(**fields: object) -> dict:
    data = json.loads((FIXTURES / "rtx3090_headless.json").read_text())
    data["devices"][0].update(fields)
    return data


@pytest.mark.parametrize(
    "fields",
    [
        {"memory_bus_width": 0},
        {"max_memory_clock": 0},
        {"memory_bus_width": {"error": "NotSupported"}},
        {"max_memory_clock": {"error": "Unknown"}},
    ],
)
def test_a_zero_or_failed_figure_is_unknown_not_zero(fields: dict) -> None:
    from homelab.gpu.replay import ReplayNvml

    report = probe(backend=ReplayNvml(_snapshot_with(**fields)))
    assert report.devices[0].memory_bandwidth is None
    assert report.devices[0].total > 0  # the card itself is read as before


@pytest.mark.parametrize("value", [-384, "384", 3.5, True])
def test_a_negative_or_odd_figure_is_a_clear_snapshot_error(value: object) -> None:
    from homelab.errors import GpuProbeError
    from homelab.gpu.replay import ReplayNvml

    with pytest.raises(GpuProbeError, match="memory_bus_width") as caught:
        ReplayNvml(_snapshot_with(memory_bus_width=value))
    assert caught.value.hint


def test_recording_keeps_the_bus_and_clock(tmp_path: Path) -> None:
    from homelab.gpu.record import record_snapshot
    from homelab.gpu.replay import ReplayNvml

    again = record_snapshot(ReplayNvml(FIXTURES / "rtx3090_headless.json"), 0, 0.25)
    device = again["devices"][0]
    assert (device["memory_bus_width"], device["max_memory_clock"]) == (384, 9751)
    assert probe(backend=ReplayNvml(again)).devices[0].memory_bandwidth == RTX3090
    old = record_snapshot(ReplayNvml(FIXTURES / "constructed_one_card_busy.json"), 0, 0.25)
    assert old["devices"][0]["memory_bus_width"] == {"error": "NotSupported"}
    assert probe(backend=ReplayNvml(old)).devices[0].memory_bandwidth is None


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ({"qwen3moe.expert_used_count": None}, "does not say qwen3moe.expert_used_count"),
        ({"qwen3moe.expert_count": None}, "does not say qwen3moe.expert_count"),
        ({"qwen3moe.expert_used_count": 0}, "says 0 for"),
        ({"qwen3moe.expert_used_count": "2"}, "says '2' for"),
        ({"qwen3moe.expert_used_count": 9}, "uses 9 of 8 experts"),
    ],
)
def test_a_header_that_does_not_say_how_many_experts_leaves_it_unknown(
    moe: GgufModel, card: GpuReport, metadata: dict, why: str
) -> None:
    plan = make_plan(moe, "q3moe", card, REQUEST)
    values = {**moe.metadata, **metadata}
    values = {k: v for k, v in values.items() if v is not None}
    broken = GgufModel((replace(moe.header, metadata=values), *moe.parts[1:]))
    bound = _bound(plan, broken, card)
    assert bound.tokens_per_s(0) is None and why in (bound.unknown or "")
    assert sum(s.weights for s in bound.sides) > 0  # the bytes are still shown


# -- system RAM's bandwidth -------------------------------------------------------------------


def test_ram_bandwidth_is_measured_stored_and_read_back(tmp_path: Path) -> None:
    measured = ram_bandwidth.measure(processes=1, seconds=0.2)
    assert measured.bytes_per_s > 0 and measured.machine == ram_bandwidth.machine()
    ram_bandwidth.save(measured, where=tmp_path)
    assert ram_bandwidth.load(where=tmp_path) == measured
    assert ram_bandwidth.load(where=tmp_path / "none") is None


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"schema": 1, "bytes_per_s": 0}',
        '{"schema": 1, "bytes_per_s": -5, "measured_at": "x", "method": "x"}',
        '{"schema": 1, "bytes_per_s": true, "measured_at": "x", "method": "x"}',
        '{"schema": 2, "bytes_per_s": 5, "measured_at": "x", "method": "x"}',
        '{"schema": 1, "bytes_per_s": 5, "measured_at": "x", "method": "x", "machine": "other"}',
    ],
)
def test_a_broken_or_foreign_measurement_is_none(tmp_path: Path, content: str) -> None:
    (tmp_path / ram_bandwidth.FILE).write_text(content)
    assert ram_bandwidth.load(where=tmp_path) is None


def test_plan_cli_prices_decode_with_the_stored_ram_figure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_gguf("qwen3moe", tmp_path / "q3moe.gguf", n_layer=8, n_expert=8, n_ff_exp=512)
    args = ["plan", str(path), "--gpu-snapshot", str(FIXTURES / "rtx3090_headless.json"),
            "--n-cpu-moe", "3", "--ctx", "4096", "--parallel", "1"]  # fmt: skip
    main([*args, "--json"])
    before = json.loads(capsys.readouterr().out)["decode"]
    assert before["tokens_per_s_max"] is None and "not measured yet" in before["unknown"]
    ram_bandwidth.save(replace(RAM, machine=ram_bandwidth.machine()))
    main([*args, "--json"])
    after = json.loads(capsys.readouterr().out)["decode"]
    assert after["estimate"] is True and after["sides"][1]["bandwidth"] == RAM.bytes_per_s
    assert after["tokens_per_s_max"] > 0
    main(args)
    assert "Decode speed, estimate (memory-bandwidth bound" in capsys.readouterr().out


def test_the_rung_the_planner_chose_is_priced_as_it_placed_it(tmp_path: Path) -> None:
    """A MoE with real-size experts (384 MiB a tensor, header only) on a 6 GiB card that
    reports its bus: the ladder keeps the experts of the first N blocks in RAM, and the
    bound reads those N blocks' active experts from RAM, the rest from the card."""
    from homelab.gpu.report import CpuMemory
    from homelab.plan.placement import is_routed_expert
    from homelab.plan.workload import AGENT
    from homelab.units import GiB

    tiny = read_model(
        str(write_gguf("qwen3moe", tmp_path / "m.gguf", n_layer=8, n_ctx_train=131072))
    )
    offset, tensors = 0, []
    for t in sorted(tiny.header.tensors, key=lambda t: t.offset):
        size = 384 << 20 if is_routed_expert(t.name) else t.n_bytes or 0
        tensors.append(t._replace(offset=offset, n_bytes=size))
        offset += size
    model = GgufModel(parts=(replace(tiny.header, tensors=tuple(tensors)),))
    card = _small_card(probe(snapshot=FIXTURES / "rtx4060ti16_xorg.json"), 6 * GiB)
    plenty = CpuMemory(total=64 * GiB, available=48 * GiB)
    plan = make_plan(model, "m.gguf", card, PlanRequest(workload=AGENT), ram=lambda: plenty)
    n = plan.weights.n_cpu_moe
    assert 0 < n < 8 and plan.n_gpu_layers is None  # rung 2, not whole layers
    bound = _bound(plan, model, card)
    gpu, ram = bound.sides
    assert (gpu.weights, ram.weights) == table_sums(model, range(8), n, 2, 4)
    assert gpu.bandwidth == 128 // 8 * 9001 * 1_000_000 * 2  # the 4060 Ti's 288 GB/s
    assert ram.weights > gpu.weights / 10  # the experts in RAM weigh in the sum


def test_bench_ram_bandwidth_measures_and_keeps_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert ram_bandwidth.load() is None
    assert main(["bench", "--ram-bandwidth", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    stored = ram_bandwidth.load()
    assert stored is not None and shown["ram_bandwidth"] == stored.bytes_per_s > 0
    assert Path(shown["stored"]).name == ram_bandwidth.FILE


def test_a_state_folder_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a file").write_text("")
    with pytest.raises(ram_bandwidth.RamBandwidthError, match="cannot write") as caught:
        ram_bandwidth.save(RAM, where=tmp_path / "a file" / "state")
    assert caught.value.hint and "HOMELAB_STATE_DIR" in caught.value.hint


def test_a_worker_s_blocks_are_read_at_an_unknown_bandwidth(
    moe: GgufModel, card: GpuReport
) -> None:
    from homelab.plan.remote_device import RemoteDevice

    worker = RemoteDevice(endpoint="127.0.0.1:50052", name="RPC0", total=8 << 30, free=8 << 30)
    plan = make_plan(moe, "q3moe", card, REQUEST, remote=(worker,))
    bound = _bound(plan, moe, card)
    rpc, gpu, ram = bound.sides
    blocks = {
        s.device.llama_name: range(s.first_block, s.first_block + s.n_blocks) for s in plan.devices
    }
    assert (rpc.weights, gpu.weights + ram.weights) == (
        table_sums(moe, blocks["RPC0"], 0, 2, 8)[0] - table_sums(moe, range(0), 0, 2, 8)[0],
        sum(table_sums(moe, range(8), 0, 2, 8)) - rpc.weights,
    )
    assert rpc.bandwidth is None and "worker" in rpc.source and gpu.bandwidth == RTX3090
    assert bound.tokens_per_s(0) is None and "RPC0" in (bound.unknown or "")
