"""``R`` answers the compositor growth warning: re-plan on the card now, restart with it.

The card is the constructed growth recording (``constructed_desktop_growth.json``: three
steady samples, then kwin_wayland +700 MiB) played through the real telemetry poller on a
:class:`ManualClock`; the engine is the real llama-server serving the real SmolLM2 (the
CPU build runs the 3090 plan's flags). SmolLM2 on a 24 GiB card is capped by its trained
context, not by memory, so the -c flag stays; what the growth changes is what fits
(``tokens_fit``) and the desktop the plan counts, and both must move by the growth.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.supervision.process import alive
from homelab.plan.vocabulary import summary_words
from homelab.ui.app import make_app
from homelab.ui.widgets.keys import KeysFooter
from homelab.ui.widgets.models import ModelsMenu
from tests.factory.clock import ManualClock
from tests.factory.server_log import free_port
from tests.ui.helpers import run, wait_until
from tests.ui.test_engine_flows import _another_ready, _chat, _quit_stopping_the_engine
from tests.ui.test_live_growth import GROWTH, WAIT_S, _advance_to, _growth_text

pytestmark = pytest.mark.engine

GROWN = 700 * 2**20
"""What kwin_wayland grows by in the recording."""


def _flag(argv: tuple[str, ...] | list[str], name: str) -> int:
    return int(argv[list(argv).index(name) + 1])


def growth_app(models_dir: Path, clock: ManualClock):
    """The app on the growth recording, its telemetry on ``clock``, not adopting."""
    return make_app(
        gpu_snapshot=GROWTH,
        models_dirs=[models_dir],
        port=free_port(),
        refresh_s=1.0,
        blink=False,
        adopt=False,
        telemetry_clock=clock,
        check_agents=False,  # the probe's requests would load the engine being measured
    )


async def serve_one_slot(app, pilot, engine_pids):
    """Pick SmolLM2 with one slot (a small KV for the CPU engine), start it, wait until it
    is ready; the plan the app showed."""
    menu = app.query_one("#menu", ModelsMenu)
    await wait_until(pilot, lambda: app.state.card.report is not None and len(menu.entries) > 0)
    app.query_one("#slots").focus()
    await pilot.press("1")
    app.query_one("#models").focus()
    await pilot.press("slash", *"smollm2", "enter")
    await wait_until(
        pilot,
        lambda: app.state.picked.plan is not None and app.state.picked.plan.settings.n_seq == 1,
        WAIT_S,
    )
    shown = app.state.picked.plan
    await pilot.press("s")
    await wait_until(pilot, lambda: app.state.running.supervisor is not None, WAIT_S)
    engine_pids.add(app.state.running.supervisor.pid)
    await wait_until(pilot, lambda: app.state.health.state == "ready", 120)
    return shown


def test_R_after_the_desktop_grew_restarts_with_a_plan_made_on_the_card_now(
    models_dir: Path, engine_pids
) -> None:
    clock = ManualClock()

    async def drive() -> None:
        app = growth_app(models_dir, clock)
        async with app.run_test(size=(140, 45)) as pilot:
            shown = await serve_one_slot(app, pilot, engine_pids)
            old, old_pid = app.state.running.plan, app.state.running.supervisor.pid
            # the engine runs the plan made on the card the app showed (steady desktop)
            assert old.budget.desktop == shown.budget.desktop
            assert old.tokens_fit == shown.tokens_fit

            await _advance_to(app, pilot, clock, 3)  # kwin_wayland +700 MiB
            await wait_until(pilot, lambda: _growth_text(app) != "", WAIT_S)
            warning = _growth_text(app)
            assert "kwin_wayland" in warning and "+700.00 MiB" in warning
            assert "R: re-plan on the card now and restart" in warning
            footer = {(k.key, k.description) for k in app.query_one(KeysFooter).shown}
            assert ("R", "re-plan") in footer  # the key is in the footer too

            await pilot.press("R")
            await wait_until(
                pilot,
                lambda: _another_ready(app, old_pid) and app.state.running.plan is not old,
                120,
            )
            engine_pids.add(app.state.running.supervisor.pid)
            assert not alive(old_pid)
            new = app.state.running.plan
            assert new.budget.desktop == old.budget.desktop + GROWN
            assert new.tokens_fit < old.tokens_fit
            # the 700 MiB the desktop took are tokens the KV can no longer hold
            per_token = GROWN / (old.tokens_fit - new.tokens_fit)
            assert 12_000 < per_token < 14_000, per_token  # SmolLM2 q8_0: 12,240 B + FA copy
            argv = app.state.running.supervisor.spec.argv
            assert _flag(argv, "-c") == new.candidate.allocation.n_ctx
            assert _flag(argv, "-np") == 1

            server = str(app.query_one("#server-state").render())
            assert "re-planned on the card now (desktop +700.00 MiB)" in server
            assert f"was {summary_words(old)}" in server
            assert f"now {summary_words(new)}" in server
            assert "flags -c 8192 -np 1 → -c 8192 -np 1 (unchanged)" in server
            assert "restarts 0" in server  # a new engine, not a crash
            await wait_until(pilot, lambda: _growth_text(app) == "", WAIT_S)  # planned for it
            assert isinstance(_chat(app.state.running.session.public_url), str)  # via the gate

            replanned = app.state.running.supervisor.pid  # r: restart as it is, the same flags
            await pilot.press("r")
            await wait_until(
                pilot,
                lambda: _another_ready(app, replanned) and app.state.running.plan is not new,
                120,
            )
            engine_pids.add(app.state.running.supervisor.pid)
            assert app.state.running.supervisor.spec.argv == argv
            assert app.state.running.plan.tokens_fit == new.tokens_fit
            assert "re-planned" not in str(app.query_one("#server-state").render())
            await _quit_stopping_the_engine(app, pilot)

    run(drive())


def test_R_without_an_engine_of_this_app_says_there_is_nothing_to_re_plan(
    models_dir: Path,
) -> None:
    async def drive() -> None:
        app = make_app(
            gpu_snapshot=GROWTH,
            models_dirs=[models_dir],
            refresh_s=0,
            blink=False,
            adopt=False,
        )
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.card.report is not None)
            await pilot.press("R")
            await wait_until(pilot, lambda: len(app.said) > 0)
            titles = [n.title for n in app.said]
            assert "Nothing to re-plan" in titles
            assert app.state.running.supervisor is None
            await pilot.press("q")
        assert app.return_code == 0

    run(drive())
