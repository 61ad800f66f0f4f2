"""The TUI's plan panel shows a stored bench of the plan's flags next to the memory answer,
with its text chart; other flags show none. The bench is a real one (against the module's
llama-server), stored under the key of the plan the app made."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from homelab.engine.llamacpp.calibrate import current_engine_version
from homelab.gguf.model_file import read_model
from homelab.measure.key import key_for_plan
from homelab.measure.runner import run_bench
from homelab.measure.settings import BenchSettings
from homelab.measure.shapes import Workload
from homelab.measure.store import save
from homelab.ui.app import make_app
from tests.ui.helpers import GPU_FIXTURES, pick_smollm2, run, wait_until


def _steps(app) -> str:
    return str(app.query_one("#steps").render())


def test_plan_panel_shows_the_stored_bench(
    engine_url: str, smollm2_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    models = tmp_path / "models"
    models.mkdir()
    (models / smollm2_gguf.name).symlink_to(smollm2_gguf)
    report = run_bench(BenchSettings(engine_url, workload=Workload.CHAT, prompt_tokens=16,
                                     max_tokens=2, turns=1, concurrency=(1,), warmup=False))  # fmt: skip

    async def drive() -> None:
        app = make_app(gpu_snapshot=GPU_FIXTURES / "rtx3090_wayland.json", models_dirs=[models],
                       refresh_s=0, blink=False, adopt=False)  # fmt: skip
        async with app.run_test(size=(140, 45)) as pilot:
            await pick_smollm2(pilot)
            assert "measured:" not in _steps(app)
            assert "Decode speed, estimate" in _steps(app)  # the card's bound, marked as one
            slots = app.state.picked.plan.settings.n_seq
            key = key_for_plan(
                app.state.picked.plan,
                read_model(models / smollm2_gguf.name),
                current_engine_version(),
            )
            assert key is not None and key.card == "NVIDIA GeForce RTX 3090"
            save(key, report.to_dict())
            app.query_one("#slots").focus()  # re-plan at other flags, then back at these
            await pilot.press("1")
            await wait_until(
                pilot,
                lambda: (
                    app.state.picked.plan is not None and app.state.picked.plan.settings.n_seq == 1
                ),
            )
            assert "measured:" not in _steps(app)
            await pilot.press("backspace")
            await wait_until(pilot, lambda: "measured:" in _steps(app))
            steps = _steps(app)
            assert f"memory holds {slots} chats; measured: 1 chat TTFT " in steps
            assert "decode" in steps and "t/s" in steps  # the text chart
            # the bench's decode rate in place of the estimate, in the working itself
            assert re.search(r"Decode speed: [\d.,]+ tok/s measured", steps), steps
            assert "Decode speed, estimate" not in steps

    run(drive())
