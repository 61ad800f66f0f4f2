"""`homelab plan` end to end: real GGUF, replayed cards, exit codes, JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from homelab.cli import main

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_on_replayed_wayland_card(capsys, smollm2_gguf: Path) -> None:
    code, out, _ = _plan(
        capsys,
        str(smollm2_gguf),
        "--gpu-snapshot",
        str(FIXTURES / "rtx3090_wayland.json"),
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["model"]["arch"] == "llama" and data["model"]["n_layer"] == 30
    assert data["model"]["trained_ctx"] == 8192
    budget = data["budget"]
    snapshot = json.loads((FIXTURES / "rtx3090_wayland.json").read_text())
    assert budget["total"] == snapshot["devices"][0]["memory_v2"][0]["total"]
    assert budget["desktop"] > 2 * 1024**3  # the Wayland desktop's peak, not zero
    assert budget["headroom"] == 1024**3  # the card drives a display
    assert budget["weights"] + budget["engine"] + budget["kv"] <= (
        budget["total"]
        - budget["reserved"]
        - budget["desktop"]
        - budget["other"]
        - budget["headroom"]
    )
    assert data["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 34 // 32
    assert data["argv"][0] == "llama-server" and str(smollm2_gguf) in data["argv"]


def test_plan_human_output_shows_the_working(capsys, smollm2_gguf: Path) -> None:
    code, out, _ = _plan(capsys, str(smollm2_gguf), "--vram", "16GiB", "--workload", "chat")
    assert code == 0
    assert "2 × 30 layers × 3 kv heads × 64 × 34/32 B = 12,240 B" in out
    assert "llama-server -m" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--vram", "256MiB", "--ctx", "8192"], 3),  # the context does not fit
        (["--gpu-snapshot", str(FIXTURES / "driver_not_loaded.json")], 5),
        (["--cache-type", "q3_k"], 2),
        (["--workload", "lots"], 2),
        (["--vram", "banana"], 2),
    ],
)
def test_exit_codes(capsys, smollm2_gguf: Path, args: list[str], expected: int) -> None:
    code, out, err = _plan(capsys, str(smollm2_gguf), *args)
    assert code == expected
    assert "Traceback" not in err
    assert err.startswith("homelab: ")


def test_bad_model_file_exit_4(capsys, tmp_path: Path) -> None:
    foreign = tmp_path / "photo.gguf"
    foreign.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    code, _, err = _plan(capsys, str(foreign), "--vram", "16GiB")
    assert code == 4 and "GGUF" in err
    code, _, err = _plan(capsys, str(tmp_path / "missing.gguf"), "--vram", "16GiB")
    assert code == 4


def test_console_script_runs_as_a_process(smollm2_gguf: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "homelab", "plan", str(smollm2_gguf), "--vram", "24GiB", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["budget"]["total"] == 24 * 1024**3
