"""Picking a model shows its plan; editing a setting re-plans at once; errors read as words."""

from __future__ import annotations

from pathlib import Path

from homelab.ui.app import make_app
from homelab.ui.widgets.models import ModelsMenu
from tests.ui.helpers import GPU_FIXTURES, NO_GPU, run, wait_until


def _steps_text(app) -> str:
    return str(app.query_one("#steps").render())


def _argv_text(app) -> str:
    return str(app.query_one("#argv").render())


def test_pick_shows_the_plan_and_the_exact_argv(models_dir: Path) -> None:
    async def drive() -> None:
        app = make_app(
            gpu_snapshot=GPU_FIXTURES / "rtx3090_wayland.json",
            models_dirs=[models_dir],
            refresh_s=0,
            blink=False,
            adopt=False,
        )
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(pilot, lambda: any(e.source == "dir" for e in menu.entries))
            await pilot.press("slash", *"smollm2", "enter")
            await wait_until(pilot, lambda: app.state.picked.plan is not None)
            assert (
                app.state.picked.entry is not None
                and app.state.picked.entry.name == "SmolLM2-135M-Instruct.Q4_1"
            )
            steps = _steps_text(app)
            assert "Model: llama, 30 layers" in steps
            assert "NVIDIA GeForce RTX 3090" in steps
            argv = _argv_text(app)
            assert f"-m {models_dir / 'SmolLM2-135M-Instruct.Q4_1.gguf'}" in argv
            assert "-ngl all" in argv and "--port 8080" in argv
            # the row's verdict, worded from the same plan
            key = str(models_dir / "SmolLM2-135M-Instruct.Q4_1.gguf")
            await wait_until(pilot, lambda: key in menu.judgements)
            slots = app.state.picked.plan.settings.n_seq
            assert menu.judgements[key].text.startswith("fits: ")
            assert f"{slots} slots" in menu.judgements[key].text

            # editing the slots re-plans at once
            app.query_one("#slots").focus()
            await pilot.press("2")
            await wait_until(
                pilot,
                lambda: (
                    app.state.picked.plan is not None and app.state.picked.plan.settings.n_seq == 2
                ),
            )
            assert "-np 2" in _argv_text(app)

    run(drive())


def test_an_impossible_setting_is_shown_as_title_message_hint(models_dir: Path) -> None:
    async def drive() -> None:
        app = make_app(
            gpu_snapshot=NO_GPU, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
        )
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(pilot, lambda: any(e.source == "dir" for e in menu.entries))
            await pilot.press("slash", *"smollm2", "enter")
            await wait_until(pilot, lambda: app.state.picked.plan is not None)
            assert "system RAM" in str(app.query_one("#card-text").render())
            app.query_one("#ctx").focus()
            await pilot.press(*"999999999")  # far beyond what RAM holds
            await wait_until(pilot, lambda: app.state.picked.plan is None)
            steps = _steps_text(app)
            assert steps.startswith("Does not fit"), steps
            assert "Traceback" not in steps

    run(drive())


def test_no_llama_server_is_said_at_once_with_how_to_get_one(
    models_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    from homelab.engine.llamacpp.locate import ENV_VAR

    monkeypatch.setenv(ENV_VAR, str(tmp_path / "no-such-llama-server"))

    async def drive() -> None:
        app = make_app(
            gpu_snapshot=NO_GPU, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
        )
        async with app.run_test(size=(140, 45)) as pilot:
            await wait_until(pilot, lambda: app.state.engine_problem is not None)
            text = str(app.query_one("#server-state").render())
            assert "no-such-llama-server" in text and "homelab engine build" in text

    run(drive())


def test_s_starts_the_preview_only_on_the_card_and_settings_it_was_planned_on(
    smollm2_gguf: Path,
) -> None:
    from homelab.engine.options import plan_options
    from homelab.gpu.report import synthetic_report
    from homelab.serve.prepare import prepare
    from homelab.ui.state import Preview

    report, options = synthetic_report(8 << 30), plan_options(ctx=512, slots=1)
    prepared = prepare(str(smollm2_gguf), report, options)
    preview = Preview(prepared, report, options)
    assert preview.to_start(synthetic_report(8 << 30), plan_options(ctx=512, slots=1)) is prepared
    # the card changed, or the settings, or it was never read: the session plans on it now
    assert preview.to_start(synthetic_report(16 << 30), options) is None
    assert preview.to_start(report, plan_options(ctx=1024, slots=1)) is None
    assert preview.to_start(None, options) is None


def test_the_picked_row_stays_highlighted_and_in_view_when_the_menu_is_refilled(
    models_dir: Path,
) -> None:
    """SmolLM2 is the last of more rows than the menu shows: once picked, the cursor is on it,
    scrolled into view, and a refill (verdicts judged again) leaves it there."""
    from tests.ui.helpers import pick_smollm2

    async def go() -> None:
        app = make_app(
            gpu_snapshot=GPU_FIXTURES / "rtx3090_wayland.json",
            models_dirs=[models_dir],
            refresh_s=0,
            blink=False,
            adopt=False,
        )
        async with app.run_test(size=(140, 45)) as pilot:
            await pick_smollm2(pilot)
            menu = app.query_one("#menu", ModelsMenu)
            table = menu.query_one("#models")
            key = str(models_dir / "SmolLM2-135M-Instruct.Q4_1.gguf")
            for refill in (lambda: None, menu.clear_judgements):
                refill()
                await pilot.pause()
                assert table.row_count > table.size.height - 1  # more rows than the view
                row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
                assert row_key == key
                assert table.scroll_y <= table.cursor_row < table.scroll_y + table.size.height - 1

    run(go())


def test_the_cache_menu_starts_at_auto_and_plans_as_the_cli_does_without_cache_type(
    models_dir: Path, monkeypatch
) -> None:
    """On no card the CLI without --cache-type takes the fastest KV setting RAM allows; the
    TUI's default (``auto``) asks for the same nothing, so both show one plan; picking
    ``q8_0`` in the menu is then honoured as given."""
    from homelab.cli import build_parser
    from homelab.cli.plan_cmd import options_from_args
    from homelab.gpu import cpu
    from homelab.gpu.report import CpuMemory
    from homelab.plan.card import card_for
    from homelab.ui import backend
    from homelab.units import GiB
    from tests.ui.helpers import pick_smollm2

    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=32 * GiB, available=24 * GiB))
    model = models_dir / "SmolLM2-135M-Instruct.Q4_1.gguf"
    args = build_parser().parse_args(["plan", str(model), "--gpu-snapshot", str(NO_GPU)])
    cli_options = options_from_args(args)
    cli_plan = backend.prepare(str(model), card_for(cli_options), cli_options).plan.plan

    async def go() -> None:
        app = make_app(
            gpu_snapshot=NO_GPU, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
        )
        async with app.run_test(size=(140, 45)) as pilot:
            await pick_smollm2(pilot)
            shown = app.state.picked.plan
            assert shown is not None
            assert shown.settings.type_k == cli_plan.settings.type_k
            assert shown.settings.flash_attn == cli_plan.settings.flash_attn
            assert shown.kv_choice and shown.kv_choice == cli_plan.kv_choice
            app.query_one("#cache").value = "q8_0"
            await wait_until(
                pilot,
                lambda: (
                    app.state.picked.plan is not None
                    and app.state.picked.plan.settings.type_k == "q8_0"
                ),
            )
            assert not app.state.picked.plan.kv_choice  # asked for: nothing chosen for it

    run(go())
