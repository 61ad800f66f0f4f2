"""The TUI and an engine homelab's keeper serves (``serve --detach``): real keeper, real
llama-server (SmolLM2), the app driven by Pilot on the same state folder.

The app must neither adopt a kept engine (two supervisors would fight) nor say "no engine
running" while one serves: it shows it as kept, with the keeper's pid and the URL; ``x``
asks and stops keeper, gate and engine; ``s`` of another model asks before replacing it;
a keeper stopped from a terminal is noticed on the next poll.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from homelab.ui.app import make_app
from homelab.ui.screens import ConfirmScreen
from tests.engine.supervisor_child import run_homelab, serve_on_a_free_port
from tests.gate_serve.helpers import PLAN, gate_processes
from tests.gate_serve.test_keeper import keeper_processes
from tests.gate_serve.test_keeper import keepers as keepers  # the fixture
from tests.ui.helpers import GPU_FIXTURES, run, wait_until

pytestmark = pytest.mark.engine

WAIT_S = 120


def _kept(smollm2_gguf: Path, engines):
    served, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach")
    assert served.returncode == 0, served.stdout + served.stderr
    record = StateFile().read()
    assert record is not None and record.kept
    engines.track(record.pid)
    return record, f"http://127.0.0.1:{port}"


@pytest.fixture
def models_dir(tmp_path: Path, smollm2_gguf: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / smollm2_gguf.name).symlink_to(smollm2_gguf)
    return folder


def _app(models_dir: Path):
    return make_app(
        gpu_snapshot=GPU_FIXTURES / "rtx3090_headless.json",
        models_dirs=[models_dir],
        refresh_s=0,
        blink=False,
        check_agents=False,
    )


def _state(app) -> str:
    return str(app.query_one("#server-state", Static).render())


def test_a_kept_engine_is_shown_kept_and_x_stops_it_through_its_keeper(
    smollm2_gguf: Path, models_dir: Path, engines, gates, keepers
) -> None:
    record, url = _kept(smollm2_gguf, engines)

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(160, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.kept is not None, WAIT_S)
            await pilot.pause()
            state = _state(app)
            assert state.startswith("kept") and url in state, state
            assert f"kept by homelab's keeper (pid {record.supervisor_pid})" in state
            assert app.state.running.supervisor is None  # not adopted: the keeper's

            await pilot.press("x")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10)
            assert f"kept by homelab's keeper (pid {record.supervisor_pid})" in app.screen.question
            await pilot.press("y")
            await wait_until(pilot, lambda: app.state.kept is None, WAIT_S)
            await pilot.pause()
            assert "no engine running" in _state(app)
            assert "its keeper" in app.said[-1].message

    run(drive())
    assert not alive(record.pid, record.create_time)
    assert not keeper_processes() and not gate_processes()
    assert StateFile().read() is None


def test_s_of_another_model_asks_and_a_keeper_stopped_elsewhere_is_noticed(
    smollm2_gguf: Path, models_dir: Path, engines, gates, keepers
) -> None:
    record, _url = _kept(smollm2_gguf, engines)

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(160, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.kept is not None, WAIT_S)
            await pilot.press("slash", *"qwen3-8b", "enter")
            await wait_until(pilot, lambda: app.state.picked.plan is not None, WAIT_S)
            app.state.picked.model_path = smollm2_gguf.parent / "another.gguf"  # "downloaded"
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10)
            question = app.screen.question
            assert "Stop it and start qwen3-8b?" in question
            assert f"kept by homelab's keeper (pid {record.supervisor_pid})" in question
            await pilot.press("n")  # nothing replaced
            await pilot.pause()
            assert app.state.kept is not None and app.state.running.supervisor is None

            stopped = run_homelab("stop")  # from a terminal
            assert stopped.returncode == 0, stopped.stderr
            await wait_until(pilot, lambda: app.state.kept is None, WAIT_S)
            assert any("has stopped" in said.message for said in app.said)

    run(drive())
    assert not alive(record.pid, record.create_time)
