"""vLLM with a MoE model's routed experts in system RAM: ``--n-cpu-moe N`` priced as vLLM 0.32's
``--cpu-offload-gb`` with ``--cpu-offload-params experts``, from the checkpoint's tensor table.

The model is Qwen3-30B-A3B's real config.json next to safetensors shards with its real tensor
table (names, dtypes, shapes, offsets) over sparse data: bf16, 61 GB, more than any home card.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.options import plan_options
from homelab.engine.vllm.argv import vllm_argv
from homelab.errors import ModelFileError, UsageError
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.plan.vllm.plan import plan_vllm
from homelab.units import GiB

CONFIG = {  # Qwen/Qwen3-30B-A3B config.json (the fields vLLM and homelab read)
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
CARD = 24 * GiB
PLENTY = CpuMemory(total=128 * GiB, available=96 * GiB)


def _tensors(c: dict) -> dict[str, list[int]]:
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    q, kv, ff = (
        c["num_attention_heads"] * c["head_dim"],
        c["num_key_value_heads"] * c["head_dim"],
        c["moe_intermediate_size"],
    )
    shapes = {"model.embed_tokens.weight": [c["vocab_size"], h], "model.norm.weight": [h]}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [q, h],
            p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h],
            p + "self_attn.o_proj.weight": [h, q],
            p + "self_attn.q_norm.weight": [c["head_dim"]],
            p + "self_attn.k_norm.weight": [c["head_dim"]],
            p + "mlp.gate.weight": [c["num_experts"], h],
        }
        for e in range(c["num_experts"]):
            for proj, shape in (
                ("gate_proj", [ff, h]),
                ("up_proj", [ff, h]),
                ("down_proj", [h, ff]),
            ):
                shapes[f"{p}mlp.experts.{e}.{proj}.weight"] = shape
    shapes["lm_head.weight"] = [c["vocab_size"], h]
    return shapes


def _write_shard(path: Path, shapes: dict[str, list[int]]) -> int:
    """A safetensors file with this tensor table (bf16) over sparse data; its data bytes."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)
    return offset


def _layer_experts(shapes: dict[str, list[int]], i: int) -> int:
    return sum(
        2 * a * b
        for name, (a, b) in ((k, v) for k, v in shapes.items() if len(v) == 2)
        if name.startswith(f"model.layers.{i}.mlp.experts.")
    )


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vllm-moe") / "Qwen3-30B-A3B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    shapes = list(_tensors(CONFIG).items())
    half = len(shapes) // 2
    for i, part in enumerate((shapes[:half], shapes[half:])):
        _write_shard(folder / f"model-{i + 1:05d}-of-00002.safetensors", dict(part))
    return folder


def _plan(folder: Path, ram: CpuMemory | None = PLENTY, **options):
    options = plan_options(engine="vllm", vram=CARD, **options)
    return plan_vllm(folder, synthetic_report(CARD), options, ram=lambda: ram)


def test_the_experts_of_n_layers_leave_the_card_and_the_pool_grows_by_them(moe_dir: Path) -> None:
    shapes = _tensors(CONFIG)
    fewer, more = _plan(moe_dir, n_cpu_moe=40, slots=1), _plan(moe_dir, n_cpu_moe=44, slots=1)
    for plan, n in ((fewer, 40), (more, 44)):
        offload = plan.experts_offload
        assert offload is not None and offload.n_layers == n
        assert offload.bytes == sum(_layer_experts(shapes, i) for i in range(n))
        argv = vllm_argv(plan)
        gb = float(argv[argv.index("--cpu-offload-gb") + 1])
        assert int(gb * 1024**3) == offload.bytes  # vLLM's own conversion gives the bytes back
        assert argv[argv.index("--cpu-offload-params") + 1] == "experts"
        assert any("pinned system RAM" in w for w in plan.warnings)
    moved = sum(_layer_experts(shapes, i) for i in range(40, 44))
    assert more.memory.weights == fewer.memory.weights - moved
    assert more.memory.before_kv == fewer.memory.before_kv - moved  # nothing else changes
    assert more.kv_pool == fewer.kv_pool + moved
    lines = [s.what for s in more.steps]
    assert any("routed experts of 44 layer(s) in system RAM" in w for w in lines)


def test_without_experts_in_ram_the_hint_names_the_setting(moe_dir: Path) -> None:
    from homelab.errors import DoesNotFitError

    with pytest.raises(DoesNotFitError) as caught:
        _plan(moe_dir)
    assert "--n-cpu-moe N" in (caught.value.hint or "")


def test_every_layer_with_cpu_moe_and_a_count_past_the_layers(moe_dir: Path) -> None:
    every = _plan(moe_dir, cpu_moe=True)
    past = _plan(moe_dir, n_cpu_moe=60)
    assert every.experts_offload is not None and every.experts_offload.n_layers == 48
    assert past.experts_offload == every.experts_offload
    assert any("60 layers were asked for" in w for w in past.warnings)
    assert not any("were asked for" in w for w in every.warnings)


def test_experts_that_do_not_fit_in_free_ram_are_refused_with_the_numbers(moe_dir: Path) -> None:
    from homelab.errors import DoesNotFitError

    scarce = CpuMemory(total=32 * GiB, available=20 * GiB)
    with pytest.raises(DoesNotFitError) as caught:
        _plan(moe_dir, ram=scarce, n_cpu_moe=44)
    assert "49.50 GiB" in caught.value.message and "20.00 GiB is available" in caught.value.message
    pinned = sum(_layer_experts(_tensors(CONFIG), i) for i in range(44))
    assert caught.value.short_by == pinned - scarce.available


def test_unreadable_ram_is_not_taken_for_none_free_the_plan_says_it_was_not_checked(
    moe_dir: Path,
) -> None:
    plan = _plan(moe_dir, ram=None, n_cpu_moe=44)
    assert plan.experts_offload is not None and plan.experts_offload.n_layers == 44
    assert any("could not be read" in w and "not checked" in w for w in plan.warnings)


def test_the_cli_plan_and_its_json(moe_dir: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from homelab.gpu import cpu

    monkeypatch.setattr(cpu, "cpu_memory", lambda: PLENTY)  # psutil's figure, held still
    code = main(
        ["plan", str(moe_dir), "--engine", "vllm", "--vram", "24GiB", "--n-cpu-moe", "44", "--json"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["n_cpu_moe"] == 44 and data["ram"]["experts"] > 0
    assert "--cpu-offload-gb" in data["argv"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--n-cpu-moe", "4"], "has no routed experts"),
        (["--cpu-moe"], "has no routed experts"),
    ],
)
def test_a_dense_model_is_refused_in_one_line(model_dir, capsys, args, words) -> None:
    folder = model_dir("Qwen__Qwen3-8B")
    code = main(["plan", str(folder), "--engine", "vllm", "--vram", "24GiB", *args])
    _, err = capsys.readouterr()
    assert code == 2 and err.startswith("homelab: ") and words in err
    assert "Traceback" not in err


def test_shards_not_on_disk_cannot_be_priced(tmp_path: Path) -> None:
    folder = tmp_path / "index-only"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 61_000_000_000}, "weight_map": {}})
    )
    with pytest.raises(ModelFileError, match="no safetensors shards on disk"):
        _plan(folder, n_cpu_moe=4)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (struct.pack("<Q", 12) + b"not json at ", "is not valid JSON"),
        (struct.pack("<Q", 1 << 40) + b"{}", "no readable safetensors header"),
        (b"\x01\x02", "no readable safetensors header"),
    ],
)
def test_a_broken_shard_header_is_a_clear_error(tmp_path: Path, data: bytes, words: str) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.safetensors").write_bytes(data)
    with pytest.raises(ModelFileError, match=words):
        _plan(folder, n_cpu_moe=4)


def test_tensor_parallel_with_experts_in_ram_is_refused(moe_dir: Path) -> None:
    from homelab.gpu.report import GpuReport

    two = synthetic_report(CARD)
    report = GpuReport(
        devices=(two.devices[0], type(two.devices[0])(**{**_fields(two.devices[0]), "index": 1})),
        **{k: v for k, v in _fields(two).items() if k != "devices"},
    )
    options = plan_options(engine="vllm", gpu=(0, 1), n_cpu_moe=4)
    with pytest.raises(UsageError, match="not with tensor parallel"):
        plan_vllm(moe_dir, report, options)


def _fields(obj: object) -> dict:
    from dataclasses import fields

    return {f.name: getattr(obj, f.name) for f in fields(obj)}  # type: ignore[arg-type]


def test_on_the_cpu_backend_nothing_moves_and_it_says_so(tmp_path: Path) -> None:
    from homelab.gpu.report import GpuReport

    small = {**CONFIG, "num_hidden_layers": 4, "num_experts": 8, "hidden_size": 256}
    small |= {"vocab_size": 1024, "num_attention_heads": 4, "num_key_value_heads": 2}
    folder = tmp_path / "small-moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(small))
    _write_shard(folder / "model.safetensors", _tensors(small))
    no_gpu = GpuReport(source="cpu", devices=(), cpu=CpuMemory(24 * GiB, 20 * GiB), note="no GPU")
    plan = plan_vllm(folder, no_gpu, plan_options(engine="vllm", n_cpu_moe=2, ctx=4096))
    assert plan.backend == "cpu" and plan.experts_offload is None
    assert plan.warnings[0].startswith("The plan is for system RAM")
    assert "--cpu-offload-gb" not in vllm_argv(plan, executable="/venv/bin/python")
