"""vLLM through the CLI (`homelab plan/serve --engine vllm`) and the supervisor's vLLM profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.vllm.profile import diagnose_vllm, vllm_profile
from homelab.errors import DoesNotFitError

FIXTURES = Path(__file__).parents[2] / "fixtures"
WAYLAND = str(FIXTURES / "gpu" / "rtx3090_wayland.json")
LOGS = FIXTURES / "vllm" / "logs"


def test_plan_engine_vllm_json(model_dir, capsys) -> None:
    folder = model_dir("Qwen__Qwen3-8B")
    code = main(["plan", str(folder), "--engine", "vllm", "--gpu-snapshot", WAYLAND, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["engine"] == "vllm" and data["steps"]
    argv = data["argv"]
    assert argv[:3] == ["vllm", "serve", str(folder)]
    assert "--enable-prefix-caching" in argv
    assert float(argv[argv.index("--gpu-memory-utilization") + 1]) == data["gpu_memory_utilization"]
    assert int(argv[argv.index("--max-model-len") + 1]) == data["max_model_len"]


def test_serve_engine_vllm_without_vllm_installed_says_so(
    model_dir, capsys, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `vllm` anywhere on it
    folder = model_dir("Qwen__Qwen3-8B")
    code = main(["serve", str(folder), "--engine", "vllm", "--gpu-snapshot", WAYLAND])
    _, err = capsys.readouterr()
    assert code == 6
    assert "vLLM is not installed" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("log", "ready"),
    [
        ("vllm-0.33.0_written-gpu-only_qwen3-8b_rtx3090_startup-ok.log", True),
        ("vllm-0.33.0_written-gpu-only_qwen3.5-0.8b_rtx3090_startup-ok.log", True),
        ("vllm-0.32.0_captured-cpu_tiny-llama_startup-ok.log", True),
        ("vllm-0.32.0_captured-cpu_tiny-llama_kv-too-small.log", False),
        ("vllm-0.33.0_written-gpu-only_qwen3-8b_rtx3090_free-memory.log", False),
    ],
)
def test_profile_reads_recorded_logs(log: str, ready: bool) -> None:
    lines = (LOGS / log).read_text().splitlines()
    profile = vllm_profile()
    assert any(profile.is_serving(line) for line in lines) is ready
    if not ready:
        failure = diagnose_vllm(lines, 1)
        assert failure.permanent and failure.quoted
        assert issubclass(failure.error_type, DoesNotFitError)
        assert failure.hint


def test_profile_quotes_the_tail_of_an_unknown_failure() -> None:
    failure = diagnose_vllm(["loading", "Segmentation fault"], -11)
    assert failure.quoted[-1] == "Segmentation fault" and not failure.permanent
