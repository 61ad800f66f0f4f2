"""The menu lives: ``m`` (and the terminal's focus coming back) lists the models folders and
the HF cache again; a GGUF copied in shows and is judged without a restart, one removed goes,
the other rows keep their verdicts, a broken file is a row with its reason (never a crash),
and a file replaced under the same name is read again."""

from __future__ import annotations

import shutil
from pathlib import Path

from textual import events

from homelab.ui.app import make_app
from homelab.ui.widgets.models import ModelsMenu
from tests.ui.helpers import NO_GPU, run, wait_until


def _app(models_dir: Path):
    return make_app(
        gpu_snapshot=NO_GPU, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
    )


def _said(app) -> list[str]:
    return [n.message for n in app.said]


def test_a_model_copied_in_shows_on_m_and_one_removed_goes(
    models_dir: Path, smollm2_gguf: Path
) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            first = str(models_dir / smollm2_gguf.name)
            await wait_until(pilot, lambda: first in menu.judgements)
            judged = menu.judgements[first]

            copied = models_dir / "copied-in.gguf"
            copied.symlink_to(smollm2_gguf)
            broken = models_dir / "broken.gguf"
            broken.write_bytes(b"GGUF\x03\x00\x00\x00")  # a header cut after its version
            await pilot.press("m")
            await wait_until(pilot, lambda: str(copied) in menu.judgements, timeout=120)
            await wait_until(pilot, lambda: str(broken) in menu.judgements, timeout=120)
            assert menu.judgements[first] is judged  # kept, not judged again
            assert menu.judgements[str(copied)].text.startswith("fits")
            assert menu.judgements[str(broken)].text.startswith("unknown")
            assert any("2 new, 0 gone" in m for m in _said(app))

            copied.unlink()
            await pilot.press("m")
            await wait_until(pilot, lambda: str(copied) not in {e.key for e in menu.entries})
            assert str(copied) not in menu.judgements
            await wait_until(pilot, lambda: any("1 gone" in m for m in _said(app)))
            await pilot.press("m")  # asked, nothing changed: still said
            await wait_until(pilot, lambda: any(m == "no change" for m in _said(app)))

    run(drive())


def test_the_terminal_focus_coming_back_rescans(models_dir: Path, smollm2_gguf: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(pilot, lambda: len(menu.judgements) == len(menu.entries) > 0)
            copied = models_dir / "while-away.gguf"
            shutil.copyfile(smollm2_gguf, copied)
            app.post_message(events.AppFocus())
            await wait_until(pilot, lambda: str(copied) in menu.judgements, timeout=120)
            assert menu.judgements[str(copied)].text.startswith("fits")

            copied.write_bytes(b"not a gguf at all")  # replaced under the same name
            await pilot.press("m")
            await wait_until(pilot, lambda: any(m == "no change" for m in _said(app)))
            menu.clear_judgements()  # an edit's re-judge reads the header again
            app.judge_models(list(menu.entries))
            await wait_until(
                pilot,
                lambda: (
                    str(copied) in menu.judgements
                    and menu.judgements[str(copied)].text.startswith("unknown")
                ),
                timeout=120,
            )

    run(drive())
