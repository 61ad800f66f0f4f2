"""The keys as a new user meets them: a field gives the keys back on enter and escape and no
hotkey fires while typing in one; what costs minutes or kills an engine asks first (a
keyboard-only dialog: y or enter yes, n or escape no); a key that cannot act now says why.

The engine-setup cases run on a machine without llama-server (as ``test_first_run``
makes one: no engine of homelab's, none on ``PATH``) and hold the real build lock as
"another homelab's build"; the engine that build lands is a stand-in executable on
``PATH`` (found by the domain's locate rules like any other; never run for a model). One
test runs the real engine for the stop and quit dialogs.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.engine.llamacpp import locate
from homelab.engine.llamacpp.build import resolve_variant
from homelab.ui.app import make_app
from homelab.ui.screens import ConfirmScreen, QuitScreen
from homelab.ui.widgets.engine_setup import EngineSetupPanel
from tests.factory.server_log import free_port
from tests.ui.helpers import GPU_FIXTURES, NO_GPU, pick_smollm2, run, wait_until
from tests.ui.test_engine_flows import _app as _engine_app
from tests.ui.test_engine_flows import _pick_small_plan, _start_and_wait_ready
from tests.ui.test_first_run import _setup_text

HOTKEYS = ("s", "x", "r", "R", "l", "d", "f", "b", "e", "c", "q", "t", "slash")
FIELDS = ("#ctx", "#slots", "#workload", "#filter", "#log-search")


@pytest.fixture
def no_engine_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No llama-server to find; yields the folder on ``PATH`` where one may land (:func:`_land`)."""
    monkeypatch.delenv(locate.ENV_VAR, raising=False)
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    landing = tmp_path / "landing"
    landing.mkdir()
    folders = os.environ.get("PATH", "").split(os.pathsep)
    kept = [f for f in folders if f and not (Path(f) / "llama-server").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join([str(landing), *kept]))
    with pytest.raises(Exception, match="no llama-server found"):
        locate.find_llama_server()
    yield landing
    locate.configure_llama_server(None)


def _land(folder: Path) -> Path:
    """An executable ``llama-server`` in ``folder`` (it lists no device when asked)."""
    binary = folder / "llama-server"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def _app(models_dir: Path | None = None, **kwargs):
    kwargs.setdefault("gpu_snapshot", NO_GPU)
    kwargs.setdefault("refresh_s", 0)
    return make_app(
        models_dirs=[models_dir] if models_dir is not None else [],
        blink=False,
        adopt=False,
        check_agents=False,
        **kwargs,
    )


def _record_notes(app) -> list[tuple[str, str]]:
    """Every notification the app shows from now on, as (title, message)."""
    notes: list[tuple[str, str]] = []
    shown = app.notify

    def notify(message: str, *, title: str = "", **kwargs) -> None:
        notes.append((title, message))
        shown(message, title=title, **kwargs)

    app.notify = notify
    return notes


def _focus_field(app, field: str) -> None:
    if field == "#filter":
        app.query_one("#menu").open_filter()
    else:
        app.query_one(field).focus()


@pytest.mark.parametrize("leave", ["enter", "escape"])
def test_a_field_gives_the_keys_back_and_no_hotkey_fires_while_typing(leave: str) -> None:
    async def drive() -> None:
        app = _app(gpu_snapshot=GPU_FIXTURES / "rtx3090_wayland.json")
        async with app.run_test(size=(140, 45)) as pilot:
            await app.workers.wait_for_complete()
            notes = _record_notes(app)
            for field in FIELDS:
                _focus_field(app, field)
                await pilot.pause()
                await pilot.press(*HOTKEYS, "4", "2")
                value = app.query_one(field).value
                if field in ("#ctx", "#slots"):
                    assert value == "42", field  # integers: the letters are refused
                else:
                    assert value == "sxrRldfbecqt/42", field  # typed, every one
                # none acted: no dialog, no note, no build, still running, still typing
                assert app.is_running and len(app.screen_stack) == 1, field
                assert notes == [] and app.build_cancel is None, field
                assert app.focused is app.query_one(field)
                await pilot.press(leave)
                assert app.focused is app.query_one("#models"), (field, leave)
                await pilot.press("x")  # the keys act again: x says why it cannot
                assert notes.pop() == ("Nothing to stop", "No engine is running."), field
                app.query_one(field).value = ""
                await pilot.pause()

    run(drive())


def test_the_dialogs_answer_from_the_keyboard() -> None:
    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            for keys, expected in (
                (("y",), True),
                (("enter",), True),
                (("n",), False),
                (("escape",), False),
                (("tab", "enter"), False),  # tab to "no", enter presses it
                (("q", "x", "b", "escape"), False),  # the app's keys do nothing meanwhile
            ):
                answers: list[bool | None] = []
                app.push_screen(ConfirmScreen("Sure?", yes="Do it"), answers.append)
                await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
                await pilot.press(*keys)
                await wait_until(pilot, lambda: bool(answers))  # noqa: B023 (awaited here)
                assert answers == [expected], keys
                assert len(app.screen_stack) == 1 and app.is_running
            for key, choice in (("n", "cancel"), ("escape", "cancel"), ("l", "leave")):
                chosen: list[str | None] = []
                app.push_screen(QuitScreen("An engine (pid 1)"), chosen.append)
                await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))
                await pilot.press(key)
                await wait_until(pilot, lambda: bool(chosen))  # noqa: B023 (awaited here)
                assert chosen == [choice], key

    run(drive())


def test_keys_that_cannot_act_say_why(models_dir: Path, no_engine_here: Path) -> None:
    _land(no_engine_here)

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.card.report is not None)
            await app.workers.wait_for_complete()
            assert app.state.engine_problem is None  # an engine is found
            notes = _record_notes(app)
            expected = {
                "s": "Nothing to start",
                "x": "Nothing to stop",
                "r": "Nothing to restart",
                "R": "Nothing to re-plan",
                "c": "No URL",
                "t": "No chat",
                "d": "Nothing to download",
                "b": "Engine there",  # not in the footer with an engine: pressed, it says so
                "f": "Engine there",
                "e": "Engine there",
            }
            for key, title in expected.items():
                await pilot.press(key)
                assert notes and notes[-1][0] == title, (key, notes)
                assert len(app.screen_stack) == 1, key  # no dialog for nothing to lose
            await pick_smollm2(pilot)
            notes.clear()
            await pilot.press("d")  # a file here: nothing to download, and why
            assert notes == [
                (
                    "Nothing to download",
                    "SmolLM2-135M-Instruct.Q4_1 is a file here already; d downloads presets (★).",
                )
            ]
            app.query_one("#server").display = False  # the log not on screen
            await pilot.pause()
            await pilot.press("l")
            assert notes[-1][0] == "No log to search"
            assert app.focused is app.query_one("#models")

    run(drive())


def test_x_q_and_ctrl_q_ask_while_an_engine_runs_and_no_leaves_it_alone() -> None:
    """The dialogs' wiring, no engine needed: the app's state says one runs (a stand-in
    supervisor that nothing may touch); every no leaves it so."""
    from types import SimpleNamespace

    from homelab.ui.screens import QuitScreen

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.card.report is not None)
            await app.workers.wait_for_complete()
            app.state.running.supervisor = SimpleNamespace(pid=4242)  # type: ignore[assignment]
            app.state.health.state = "ready"
            for key, dialog, no in (
                ("x", ConfirmScreen, "n"),
                ("x", ConfirmScreen, "escape"),
                ("q", QuitScreen, "n"),
                ("ctrl+q", QuitScreen, "escape"),  # Textual's own ctrl+q would quit unasked
            ):
                await pilot.press(key)
                await wait_until(pilot, lambda: isinstance(app.screen, dialog))  # noqa: B023
                assert "pid 4242" in str(app.screen.query_one("Static").render()), key
                await pilot.press(no)
                await wait_until(pilot, lambda: len(app.screen_stack) == 1)
                assert app.is_running and app.state.health.state == "ready", key
            app.state.running.supervisor, app.state.health.state = None, None
            await pilot.press("q")  # nothing runs: quits at once
        assert app.return_code == 0

    run(drive())


def test_b_asks_first_and_escape_stops_the_wait_for_another_build_at_once(
    no_engine_here: Path,
) -> None:
    """Another homelab holds the build lock all along: the cancel ends the wait at once; when
    that other build's engine lands, the cancelled panel goes without a key."""
    name = locate.install_dir(resolve_variant(None)).name
    locate.engine_root().mkdir(parents=True, exist_ok=True)

    async def drive() -> None:
        app = _app(refresh_s=1.0)  # refreshing: the app looks for an engine again
        with open(locate.engine_root() / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            async with app.run_test(size=(140, 45)) as pilot:
                await wait_until(pilot, lambda: app.state.engine_problem is not None)
                for no in ("n", "escape"):
                    await pilot.press("b")
                    await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
                    await pilot.press(no)
                    await wait_until(pilot, lambda: len(app.screen_stack) == 1)
                    assert app.build_cancel is None  # said no: nothing started
                await pilot.press("b")
                await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
                await pilot.press("y")
                await wait_until(pilot, lambda: "waiting for another" in _setup_text(app))
                await pilot.press("escape")
                # the lock is still held: the wait ended on the cancel, not on the other build
                await wait_until(pilot, lambda: "Build cancelled" in _setup_text(app))
                assert app.build_cancel is None and app.state.engine_problem is not None
                panel = app.query_one("#engine-setup", EngineSetupPanel)
                assert panel.display
                # the other build finishes: its engine lands
                _land(no_engine_here)
                fcntl.flock(lock, fcntl.LOCK_UN)
                await wait_until(pilot, lambda: app.state.engine_problem is None)
                await wait_until(pilot, lambda: not panel.display)
                assert "Build cancelled" not in str(app.query_one("#server-state").render())

    run(drive())


@pytest.mark.engine
def test_x_and_q_with_an_engine_ask_first(models_dir: Path, engine_pids) -> None:
    from homelab.engine.supervision.process import alive

    async def drive() -> None:
        app = _engine_app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            pid = app.state.running.supervisor.pid
            for no in ("n", "escape"):
                await pilot.press("x")
                await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
                assert f"pid {pid}" in str(app.screen.query_one("Static").render())
                await pilot.press(no)
                await wait_until(pilot, lambda: len(app.screen_stack) == 1)
                assert app.state.health.state == "ready" and alive(pid)
            for quit_key in ("q", "ctrl+q"):  # both ask; n stays
                await pilot.press(quit_key)
                await wait_until(pilot, lambda: app.screen.__class__.__name__ == "QuitScreen")
                await pilot.press("n")
                await wait_until(pilot, lambda: len(app.screen_stack) == 1)
                assert app.is_running and alive(pid)
            await pilot.press("x")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("enter")  # yes: the panel says so at once, then it stops
            assert app.state.health.state in ("stopping", "stopped")
            await wait_until(pilot, lambda: app.state.health.state == "stopped", timeout=60)
            assert not alive(pid)
            await pilot.press("q")  # nothing runs: quits at once
        assert app.return_code == 0

    run(drive())
