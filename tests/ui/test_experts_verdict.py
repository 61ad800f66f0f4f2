"""A MoE the card cannot serve whole: the TUI words the plan the offload ladder made, in the
models menu, the plan panel and the server panel, at 80×24 and wide.

The model is the factory's qwen3moe (Qwen3-30B-A3B's 48 layers and KV geometry) with its
routed experts grown in the header to 384 MiB a layer, 18 GiB in all (a header-only file:
nothing is written for them); the card is the replayed 16 GB RTX 4060 Ti under Xorg; system
RAM is held at fixed figures (psutil cannot be recorded). What the screen must say is the
domain's own plan of the same file on the same card, never a number written here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.cells import cell_len
from textual.widgets import Static

from homelab.engine.options import plan_options
from homelab.gguf.model_file import read_model
from homelab.gpu import cpu
from homelab.gpu.probe import probe
from homelab.gpu.report import CpuMemory
from homelab.plan.judge import judge
from homelab.plan.placement import is_routed_expert, plan_ram
from homelab.plan.planner import Plan
from homelab.plan.vocabulary import allocated_words
from homelab.ui.app import make_app
from homelab.ui.catalog import ELLIPSIS, fitted, judgement_of_plan, plan_words
from homelab.ui.widgets.models import MIN_VERDICT_CELLS, ModelsMenu
from homelab.ui.widgets.pages import PageTabs
from homelab.ui.widgets.server import ServerPanel
from homelab.units import GiB, MiB, format_bytes
from tests.factory import write_gguf
from tests.hub.test_presets_cli import header_only
from tests.ui.helpers import GPU_FIXTURES, run, wait_until

CARD = GPU_FIXTURES / "rtx4060ti16_xorg.json"
RAM = CpuMemory(total=64 * GiB, available=48 * GiB)
EXPERT_TENSOR = 128 * MiB
"""Each of a layer's three routed-expert tensors, as the grown header says."""


@pytest.fixture
def moe_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models folder holding only the grown MoE; system RAM held still."""
    monkeypatch.setattr(cpu, "cpu_memory", lambda: RAM)
    tiny = write_gguf("qwen3moe", tmp_path / "tiny.gguf", n_ctx_train=262_144)
    sizes = {t.name: t.n_bytes or 1 for t in read_model(str(tiny)).parts[0].tensors}
    folder = tmp_path / "models"
    folder.mkdir()

    def grow(name: str) -> int:
        return EXPERT_TENSOR // sizes[name] if is_routed_expert(name) else 1

    header_only(tiny, folder / "Big-MoE-Q4_K_M.gguf", grow)
    return folder


def _domain_plan(path: Path) -> Plan:
    """What the planner makes of the file on the card, judged as the menu judges a row."""
    fit = judge(read_model(str(path)), path.stem, probe(snapshot=CARD, window_s=0), plan_options())
    assert fit.plan is not None, fit.explanation
    return fit.plan


def _screen(app) -> str:
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


async def _pick(pilot, path: Path) -> None:
    app = pilot.app
    menu = app.query_one("#menu", ModelsMenu)
    await wait_until(pilot, lambda: str(path) in menu.judgements)
    await pilot.press("slash", *"big-moe", "enter")
    await wait_until(pilot, lambda: app.state.picked.plan is not None)
    await app.workers.wait_for_complete()
    await pilot.pause()


def _verdict_cell(menu: ModelsMenu, key: str) -> str:
    from textual.widgets import DataTable

    return str(menu.query_one("#models", DataTable).get_cell(key, "verdict"))


@pytest.mark.parametrize("size", [(80, 24), (140, 60), (220, 60)])
def test_the_experts_in_ram_verdict_is_worded_everywhere(
    moe_dir: Path, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = moe_dir / "Big-MoE-Q4_K_M.gguf"
    plan = _domain_plan(path)
    ram = plan_ram(plan)
    # the ladder's second rung: experts of some layers in RAM, every layer on the card
    assert ram is not None and 0 < ram.n_cpu_moe < 48 and plan.n_gpu_layers is None
    whole, compact = plan_words(plan)
    layers = f"experts of {ram.n_cpu_moe} layers in RAM ({format_bytes(ram.experts)})"
    assert whole == f"fits: {allocated_words(plan)}, {layers}"
    assert compact.endswith(", experts in RAM")

    async def drive() -> None:
        app = make_app(
            gpu_snapshot=CARD, models_dirs=[moe_dir], refresh_s=0, blink=False, adopt=False
        )
        async with app.run_test(size=size) as pilot:
            await _pick(pilot, path)
            menu = app.query_one("#menu", ModelsMenu)
            judged = menu.judgements[str(path)]
            assert judged.text == whole and judged.compact == compact
            # the menu's cell: as much of the verdict as its room holds, cut at a word
            shown = _verdict_cell(menu, str(path))
            room = menu._verdict_room()
            assert shown == fitted(judged, room) and cell_len(shown) <= room
            if cell_len(whole) <= room:
                assert shown == whole
            elif cell_len(compact) <= room:
                assert shown == compact
            elif shown.endswith(" " + ELLIPSIS):  # whole clauses kept, never a cut number
                assert compact.startswith(shown.removesuffix(" " + ELLIPSIS) + ", ")
            else:  # no room for a clause: the verdict's own word
                assert shown == compact.split(":")[0] and room >= MIN_VERDICT_CELLS
            screen = _screen(app)
            # the verdict column is in view at every size (the table is never wider than the
            # panel: the names are shortened first)
            assert shown in screen, [line for line in screen.splitlines() if "Big-MoE" in line]
            if app.screen.has_class("-narrow"):  # one column: the plan is a page of its own
                app.query_one("#pages", PageTabs).show_page("plan")
                await pilot.pause()
                screen = _screen(app)
            # the plan panel heads its working with the whole verdict (wrapped, not cut)
            assert " ".join(whole.split()) in " ".join(_panel_words(screen, app))
            # the server panel, serving this plan, words it the same way
            panel = app.query_one("#server", ServerPanel)
            panel.show_state(
                "ready", "http://127.0.0.1:8080", "1 s", 0, None, "Big-MoE", verdict=whole
            )
            await pilot.pause()
            state = str(panel.query_one("#server-state", Static).content)
            assert state.splitlines()[2] == f"plan {whole}"
            if size[0] >= 140:  # the server panel is in view: wrapped at words, never cut
                server_words = " ".join(_panel_words(_screen(app), app, "server"))
                assert f"plan {whole}" in server_words

    run(drive())


def _panel_words(screen: str, app, panel_id: str = "plan") -> list[str]:
    """The words inside one panel's box on the screen, in reading order."""
    region = app.query_one(f"#{panel_id}").region
    lines = screen.splitlines()[region.y + 1 : region.bottom - 1]
    return [
        word for line in lines for word in line[region.x + 1 : region.right - 1].strip(" │").split()
    ]


def test_the_whole_layer_rung_says_how_many_layers_run_on_the_cpu(moe_dir: Path) -> None:
    path = moe_dir / "Big-MoE-Q4_K_M.gguf"
    report = probe(snapshot=CARD, window_s=0)
    fit = judge(read_model(str(path)), "big", report, plan_options(n_cpu_moe=0))
    plan = fit.plan
    assert plan is not None and plan.verdict == "partial" and plan.n_gpu_layers is not None
    on_card = sum(share.n_blocks for share in plan.devices)
    assert 0 < on_card < 48
    judged = judgement_of_plan(plan, None)
    assert (
        judged.text == f"partial: -ngl {plan.n_gpu_layers}, {48 - on_card} of 48 layers on the CPU"
    )
    assert judged.compact == f"partial: -ngl {plan.n_gpu_layers}"
