"""`d` downloads the picked preset from the local Hub stand-in, then the model plans from the cache.

Cancelling mid-way (escape) is not driven here yet: the stand-in serves the small file
before a cancel can land. pull's resume after a cut is tested in tests/hub/test_pull_resume.py.
"""

from __future__ import annotations

from pathlib import Path

from homelab.paths import config_dir
from homelab.ui.app import make_app
from homelab.ui.widgets.models import ModelsMenu
from tests.hub.conftest import gguf_dir, hub_stub, tiny_gguf  # noqa: F401  (fixtures)
from tests.hubstub import HubStub
from tests.ui.helpers import NO_GPU, run, wait_until

REPO = "org/Stub-GGUF"
NAME = "Stub-Q4_K_M.gguf"


def _preset() -> None:
    folder = config_dir() / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stubby.toml").write_text(
        f'name = "Stubby"\nrepo = "{REPO}"\nquant = "Q4_K_M"\n'
        'engine = "llama.cpp"\nworkload = "chat"\nnotes = "A stand-in."\nlicense = "mit"\n'
    )


def _partial(stub: HubStub) -> Path:
    import os

    cache = Path(os.environ["HF_HUB_CACHE"])
    sha = stub.file(REPO, NAME).sha256
    return cache / "models--org--Stub-GGUF" / "blobs" / f"{sha}.incomplete"


def test_download_then_the_model_plans_from_the_cache(
    hub_stub,  # noqa: F811
    tiny_gguf,  # noqa: F811
) -> None:
    stub = hub_stub({REPO: {NAME: tiny_gguf("stub.gguf", seed=3, n_layer=48)}})
    size = stub.file(REPO, NAME).size
    _preset()

    async def drive() -> None:
        app = make_app(gpu_snapshot=NO_GPU, refresh_s=0.5, blink=False, adopt=False)
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            await wait_until(pilot, lambda: any(e.key == "preset:stubby" for e in menu.entries))
            app.query_one("#models").focus()
            await pilot.press("slash", *"stubby", "enter")
            await wait_until(pilot, lambda: app.picked is not None and app.picked.preset)
            app.query_one("#models").focus()
            await pilot.press("d")
            bar = app.query_one("#download")
            try:
                await wait_until(pilot, lambda: "downloaded" in str(bar.render()), timeout=60)
            except AssertionError:
                raise AssertionError(str(bar.render())) from None
            assert not _partial(stub).exists()
            await wait_until(
                pilot, lambda: app.model_path is not None and app.plan is not None, timeout=30
            )
            assert app.model_path.stat().st_size == size  # planned from the cached file
            await pilot.press("q")

    run(drive())
