"""`d` on a preset opens the quant chooser: every quant of the repo with its size and its
verdict on this card, the words and the ranking of ``homelab quants`` (the same domain
call, made here again to compare); enter downloads the chosen quant into the HF cache,
escape closes with nothing downloaded; offline or on a Hub error the chooser says why and
offers the preset's own quant.

The Hub is the local stand-in (real HTTP on 127.0.0.1) with its faults: a listing that
answers 500, one cut off mid-body, one naming a file without its size.
"""

from __future__ import annotations

import os
from pathlib import Path

from textual.widgets import OptionList

from homelab.serve.quant_choice import quants_on_card, verdict_words
from homelab.ui.app import make_app
from homelab.ui.quant_screen import BEST_MARK, READING, QuantScreen
from homelab.ui.widgets.models import ModelsMenu
from homelab.units import format_bytes
from tests.hub.conftest import gguf_dir, hub_stub, tiny_gguf  # noqa: F401  (fixtures)
from tests.hubstub import HubStub
from tests.ui.helpers import GPU_FIXTURES, STUB_REPO, run, stub_preset, wait_until

REPO = STUB_REPO
CARD = GPU_FIXTURES / "rtx3090_wayland.json"
QUANTS = {"Q2_K": 1, "Q4_K_M": 2, "Q8_0": 3}
"""Tag -> layers (the bigger quant, the bigger file): the preset's own is Q4_K_M."""


def _file(tag: str) -> str:
    return f"Stub-{tag}.gguf"


def _stub(hub_stub, tiny_gguf, extra: dict | None = None, quants=QUANTS) -> HubStub:  # noqa: F811
    stub_preset()
    files = {
        _file(t): tiny_gguf(f"{t}.gguf", seed=i, n_layer=n)
        for i, (t, n) in enumerate(quants.items())
    }
    return hub_stub({REPO: {**files, **(extra or {})}})


def _app(card: Path = CARD):
    return make_app(gpu_snapshot=card, refresh_s=0, blink=False, adopt=False, check_agents=False)


def _blob(stub: HubStub, name: str) -> Path:
    sha = stub.file(REPO, name).sha256
    return Path(os.environ["HF_HUB_CACHE"]) / "models--org--Stub-GGUF" / "blobs" / sha


def _downloads(stub: HubStub) -> list:
    """Whole-file GETs from the CDN (header reads ask for closed ranges)."""
    return [
        r
        for r in stub.requests
        if r.host == "cdn" and r.method == "GET" and (r.range is None or r.range.endswith("-"))
    ]


async def _pick_stubby(app, pilot) -> None:
    """Stubby picked, its plan made, every verdict in (their Hub reads done)."""
    menu = app.query_one("#menu", ModelsMenu)
    await wait_until(pilot, lambda: any(e.key == "preset:stubby" for e in menu.entries))
    await wait_until(pilot, lambda: len(menu.judgements) == len(menu.entries))
    app.query_one("#models").focus()
    await pilot.press("slash", *"stubby", "enter")
    await wait_until(pilot, lambda: app.state.picked.plan is not None or _plan_failed(app))
    await app.workers.wait_for_complete()
    app.query_one("#models").focus()


def _plan_failed(app) -> bool:
    return "planning" not in str(app.query_one("#steps").render())


async def _open(app, pilot) -> QuantScreen:
    await pilot.press("d")
    await wait_until(pilot, lambda: isinstance(app.screen, QuantScreen))
    screen = app.screen
    await wait_until(pilot, lambda: READING not in _status(screen), timeout=60)
    return screen


def _status(screen: QuantScreen) -> str:
    return str(screen.query_one("#quants-status").render())


def _shown(screen: QuantScreen) -> list[str]:
    options = screen.query_one("#quants", OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


def _bar(app) -> str:
    return str(app.query_one("#download").render())


def test_the_chooser_shows_every_quant_as_the_domain_judges_it_and_downloads_the_one_chosen(
    hub_stub,  # noqa: F811
    tiny_gguf,  # noqa: F811
) -> None:
    stub = _stub(hub_stub, tiny_gguf)

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            screen = await _open(app, pilot)
            preset = app.state.picked.entry.preset
            expected = quants_on_card(
                REPO,
                "main",
                app.plan_options(),
                report=app.state.card.report,
                default_workload=preset.workload,
            )
            assert expected.best is not None  # a card where the choice means something
            shown = _shown(screen)
            assert len(shown) == len(expected.fits) == len(QUANTS)
            for line, quant in zip(shown, expected.fits, strict=True):
                cells = line.split()
                assert cells[0 if quant is not expected.best else 1] == quant.label, line
                assert verdict_words(quant) in line and format_bytes(quant.size) in line, line
                assert (cells[0] == BEST_MARK) == (quant is expected.best), line
            options = screen.query_one("#quants", OptionList)
            assert options.highlighted == expected.fits.index(expected.best)  # preselected
            assert expected.why in _status(screen)

            other = next(q for q in expected.fits if q is not expected.best)
            target = expected.fits.index(other)
            key = "up" if target < options.highlighted else "down"
            await pilot.press(*[key] * abs(target - options.highlighted), "enter")
            await wait_until(pilot, lambda: "downloaded" in _bar(app), timeout=60)
            assert len(app.screen_stack) == 1
            blob = _blob(stub, _file(other.label))
            assert blob.stat().st_size == stub.file(REPO, _file(other.label)).size
            assert [r.filename for r in _downloads(stub)] == [_file(other.label)]
            menu = app.query_one("#menu", ModelsMenu)  # listed as a row of the HF cache
            await wait_until(
                pilot,
                lambda: any(
                    e.source == "cache" and e.path.name == _file(other.label) for e in menu.entries
                ),
            )
            await pilot.press("q")

    run(drive())


def test_escape_closes_the_chooser_with_nothing_downloaded(hub_stub, tiny_gguf) -> None:  # noqa: F811
    stub = _stub(hub_stub, tiny_gguf)

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            await _open(app, pilot)
            await pilot.press("escape")
            await wait_until(pilot, lambda: len(app.screen_stack) == 1)
            await app.workers.wait_for_complete()
            assert app.download_cancel is None and "starting" not in _bar(app)
            await pilot.press("q")

    run(drive())
    assert _downloads(stub) == []
    assert not any(_blob(stub, _file(t)).exists() for t in QUANTS)
