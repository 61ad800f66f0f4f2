"""The live metrics panel against the real llama-server and the real SmolLM2.

The engine is started the way the engine-flow tests start it (SmolLM2, ctx 4096, one
slot, on the no-GPU card); chats go through its URL with plain HTTP. The panel's
figures come from the status poller (llama-server's counters), which the app starts
once the engine is ready and stops when it stops.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from homelab.engine.supervision.state_file import StateFile
from tests.factory.server_log import free_port
from tests.ui.helpers import run, wait_until
from tests.ui.test_engine_flows import _app, _chat, _pick_small_plan, _start_and_wait_ready

pytestmark = pytest.mark.engine


def _metrics_text(app) -> str:
    return str(app.query_one("#metrics-text").render())


def _alarm_text(app) -> str:
    box = app.query_one("#metrics-alarm")
    return str(box.render()) if box.display else ""


def _gen_figure(app) -> float:
    """The gen tok/s the panel shows (0 when it shows none)."""
    text = _metrics_text(app)
    if " gen " not in text:
        return 0.0
    figure = text.split(" gen ", 1)[1].split(" tok/s", 1)[0].strip()
    try:
        return float(figure)
    except ValueError:
        return 0.0


def test_metrics_panel_shows_the_generation_speed_of_a_real_chat(
    models_dir: Path, engine_pids
) -> None:
    async def drive() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            panel = app.query_one("#metrics")
            assert not panel.display  # no engine: no panel
            await _pick_small_plan(app, pilot)
            url = await _start_and_wait_ready(app, pilot, engine_pids)
            await wait_until(pilot, lambda: panel.display and panel.last is not None, 30)
            assert app.status_poller is not None
            assert _gen_figure(app) == 0.0  # nothing generated yet
            assert "0 running" in _metrics_text(app)
            assert isinstance(_chat(url), str)
            await wait_until(pilot, lambda: _gen_figure(app) > 0, 30)
            await wait_until(pilot, lambda: max(panel.gen_history) > 0, 30)  # the sparkline
            assert "KV slot 0:" in _metrics_text(app)
            assert "cache reuse (latest prompt)" in _metrics_text(app)
            # the chat went through the admission gate in front: its numbers are shown too
            await wait_until(pilot, lambda: "admitted 1" in _metrics_text(app), 30)
            assert "gate: 0 running · 0 queued · 0 of " in _metrics_text(app)
            held = panel.last.kv_per_slot[0][1]
            assert held > 0  # the chat's cells are held in slot 0
            # the engine behind the gate has its own key: its /slots refuses a caller
            # without it, so the figures above came from a poller that sends it
            engine_url = app.state.running.supervisor.url
            assert engine_url is not None and engine_url != url
            refused = httpx.get(f"{engine_url}/slots", timeout=10, trust_env=False)
            assert refused.status_code == 401, refused.text
            assert _alarm_text(app) == ""  # a first short chat never alarms
            poller = app.status_poller
            await pilot.press("x", "y")  # stop it? yes
            await wait_until(pilot, lambda: app.state.health.state == "stopped", 60)
            await wait_until(pilot, lambda: not panel.display and app.status_poller is None, 30)
            await wait_until(pilot, lambda: poller._thread.ended.is_set(), 30)
            await pilot.press("q")
        assert app.return_code == 0

    run(drive())


def test_quit_with_the_status_poller_running_never_raises(models_dir: Path, engine_pids) -> None:
    async def drive() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            await wait_until(pilot, lambda: app.status_poller is not None, 30)
            poller = app.status_poller
            await pilot.press("q")
            await wait_until(pilot, lambda: app.screen.__class__.__name__ == "QuitScreen")
            await pilot.press("s")
            await wait_until(pilot, lambda: not app.is_running, 60)
        assert app.return_code == 0
        assert poller._thread.ended.is_set()
        assert app.status_poller is None

    run(drive())


def test_an_adopted_keyed_engine_still_fills_the_panel(models_dir: Path, engine_pids) -> None:
    """The engine behind the gate has its own key; the next app, which adopts it (its keeper
    gone), polls its
    ``/slots`` and ``/metrics`` with the key from the engine's record (else 401s, no slots)."""
    state: dict[str, object] = {}

    async def first() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            state["engine"] = app.state.running.supervisor.url
            await pilot.press("q")
            await wait_until(pilot, lambda: app.screen.__class__.__name__ == "QuitScreen")
            await pilot.press("l")  # leave it running
            await wait_until(pilot, lambda: not app.is_running, timeout=60)
        app.shutdown_engine()

    async def second() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            panel = app.query_one("#metrics")
            await wait_until(pilot, lambda: app.state.health.state == "ready", timeout=60)
            assert app.state.running.supervisor.url == state["engine"]  # adopted, not new
            await wait_until(pilot, lambda: "KV slot 0:" in _metrics_text(app), 30)
            assert panel.last is not None and panel.last.slots is not None
            assert not panel.last.notes, panel.last.notes  # no 401 said
            await pilot.press("x", "y")  # stop it? yes
            await wait_until(pilot, lambda: app.state.health.state == "stopped", timeout=60)
            await pilot.press("q")

    run(first())
    # "leave running" handed it to a keeper; with the keeper gone (killed) the next app
    # adopts the engine itself, and must poll it with the key
    record = StateFile().read()
    assert record is not None and record.kept and record.supervisor_pid is not None
    os.kill(record.supervisor_pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while record.keeper_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    refused = httpx.get(f"{state['engine']}/slots", timeout=10, trust_env=False)
    assert refused.status_code == 401, refused.text
    run(second())
