"""bench/gpu_check.py in CPU mode, for real: one tiny generated geometry served by
`homelab serve` on the real llama-server, its load log captured, predicted vs actual written.
The GPU run (bench/gpu_check.sh on a lent card) uses the same driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402
from _gpu_cases import CASE_SETS, format_table  # noqa: E402

from homelab.engine.llamacpp.log import parse_load_log  # noqa: E402
from homelab.gpu.probe import probe  # noqa: E402

SMOKE_NAME = "llama__c2048_np1_ctk-q8_0_ctv-q8_0_fa-on"


def test_cpu_mode_serves_one_geometry_and_writes_predicted_vs_actual(
    llama_server_bin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu", "--set", "smoke"]
    argv += ["--out", str(out), "--server", str(llama_server_bin)]
    argv += ["--workdir", str(tmp_path / "work"), "--deadline-s", "50"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    report = json.loads((out / "gpu_check.json").read_text("utf-8"))
    assert report["mode"] == "cpu" and report["record"] is None and report["skipped"] == []
    assert "build 11312" in report["server_version"]
    (case,) = report["cases"]
    assert case["name"] == SMOKE_NAME and case["error"] is None and case["serve_rc"] == 0
    parts = case["parts"]
    for part in ("weights", "kv", "compute", "total"):
        assert parts[part]["predicted"] > 0 and parts[part]["actual"] > 0, part
    kv_row = next(r for r in case["rows"] if r["name"] == "KV")
    assert kv_row["within_log_rounding"] is True  # the KV maths is byte-exact
    assert parts["kv"]["actual"] == kv_row["actual"]
    assert parts["cuda_context"] == {"predicted": 0, "actual": None}  # CPU: no CUDA context
    assert abs(parts["total"]["actual"] - parts["total"]["predicted"]) < (
        0.1 * parts["total"]["predicted"]
    )
    argv = case["plan"]["argv"]
    assert argv[argv.index("-c") + 1] == "2048"

    with tarfile.open(out / "fixtures" / "llama_logs-cpu.tar.gz") as tar:
        (member,) = tar.getmembers()
        assert member.name == f"{SMOKE_NAME}.log"
        handle = tar.extractfile(member)
        assert handle is not None
        text = handle.read().decode("utf-8")
    assert "---- homelab" not in text  # homelab's markers left out: the engine's own output
    log = parse_load_log(text)
    assert log.ready and sum(line.size_mib for line in log.kv_caches) == 136.0

    pid = next(int(line.split()[1].rstrip(",")) for line in case["serve_output"] if "pid" in line)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    table = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gpu_check.py"),
            "--table",
            str(out / gpu_check.RESULTS),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert SMOKE_NAME in table and "yes" in table


def test_table_marks_a_total_past_three_percent_and_missing_figures() -> None:
    def result(name: str, predicted: int | None, actual: int | None) -> dict:
        return {
            "name": name,
            "error": None,
            "parts": {"total": {"predicted": predicted, "actual": actual}},
        }

    table = format_table(
        [result("close", 1000, 1029), result("far", 1000, 1031), result("gone", 1000, None)]
    )
    lines = table.splitlines()
    assert lines[1].split()[-2:] == ["+2.9%", "yes"]
    assert lines[2].split()[-2:] == ["+3.1%", "no"]
    assert lines[3].split()[-2:] == ["n/a", "n/a"]


def test_fa_copy_is_the_compute_difference_of_sibling_cases() -> None:
    f16, q8 = CASE_SETS["cpu"][0], CASE_SETS["cpu"][1]
    assert f16.sibling_key() == q8.sibling_key() and (f16.cache, q8.cache) == ("f16", "q8_0")
    results = [
        {"name": "a", "parts": {"compute": {"actual": 100}, "fa_copy": {"actual": None}}},
        {"name": "b", "parts": {"compute": {"actual": 164}, "fa_copy": {"actual": None}}},
    ]
    gpu_check.fill_fa_copy(results, {"a": f16, "b": q8})
    assert [r["parts"]["fa_copy"]["actual"] for r in results] == [0, 64]


def test_card_names_and_engine_memory_from_a_recorded_card() -> None:
    assert gpu_check.card_slug("NVIDIA GeForce RTX 3090") == "rtx3090"
    assert gpu_check.card_slug("NVIDIA H200") == "h200"
    report = probe(snapshot=ROOT / "tests" / "fixtures" / "gpu" / "rtx3090_wayland.json")
    device = report.devices[0]
    process = max(device.processes or (), key=lambda p: p.used_bytes or 0)
    memory = gpu_check.engine_memory(report, process.pid)
    assert memory == {"device_used": device.used, "process_used": process.used_bytes}
    assert gpu_check.engine_memory(report, None)["process_used"] is None


def _cuda_lines(model_mib: float, kv_mib: float, compute_mib: float) -> str:
    """Buffer lines as llama.cpp b11312 prints them for a CUDA load (format strings of
    llama-model.cpp, llama-kv-cache.cpp, llama-context.cpp)."""
    return "\n".join(
        [
            f"load_tensors:   CPU_Mapped model buffer size = {0.29:8.2f} MiB",
            f"load_tensors:        CUDA0 model buffer size = {model_mib:8.2f} MiB",
            f"llama_kv_cache:      CUDA0 KV buffer size = {kv_mib:8.2f} MiB",
            f"llama_kv_cache: size = {kv_mib:7.2f} MiB (  2048 cells,  32 layers,  1/1 seqs), "
            f"K (q8_0): {kv_mib / 2:7.2f} MiB, V (q8_0): {kv_mib / 2:7.2f} MiB",
            f"sched_reserve:      CUDA0 compute buffer size = {compute_mib:8.2f} MiB",
            f"sched_reserve:  CUDA_Host compute buffer size = {4.0:8.2f} MiB",
        ]
    )


def test_gpu_parts_take_the_context_from_nvml_minus_the_logged_buffers(tmp_path: Path) -> None:
    from homelab.cli import build_parser
    from homelab.cli.plan_cmd import prepared_from_args
    from tests.factory import write_gguf

    model = write_gguf("llama", tmp_path / "llama.gguf")
    snapshot = ROOT / "tests" / "fixtures" / "gpu" / "rtx3090_headless.json"
    args = build_parser().parse_args(
        ["plan", str(model), "--ctx", "2048", "--parallel", "1", "--gpu-snapshot", str(snapshot)]
    )
    prepared = prepared_from_args(args)
    plan, argv = prepared.plan.plan, list(prepared.argv)
    assert plan.on_gpu
    mib = 1 << 20
    text = _cuda_lines(20.0, 136.0, 50.0)
    memory = {"process_used": 700 * mib, "device_used": 5000 * mib, "device_used_before": 0}
    parts = gpu_check.parts_of(plan, argv, text, memory, cpu=False)["parts"]
    assert parts["cuda_context"] == {"predicted": 456 * mib, "actual": (700 - 206) * mib}
    assert parts["total"]["actual"] == 700 * mib
    assert parts["total"]["predicted"] == (
        plan.weights_on_device + plan.candidate.allocation.total + plan.candidate.engine.total
    )
    assert parts["compute"]["actual"] == 50 * mib and parts["kv"]["actual"] == 136 * mib
    no_process = {"process_used": None, "device_used": 5000 * mib, "device_used_before": 4300 * mib}
    parts = gpu_check.parts_of(plan, argv, text, no_process, cpu=False)["parts"]
    assert parts["total"]["actual"] == 700 * mib  # the card's growth while it ran
    grew = {**memory, "after_request": {"process_used": 730 * mib, "device_used": None}}
    parts = gpu_check.parts_of(plan, argv, text, grew, cpu=False)["parts"]
    assert parts["total"]["actual"] == 730 * mib  # lazy buffers of the first request count


def test_unpack_files_a_returned_run(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_kit

    back = tmp_path / "files_at"
    (back / "fixtures" / "gpu").mkdir(parents=True)
    (back / "fixtures" / "gpu" / "h200_headless.json").write_text("{}")
    (back / "gpu_check.json").write_text('{"cases": []}')
    with tarfile.open(back / "fixtures" / "llama_logs-h200.tar.gz", "w:gz") as tar:
        log = tmp_path / f"{SMOKE_NAME}.log"
        log.write_text("llama_kv_cache: size = ...\n")
        tar.add(log, arcname=log.name)
    repo = tmp_path / "repo"
    written = gpu_kit.unpack(back, root=repo)
    assert sorted(p.relative_to(repo).as_posix() for p in written) == [
        "bench/results/gpu_check-h200.json",
        "tests/fixtures/gpu/h200_headless.json",
        f"tests/fixtures/llama_logs/h200/{SMOKE_NAME}.log",
    ]
