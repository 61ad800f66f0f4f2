"""No network: what needs the Hub says it is offline, everything else keeps working.

The Hub is the local stand-in (tests/hubstub, real HTTP on 127.0.0.1); "the network goes
away" is the stand-in stopped, so its port refuses connections, as a Hub behind a
dead link does. The app makes no probe of its own: the line follows the Hub calls it
makes anyway (a preset's header read, a download). The plan panel's preview of a preset
not downloaded yet is ``homelab serve PRESET --dry-run``'s plan while the Hub answers,
and the preset's own facts' while it does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.cli import main as cli_main
from homelab.ui.app import make_app
from homelab.ui.quant_screen import QuantScreen
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.offline import OfflineBanner
from homelab.units import GiB
from tests.hub.conftest import gguf_dir, hub_stub, tiny_gguf  # noqa: F401  (fixtures)
from tests.ui.helpers import NO_GPU, STUB_REPO, run, stub_preset, wait_until

REPO = STUB_REPO
NAME = "Stub-Q4_K_M.gguf"


def _banner(app) -> OfflineBanner:
    return app.query_one("#offline", OfflineBanner)


async def _rejudge(app, pilot, ctx: str) -> None:
    """A new context in the plan panel: the picked row is judged again (its header read)."""
    app.query_one("#ctx").clear()
    app.query_one("#ctx").focus()
    await pilot.press(*ctx)
    await pilot.pause(0.2)
    await app.workers.wait_for_complete()
    await pilot.pause()


async def _pick(app, pilot, name: str) -> None:
    app.query_one("#models").focus()
    await pilot.press("slash", *name, "enter")
    await wait_until(
        pilot,
        lambda: app.state.picked.entry is not None and name in app.state.picked.entry.name.lower(),
    )


def test_the_hub_going_away_shows_the_offline_line_and_local_models_still_plan(
    hub_stub,  # noqa: F811
    tiny_gguf,  # noqa: F811
    models_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repos = {REPO: {NAME: tiny_gguf("stub.gguf", seed=3, n_layer=4)}}
    stub = hub_stub(repos)
    stub_preset()

    async def drive() -> None:
        app = make_app(
            gpu_snapshot=NO_GPU, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
        )
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(pilot, lambda: any(e.key == "preset:stubby" for e in menu.entries))
            await app.workers.wait_for_complete()  # every header read: the Hub answered
            await pilot.pause()
            assert menu.judgements["preset:stubby"].from_preset is False
            assert app.hub_offline is None and not _banner(app).display

            stub.close()  # the network goes away
            await _pick(app, pilot, "stubby")
            await pilot.press("d")  # a download (its chooser's listing) needs the Hub
            await wait_until(pilot, lambda: _banner(app).display, timeout=60)
            chooser = app.screen
            assert isinstance(chooser, QuantScreen)  # it says why too, then escape closes it
            await wait_until(pilot, lambda: "cannot reach" in str(_chooser_status(chooser)))
            await pilot.press("escape")
            await wait_until(pilot, lambda: len(app.screen_stack) == 1)
            text = str(_banner(app).render())
            host = stub.endpoint.removeprefix("http://")
            assert f"offline: header reads and downloads need {host}" in text
            assert "cannot reach" in text  # the domain's own words for it

            back = hub_stub(repos)  # online again: the next header read clears it
            await _rejudge(app, pilot, "8192")
            assert app.hub_offline is None and not _banner(app).display

            back.close()  # and away again: the header reads alone show it
            await _rejudge(app, pilot, "4096")
            assert _banner(app).display and app.hub_offline is not None

            await _pick(app, pilot, "smollm2")  # a local model plans without the Hub
            await wait_until(pilot, lambda: app.state.picked.plan is not None, timeout=60)
            assert app.query_one("#ctx").value == ""  # the edit stayed with the preset's row
            assert app.state.row_settings["preset:stubby"]["ctx"] == "4096"
            assert _banner(app).display

    run(drive())


def _chooser_status(chooser: QuantScreen) -> str:
    return str(chooser.query_one("#quants-status").render())


def test_hf_hub_offline_is_said_from_the_first_frame(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    async def drive() -> None:
        app = make_app(
            gpu_snapshot=NO_GPU, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
        )
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.pause()
            assert _banner(app).display
            text = str(_banner(app).render())
            assert "offline: header reads and downloads need" in text
            assert "HF_HUB_OFFLINE is set" in text
            await _pick(app, pilot, "smollm2")
            await wait_until(pilot, lambda: app.state.picked.plan is not None, timeout=60)
            await app.workers.wait_for_complete()
            assert _banner(app).display  # still offline after the presets were judged

    run(drive())


def _preview_app(models_dir: Path):
    return make_app(vram=8 * GiB, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False)


def test_the_preview_of_a_preset_not_downloaded_is_serve_dry_runs_plan(
    hub_stub,  # noqa: F811
    tiny_gguf,  # noqa: F811
    models_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hub_stub({REPO: {NAME: tiny_gguf("stub.gguf", seed=3, n_layer=4)}})
    stub_preset()
    assert cli_main(["serve", "stubby", "--vram", "8GiB", "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["argv"][dry["argv"].index("--alias") + 1] == "stubby"  # the preset's own name

    async def drive() -> None:
        app = _preview_app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick(app, pilot, "stubby")
            await wait_until(pilot, lambda: app.state.picked.plan is not None, timeout=60)
            picked = app.state.picked
            assert picked.model_path is None  # nothing was downloaded for the preview
            assert picked.argv == dry["argv"]
            assert f"-hf {REPO}:Q4_K_M" in str(app.query_one("#argv").render())

    run(drive())


def test_while_the_hub_is_unreachable_a_preset_previews_from_its_facts_fetched_by_hf(
    models_dir: Path,
) -> None:
    """The Hub is the closed loopback port every test starts with: a shipped preset plans
    from its ``[facts]``; one without facts says why and how to get its header."""
    stub_preset()  # no [facts] table

    async def drive() -> None:
        app = _preview_app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick(app, pilot, "qwen3-8b")
            await wait_until(pilot, lambda: app.state.picked.plan is not None, timeout=60)
            argv = app.state.picked.argv
            assert argv[:3] == ["llama-server", "-hf", "Qwen/Qwen3-8B-GGUF:Q4_K_M"]
            assert "-m" not in argv and app.state.picked.model_path is None
            assert argv[argv.index("--alias") + 1] == "qwen3-8b"  # served by the preset's name

            await _pick(app, pilot, "stubby")
            steps = app.query_one("#steps")
            await wait_until(pilot, lambda: "Download it first" in str(steps.render()), 60)
            assert app.state.picked.plan is None and app.state.picked.argv == []

    run(drive())
