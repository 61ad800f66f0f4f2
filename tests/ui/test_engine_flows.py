"""Start, answer, stop, switch and quit against the real llama-server and the real SmolLM2.

The card is the recorded no-GPU snapshot (plans for system RAM, as the CPU build of
llama-server runs them); each test picks SmolLM2 with a small chat plan (ctx 4096,
1 slot) through the plan panel's own fields.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from homelab.ui.app import make_app
from homelab.ui.widgets.models import ModelsMenu
from tests.factory.server_log import free_port
from tests.ui.helpers import NO_GPU, run, wait_until

pytestmark = pytest.mark.engine


def _app(models_dir: Path, port: int, **kwargs):
    return make_app(
        gpu_snapshot=NO_GPU,
        models_dirs=[models_dir],
        port=port,
        refresh_s=0.5,
        blink=False,
        **{"check_agents": False, **kwargs},  # it probes the engine; its own test turns it on
    )


async def _pick_small_plan(app, pilot, name: str = "smollm2") -> None:
    menu = app.query_one("#menu", ModelsMenu)
    await wait_until(pilot, lambda: any(e.source == "dir" for e in menu.entries))
    app.query_one("#ctx").focus()
    await pilot.press(*"4096")
    app.query_one("#slots").focus()
    await pilot.press("1")
    app.query_one("#models").focus()
    await pilot.press("slash", *name, "enter")
    await wait_until(
        pilot,
        lambda: (
            app.state.picked.plan is not None
            and app.state.picked.plan.candidate.allocation.n_ctx == 4096
        ),
    )


async def _start_and_wait_ready(app, pilot, engine_pids) -> str:
    await pilot.press("s")
    await wait_until(pilot, lambda: app.state.running.supervisor is not None, timeout=30)
    engine_pids.add(app.state.running.supervisor.pid)
    await wait_until(pilot, lambda: app.state.health.state == "ready", timeout=120)
    await wait_until(pilot, lambda: app.state.running.session.public_url is not None, timeout=30)
    url = app.state.running.session.public_url  # the admission gate's, in front of the engine
    assert url is not None and url != app.state.running.supervisor.url
    await wait_until(pilot, lambda: url in str(app.query_one("#server-state").render()))
    shown = str(app.query_one("#server-state").render())
    assert "ready" in shown  # the URL a person reads
    assert "on CPU only (no GPU device)" in shown  # what the suite's engine computes on
    return url


def _chat(url: str) -> str:
    with httpx.Client(trust_env=False, timeout=60) as client:
        response = client.post(
            f"{url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8},
        )
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


async def _quit_stopping_the_engine(app, pilot) -> None:
    """``q``, then "stop it" on the quit screen; the app ends."""
    await pilot.press("q")
    await wait_until(pilot, lambda: app.screen.__class__.__name__ == "QuitScreen")
    await pilot.press("s")
    await wait_until(pilot, lambda: not app.is_running, timeout=60)


def test_start_answers_a_chat_then_stop(models_dir: Path, engine_pids) -> None:
    port = free_port()

    async def drive() -> None:
        app = _app(models_dir, port)
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            url = await _start_and_wait_ready(app, pilot, engine_pids)
            assert url == f"http://127.0.0.1:{port}"
            assert isinstance(_chat(url), str)
            await pilot.press("c")
            assert app.clipboard == url
            pid = app.state.running.supervisor.pid
            await wait_until(
                pilot, lambda: "new prompt" in _log_text(app), timeout=10
            )  # the chat, in the log tail
            lines = app.query_one("#log").lines
            # the seed: the tail read when the app subscribed (pushed lines carry no marker)
            assert lines[0].startswith("---- homelab ") and " attempt 1: " in lines[0]
            # then the pushed lines, none twice at the seam: the serving line once
            assert sum("listening on http" in line for line in lines) == 1
            assert "── ready: ready in" in _log_text(app)  # the supervisor's transition
            await pilot.press("x", "y")  # stop it? yes
            await wait_until(pilot, lambda: app.state.health.state == "stopped", timeout=60)
            assert not alive(pid)
            await pilot.press("q")  # nothing runs: quits at once
        assert app.return_code == 0

    run(drive())


def _another_ready(app, old_pid: int) -> bool:
    """A new engine (not ``old_pid``) is ready."""
    return (
        app.state.running.supervisor is not None
        and app.state.running.supervisor.pid != old_pid
        and app.state.health.state == "ready"
    )


def _log_text(app) -> str:
    return "\n".join(app.query_one("#log").lines)


def test_quit_with_an_engine_running_can_stop_it(models_dir: Path, engine_pids) -> None:
    async def drive() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            pid = app.state.running.supervisor.pid
            await _quit_stopping_the_engine(app, pilot)
        assert not alive(pid)

    run(drive())


def test_quit_leaving_the_engine_running_hands_it_to_a_keeper_the_next_app_shows(
    models_dir: Path, engine_pids
) -> None:
    """ "Leave running" hands the engine (and its gate) to homelab's keeper, which adopts
    them as they run (the same pid, the same URL) and restarts them after a crash; the next
    app shows it kept (never adopts it: two supervisors would fight) and ``x`` stops it
    through the keeper."""
    state: dict[str, object] = {}

    async def first() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            state["url"] = await _start_and_wait_ready(app, pilot, engine_pids)
            state["pid"] = app.state.running.supervisor.pid
            await pilot.press("q")
            await wait_until(pilot, lambda: app.screen.__class__.__name__ == "QuitScreen")
            await pilot.press("l")
            await wait_until(pilot, lambda: not app.is_running, timeout=120)
        app.shutdown_engine()  # what run_app does: must leave a released engine alone
        state["left"] = app.state.left_note

    async def second() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.kept is not None, timeout=60)
            assert app.state.running.supervisor is None  # not adopted: the keeper's
            assert str(state["url"]) in str(app.query_one("#server-state").render())
            await pilot.press("x", "y")  # stop it? yes
            await wait_until(pilot, lambda: app.state.kept is None, timeout=60)
            await pilot.press("q")

    run(first())
    assert "kept by homelab's keeper" in str(state["left"]), state["left"]
    record = StateFile().read()
    try:
        assert record is not None and record.kept and record.keeper_alive()
        assert record.pid == state["pid"]  # adopted as it ran, not started again
        assert isinstance(_chat(str(state["url"])), str)
        run(second())
        assert not alive(int(state["pid"]))
        assert not record.keeper_alive()
    finally:
        if record is not None and record.supervisor_pid and record.keeper_alive():
            os.kill(record.supervisor_pid, signal.SIGTERM)


def test_switch_stops_the_first_engine_and_starts_the_second(
    models_dir: Path, smollm2_gguf: Path, engine_pids
) -> None:
    (models_dir / "second-copy.gguf").symlink_to(smollm2_gguf)

    async def drive() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            first_pid = app.state.running.supervisor.pid
            await pilot.press("slash", *"second", "enter")
            await wait_until(
                pilot,
                lambda: (
                    app.state.picked.plan is not None
                    and app.state.picked.entry.name == "second-copy"
                ),
            )
            await pilot.press("s")
            await wait_until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
            assert f"pid {first_pid}" in str(app.screen.question)
            await pilot.press("y")
            await wait_until(pilot, lambda: _another_ready(app, first_pid), timeout=120)
            engine_pids.add(app.state.running.supervisor.pid)
            assert not alive(first_pid)
            assert app.state.running.entry.name == "second-copy"
            # through the gate: the engine's own port wants the key only the gate holds
            await wait_until(pilot, lambda: app.state.running.session.public_url is not None)
            assert isinstance(_chat(app.state.running.session.public_url), str)
            await _quit_stopping_the_engine(app, pilot)

    run(drive())


def test_the_serve_session_records_the_plan_and_the_panel_shows_actuals_and_a_searchable_log(
    models_dir: Path, engine_pids
) -> None:
    from homelab.engine.supervision.state_file import StateFile
    from homelab.ui.widgets.server import ServerPanel

    async def drive() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            preview = app.state.picked.preview  # started as shown, not planned again
            assert preview is not None and app.state.running.plan is preview.prepared.plan.plan
            record = StateFile().live()
            assert record is not None and record.pid == app.state.running.supervisor.pid
            assert record.facts is not None  # plan facts in the record: the session's path
            await wait_until(pilot, lambda: app.state.health.actuals is not None, timeout=30)
            actuals = str(app.query_one("#server-actuals").render())
            assert "predicted → actual" in actuals
            panel = app.query_one("#server", ServerPanel)
            await wait_until(pilot, lambda: len(panel.visible_lines) > 5, timeout=30)
            await pilot.press("l")
            assert app.focused is not None and app.focused.id == "log-search"
            await pilot.press(*"slot")
            shown = panel.visible_lines
            assert shown and all("slot" in line.lower() for line in shown)
            await pilot.press("escape")
            assert len(panel.visible_lines) > len(shown)
            app.query_one("#models").focus()
            await pilot.press("x", "y")  # stop it? yes
            await wait_until(pilot, lambda: app.state.health.state == "stopped", timeout=60)
            await pilot.press("q")

    run(drive())
