"""The TUI beside a real set of models (``homelab serve A B C``'s gate and engines): the
card bar shows each resident model's part, the server panel the set's URL and each model's
state from its gate, and ``s`` starts nothing beside it (nor adopts, nor stops its engines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.supervision.process import alive
from homelab.engine.supervision.set_record import SetMember, new_record, write_set
from homelab.ui.app import make_app
from homelab.ui.widgets.models import ModelsMenu
from tests.gate_set.conftest import set_gate, three_models  # noqa: F401  (the real set)
from tests.ui.helpers import NO_GPU, run, screen_text, wait_until

pytestmark = pytest.mark.engine

GIB = 2**30
MIB = 2**20


def test_the_tui_shows_a_served_set_and_starts_nothing_beside_it(
    set_gate,  # noqa: F811
    three_models: dict[str, Path],  # noqa: F811
    models_dir: Path,
) -> None:
    under = set_gate(three_models, {k: GIB for k in three_models}, 2 * GIB + GIB // 2, ["llama"])
    sizes = {"smol": 300 * MIB, "llama": 700 * MIB, "qwen3": 500 * MIB}
    members = tuple(SetMember(k, (), "chat", {"CPU": sizes[k]}) for k in three_models)
    write_set(new_record(under.url, members, ("llama",), None))
    pids = dict(under.engines.pids())
    app = make_app(
        gpu_snapshot=NO_GPU,
        models_dirs=[models_dir],
        refresh_s=0,
        blink=False,
        check_agents=False,
    )

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.state.served_set is not None)
            await wait_until(pilot, lambda: not app.state.looking)
            text = screen_text(app)
            assert f"URL {under.url}/v1" in text
            assert "llama: loaded" in text and "smol: unloaded" in text, text
            card = str(app.query_one("#card-text").render())
            assert "llama 700" in card and "smol" not in card and "qwen3" not in card, card
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(pilot, lambda: any(e.source == "dir" for e in menu.entries))
            await pilot.press("slash", *"smollm2", "enter")
            await wait_until(pilot, lambda: app.state.picked.plan is not None)
            await pilot.press("escape", "s")
            await pilot.pause(0.3)
            assert app.state.running.supervisor is None  # nothing started beside the set
            said = " ".join(str(n.message) for n in app._notifications)
            assert "`homelab stop` stops the set first" in said, said

    run(drive())
    assert under.engines.pids() == pids and all(pid and alive(pid) for pid in pids.values())
    assert under.pool.members["llama"].state == "loaded"
