"""The card follows the GPU telemetry; the compositor growth warning; quitting with the poller on.

The growth recording, ``tests/fixtures/gpu/constructed_desktop_growth.json``, was written
by hand from the 3090 Wayland scenario (its comment says how): three steady samples a
second apart, then kwin_wayland grows by 700 MiB. The app plays it through the real
telemetry poller on a :class:`ManualClock` the test moves, so the plan is made on the
steady desktop and the growth arrives when the test says.
"""

from __future__ import annotations

from pathlib import Path

from homelab.ui.app import make_app
from homelab.ui.widgets.models import ModelsMenu
from tests.factory.clock import ManualClock
from tests.ui.helpers import GPU_FIXTURES, run, wait_until

GROWTH = GPU_FIXTURES / "constructed_desktop_growth.json"
WAIT_S = 30.0


def _growth_app(models_dir: Path, clock: ManualClock):
    return make_app(
        gpu_snapshot=GROWTH,
        models_dirs=[models_dir],
        refresh_s=1.0,
        blink=False,
        adopt=False,
        telemetry_clock=clock,
    )


def _growth_text(app) -> str:
    box = app.query_one("#growth")
    return str(box.render()) if box.display else ""


async def _advance_to(app, pilot, clock: ManualClock, seq: int) -> None:
    while app.gpu_poller is None or app.gpu_poller.latest.seq < seq:
        if app.gpu_poller is not None:
            assert clock.wait_for_waiter(WAIT_S)
            clock.advance(1.0)
        await pilot.pause(0.05)
    await wait_until(pilot, lambda: app.state.card.report is app.gpu_poller.latest.report, WAIT_S)


def test_growth_warning_names_kwin_and_its_mib(models_dir: Path) -> None:
    clock = ManualClock()

    async def drive() -> None:
        app = _growth_app(models_dir, clock)
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(
                pilot, lambda: app.state.card.report is not None and len(menu.entries) > 0
            )
            assert app.gpu_poller is not None and app.gpu_poller.latest.seq == 0
            await pilot.press("slash", *"smollm2", "enter")
            await wait_until(pilot, lambda: app.state.picked.plan is not None, WAIT_S)
            steady = app.state.picked.plan.budget.desktop
            await _advance_to(app, pilot, clock, 2)  # still steady: no warning
            assert app.growth is not None and app.growth.grown == 0
            assert _growth_text(app) == ""
            await _advance_to(app, pilot, clock, 3)  # kwin_wayland +700 MiB
            await wait_until(pilot, lambda: _growth_text(app) != "", WAIT_S)
            text = _growth_text(app)
            assert "kwin_wayland" in text
            assert "+700.00 MiB" in text
            assert "since the plan" in text
            assert "Close it, or re-plan" in text
            assert "enter on the model re-plans on the card now" in text  # no engine yet
            assert app.growth.planned_desktop == steady
            assert app.growth.desktop_peak == steady + 700 * 2**20
            await pilot.press("q")
        assert app.return_code == 0
        assert app.gpu_poller is None  # stopped and joined on unmount

    run(drive())


def test_quit_while_the_gpu_poller_waits_never_raises(models_dir: Path) -> None:
    """The poller's thread is blocked on the clock between samples when q is pressed."""
    clock = ManualClock()

    async def drive() -> None:
        app = _growth_app(models_dir, clock)
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.gpu_poller is not None, WAIT_S)
            poller = app.gpu_poller
            assert clock.wait_for_waiter(WAIT_S)  # mid-recording, waiting for sample 1
            await pilot.press("q")
        assert app.return_code == 0
        assert poller.ended

    run(drive())


def test_the_card_follows_the_recording_in_time(models_dir: Path) -> None:
    """Real time: the 3090 recording's 8 samples arrive one by one and the last is final."""

    async def drive() -> None:
        app = make_app(
            gpu_snapshot=GPU_FIXTURES / "rtx3090_wayland.json",
            models_dirs=[models_dir],
            refresh_s=1.0,
            blink=False,
            adopt=False,
        )
        seen: set[int] = set()
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.gpu_poller is not None, WAIT_S)

            def final() -> bool:
                seen.add(app.state.card.report.devices[0].samples if app.state.card.report else 0)
                return (
                    app.gpu_poller.ended and app.state.card.report is app.gpu_poller.latest.report
                )

            await wait_until(pilot, final, WAIT_S)
            assert app.state.card.report.devices[0].samples == 8  # the whole recording, the window
            assert len(seen) > 2  # drawn sample by sample, not once at the end
            await pilot.press("q")
        assert app.return_code == 0

    run(drive())
