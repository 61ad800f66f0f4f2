"""The quant chooser when the Hub cannot list the quants, and on hostile repos.

Offline (``HF_HUB_OFFLINE``), a listing that answers 500 or is cut off mid-body, a repo
with no GGUF: the chooser says why and offers the preset's own quant, which still
downloads once the Hub answers again (nothing is lost: the pick, its plan, the cache). A
repo of hundreds of files lists its quants only; a quant the listing gives no size for
reads ``unknown``, never 0.
"""

from __future__ import annotations

import pytest
from textual.widgets import OptionList

from homelab.ui.quant_screen import UNKNOWN_SIZE, QuantScreen
from tests.hub.conftest import gguf_dir, hub_stub, tiny_gguf  # noqa: F401  (fixtures)
from tests.ui.helpers import run, wait_until
from tests.ui.test_download_chooser import (
    QUANTS,
    REPO,
    _app,
    _bar,
    _blob,
    _downloads,
    _file,
    _open,
    _pick_stubby,
    _shown,
    _status,
    _stub,
)

OWN = f"{REPO}:Q4_K_M"
"""The preset's own quant: what the chooser offers when it cannot list the rest."""


def _offers_own_quant(screen: QuantScreen) -> None:
    assert [r.ref for r in screen.rows] == [OWN]
    assert _shown(screen) == ["Q4_K_M  (the preset's own quant)"]
    assert screen.query_one("#quants", OptionList).highlighted == 0


async def _own_quant_downloads(app, pilot, stub) -> None:
    """Enter on the offered quant: it lands in the HF cache; the pick and plan kept."""
    picked = app.state.picked.entry
    await pilot.press("enter")
    await wait_until(pilot, lambda: "downloaded" in _bar(app), timeout=60)
    assert app.state.picked.entry is picked
    assert [r.filename for r in _downloads(stub)] == [_file("Q4_K_M")]
    assert _blob(stub, _file("Q4_K_M")).stat().st_size == stub.file(REPO, _file("Q4_K_M")).size


@pytest.mark.parametrize("fault", ["500", "truncated"])
def test_a_hub_error_says_why_and_the_presets_quant_still_downloads(
    hub_stub,  # noqa: F811
    tiny_gguf,  # noqa: F811
    fault: str,
) -> None:
    stub = _stub(hub_stub, tiny_gguf)

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            plan = app.state.picked.plan
            if fault == "500":
                stub.fail_listing(REPO, 500)
            else:
                stub.truncate_listing(REPO)
            screen = await _open(app, pilot)
            status = _status(screen)
            if fault == "500":
                assert "500" in status, status
            else:  # no whole answer: the Hub counts as unreachable, the cache has headers only
                assert "unreachable" in status.lower(), status
            _offers_own_quant(screen)
            assert app.state.picked.plan is plan  # nothing lost
            await _own_quant_downloads(app, pilot, stub)
            await pilot.press("q")

    run(drive())


def test_offline_the_chooser_says_so_and_asks_the_hub_nothing(
    hub_stub,  # noqa: F811
    tiny_gguf,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub = _stub(hub_stub, tiny_gguf)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            asked = len(stub.requests)
            screen = await _open(app, pilot)
            assert "HF_HUB_OFFLINE is set" in _status(screen)
            _offers_own_quant(screen)
            await app.workers.wait_for_complete()
            assert len(stub.requests) == asked
            await pilot.press("escape")
            await wait_until(pilot, lambda: len(app.screen_stack) == 1)
            await pilot.press("q")

    run(drive())


def test_a_repo_without_gguf_says_so(hub_stub, tiny_gguf) -> None:  # noqa: F811
    stub = _stub(hub_stub, tiny_gguf, extra={"README.md": b"# no weights\n"}, quants={})

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            screen = await _open(app, pilot)
            assert "has no GGUF model files" in _status(screen), _status(screen)
            _offers_own_quant(screen)
            await pilot.press("escape")
            await pilot.press("q")

    run(drive())
    assert _downloads(stub) == []


def test_hundreds_of_files_and_a_size_unknown(hub_stub, tiny_gguf) -> None:  # noqa: F811
    noise = {f"notes/note-{i:03}.json": b"{}" for i in range(300)}
    noise.update({"mmproj-Stub-F16.gguf": tiny_gguf("mmproj.gguf", seed=9)})
    stub = _stub(hub_stub, tiny_gguf, extra=noise)
    stub.hide_size(REPO, _file("Q2_K"))

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            screen = await _open(app, pilot)
            shown = _shown(screen)
            assert len(shown) == len(QUANTS), shown  # the quants only: no note, no projector
            assert sorted(q.label for q in screen.judged.fits) == sorted(QUANTS)
            assert all(sum(tag in line for line in shown) == 1 for tag in QUANTS), shown
            (q2,) = [line for line in shown if "Q2_K" in line]
            assert UNKNOWN_SIZE in q2 and " 0 B" not in q2, q2
            assert all(UNKNOWN_SIZE not in line for line in shown if line != q2), shown
            await pilot.press("escape")
            await pilot.press("q")

    run(drive())
    assert _downloads(stub) == []
