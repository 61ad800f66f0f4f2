"""Plans over several cards, replayed from two-GPU snapshots (and RPC devices given as input).

The snapshots ``constructed_*.json`` are constructed (each says so in its ``comment``);
``two_gpus.json`` is the older mixed scenario. Models come from the GGUF factory (a real
llama header) with their tensors sized like a big model's, since the split is about bytes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.engine.options import plan_options
from homelab.errors import UsageError
from homelab.gguf.header import GgufModel, TensorInfo
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.gpu.report import GpuReport, synthetic_report
from homelab.plan.pipeline import plan_model
from homelab.plan.remote_device import RemoteDevice
from homelab.plan.serialize import plan_to_dict
from homelab.plan.working import render_steps
from homelab.plan.workload import CHAT
from homelab.units import GiB, MiB
from tests.factory import write_gguf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
N_BLOCKS = 32  # the factory's llama has Llama-3-8B's 32 layers


def snapshot(name: str) -> GpuReport:
    return probe(snapshot=FIXTURES / f"{name}.json", window_s=0)


@pytest.fixture(scope="module")
def llama_header(tmp_path_factory: pytest.TempPathFactory):
    path = write_gguf("llama", tmp_path_factory.mktemp("m") / "llama.gguf")
    return read_model(path).header


def sized(header, *, block: int, output: int = 1000 * MiB, embd: int = 500 * MiB) -> GgufModel:
    """The factory's header with its tensors sized like a big model's."""
    tensors = [TensorInfo("token_embd.weight", (1,), 0, "F32", 0, embd)]
    tensors += [
        TensorInfo(f"blk.{i}.ffn_up.weight", (1,), 0, "F32", 0, block) for i in range(N_BLOCKS)
    ]
    tensors.append(TensorInfo("output.weight", (1,), 0, "F32", 0, output))
    return GgufModel((dataclasses.replace(header, tensors=tuple(tensors)),))


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def llama_cpp_layer_devices(tensor_split: list[int], n_gpu_layers: int) -> list[int]:
    """Device of each offloaded layer as llama.cpp's load_tensors computes it: float32
    running sums of -ts normalised by their total, then ``upper_bound`` of i / n."""
    splits = np.cumsum(np.array(tensor_split, dtype=np.float32), dtype=np.float32)
    splits = splits / splits[-1]
    return [
        int(np.searchsorted(splits, np.float32(i) / np.float32(n_gpu_layers), side="right"))
        for i in range(n_gpu_layers)
    ]


def check_devices_add_up(plan) -> None:
    """Each device holds its share within its own budget; the totals are their sums."""
    for share in plan.devices:
        assert share.used <= share.device.budget.usable, share.device.label
        assert share.spare >= 0
    assert sum(s.device.budget.usable for s in plan.devices) == plan.budget.usable
    assert sum(s.weights for s in plan.devices) == plan.weights_on_device
    assert sum(s.kv for s in plan.devices) == plan.candidate.allocation.total
    assert [s.output for s in plan.devices] == [False] * (len(plan.devices) - 1) + [True]
    blocks = [b for s in plan.devices for b in s.blocks]
    assert blocks == sorted(blocks) and len(set(blocks)) == len(blocks)


def test_mixed_cards_display_on_the_small_one(llama_header) -> None:
    # 32 × 850 MiB + 1000 MiB output: 27.5 GiB on the devices, more than either card holds
    model = sized(llama_header, block=850 * MiB)
    report = snapshot("constructed_mixed_24_12_display_small")
    for card in (0, 1):  # on either card alone, only part of it goes to the GPU
        alone = plan_model(model, "m.gguf", report, plan_options(workload=CHAT, gpu=card))
        assert alone.verdict == "partial" and len(alone.devices) == 1
    plan = plan_model(model, "m.gguf", report, plan_options(workload=CHAT))
    assert plan.verdict == "fits" and plan.n_gpu_layers is None
    assert any("does not fit GPU 0" in w and "split over the 2 cards" in w for w in plan.warnings)
    assert any("The cards differ" in w for w in plan.warnings)
    check_devices_add_up(plan)

    small, big = plan.devices  # the main card (no display, room for the output) goes last
    assert (small.device.llama_name, big.device.llama_name) == ("CUDA1", "CUDA0")
    assert small.device.budget.desktop == report.devices[1].desktop_peak > 0
    assert small.device.budget.headroom == 1024 * MiB and small.device.budget.display_active
    assert big.device.budget.desktop == 0 and big.device.budget.headroom == 512 * MiB
    assert big.device.budget.reserved == report.devices[0].reserved
    # every local card carries its own CUDA context; only the last has the logits
    assert small.engine.cuda_context == big.engine.cuda_context > 0
    assert small.engine.logits == 0 < big.engine.logits
    assert big.n_blocks > small.n_blocks > 0
    # filled to the same fraction of their room: neither is left with a whole block unused
    assert small.spare < 850 * MiB + small.kv // max(small.n_blocks, 1)

    argv = llama_server_argv(plan)
    assert flag(argv, "--device") == "CUDA1,CUDA0"
    assert flag(argv, "--split-mode") == "layer"
    assert flag(argv, "-mg") == "1"
    assert flag(argv, "-ngl") == "all"
    ts = [int(x) for x in flag(argv, "--tensor-split").split(",")]
    assert ts == [small.n_blocks, big.n_blocks + 1] and sum(ts) == N_BLOCKS + 1
    assert flag(argv, "--fit-target") == "1024,512"
    # llama.cpp's own reading of -ts puts exactly the planned blocks (and the output) there
    placed = llama_cpp_layer_devices(ts, N_BLOCKS + 1)
    assert placed == [0] * small.n_blocks + [1] * (big.n_blocks + 1)

    text = "\n".join(render_steps(plan.steps))
    assert "Split over 2 device(s) (--split-mode layer, --device CUDA1,CUDA0)" in text
    assert f"holds: blocks 0–{small.n_blocks - 1} ({small.n_blocks})" in text
    assert "the output layer: --tensor-split entry" in text
    assert f"= usable: {small.device.budget.usable:,} B" in text


def test_json_devices_carry_the_budget_fields(llama_header) -> None:
    model = sized(llama_header, block=850 * MiB)
    plan = plan_model(
        model,
        "m.gguf",
        snapshot("constructed_mixed_24_12_display_small"),
        plan_options(workload=CHAT),
    )
    data = plan_to_dict(plan, llama_server_argv(plan))
    assert len(data["devices"]) == 2
    for entry in data["devices"]:
        assert set(data["budget"]) <= set(entry)
        assert entry["endpoint"] is None and entry["kind"] == "gpu"
    for key in ("total", "reserved", "desktop", "other", "headroom", "weights", "kv", "engine"):
        assert data["budget"][key] == sum(entry[key] for entry in data["devices"]), key
    assert [e["tensor_split"] for e in data["devices"]] == [
        int(x) for x in flag(data["argv"], "--tensor-split").split(",")
    ]


def test_two_equal_cards_split_evenly(llama_header) -> None:
    model = sized(llama_header, block=850 * MiB)
    plan = plan_model(
        model, "m.gguf", snapshot("constructed_two_equal"), plan_options(workload=CHAT, gpu=(0, 1))
    )
    check_devices_add_up(plan)
    first, last = plan.devices
    # the last card also holds the output layer (1000 MiB ≈ one block): the blocks split 16/16
    assert abs(first.layers - last.layers) <= 2
    assert not any("The cards differ" in w for w in plan.warnings)
    argv = llama_server_argv(plan)
    ts = [int(x) for x in flag(argv, "--tensor-split").split(",")]
    assert sum(ts) == N_BLOCKS + 1
    assert flag(argv, "--fit-target") == "512,512"


def test_a_card_full_of_another_process(llama_header) -> None:
    report = snapshot("constructed_one_card_busy")
    busy = report.devices[0]
    # a model that fits the free card alone is planned there, pinned to it
    small = sized(llama_header, block=400 * MiB)
    plan = plan_model(small, "m.gguf", report, plan_options(workload=CHAT))
    assert plan.verdict == "fits" and len(plan.devices) == 1
    argv = llama_server_argv(plan)
    assert flag(argv, "--device") == "CUDA1" and "--tensor-split" not in argv
    # split over both when asked: the busy card gets what its 2 GiB allow, no more
    big = sized(llama_header, block=850 * MiB)
    split = plan_model(big, "m.gguf", report, plan_options(workload=CHAT, gpu=(0, 1)))
    check_devices_add_up(split)
    by_name = {s.device.llama_name: s for s in split.devices}
    assert by_name["CUDA0"].device.budget.other >= busy.total - busy.reserved - busy.free_min
    assert by_name["CUDA0"].n_blocks < by_name["CUDA1"].n_blocks
    # 27.5 GiB of weights do not fit 24 + 2 GiB: partial offload, layers from the end
    assert split.verdict == "partial" and split.n_gpu_layers is not None
    ts = [int(x) for x in flag(llama_server_argv(split), "--tensor-split").split(",")]
    assert sum(ts) == split.n_gpu_layers
    assert split.devices[0].first_block == N_BLOCKS - (split.n_gpu_layers - 1)


def test_a_card_too_full_for_one_block_is_left_out(llama_header) -> None:
    model = sized(llama_header, block=2600 * MiB, output=500 * MiB)  # more than the 2 GiB left
    plan = plan_model(
        model,
        "m.gguf",
        snapshot("constructed_one_card_busy"),
        plan_options(workload=CHAT, gpu=(0, 1)),
    )
    assert [s.device.llama_name for s in plan.devices] == ["CUDA1"]
    assert any(
        "GPU 0: NVIDIA GeForce RTX 3090 is left out of the split" in w for w in plan.warnings
    )
    assert flag(llama_server_argv(plan), "--device") == "CUDA1"


def test_one_card_plans_pin_their_device(llama_header) -> None:
    model = sized(llama_header, block=100 * MiB)
    headless = plan_model(
        model, "m.gguf", snapshot("rtx3090_headless"), plan_options(workload=CHAT)
    )
    argv = llama_server_argv(headless)
    assert flag(argv, "--device") == "CUDA0"
    assert "--tensor-split" not in argv and "--split-mode" not in argv and "-mg" not in argv
    assert not any("CUDA_DEVICE_ORDER" in w for w in headless.warnings)  # one card: no order
    assert not any("Split over" in line for line in render_steps(headless.steps))
    # a synthetic card (--vram) stands for no device: a CPU-only llama-server must still run it
    synthetic = plan_model(model, "m.gguf", synthetic_report(16 * GiB), plan_options(workload=CHAT))
    assert "--device" not in llama_server_argv(synthetic)
    report = snapshot("two_gpus")
    for gpu, name in ((1, "CUDA1"), ((1,), "CUDA1"), (0, "CUDA0"), (None, "CUDA0")):
        plan = plan_model(model, "m.gguf", report, plan_options(workload=CHAT, gpu=gpu))
        argv = llama_server_argv(plan)
        assert flag(argv, "--device") == name, gpu
        assert "--tensor-split" not in argv
        assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in w for w in plan.warnings)
        data = plan_to_dict(plan, argv)
        assert len(data["devices"]) == 1 and data["devices"][0]["llama_device"] == name
        assert {k: data["devices"][0][k] for k in data["budget"]} == data["budget"]


def test_gpu_setting_checks() -> None:
    with pytest.raises(UsageError, match="each card once"):
        plan_options(gpu=(0, 0))
    with pytest.raises(UsageError, match="card index"):
        plan_options(gpu=(0, -1))
    assert plan_options(gpu=[0, 1]).card.gpus == (0, 1)  # type: ignore[arg-type]
    assert plan_options(gpu=2).card.gpus == (2,)
    assert plan_options().card.gpus is None


def test_rpc_devices_join_the_split(llama_header) -> None:
    model = sized(llama_header, block=850 * MiB)
    worker = RemoteDevice("192.168.1.20:50052", "RPC0", total=16 * GiB, free=15 * GiB)
    report = snapshot("constructed_two_equal")
    plan = plan_model(model, "m.gguf", report, plan_options(workload=CHAT, gpu=0), remote=(worker,))
    check_devices_add_up(plan)
    remote, card = plan.devices  # workers first, as llama-server orders them itself
    assert remote.device.endpoint == "192.168.1.20:50052" and remote.device.llama_name == "RPC0"
    b = remote.device.budget
    assert (b.kind, b.total, b.desktop, b.reserved) == ("rpc", 16 * GiB, 0, 0)
    assert b.other == 1 * GiB and b.headroom == 512 * MiB
    assert remote.engine.cuda_context == 0 < card.engine.cuda_context
    argv = llama_server_argv(plan)
    assert flag(argv, "--rpc") == "192.168.1.20:50052"
    assert argv.index("--rpc") < argv.index("--device")  # the devices exist once --rpc is read
    assert flag(argv, "--device") == "RPC0,CUDA0"
    text = "\n".join(render_steps(plan.steps))
    assert "RPC0: RPC0 at 192.168.1.20:50052, on 192.168.1.20:50052" in text
    assert any("192.168.1.20:50052 run over the network" in w for w in plan.warnings)
    data = plan_to_dict(plan, argv)
    assert data["devices"][0]["endpoint"] == "192.168.1.20:50052"
    assert data["devices"][0]["kind"] == "rpc"


def test_rpc_devices_on_a_machine_without_a_gpu(llama_header) -> None:
    model = sized(llama_header, block=300 * MiB)
    workers = (
        RemoteDevice("10.0.0.2:50052", "RPC0", total=8 * GiB, free=7 * GiB),
        RemoteDevice("10.0.0.3:50052", "RPC1", total=4 * GiB, free=4 * GiB),
    )
    report = snapshot("no_gpu")
    plan = plan_model(model, "m.gguf", report, plan_options(workload=CHAT), remote=workers)
    check_devices_add_up(plan)
    argv = llama_server_argv(plan)
    assert flag(argv, "--rpc") == "10.0.0.2:50052,10.0.0.3:50052"
    assert flag(argv, "--device") == "RPC0,RPC1"
    assert not any("CUDA" in a for a in argv)
    # 32 × 300 MiB + 1000 MiB > the workers' room: they hold the last blocks, the CPU the rest
    assert plan.verdict == "partial" and plan.n_gpu_layers is not None
    ts = [int(x) for x in flag(argv, "--tensor-split").split(",")]
    assert sum(ts) == int(flag(argv, "-ngl")) == plan.n_gpu_layers
    assert all(s.engine.cuda_context == 0 for s in plan.devices)
    first = N_BLOCKS - (plan.n_gpu_layers - 1)
    placed = llama_cpp_layer_devices(ts, plan.n_gpu_layers)
    want = [0] * plan.devices[0].n_blocks + [1] * (plan.devices[1].n_blocks + 1)
    assert placed == want and plan.devices[0].first_block == first


def test_a_worker_reporting_impossible_memory_is_refused(llama_header) -> None:
    model = sized(llama_header, block=100 * MiB)
    bad = RemoteDevice("10.0.0.9:50052", "RPC0", total=4 * GiB, free=5 * GiB)
    with pytest.raises(UsageError, match="10.0.0.9:50052"):
        plan_model(model, "m.gguf", snapshot("no_gpu"), plan_options(), remote=(bad,))


def test_the_pin_follows_what_the_engine_binary_sees(llama_header, llama_server_bin) -> None:
    from homelab.engine.llamacpp.visible_devices import parse_device_list, visible_devices

    listing = (
        "Available devices:\n"
        "  CUDA0: NVIDIA GeForce RTX 3090 (24135 MiB, 23780 MiB free)\n"
        "  CUDA1: NVIDIA GeForce RTX 3060 (12044 MiB, 10810 MiB free)\n"
    )
    assert parse_device_list(listing) == {"CUDA0", "CUDA1"}
    seen = visible_devices(str(llama_server_bin))  # this machine's build: CPU only
    assert seen is not None and not any(name.startswith("CUDA") for name in seen)
    model = sized(llama_header, block=100 * MiB)
    plan = plan_model(model, "m.gguf", snapshot("two_gpus"), plan_options(workload=CHAT, gpu=1))
    assert "--device" not in llama_server_argv(plan, visible=seen)  # it would refuse CUDA1
    assert flag(llama_server_argv(plan, visible=parse_device_list(listing)), "--device") == "CUDA1"
