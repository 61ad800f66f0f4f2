"""Never a card's plan on a CPU engine, silently: on a machine where NVML reports a card (a
recorded one replayed here), a llama-server that lists no GPU device is refused at plan and
serve time with the ways out; one that lists CUDA0 is taken; ``--cpu`` makes the plan a plan
for system RAM, which any engine runs. The engines here are stand-ins (shell scripts that
answer ``--version``/``--help``/``--list-devices`` as llama-server does): no machine of the
suite has a GPU, so no real binary lists one."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.llamacpp import backend, visible_devices
from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.engine.llamacpp.backend import Backend, backend_of, check_gpu_backend
from homelab.errors import EngineError, ExitCode

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
CARD = str(GPU / "rtx3090_wayland.json")
NO_GPU = "  (none)"
CUDA = "  CUDA0: NVIDIA GeForce RTX 3090 (24135 MiB, 23720 MiB free)"
VULKAN = "  Vulkan0: NVIDIA GeForce RTX 3090 (RADV) (24576 MiB, 24000 MiB free)"
RPC = "  RPC0: 127.0.0.1:50052 (4096 MiB, 4000 MiB free)"


def stand_in(folder: Path, *devices: str, name: str = "llama-server") -> Path:
    """A llama-server stand-in that lists ``devices`` (llama.cpp's own output format)."""
    listing = "\\n".join(["Available devices:", *devices])
    script = folder / name
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --version) echo 'version: 11312 (0c1e57098)';;\n"
        "  --help) echo '--slots';;\n"
        f"  --list-devices) printf '{listing}\\n';;\n"
        "  *) exit 1;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def guarded(monkeypatch) -> None:
    """The refusal on, as on a user's machine (the suite turns it off for its CPU build)."""
    monkeypatch.delenv(backend.ALLOW_ENV, raising=False)
    visible_devices._listed.cache_clear()


def test_an_engine_without_a_gpu_device_is_refused(guarded, tmp_path: Path) -> None:
    for devices in ((NO_GPU,), (RPC,)):  # an RPC worker is no GPU of this machine
        with pytest.raises(EngineError) as error:
            check_gpu_backend(stand_in(tmp_path, *devices))
        assert error.value.title == "No GPU backend"
        assert "no GPU backend: it would run on the CPU" in error.value.message
        assert "homelab engine build --cuda" in error.value.hint and "--cpu" in error.value.hint
        visible_devices._listed.cache_clear()


def test_cuda_and_vulkan_devices_are_gpu_backends(guarded, tmp_path: Path) -> None:
    for devices in ((CUDA,), (VULKAN, RPC)):
        check_gpu_backend(stand_in(tmp_path, *devices))
        visible_devices._listed.cache_clear()


def test_an_engine_that_cannot_be_asked_is_left_to_the_start(guarded, tmp_path: Path) -> None:
    broken = tmp_path / "llama-server"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    check_gpu_backend(broken)  # no listing: the start says what is wrong
    assert backend_of(broken) is None


def test_the_test_rigs_switch_lets_it_run(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(backend.ALLOW_ENV, "1")
    check_gpu_backend(stand_in(tmp_path, NO_GPU))


def test_the_backend_is_named_from_the_binarys_own_listing(tmp_path: Path) -> None:
    visible_devices._listed.cache_clear()
    found = backend_of(stand_in(tmp_path, CUDA, RPC))
    assert found == Backend(("CUDA0: NVIDIA GeForce RTX 3090",), None)
    assert found.describe() == "CUDA (CUDA0: NVIDIA GeForce RTX 3090)"
    assert Backend((), "CPU").describe() == "CPU only (no GPU device) (built for CPU)"


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_refuses_a_card_plan_on_a_cpu_engine(
    guarded, monkeypatch, capsys, tmp_path: Path, smollm2_gguf: Path
) -> None:
    monkeypatch.setenv("HOMELAB_LLAMA_SERVER", str(stand_in(tmp_path, NO_GPU)))
    code, out, err = _plan(capsys, str(smollm2_gguf), "--gpu-snapshot", CARD)
    assert code == ExitCode.ENGINE and out == ""
    assert "no GPU backend: it would run on the CPU" in err and "Traceback" not in err
    assert "homelab engine build --cuda" in err


def test_plan_stands_on_an_engine_that_lists_the_card(
    guarded, monkeypatch, capsys, tmp_path: Path, smollm2_gguf: Path
) -> None:
    monkeypatch.setenv("HOMELAB_LLAMA_SERVER", str(stand_in(tmp_path, CUDA)))
    code, out, _ = _plan(capsys, str(smollm2_gguf), "--gpu-snapshot", CARD, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["argv"][data["argv"].index("--device") + 1] == "CUDA0"


def test_cpu_makes_a_plan_for_system_ram_on_any_engine(
    guarded, monkeypatch, capsys, tmp_path: Path, smollm2_gguf: Path
) -> None:
    monkeypatch.setenv("HOMELAB_LLAMA_SERVER", str(stand_in(tmp_path, NO_GPU)))
    code, out, _ = _plan(capsys, str(smollm2_gguf), "--cpu", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["argv"][data["argv"].index("-ngl") + 1] == "0"
    assert "--device" not in data["argv"]
    assert data["budget"]["kind"] == "cpu" and data["budget"]["device"] == "system RAM"
    code, _, err = _plan(capsys, str(smollm2_gguf), "--cpu", "--gpu-snapshot", CARD)
    assert code == ExitCode.USAGE and "system RAM" in err


def test_a_ram_plan_on_a_gpu_engine_says_device_none(tmp_path: Path, smollm2_gguf: Path) -> None:
    from homelab.engine.options import plan_options
    from homelab.serve.prepare import prepare

    plan = prepare(str(smollm2_gguf), None, plan_options(cpu=True)).plan.plan
    argv = llama_server_argv(plan, visible=frozenset({"CUDA0"}))
    assert argv[argv.index("-ngl") + 1] == "0" and argv[argv.index("--device") + 1] == "none"
    assert "--device" not in llama_server_argv(plan, visible=frozenset({"RPC0"}))
    assert "--device" not in llama_server_argv(plan)


def test_serve_refuses_before_anything_starts(tmp_path: Path, smollm2_gguf: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != backend.ALLOW_ENV}
    env["HOMELAB_LLAMA_SERVER"] = str(stand_in(tmp_path, NO_GPU))
    done = subprocess.run(
        [sys.executable, "-m", "homelab", "serve", str(smollm2_gguf), "--gpu-snapshot", CARD],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == ExitCode.ENGINE, done.stdout + done.stderr
    assert "no GPU backend: it would run on the CPU" in done.stderr
    assert "Traceback" not in done.stderr
