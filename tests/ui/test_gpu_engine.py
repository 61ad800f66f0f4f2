"""The TUI on a machine with a card (a recorded one, replayed) and an engine that has no GPU
backend: a red line in the engine-setup panel with the ways out, the preview refused with the
same words; and ``f`` fetching the prebuilt release for the card's driver from a stand-in
GitHub (constructed archives, tests/engine/release_standin), after which the app runs it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from homelab.engine.llamacpp import backend, locate, visible_devices
from homelab.engine.llamacpp.release import asset_names
from homelab.engine.llamacpp.release_fetch import API_ENV_VAR
from homelab.ui.app import make_app
from homelab.ui.widgets.models import ModelsMenu
from tests.engine.release_standin import (
    ReleaseStandIn,
    cudart_archive,
    engine_members,
    make_tar,
    serving,
)
from tests.engine.test_gpu_backend import CUDA, NO_GPU, stand_in
from tests.ui.helpers import GPU_FIXTURES, pick_smollm2, run, wait_until
from tests.ui.test_first_run import _setup_text

CARD = GPU_FIXTURES / "rtx3090_wayland.json"  # driver 590: CUDA 13.1


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(backend.ALLOW_ENV, raising=False)
    visible_devices._listed.cache_clear()


def _app(models_dir: Path):
    return make_app(
        gpu_snapshot=CARD, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
    )


def test_a_cpu_engine_on_a_card_is_a_red_line_with_the_ways_out(
    guarded, models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(locate.ENV_VAR, str(stand_in(tmp_path, NO_GPU)))

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            assert app.state.engine_problem.title == "No GPU backend"
            text = _setup_text(app)
            assert "No GPU backend" in text and "it would run on the CPU" in text
            assert "f  fetch llama.cpp's prebuilt engine" in text
            assert text.index("f  fetch") < text.index("b  build")  # seconds before minutes
            assert app.check_action("fetch_engine", ()) is True
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(pilot, lambda: len(menu.entries) > 0)
            await pilot.press("slash", *"smollm2", "enter")

            def steps() -> str:
                return str(app.query_one("#plan").query_one("#steps").render())

            await wait_until(pilot, lambda: "No GPU backend" in steps(), timeout=30)
            assert app.state.picked.plan is None  # no card plan to start on this engine
            assert "it would run on the CPU" in steps()

    run(drive())


def test_an_engine_that_lists_the_card_raises_nothing(
    guarded, models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(locate.ENV_VAR, str(stand_in(tmp_path, CUDA)))

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(160, 50)) as pilot:
            await pick_smollm2(pilot)
            await wait_until(pilot, lambda: app.state.picked.plan is not None, timeout=30)
            assert app.state.engine_problem is None
            assert "--device" in app.state.picked.argv

    run(drive())


def test_f_fetches_the_release_for_the_cards_driver_and_the_app_runs_it(
    guarded, models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(locate.ENV_VAR, raising=False)
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    folders = os.environ.get("PATH", "").split(os.pathsep)
    kept = [f for f in folders if f and not (Path(f) / "llama-server").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    names = asset_names("cuda-13.4")
    stand = ReleaseStandIn({names[0]: make_tar(engine_members()), names[1]: cudart_archive("13.4")})

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            await pilot.press("f")
            await wait_until(pilot, lambda: app.engine_origin is not None, timeout=60)
            assert app.engine_origin == "release:cuda-13.4"
            assert app.state.engine_problem is None
            await wait_until(pilot, lambda: app.state.engine_backend is not None)
            assert app.state.engine_backend == (
                "CUDA (CUDA0: NVIDIA GeForce RTX 3090; built for the official CUDA 13.4 release)"
            )

    with serving(stand):
        monkeypatch.setenv(API_ENV_VAR, f"http://127.0.0.1:{stand.port}")
        run(drive())
    assert locate.cached_release("cuda-13.4") is not None
