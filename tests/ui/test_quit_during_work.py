"""Quitting while the telemetry poller, the listing, the verdicts or a plan still run never raises."""

from __future__ import annotations

from pathlib import Path

from homelab.ui.app import make_app
from tests.factory.clock import ManualClock
from tests.ui.helpers import GPU_FIXTURES, run


def test_quit_at_once_while_workers_run(models_dir: Path) -> None:
    """Real-time runs quit as soon as a worker is seen (on a loaded machine the 2 s recording
    may end first); the runs on a :class:`ManualClock` quit while the poller's thread is
    certainly alive, waiting for its next sample, so one case is always exercised."""
    busy_at_quit: list[bool] = []

    async def drive(clock: ManualClock | None) -> None:
        app = make_app(
            gpu_snapshot=GPU_FIXTURES / "two_gpus.json",
            models_dirs=[models_dir],
            refresh_s=0.01,  # the telemetry poller plays the recording (2 s) in time
            blink=False,
            adopt=False,
            telemetry_clock=clock,
        )
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.press("enter")  # a plan worker too, once the menu is there
            for _ in range(400):  # quit the moment a worker is seen running
                if _busy(app):
                    break
                await pilot.pause(0.005)
            busy_at_quit.append(_busy(app))
            await pilot.press("q")
        assert app.return_code == 0  # run_test re-raises anything the app raised

    for _ in range(4):
        run(drive(None))
    for _ in range(2):
        run(drive(ManualClock()))
    assert all(busy_at_quit[-2:]), "the poller on a manual clock had ended before the quit"


def _busy(app) -> bool:
    """A worker runs, or the GPU telemetry poller still samples on its thread."""
    poller = app.gpu_poller
    return any(w.is_running for w in app.workers) or (poller is not None and not poller.ended)
