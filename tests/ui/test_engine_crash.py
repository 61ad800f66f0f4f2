"""The engine crashing while the app watches: the panel shows the restart and the engine's own error.

Real llama-server, real SmolLM2, real reasons: the model file replaced by a truncated copy
before the supervisor's restart (llama-server refuses it in its own words, a failure that
would repeat, so the supervisor stops at once), and a crash loop (killed five times within
the policy's window). The log lines on the panel are the ones the supervisor pushed.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from homelab.engine.supervision.process import alive
from tests.factory.server_log import free_port
from tests.ui.helpers import run, wait_until
from tests.ui.test_engine_flows import (
    _another_ready,
    _app,
    _chat,
    _log_text,
    _pick_small_plan,
    _quit_stopping_the_engine,
    _start_and_wait_ready,
)

pytestmark = pytest.mark.engine


def _server_text(app) -> str:
    return str(app.query_one("#server-state").render())


@pytest.fixture
def copied_model(tmp_path: Path, smollm2_gguf: Path) -> Path:
    """A models folder holding a real copy of SmolLM2 (so the test can damage it)."""
    folder = tmp_path / "copied"
    folder.mkdir()
    shutil.copyfile(smollm2_gguf, folder / smollm2_gguf.name)
    return folder / smollm2_gguf.name


def test_a_damaged_model_file_at_the_restart_shows_the_engines_own_words_and_gives_up(
    copied_model: Path, engine_pids
) -> None:
    async def drive() -> None:
        app = _app(copied_model.parent, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            first_pid = app.state.running.supervisor.pid
            damaged = copied_model.with_suffix(".part")
            with open(copied_model, "rb") as whole, open(damaged, "wb") as cut:
                cut.write(whole.read(copied_model.stat().st_size * 6 // 10))
            os.replace(damaged, copied_model)  # the running engine keeps the old inode
            os.kill(first_pid, signal.SIGKILL)
            await wait_until(
                pilot, lambda: app.state.running.supervisor.pid != first_pid, timeout=60
            )
            engine_pids.add(app.state.running.supervisor.pid)
            await wait_until(
                pilot,
                lambda: app.state.health.state == "stopped" and app.state.health.gave_up,
                timeout=120,
            )
            text = _server_text(app)
            assert text.startswith("gave up")
            assert "restarts 1" in text
            assert "Bad model file" in text  # the title
            assert "not restarting (it would fail the same way again)" in text  # the supervisor
            assert "data is not within the file bounds" in text  # llama-server's own words
            assert "truncated or damaged" in text  # the hint
            assert not alive(app.state.running.supervisor.pid)
            log = _log_text(app)  # pushed by the supervisor, in order
            assert "── crashed: llama-server was killed by SIGKILL" in log
            assert "── restart in" in log
            assert "error loading model" in log
            assert log.index("── crashed: llama-server was killed by SIGKILL") < log.index(
                "error loading"
            )
            assert "── stopped: Bad model file" in log
            await pilot.press("q")  # nothing runs any more: quits at once
        assert app.return_code == 0

    run(drive())


async def _killed_and_back(app, pilot, engine_pids, restarts: int) -> None:
    """SIGKILL the engine; the supervisor restarts it and the panel says why it did."""
    pid = app.state.running.supervisor.pid
    os.kill(pid, signal.SIGKILL)
    await wait_until(pilot, lambda: _another_ready(app, pid), timeout=120)
    engine_pids.add(app.state.running.supervisor.pid)
    assert app.state.health.restarts == restarts
    server = _server_text(app)
    assert f"restarts {restarts}" in server
    # why it restarted stays on the panel: the supervisor's explained failure
    assert "last crash: llama-server stopped: llama-server was killed by SIGKILL" in server
    log = _log_text(app)  # the supervisor's transitions, pushed with the lines
    assert log.rindex("── crashed: llama-server was killed by SIGKILL") < log.rindex(
        "── restart in"
    )
    assert log.rindex("── restart in") < log.rindex("── ready")


def test_an_engine_killed_from_outside_is_restarted_and_the_panel_says_so(
    models_dir: Path, engine_pids
) -> None:
    async def drive() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            await _killed_and_back(app, pilot, engine_pids, 1)
            assert isinstance(_chat(app.state.running.session.public_url), str)  # via the gate
            await _quit_stopping_the_engine(app, pilot)

    run(drive())


def test_a_crash_loop_is_stopped_by_the_supervisor_and_the_panel_says_so(
    models_dir: Path, engine_pids
) -> None:
    """Killed five times: the default policy's crash loop (5 crashes within 600 s)."""

    async def drive() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            for restarts in range(1, 5):
                await _killed_and_back(app, pilot, engine_pids, restarts)
            os.kill(
                app.state.running.supervisor.pid, signal.SIGKILL
            )  # the fifth crash in the window
            await wait_until(
                pilot,
                lambda: app.state.health.state == "stopped" and app.state.health.gave_up,
                timeout=60,
            )
            text = _server_text(app)
            assert text.startswith("gave up")
            assert "restarts 4" in text
            assert "llama-server stopped: gave up after 5 crashes in 600 s (a crash loop)" in text
            assert "the last one: llama-server was killed by SIGKILL" in text
            assert "something killed it with SIGKILL" in text  # the hint
            log = _log_text(app)  # the last 500 lines: the end of the story
            assert log.endswith(
                "── crashed: llama-server was killed by SIGKILL\n── stopped: llama-server stopped"
            )
            await pilot.press("q")
        assert app.return_code == 0

    run(drive())
