"""The server panel's plan line for a live session that keeps experts in system RAM.

The real llama-server serves a generated qwen3moe GGUF (8 layers of 16 experts) on a card
the app is told is small (``--vram``): too small for the whole model with a 4,096-token
slot, so the session's plan keeps the routed experts of the first layers in RAM
(``--n-cpu-moe N``) and every layer's attention and KV on the card. The panel must word
that running plan as the domain words it (never a number written here), the engine's
command line must carry the same N, and the engine must answer through the panel's URL.
The suite's engine is a CPU build, so "the card" is only the plan's budget: what is tested
is that the plan the session runs is the one the panel shows.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from textual.widgets import Static

from homelab.engine.options import plan_options
from homelab.gguf.model_file import read_model
from homelab.gpu import cpu
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.plan.judge import judge
from homelab.plan.placement import plan_ram
from homelab.plan.planner import Plan
from homelab.ui.app import make_app
from homelab.ui.catalog import plan_words
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.server import ServerPanel
from homelab.units import GiB, MiB, format_bytes
from tests.factory import write_gguf
from tests.factory.server_log import free_port
from tests.ui.helpers import run, wait_until

pytestmark = pytest.mark.engine

LAYERS = 8
VRAM = 1056 * MiB
"""Too small for the whole model and its engine at 4,096 tokens, enough with a few layers'
experts in RAM (checked against the domain's own plan below, before the app runs)."""
CTX, SLOTS = 4096, 1
RAM = CpuMemory(total=64 * GiB, available=48 * GiB)


@pytest.fixture
def moe_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models folder holding only the generated MoE; system RAM held still."""
    monkeypatch.setattr(cpu, "cpu_memory", lambda: RAM)
    folder = tmp_path / "models"
    folder.mkdir()
    write_gguf("qwen3moe", folder / "live-moe.gguf", n_layer=LAYERS, n_expert=16, n_ff_exp=1024)
    return folder


def _domain_plan(path: Path) -> Plan:
    """The planner's own plan of the file on that card: the ladder's second rung."""
    options = plan_options(ctx=CTX, slots=SLOTS, vram=VRAM)
    fit = judge(read_model(str(path)), path.stem, synthetic_report(VRAM), options)
    assert fit.plan is not None, fit.explanation
    return fit.plan


async def _pick(app, pilot) -> None:
    menu = app.query_one("#menu", ModelsMenu)
    await wait_until(pilot, lambda: any(e.source == "dir" for e in menu.entries))
    app.query_one("#ctx").focus()
    await pilot.press(*str(CTX))
    app.query_one("#slots").focus()
    await pilot.press(str(SLOTS))
    app.query_one("#models").focus()
    await pilot.press("slash", *"live-moe", "enter")
    await wait_until(
        pilot,
        lambda: (
            app.state.picked.plan is not None
            and app.state.picked.plan.candidate.allocation.n_ctx == CTX
        ),
    )


def _complete(url: str) -> httpx.Response:
    with httpx.Client(trust_env=False, timeout=60) as client:
        return client.post(f"{url}/completion", json={"prompt": "Hello", "n_predict": 4})


def test_the_panel_words_the_running_plan_with_experts_in_ram(moe_dir: Path, engine_pids) -> None:
    expected = _domain_plan(moe_dir / "live-moe.gguf")
    ram = plan_ram(expected)
    assert ram is not None and 0 < ram.n_cpu_moe < LAYERS and expected.n_gpu_layers is None

    async def drive() -> None:
        app = make_app(
            vram=VRAM, models_dirs=[moe_dir], port=free_port(), blink=False, check_agents=False
        )
        async with app.run_test(size=(160, 50)) as pilot:
            await _pick(app, pilot)
            await pilot.press("s")
            await wait_until(pilot, lambda: app.state.running.supervisor is not None, timeout=30)
            engine_pids.add(app.state.running.supervisor.pid)
            await wait_until(pilot, lambda: app.state.health.state == "ready", timeout=120)
            session = app.state.running.session
            await wait_until(pilot, lambda: session.public_url is not None, timeout=30)
            assert session.plan is not None and isinstance(session.plan.plan, Plan)
            running = session.plan.plan
            running_ram = plan_ram(running)
            # the session runs the ladder's rung the domain chose, and the engine was told so
            assert running_ram is not None and running_ram.n_cpu_moe == ram.n_cpu_moe
            assert running.n_gpu_layers is None  # every layer's attention and KV on the card
            argv = list(app.state.running.supervisor.spec.argv)
            assert argv[argv.index("--n-cpu-moe") + 1] == str(running_ram.n_cpu_moe)
            # the panel's plan line is the running plan's words
            whole = plan_words(running)[0]
            layers = f"experts of {running_ram.n_cpu_moe} layers in RAM"
            assert f"{layers} ({format_bytes(running_ram.experts)})" in whole
            panel = app.query_one("#server", ServerPanel)
            await wait_until(
                pilot, lambda: session.public_url in str(panel.query_one("#server-state").render())
            )
            lines = str(panel.query_one("#server-state", Static).content).splitlines()
            assert f"plan {whole}" in lines, lines
            reply = _complete(session.public_url)
            assert reply.status_code == 200 and "content" in reply.json(), reply.text
            await pilot.press("q")
            await wait_until(pilot, lambda: app.screen.__class__.__name__ == "QuitScreen")
            await pilot.press("s")
            await wait_until(pilot, lambda: not app.is_running, timeout=60)

    run(drive())
