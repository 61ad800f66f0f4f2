"""The CUDA toolkit from NVIDIA's wheels: what it refuses (old drivers, old cards, read from
recorded cards), which architectures it builds for, how CMake is pointed at it, and that a
failed install says why and leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from homelab.engine.llamacpp import cuda_build, cuda_kit
from homelab.engine.llamacpp.cuda_build import architectures, cuda_configuration
from homelab.errors import EngineError
from homelab.gpu.probe import probe

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def _card(name: str):
    return probe(snapshot=GPU / name, window_s=0.0)


@pytest.mark.parametrize(
    ("snapshot", "refused"),
    [
        ("rtx3090_headless.json", "supports CUDA 12.0"),  # driver 525
        ("rtx4060ti16_xorg.json", "supports CUDA 12.8"),  # driver 570
        ("old_driver.json", "supports CUDA 11.4"),
        ("rtx3090_wayland.json", None),  # driver 590: CUDA 13.1
        ("two_gpus.json", None),
    ],
)
def test_the_kit_needs_a_cuda_13_driver(snapshot: str, refused: str | None) -> None:
    card = _card(snapshot)
    said = cuda_kit.kit_refusal(card.cuda_driver, tuple(d.compute_capability for d in card.devices))
    if refused is None:
        assert said is None
    else:
        assert said is not None and refused in said and "580 series" in said


def test_old_cards_are_refused_and_unknown_is_not_a_refusal() -> None:
    assert cuda_kit.kit_refusal("13.1", ((8, 6), (7, 0))) is not None
    assert "7.0" in (cuda_kit.kit_refusal("13.1", ((7, 0),)) or "")
    assert cuda_kit.kit_refusal("13.1", ((7, 5), (12, 0))) is None
    assert cuda_kit.kit_refusal(None, (None,)) is None
    assert cuda_kit.kit_refusal("not a version", ()) is None


def test_architectures_are_the_cards_own() -> None:
    assert cuda_kit.cuda_architectures(((8, 6),)) == "86-real"
    assert cuda_kit.cuda_architectures(((8, 9), (8, 6), (8, 6))) == "86-real;89-real"
    assert cuda_kit.cuda_architectures(((12, 0), (8, 6))) == "86-real;120-real"
    assert cuda_kit.cuda_architectures(((8, 6), None)) is None  # one card unknown: ask CMake
    assert cuda_kit.cuda_architectures(()) is None


def test_without_a_card_or_a_named_architecture_a_cuda_build_is_refused(monkeypatch) -> None:
    monkeypatch.delenv(cuda_build.ARCH_ENV, raising=False)
    monkeypatch.setattr(cuda_build, "nvidia_driver_present", lambda: False)
    with pytest.raises(EngineError) as error:
        architectures(_card("rtx3090_wayland.json"))  # recorded before capabilities were
    assert error.value.title == "No card to build for"
    assert cuda_build.ARCH_ENV in error.value.hint and "--cpu" in error.value.hint
    monkeypatch.setenv(cuda_build.ARCH_ENV, "86-real")
    assert architectures(None) == "86-real"


def test_an_old_driver_is_refused_before_anything_is_downloaded(monkeypatch) -> None:
    monkeypatch.setenv(cuda_build.ARCH_ENV, "86-real")
    monkeypatch.setattr(cuda_build, "system_toolkit", lambda: None)
    monkeypatch.setattr(cuda_kit, "ensure_kit", lambda progress: pytest.fail("downloaded"))
    with pytest.raises(EngineError) as error:
        cuda_configuration(_card("rtx3090_headless.json"), lambda f, line: None)
    assert error.value.title == "CUDA 13 not possible"
    assert "homelab engine fetch" in error.value.hint and "580 series" in error.value.hint


def test_cmake_is_pointed_at_the_kit_and_the_driver_library(tmp_path: Path) -> None:
    kit = cuda_kit.Kit(tmp_path / "nvidia" / "cu13")
    kit.lib.mkdir(parents=True)
    driver = tmp_path / "libcuda.so.1"
    driver.write_bytes(b"")
    args = cuda_kit.cmake_kit_args(kit, driver)
    cuda_kit.link_driver(kit, driver)
    assert f"-DCMAKE_CUDA_COMPILER={kit.nvcc}" in args
    assert f"-DCUDAToolkit_ROOT={kit.root}" in args
    assert f"-DCMAKE_BUILD_RPATH={kit.lib}" in args  # the engine finds cuBLAS where it runs
    assert "-DGGML_CUDA_NO_VMM=ON" not in args
    assert (kit.lib / "stubs" / "libcuda.so").resolve() == driver.resolve()
    cuda_kit.link_driver(kit, driver)  # again: the link is replaced
    assert (kit.lib / "stubs" / "libcuda.so").resolve() == driver.resolve()
    assert "-DGGML_CUDA_NO_VMM=ON" in cuda_kit.cmake_kit_args(kit, None)


def test_a_kit_that_cannot_be_installed_says_why_and_leaves_nothing(
    monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens
    monkeypatch.setenv("PIP_NO_INDEX", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    lines: list[str] = []
    with pytest.raises(EngineError) as error:
        cuda_kit.ensure_kit(lambda f, line: lines.append(line))
    assert error.value.title == "CUDA toolkit not installed"
    assert "homelab engine fetch" in error.value.hint or "network" in error.value.hint
    assert cuda_kit.installed_kit() is None
    assert os.listdir(cuda_kit.kit_dir().parent) == []  # no staging folder left
    assert any("1.1 GB" in line for line in lines)


def test_a_full_disk_is_said_before_pip_runs(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(cuda_kit, "KIT_BYTES", 1 << 60)
    monkeypatch.setattr(cuda_kit, "_pip_install", lambda target: pytest.fail("pip ran"))
    with pytest.raises(EngineError) as error:
        cuda_kit.ensure_kit(lambda f, line: None)
    assert error.value.title == "No disk space"
