"""First run on a machine with no llama-server: the app says so and gets one without a restart.

"No llama-server" is made real: ``HOMELAB_DATA_DIR`` is an empty folder (none of
homelab's own builds), ``HOMELAB_LLAMA_SERVER`` unset, and ``PATH`` without any folder
holding a ``llama-server``. The real binary (``llama_server_bin``, found before the
environment changes) is what the user then points to, or what the "already built" fast
path of the real build finds once it is linked into the data folder. A from-source build
is never run here: the failing build stops for a real reason in its first step (the
source archive is not cached and the package index is a closed port), and the cancelled
one waits on the real build lock, held by the test, until escape is pressed (the wait
stops then, the lock still held).
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
from homelab.engine.llamacpp.source import SDIST_FILE
from homelab.ui.app import make_app
from homelab.ui.settings import saved_llama_server
from homelab.ui.widgets.engine_setup import EngineSetupPanel
from tests.factory.server_log import free_port
from tests.ui.helpers import NO_GPU, run, wait_until
from tests.ui.test_engine_flows import (
    _chat,
    _pick_small_plan,
    _quit_stopping_the_engine,
    _start_and_wait_ready,
)


@pytest.fixture
def no_engine(
    llama_server_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A machine without llama-server (see the module docstring); yields the real binary."""
    monkeypatch.delenv(locate.ENV_VAR, raising=False)
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    folders = os.environ.get("PATH", "").split(os.pathsep)
    kept = [f for f in folders if f and not (Path(f) / "llama-server").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    with pytest.raises(Exception, match="no llama-server found"):
        locate.find_llama_server()
    yield llama_server_bin
    locate.configure_llama_server(None)


@pytest.fixture
def no_package_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip (the build's source download) sees no index: a closed port, no local wheels."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{free_port()}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")


def _app(models_dir: Path | None = None, **kwargs):
    dirs = [models_dir] if models_dir is not None else []
    kwargs.setdefault("check_agents", False)  # the probe would load the engine under test
    return make_app(gpu_snapshot=NO_GPU, models_dirs=dirs, blink=False, adopt=False, **kwargs)


def _setup_text(app) -> str:
    panel = app.query_one("#engine-setup", EngineSetupPanel)
    return "\n".join(str(s.render()) for s in panel.query("Static"))


async def _choose(pilot, path: Path | str) -> None:
    """``e``, the path typed into the dialog, enter."""
    await pilot.press("e")
    await wait_until(pilot, lambda: pilot.app.screen.__class__.__name__ == "EnginePathScreen")
    await pilot.press(*str(path), "enter")
    await wait_until(pilot, lambda: pilot.app.screen.__class__.__name__ != "EnginePathScreen")


def test_no_engine_the_panels_say_so_and_offer_to_build_or_point(no_engine: Path) -> None:
    async def drive() -> None:
        app = _app(refresh_s=0)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            server = str(app.query_one("#server-state").render())
            assert "no llama-server found" in server and "none on PATH" in server
            panel = app.query_one("#engine-setup", EngineSetupPanel)
            await wait_until(pilot, lambda: panel.display)
            text = _setup_text(app)
            assert "No llama-server to run" in text
            assert "b  build it here" in text and "e  use a llama-server you have" in text
            bindings = app.active_bindings
            assert bindings["b"].enabled and bindings["e"].enabled  # on offer, in the footer
            commands = {c.title for c in app.get_system_commands(app.screen)}
            assert {"Build llama-server", "Use a llama-server binary"} <= commands

    run(drive())


def test_pointing_at_the_real_binary_lets_s_serve_smollm2_and_the_next_start_finds_it(
    no_engine: Path, models_dir: Path, engine_pids
) -> None:
    port = free_port()

    async def first() -> None:
        app = _app(models_dir, port=port, refresh_s=0.5)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            await _choose(pilot, no_engine)
            await wait_until(pilot, lambda: app.engine_origin == "setting", timeout=60)
            assert app.state.engine_problem is None and app.engine_setup_error is None
            assert not app.query_one("#engine-setup", EngineSetupPanel).display
            assert "no llama-server found" not in str(app.query_one("#server-state").render())
            assert saved_llama_server() == no_engine
            await _pick_small_plan(app, pilot)
            url = await _start_and_wait_ready(app, pilot, engine_pids)
            assert Path(app.state.running.supervisor.spec.argv[0]).resolve() == no_engine.resolve()
            assert isinstance(_chat(url), str)
            await _quit_stopping_the_engine(app, pilot)

    async def second() -> None:
        app = _app(models_dir, refresh_s=0)
        async with app.run_test(size=(140, 45)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.state.engine_problem is None  # found through the saved setting
            assert not app.query_one("#engine-setup", EngineSetupPanel).display
            assert locate.locate_llama_server().origin == "setting"

    run(first())
    assert locate._configured is None  # forgotten when the app ended
    run(second())


def test_a_file_that_is_not_llama_server_is_refused_with_why(
    no_engine: Path, tmp_path: Path
) -> None:
    script = tmp_path / "llama-server"
    script.write_text("#!/bin/sh\necho 'hello from a script'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    plain = tmp_path / "plain-file"
    plain.write_text("not a program\n")

    async def drive() -> None:
        app = _app(refresh_s=0)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            await _choose(pilot, script)
            await wait_until(pilot, lambda: app.engine_setup_error is not None, timeout=60)
            assert app.engine_setup_error.title == "Not llama-server"
            text = _setup_text(app)
            assert "Not llama-server" in text and "hello from a script" in text
            assert "point the llama-server path (e) at a llama-server binary" in text
            await _choose(pilot, plain)
            await wait_until(pilot, lambda: "not an executable file" in _setup_text(app))
            assert "chmod +x" in _setup_text(app)
            assert app.state.engine_problem is not None  # still no engine
            assert saved_llama_server() is None  # nothing kept

    run(drive())


def test_build_already_built_finds_the_engine_at_once(no_engine: Path) -> None:
    async def drive() -> None:
        app = _app(refresh_s=0)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            # another homelab finished the build meanwhile: the real build, linked in
            variant = resolve_variant(None)
            locate.engine_root().mkdir(parents=True, exist_ok=True)
            locate.install_dir(variant).symlink_to(no_engine.parent.parent)
            await pilot.press("b", "y")  # build it? yes
            await wait_until(pilot, lambda: app.engine_origin is not None, timeout=60)
            assert app.engine_origin == f"build:{variant}"
            assert app.state.engine_problem is None
            assert "already built" in _setup_text(app)  # the build's own line
            assert not app.query_one("#engine-setup", EngineSetupPanel).display

    run(drive())


def test_a_build_that_cannot_fetch_its_source_shows_the_error_and_hint(
    no_engine: Path, no_package_index: None
) -> None:
    async def drive() -> None:
        app = _app(refresh_s=0)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            await pilot.press("b", "y")  # build it? yes
            await wait_until(pilot, lambda: app.engine_setup_error is not None, timeout=120)
            error = app.engine_setup_error
            assert error.title == "Source download failed", error
            text = _setup_text(app)
            assert "Source download failed" in text
            assert "could not download llama-cpp-python" in text
            assert f"put {SDIST_FILE}" in text  # the hint: how to do it offline
            assert app.state.engine_problem is not None and app.build_cancel is None
            assert app.query_one("#engine-setup", EngineSetupPanel).display

    run(drive())


def test_escape_cancels_a_build(no_engine: Path, no_package_index: None) -> None:
    """The build waits for the real build lock (held here), escape is pressed: the wait
    stops with the lock still held, before fetching anything."""
    name = locate.install_dir(resolve_variant(None)).name
    locate.engine_root().mkdir(parents=True, exist_ok=True)

    async def drive() -> None:
        app = _app(refresh_s=0)
        with open(locate.engine_root() / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            async with app.run_test(size=(140, 45)) as pilot:
                await wait_until(pilot, lambda: app.state.engine_problem is not None)
                await pilot.press("b", "y")  # build it? yes
                await wait_until(pilot, lambda: "waiting for another" in _setup_text(app))
                assert "escape cancels" in _setup_text(app)
                await pilot.press("e")  # a dialog up: escape closes it, the build goes on
                await wait_until(pilot, lambda: len(app.screen_stack) == 2)
                await pilot.press("escape")
                await wait_until(pilot, lambda: len(app.screen_stack) == 1)
                assert "cancelling" not in _setup_text(app) and not app.build_cancel.is_set()
                await pilot.press("escape")
                text = _setup_text(app)  # the wait stops within a try of the lock
                assert "cancelling" in text or "Build cancelled" in text
                await wait_until(pilot, lambda: "Build cancelled" in _setup_text(app))
                fcntl.flock(lock, fcntl.LOCK_UN)
                assert app.build_cancel is None and app.engine_setup_error is None
                assert app.state.engine_problem is not None

    run(drive())


def test_a_bad_llama_server_setting_is_shown_and_the_rules_go_on_without_it(
    no_engine: Path,
) -> None:
    from homelab.ui.settings import settings_path

    settings_path().write_text("llama_server = 3\n")

    async def drive() -> None:
        app = _app(refresh_s=0)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            text = _setup_text(app)
            assert "Bad settings file" in text and str(settings_path()) in text
            assert locate._configured is None

    run(drive())
