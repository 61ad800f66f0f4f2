"""``homelab gpu``: human output, --json, --watch, --record and exit codes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from homelab.cli import gpu_cmd, main
from homelab.gpu.probe import probe
from homelab.plan.budget import device_budget
from homelab.units import format_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def run(argv: list[str]) -> int:
    """``homelab gpu ARGV`` (``main`` registers only the gpu subcommand for it)."""
    return main(["gpu", *argv])


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def raw(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def test_human_output_for_the_wayland_card(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--gpu-snapshot", fixture("rtx3090_wayland.json")]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    device = raw("rtx3090_wayland.json")["devices"][0]
    last = device["memory_v2"][-1]
    assert "GPU 0: NVIDIA GeForce RTX 3090" in out
    assert f"total     {format_bytes(last['total'])}" in out
    assert f"reserved  {format_bytes(last['reserved'])}" in out
    assert f"used      {format_bytes(last['used'])}" in out
    assert f"free      {format_bytes(last['free'])}" in out
    free_min = min(e["free"] for e in device["memory_v2"])
    assert f"free_min  {format_bytes(free_min)}  (lowest of 8 samples" in out
    # the figure the TUI's card calls usable after headroom, in the same words
    report = probe(snapshot=Path(fixture("rtx3090_wayland.json")))
    usable = device_budget(report, 0).usable
    assert usable < free_min and f"usable    {format_bytes(usable)}  (usable after headroom" in out
    assert "desktop   now " in out and ", peak " in out
    assert "display   active" in out
    assert "source: replay, driver 590.44.01, CUDA 13.1" in out
    assert "note: Replayed from GPU snapshot" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("    ")]
    assert rows[0] == ["PID", "NAME", "CLASS", "KIND", "MEMORY"]
    assert ["1873", "/usr/bin/kwin_wayland", "desktop", "G", "700.00", "MiB"] in rows
    assert ["5120", "/usr/bin/python3", "compute", "C", "1.50", "GiB"] in rows


def test_human_output_shows_na_and_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--gpu-snapshot", fixture("per_process_unavailable.json")]) == 0
    out = capsys.readouterr().out
    assert "desktop   now n/a, peak n/a" in out
    assert all(
        line.rstrip().endswith("n/a")
        for line in out.splitlines()[-6:-1]
        if line.startswith("    ") and "PID" not in line
    )
    assert run(["--gpu-snapshot", fixture("old_driver.json")]) == 0
    out = capsys.readouterr().out
    assert "reserved  n/a" in out
    warning = "  warning: Reserved memory (memory info v2) unavailable (FunctionNotFound"
    assert warning in out


def test_long_names_are_shortened_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--gpu-snapshot", fixture("rtx4060ti16_xorg.json")]) == 0
    out = capsys.readouterr().out
    assert "/opt/google/chrome/chrome --type=gpu-..." in out
    assert "C+G" in out


def test_cpu_fallback_exits_zero_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--gpu-snapshot", fixture("no_gpu.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No usable NVIDIA GPU: planning against system RAM.")
    assert "RAM total " in out and "available " in out
    assert "note: No NVIDIA driver found (" in out


def test_probe_failure_exits_5_with_one_paragraph(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--gpu-snapshot", fixture("driver_not_loaded.json")]) == 5
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[0] == (
        "homelab: GPU probe failed: "
        "The NVIDIA driver is installed but its kernel module is not loaded."
    )
    assert "Traceback" not in err and len(err.splitlines()) == 2


def test_malformed_and_missing_snapshots_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    data = raw("two_gpus.json")
    data["devices"][1]["memory_v2"][0]["free"] = "lots"
    bad.write_text(json.dumps(data))
    assert run(["--gpu-snapshot", str(bad)]) == 5
    err = capsys.readouterr().err
    assert str(bad) in err and "devices[1].memory_v2[0].free" in err and "Traceback" not in err
    assert run(["--gpu-snapshot", str(tmp_path / "missing.json"), "--json"]) == 5
    out, err = capsys.readouterr()
    assert out == "" and "Cannot read GPU snapshot" in err


def test_json_is_one_object_in_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--gpu-snapshot", fixture("two_gpus.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {
        "source",
        "devices",
        "driver",
        "cuda_driver",
        "cpu",
        "note",
        "window_s",
        "ram_low",
        "warnings",
    }
    assert data["source"] == "replay" and data["cpu"] is None and data["warnings"] == []
    assert data["ram_low"] is None  # a recording holds no RAM: only a live window samples it
    assert len(data["devices"]) == 2
    gpu1 = data["devices"][1]
    raw1 = raw("two_gpus.json")["devices"][1]
    assert gpu1["total"] == raw1["memory_v2"][-1]["total"]
    assert gpu1["free_min"] == min(e["free"] for e in raw1["memory_v2"])
    assert isinstance(gpu1["reserved"], int) and gpu1["homelab_bytes"] == 0
    report = probe(snapshot=Path(fixture("two_gpus.json")))
    assert [d["usable_bytes"] for d in data["devices"]] == [
        device_budget(report, i).usable for i in (0, 1)
    ]
    assert gpu1["usable_bytes"] == gpu1["free_min"] - 512 * 1024**2  # no desktop: 512 MiB kept
    assert gpu1["processes"] == [
        {
            "pid": 7001,
            "name": "/home/ana/.local/share/homelab/engines/llama-server",
            "used_bytes": 9216 * 1024**2,
            "kinds": "C",
            "klass": "compute",
        }
    ]


def test_json_keeps_none_as_null(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--gpu-snapshot", fixture("per_process_unavailable.json"), "--json"]) == 0
    device = json.loads(capsys.readouterr().out)["devices"][0]
    assert device["desktop_now"] is None and device["desktop_peak"] is None
    assert all(p["used_bytes"] is None for p in device["processes"])


def test_json_cpu_fallback(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--gpu-snapshot", fixture("no_gpu.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "cpu" and data["devices"] == []
    assert 0 < data["cpu"]["available"] <= data["cpu"]["total"]


def test_watch_refreshes_until_the_iterations_run_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run(
            [
                "--gpu-snapshot",
                fixture("rtx3090_headless.json"),
                "--watch",
                "--json",
                "--iterations",
                "2",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert [json.loads(line)["devices"][0]["samples"] for line in lines] == [3, 3]


def test_watch_stops_cleanly_on_ctrl_c(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def interrupted(seconds: float) -> None:
        calls.append(seconds)
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu_cmd.time, "sleep", interrupted)
    assert run(["--gpu-snapshot", fixture("rtx3090_headless.json"), "--watch"]) == 0
    out = capsys.readouterr().out
    assert out.count("GPU 0: NVIDIA GeForce RTX 3090") == 1
    assert len(calls) == 1 and 0.5 < calls[0] <= 1.0


def test_record_writes_a_replayable_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "card.json"
    assert run(["--gpu-snapshot", fixture("rtx4060ti16_xorg.json"), "--record", str(target)]) == 0
    assert capsys.readouterr().out == f"Recorded 1 GPU(s), 4 sample(s) to {target}.\n"
    assert run(["--gpu-snapshot", str(target), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert run(["--gpu-snapshot", fixture("rtx4060ti16_xorg.json"), "--json"]) == 0
    original = json.loads(capsys.readouterr().out)
    assert {**again, "note": None} == {**original, "note": None}


def test_record_without_a_driver_still_writes_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "none.json"
    assert run(["--record", str(target), "--sample-seconds", "0"]) == 0
    recorded = json.loads(target.read_text())
    out = capsys.readouterr().out
    if recorded["init"]["error"] is None:
        pytest.skip("an NVIDIA driver is present on this machine")
    assert recorded["init"] == {"error": "LibraryNotFound"}
    assert out == f"Recorded NVML failed to start (LibraryNotFound) to {target}.\n"


def test_record_to_an_unwritable_place_is_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "no" / "such" / "dir.json"
    assert run(["--gpu-snapshot", fixture("no_gpu.json"), "--record", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"homelab: Cannot record: Cannot write the snapshot to {target}")
    assert "Traceback" not in err


def test_iterations_is_hidden_from_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(["--help"])
    out = capsys.readouterr().out
    for option in ("--json", "--watch", "--gpu-snapshot", "--record", "--sample-seconds"):
        assert option in out
    assert "--iterations" not in out


@pytest.mark.skipif(
    importlib.util.find_spec("homelab.cli.plan_cmd") is None
    or importlib.util.find_spec("homelab.cli.engine_cmd") is None,
    reason="the rest of the command tree is not there yet",
)
def test_through_the_real_entry_point(capsys: pytest.CaptureFixture[str]) -> None:
    from homelab.cli import main

    assert main(["gpu", "--gpu-snapshot", fixture("driver_not_loaded.json")]) == 5
    assert main(["gpu", "--gpu-snapshot", fixture("rtx3090_headless.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "replay"
