"""What the server panel says runs is what runs: "looking…" until the adoption has looked (and
``s`` waits), an engine left running is replaced only when asked (or adopted when it is the
very engine picked), the same file with other settings is a switch, and "ready" only once the
URL shown answers. The real app on the suite's no-GPU snapshot; the engine side is stood in
for where a real one would only add minutes (the real adoption: tests/ui/test_engine_flows.py)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from homelab.ui import engine_flow
from homelab.ui.app import make_app
from homelab.ui.catalog import ModelEntry
from homelab.ui.screens import ConfirmScreen
from homelab.ui.state import LOOKING, Running
from homelab.ui.what_runs import picked_facts
from homelab.ui.widgets.models import ModelsMenu
from tests.ui.helpers import NO_GPU, pick_smollm2, run, wait_until


def _app(models_dir: Path, **kwargs):
    kwargs.setdefault("adopt", False)
    return make_app(
        gpu_snapshot=NO_GPU, models_dirs=[models_dir], refresh_s=0, blink=False, **kwargs
    )


def _server_text(app) -> str:
    return str(app.query_one("#server-state").render())


def _said(app) -> list[str]:
    return [n.message for n in app.said]


def _record(model: Path, facts) -> SimpleNamespace:
    return SimpleNamespace(
        model=str(model), pid=4242, facts=facts, supervised_by_other=lambda: False
    )


def test_the_panel_says_looking_until_the_adoption_has_looked(
    models_dir: Path, monkeypatch
) -> None:
    looked = threading.Event()
    real = engine_flow._left_running

    def slow():
        looked.wait(120)
        return real()

    monkeypatch.setattr(engine_flow, "_left_running", slow)

    async def drive() -> None:
        app = _app(models_dir, adopt=True)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.looking)
            assert LOOKING in _server_text(app) and "no engine running" not in _server_text(app)
            started: list[dict] = []
            app.run_engine = lambda *a, **k: started.append(k)  # type: ignore[method-assign]
            menu = app.query_one("#menu", ModelsMenu)  # picked as a person does, while it looks
            await wait_until(pilot, lambda: any(e.source == "dir" for e in menu.entries))
            await pilot.press("slash", *"smollm2", "enter")
            await wait_until(pilot, lambda: app.state.picked.preview is not None)
            assert app.state.looking
            await pilot.press("s")
            await wait_until(pilot, lambda: LOOKING in _said(app))
            assert started == [] and app.state.running.supervisor is None
            looked.set()
            await wait_until(pilot, lambda: not app.state.looking)
            assert "no engine running" in _server_text(app)

    run(drive())


def test_an_engine_left_running_is_replaced_only_when_asked(models_dir: Path, monkeypatch) -> None:
    """Another plan of the picked file left running: ``s`` asks, and no is nothing; the very
    engine picked (same file, same facts) is started, hence adopted, without a question."""

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            await pick_smollm2(pilot)
            facts = picked_facts(app.state.picked)
            assert facts is not None
            path = app.state.picked.model_path
            started: list[dict] = []
            app.run_engine = lambda *a, **k: started.append(k)  # type: ignore[method-assign]

            other = replace(facts, slots=4, ctx_total=4 * facts.ctx_per_slot)
            monkeypatch.setattr(engine_flow, "_left_running", lambda: _record(path, other))
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert "left" in app.screen.question
            await pilot.press("n")
            await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            assert started == []
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            await wait_until(pilot, lambda: len(started) == 1)
            assert started[0]["replace"] is True and started[0]["stop_first"] is False

            monkeypatch.setattr(engine_flow, "_left_running", lambda: _record(path, facts))
            await pilot.press("s")
            await wait_until(pilot, lambda: len(started) == 2)
            assert not isinstance(app.screen, ConfirmScreen)
            assert started[1]["stop_first"] is False and "replace" not in started[1]

    run(drive())


def _fake_running(app, model: Path, facts, key: str) -> None:
    spec = SimpleNamespace(model=str(model), facts=facts)
    supervisor = SimpleNamespace(pid=4242, spec=spec)
    picked = app.state.picked.entry
    name = picked.name if key == picked.key else model.stem
    entry = ModelEntry(key, name, None, "dir", path=model)
    app.state.running = Running(None, supervisor, entry)  # type: ignore[arg-type]
    app.state.health.state = "ready"


def test_the_same_file_with_other_settings_is_a_switch(models_dir: Path, tmp_path: Path) -> None:
    """The running engine is the picked row (same key, same file) but runs 4 slots where the
    plan says another count: not "already running" but a restart, asked."""

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            await pick_smollm2(pilot)
            facts = picked_facts(app.state.picked)
            assert facts is not None and facts.slots != 4
            path, key = app.state.picked.model_path, app.state.picked.entry.key
            started: list[dict] = []
            app.run_engine = lambda *a, **k: started.append(k)  # type: ignore[method-assign]
            _fake_running(app, path, replace(facts, slots=4), key)
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            question = app.screen.question
            assert "restart it as" in question and "× 4 slots" in question
            await pilot.press("y")
            await wait_until(pilot, lambda: len(started) == 1)
            assert started[0]["stop_first"] is True

            _fake_running(app, path, facts, key)  # the very engine picked: nothing to do
            await pilot.press("s")
            await wait_until(pilot, lambda: any("already running" in m for m in _said(app)))
            assert not isinstance(app.screen, ConfirmScreen) and len(started) == 1

            link = tmp_path / "second-name.gguf"  # a second name of the running file
            link.symlink_to(path)
            _fake_running(app, link, facts, "another-key")
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert "the same file under another name" in app.screen.question
            await pilot.press("n")

    run(drive())


def test_ready_is_said_only_once_the_url_shown_answers(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            await pick_smollm2(pilot)
            facts = picked_facts(app.state.picked)
            _fake_running(app, app.state.picked.model_path, facts, "k")
            session = SimpleNamespace(public_url=None, plan=None)
            app.state.running.session = session  # type: ignore[assignment]
            app._show_engine()
            text = _server_text(app)
            assert text.startswith("opening the gate") and "URL —" in text
            session.public_url = "http://127.0.0.1:8080"
            app._show_engine()
            text = _server_text(app)
            assert text.startswith("ready") and "URL http://127.0.0.1:8080" in text

    run(drive())
