"""An edit of the plan panel's fields belongs to the row it was made on: its plan and its
verdict, never every row and every later pick; picking a row shows that row's own fields
(and, as the empty workload's placeholder, what it plans for: a preset's own workload);
``z`` drops the row's edits. Fields typed before any pick go to the first row picked."""

from __future__ import annotations

from pathlib import Path

from homelab.ui.app import make_app
from homelab.ui.messages import ModelJudged
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.plan import DEFAULT_VALUES
from tests.ui.helpers import NO_GPU, run, wait_until


def _app(models_dir: Path):
    return make_app(
        gpu_snapshot=NO_GPU, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
    )


def _said(app) -> list[str]:
    return [n.message for n in app.said]


async def _pick(app, pilot, words: str, key: str) -> None:
    app.query_one("#models").focus()
    await pilot.press("slash", *words, "enter")
    await wait_until(
        pilot, lambda: app.state.picked.entry is not None and app.state.picked.entry.key == key
    )
    await wait_until(
        pilot,
        lambda: (
            app.state.picked.plan is not None
            and app.state.picked.preview is not None
            and app.state.picked.preview.prepared.plan.model_path
            == str(app.state.picked.model_path)
        ),
        timeout=120,
    )
    await app.workers.wait_for_complete()
    await pilot.pause()


def _second_name(models_dir: Path, smollm2_gguf: Path) -> tuple[Path, str]:
    """A second row of the same file (a link by another name), and the first row's key."""
    other = models_dir / "other-name.gguf"
    other.symlink_to(smollm2_gguf)
    return other, str(models_dir / smollm2_gguf.name)


async def _all_judged(app, pilot) -> ModelsMenu:
    menu = app.query_one("#menu", ModelsMenu)
    await wait_until(pilot, lambda: len(menu.judgements) == len(menu.entries) > 0, timeout=120)
    return menu


def _slots(app) -> int:
    return app.state.picked.plan.settings.n_seq


def test_an_edit_stays_with_its_row_and_z_drops_it(models_dir: Path, smollm2_gguf: Path) -> None:
    other, first = _second_name(models_dir, smollm2_gguf)

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            menu = await _all_judged(app, pilot)
            untouched = menu.judgements[str(other)]
            await _pick(app, pilot, "smollm2", first)
            default_slots = _slots(app)
            assert default_slots != 2
            app.query_one("#slots").focus()
            await pilot.press("2", "enter")
            await wait_until(pilot, lambda: _slots(app) == 2, timeout=120)
            await wait_until(
                pilot,
                lambda: "2 slots" in (menu.judgements.get(first) or untouched).text,
                timeout=120,
            )
            assert menu.judgements[str(other)] is untouched  # the other row: not judged again

            await _pick(app, pilot, "other-name", str(other))
            assert app.query_one("#slots").value == ""  # its own fields, not the last row's
            assert _slots(app) == default_slots

            await _pick(app, pilot, "smollm2", first)
            assert app.query_one("#slots").value == "2" and _slots(app) == 2
            await pilot.press("z")
            await wait_until(pilot, lambda: app.query_one("#slots").value == "")
            await wait_until(
                pilot,
                lambda: app.state.picked.plan is not None and _slots(app) == default_slots,
                timeout=120,
            )
            assert first not in app.state.row_settings
            await pilot.press("z")
            await wait_until(pilot, lambda: "Nothing edited on this row." in _said(app))

    run(drive())


def test_a_bad_field_on_one_row_leaves_the_others_judged(
    models_dir: Path, smollm2_gguf: Path
) -> None:
    other, first = _second_name(models_dir, smollm2_gguf)

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            menu = await _all_judged(app, pilot)
            await _pick(app, pilot, "smollm2", first)
            app.query_one("#workload").focus()
            await pilot.press(*"nonsense", "enter")  # not a workload: this row's plan says so
            await wait_until(
                pilot, lambda: "nonsense" in str(app.query_one("#steps").render()), timeout=60
            )
            assert str(other) in menu.judgements  # the others keep their verdicts
            await _pick(app, pilot, "other-name", str(other))
            assert app.query_one("#workload").value == ""

    run(drive())


def test_a_presets_own_workload_is_the_fields_placeholder(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(pilot, lambda: any(e.key == "preset:qwen3-8b" for e in menu.entries))
            app.query_one("#models").focus()
            await pilot.press("slash", *"qwen3-8b", "enter")
            await wait_until(
                pilot,
                lambda: (
                    app.state.picked.entry is not None
                    and app.state.picked.entry.key == "preset:qwen3-8b"
                ),
            )
            assert app.query_one("#workload").placeholder == "chat"  # the preset plans for chat
            await pilot.press("escape")
            app.query_one("#models").focus()
            await pilot.press("slash", *"smollm2", "enter")
            await wait_until(
                pilot,
                lambda: (
                    app.state.picked.entry is not None and app.state.picked.entry.source == "dir"
                ),
            )
            assert app.query_one("#workload").placeholder == "agent"

    run(drive())


def test_a_verdict_judged_before_an_edit_never_replaces_the_edits_own(
    models_dir: Path, smollm2_gguf: Path
) -> None:
    """The menu's judging pass reads each row's fields when it starts; an edit made while it
    runs gets its own verdict at once, and the pass's older one, arriving after it, is
    dropped (it was judged with the fields before the edit)."""
    _, first = _second_name(models_dir, smollm2_gguf)

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            menu = await _all_judged(app, pilot)
            before = menu.judgements[first]  # judged with the default fields
            await _pick(app, pilot, "smollm2", first)
            app.query_one("#slots").focus()
            await pilot.press("2", "enter")
            await wait_until(pilot, lambda: "2 slots" in menu.judgements[first].text, timeout=120)
            edited = menu.judgements[first]
            # the pass that started before the edit ends now: its verdict is stale
            app.post_message(ModelJudged(first, before, dict(DEFAULT_VALUES)))
            await pilot.pause()
            await app.workers.wait_for_complete()
            assert menu.judgements[first] is edited
            # one judged with the row's fields as they are is taken
            values = dict(app.state.row_settings[first])
            app.post_message(ModelJudged(first, before, values))
            await wait_until(pilot, lambda: menu.judgements[first] is before)

    run(drive())
