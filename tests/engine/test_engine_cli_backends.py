"""``homelab engine build|fetch|path`` as a person runs them: a recorded card with a CUDA 12
driver is refused a CUDA 13 build and pointed at the prebuilt release; ``engine fetch``
installs that release from a stand-in GitHub (constructed archives, tests/engine/release_standin)
and locate then runs it, before the CPU build; ``engine path`` names the backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.llamacpp import locate, visible_devices
from homelab.engine.llamacpp.release import asset_names
from homelab.engine.llamacpp.release_fetch import API_ENV_VAR
from homelab.errors import ExitCode
from tests.engine.release_standin import (
    ReleaseStandIn,
    cudart_archive,
    engine_members,
    make_tar,
    serving,
)

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def test_a_cuda_12_driver_is_refused_a_cuda_13_build_and_offered_the_release(
    capsys, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr("homelab.engine.llamacpp.cuda_build.system_toolkit", lambda: None)
    code = main(["engine", "build", "--gpu-snapshot", str(GPU / "rtx4060ti16_xorg.json")])
    _, err = capsys.readouterr()
    assert code == ExitCode.ENGINE
    assert "supports CUDA 12.8" in err and "homelab engine fetch" in err
    assert "Traceback" not in err
    assert not (tmp_path / "data" / "cuda").exists()  # nothing downloaded
    assert locate.cached_build("cpu") is None  # and no CPU engine built instead


def test_engine_fetch_installs_the_release_locate_prefers_over_the_cpu_build(
    capsys, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    names = asset_names("cuda-12.8")
    stand_in = ReleaseStandIn(
        {names[0]: make_tar(engine_members()), names[1]: cudart_archive("12.8")}
    )
    with serving(stand_in):
        monkeypatch.setenv(API_ENV_VAR, f"http://127.0.0.1:{stand_in.port}")
        code = main(["engine", "fetch", "--gpu-snapshot", str(GPU / "rtx4060ti16_xorg.json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    binary = locate.release_dir("cuda-12.8") / "bin" / "llama-server"
    assert out.strip() == str(binary)
    located = locate.locate_llama_server()
    assert (located.path, located.origin) == (binary, "release:cuda-12.8")
    visible_devices._listed.cache_clear()
    assert main(["engine", "path"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(binary)
    assert (
        "backend: CUDA (CUDA0: NVIDIA GeForce RTX 3090; built for the official CUDA 12.8 release)"
        in err
    )


def test_engine_fetch_offline_is_said_plainly(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv(API_ENV_VAR, "http://127.0.0.1:9")  # nothing listens there
    code = main(["engine", "fetch", "--flavour", "cuda-13.4"])
    _, err = capsys.readouterr()
    assert code == ExitCode.ENGINE and "could not be reached" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("snapshot", ["no_gpu.json"])
def test_engine_fetch_without_a_card_is_refused(capsys, snapshot: str) -> None:
    code = main(["engine", "fetch", "--gpu-snapshot", str(GPU / snapshot)])
    _, err = capsys.readouterr()
    assert code == ExitCode.ENGINE and "Traceback" not in err
