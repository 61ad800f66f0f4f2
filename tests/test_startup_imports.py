"""``homelab plan`` on a local file starts light: no numpy, gguf, Hub client or UI toolkit.

Each case runs the real command line (``python -m homelab ...``) in a fresh interpreter
under a small wrapper that writes ``sorted(sys.modules)`` to a file when the process
exits, and checks what was loaded. Start-up *time* is measured in
``bench/bench_plan_startup.py``; this only keeps the heavy imports out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from homelab.cli import COMMAND_MODULES, COMMAND_OWNERS, build_parser
from tests.factory import write_gguf

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "fixtures" / "gpu" / "rtx4060ti16_xorg.json"

HEAVY = ("numpy", "gguf", "httpx", "huggingface_hub", "textual", "rich")
"""Top-level packages ``homelab plan FILE`` must not import (each costs tens of ms)."""

_WRAPPER = """\
import atexit, json, runpy, sys
out, sys.argv = sys.argv[1], ["homelab", *sys.argv[2:]]
def _dump():
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(_dump)
runpy.run_module("homelab", run_name="__main__", alter_sys=True)
"""


def loaded_modules(tmp_path: Path, *args: str) -> tuple[int, list[str], str]:
    """Run ``homelab ARGS`` in a fresh interpreter: (exit code, modules loaded at exit, stderr)."""
    out = tmp_path / f"modules-{len(list(tmp_path.glob('modules-*')))}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert out.exists(), f"the wrapper wrote no module list:\n{done.stderr[-3000:]}"
    return done.returncode, json.loads(out.read_text()), done.stderr


def heavy_in(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf("qwen35", tmp_path_factory.mktemp("startup") / "qwen35-tiny.gguf")


@pytest.mark.parametrize(
    "card",
    [("--vram", "16GiB"), ("--gpu-snapshot", str(SNAPSHOT))],
    ids=["vram", "gpu-snapshot"],
)
@pytest.mark.parametrize("output", [("--json",), ()], ids=["json", "text"])
def test_plan_of_a_local_file_loads_nothing_heavy(
    tmp_path: Path, model: Path, card: tuple[str, ...], output: tuple[str, ...]
) -> None:
    code, modules, err = loaded_modules(tmp_path, "plan", str(model), *card, *output)
    assert code == 0, err
    assert "homelab.plan.planner" in modules and "homelab.gguf.reader" in modules
    assert heavy_in(modules) == []
    hub = [m for m in modules if m == "homelab.hub" or m.startswith("homelab.hub.")]
    assert hub == [], "a local file needs no Hub module"
    other_commands = {f"homelab.cli.{name}" for name in COMMAND_MODULES} - {"homelab.cli.plan_cmd"}
    assert sorted(other_commands & set(modules)) == []


def test_the_probe_sees_heavy_imports(tmp_path: Path) -> None:
    """The same probe on a command that does load the Hub client: the check can fail."""
    # A Hub ref is the one plan that needs the Hub modules (the endpoint is a closed
    # loopback port, so it fails fast with a network error, after the imports).
    env_endpoint = os.environ.get("HF_ENDPOINT", "")
    assert env_endpoint.startswith("http://127.0.0.1"), "conftest keeps the Hub on loopback"
    code, modules, _ = loaded_modules(
        tmp_path, "plan", "someorg/Some-Model-GGUF:Q4_K_M", "--vram", "16GiB", "--json"
    )
    assert code != 0
    assert "homelab.hub.model_ref" in modules and "huggingface_hub" in heavy_in(modules)


def test_every_command_is_registered_by_its_owner() -> None:
    """``COMMAND_OWNERS`` (the lazy registration table) names every command exactly."""
    full = build_parser()
    (subparsers,) = [a for a in full._actions if a.dest == "command"]
    assert set(subparsers.choices) == set(COMMAND_OWNERS)
    for command, owner in COMMAND_OWNERS.items():
        assert owner in COMMAND_MODULES
        (only,) = [a for a in build_parser(command)._actions if a.dest == "command"]
        assert command in only.choices
